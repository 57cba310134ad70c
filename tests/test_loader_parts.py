"""SeqLoader's parts: declared keyword options, one identity for describe() and the rank agreement,
the torch-free resume state whose position is read without side effects, one place that builds a
Batch."""

from __future__ import annotations

import dataclasses
from typing import get_type_hints

import numpy as np
import pytest

import seqloader as sl
from conftest import index_corpus
from seqloader.errors import OptionError
from seqloader.loading.batch_spec import BatchSpec
from seqloader.loading.counts import count_key
from seqloader.loading.execute import LoadedBatch
from seqloader.plan.state import STATE_VERSION, LoaderState
from seqloader.torch.batch import Batch, build_batch
from seqloader.trainer.checks import CheckOptions
from seqloader.trainer.loader_options import LoaderKeywords, PlanKeywords, WorkerKeywords


@pytest.mark.parametrize(
    ("keywords", "options"), [(PlanKeywords, sl.PlanOptions), (WorkerKeywords, sl.WorkerOptions)]
)
def test_keyword_options_are_declared_as_the_option_fields(keywords, options) -> None:
    """The typed keywords IDEs see are exactly the dataclass fields, with the same types."""
    fields = {f.name for f in dataclasses.fields(options) if f.init}
    assert set(keywords.__annotations__) == fields
    hints, field_hints = get_type_hints(keywords), get_type_hints(options)
    assert {k: hints[k] for k in fields} == {k: field_hints[k] for k in fields}
    assert set(LoaderKeywords.__annotations__) >= fields


def test_old_and_new_option_names_are_the_same_objects() -> None:
    loader = sl.SeqLoader(index_corpus(20), max_seqs=3, num_workers=0)
    assert loader.plan_options.max_seqs == 3 and loader.worker_options.num_workers == 0
    assert not hasattr(loader, "options") and not hasattr(loader, "workers")  # one name each


def test_audit_is_a_check_policy_with_a_shorthand() -> None:
    assert sl.SeqLoader(index_corpus(20)).audit == "off"
    assert sl.SeqLoader(index_corpus(20), audit=True).checks.audit == "error"
    assert sl.SeqLoader(index_corpus(20), audit="warn").audit == "warn"
    assert sl.SeqLoader(index_corpus(20), checks=CheckOptions(audit="warn")).audit == "warn"
    same = sl.SeqLoader(index_corpus(20), audit="warn", checks=CheckOptions(audit="warn"))
    assert same.audit == "warn"
    with pytest.raises(OptionError, match=r"audit: got 'error', but checks=CheckOptions\(audit="):
        sl.SeqLoader(index_corpus(20), audit="error", checks=CheckOptions(audit="warn"))
    with pytest.raises(OptionError, match=r"checks\.audit: got 'yes', expected one of"):
        CheckOptions(audit="yes")  # type: ignore[arg-type]


def test_describe_and_the_rank_agreement_share_one_identity() -> None:
    loader = sl.SeqLoader(index_corpus(20), max_seqs=3, rank=1, world_size=2)
    described, agreed = loader.describe(), loader._agreement(1)
    assert described["plan_fingerprint"] == agreed["plan_fingerprint"] == loader.fingerprint
    assert described["options"] == agreed["options"] == loader.plan_options.to_json()
    assert described["length_key"] == agreed["length_key"] == "data"
    assert described["source"] == f"{loader.source!r} fingerprint={agreed['source_fingerprint']}"
    assert (agreed["epoch"], agreed["world_size"], agreed["resume_position"]) == ("1", "2", "none")


def test_reading_the_position_changes_nothing() -> None:
    loader = sl.SeqLoader(index_corpus(20), max_seqs=3)
    state: LoaderState = loader._state
    it = loader.epoch(1)
    next(it), next(it)
    assert state.consumed == 2
    first, second = state.position(), state.position()
    assert first == second and first.steps == 2 and state.consumed == 2  # no folding on read
    assert loader.state_dict() == loader.state_dict()
    assert loader.state_dict()["steps"] == 2 and loader.state_dict()["version"] == STATE_VERSION
    next(it)
    assert state.position().steps == 3


def test_a_batch_is_built_by_field_name_from_what_was_loaded() -> None:
    import torch

    spec = BatchSpec(3, 7, np.array([4, 9]), np.array([True, False]))
    loaded = LoadedBatch(
        spec,
        {"data": np.zeros((2, 5, 1), np.float32)},
        {"data": np.array([5, 2])},
        ["t4", "t9"],
        skipped=["s"],
        nonfinite=("n",),  # any sequence: the batch holds a list
    )
    data = {"data": torch.ones(2, 5, 1)}
    batch = build_batch(loaded, data)
    assert isinstance(batch, Batch) and batch.data is data
    assert (batch.epoch, batch.step, batch.seq_tags) == (3, 7, ["t4", "t9"])
    assert batch.seq_indices.tolist() == [4, 9] and batch.mask.tolist() == [True, False]
    assert batch.lengths["data"].tolist() == [5, 2]
    assert (batch.skipped, batch.nonfinite) == (["s"], ["n"])
    assert batch.counts["data"] == count_key(np.array([5, 2]), spec.real)
