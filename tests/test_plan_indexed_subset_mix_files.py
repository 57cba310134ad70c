"""``fixed_random_subset`` with ``distribution="files"`` or a ``mix`` under indexed planning
(hypothesis; pure numpy). Global planning refuses them (its subset re-orders the corpus, which
files and a mix order themselves); indexed planning admits RETURNN's subset (the same draw every
epoch, the rest counted as filtered) and plans it in the files' or the mix's own order. Every
planned unit is in the subset, every admitted one of it planned (files), and every contract holds
(``check_plan_contracts``: exactly once, the mix's corpus epochs, equal steps, resume chains
W -> W' -> W'', determinism)."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plan_contracts import check_plan_contracts
from seqloader.errors import OptionError
from seqloader.plan import PlanOptions
from seqloader.plan.admission import subset_order
from seqloader.plan.mix import Corpora
from seqloader.plan.planners import make_planner

ORDERINGS = ["default", "sorted_reverse", "random:2", "laplace:.3", "buckets:3",
             "sort_bin_shuffle:.3"]  # fmt: skip


@st.composite
def cases(draw: st.DrawFn) -> dict:
    n = draw(st.integers(30, 120))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    data = rng.integers(1, 30, size=n).astype(np.int64)
    files = np.unique(np.concatenate([[0, n], rng.integers(1, n, 10)]))
    mixed = draw(st.booleans())
    options = {
        "ordering": draw(st.sampled_from(ORDERINGS)),
        "distribution": "files" if not mixed else draw(st.sampled_from(["files", "shard"])),
        "mix": {"a": 1.5, "b": 0.5} if mixed else None,
        "chunking": draw(st.sampled_from([None, "8:4"])),
        "fixed_random_subset": draw(st.sampled_from([0.6, n // 2])),
        "fixed_random_subset_seed": draw(st.integers(0, 3)),
        "partition_epoch": draw(st.integers(1, 2)),
        "uneven": draw(st.sampled_from(["split", "pad"])),
        "max_frames": 80,
        "max_seqs": draw(st.sampled_from([None, 5])),
        "seed": draw(st.integers(0, 3)),
    }
    corpora = Corpora(("a", "b"), np.array([0, files[1], n])) if mixed else None
    worlds = draw(st.sampled_from([[2], [3, 2], [2, 4, 3]]))
    return {"data": data, "options": options, "files": files, "corpora": corpora,
            "worlds": worlds}  # fmt: skip


def planner_of(case: dict):
    files = case["files"] if case["options"]["distribution"] == "files" else None
    options = PlanOptions(**case["options"])
    return make_planner({"data": case["data"]}, options, files=files, corpora=case["corpora"])


@settings(max_examples=40, deadline=None)
@given(cases())
def test_the_subset_over_files_or_a_mix_keeps_every_contract(case: dict) -> None:
    o = case["options"]
    n = len(case["data"])
    subset = np.zeros(n, dtype=bool)
    subset[subset_order(n, o["fixed_random_subset"], o["fixed_random_subset_seed"])] = True
    if o["mix"] is not None and not all(np.add.reduceat(subset, case["corpora"].bounds[:-1])):
        with pytest.raises(OptionError, match="has no admitted sequences"):
            planner_of(case)  # a corpus with none of the subset: refused by name
        return
    planner = planner_of(case)
    assert planner.options.planning == "indexed"
    assert planner.filtered(1).get("not in fixed_random_subset", 0) == n - subset.sum()

    def in_subset(planner, epoch, plan) -> None:
        assert subset[plan.batches.seqs].all()

    epochs = range(1, o["partition_epoch"] + 1)
    check_plan_contracts(
        partial(planner_of, case), case["worlds"], [0.4, 0.5], epochs, each_plan=in_subset
    )
    if o["mix"] is None:  # every sequence of the subset once over the full epoch
        seen = np.concatenate([planner.global_plan(e, 1).batches.seqs for e in epochs])
        assert sorted(set(seen.tolist())) == np.flatnonzero(subset).tolist()


@pytest.mark.parametrize("extra", [{"distribution": "files"}, {"mix": {"a": 1.0}}], ids=str)
def test_global_planning_still_refuses_them_by_name(extra: dict) -> None:
    with pytest.raises(OptionError, match="use planning='indexed'"):
        PlanOptions(fixed_random_subset=0.5, **extra, planning="global")
    assert PlanOptions(fixed_random_subset=0.5, **extra).resolved_planning == "indexed"
