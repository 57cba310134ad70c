"""``seqloader stats`` with length variants: each ordering's padded frames and step imbalance are
those of the variant every slot is planned in (indexed plans carry it per slot; global planning
draws it per full epoch), not the longest variant's (what ``simulate`` does too)."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

import seqloader as sl
import seqloader.cli.stats as stats
from seqloader.cli.main import main
from seqloader.cli.options import Opened
from seqloader.loading.planner_for import planner_for
from seqloader.plan.epoch_plan import list_imbalance
from seqloader.plan.options import PlanOptions
from seqloader.plan.variants import variant_of
from seqloader.trainer.loader_options import WorkerOptions


class _Varied(sl.MemorySource):
    """A memory source read in three variants of known lengths (not monotone in the factor)."""

    def __init__(self, table: np.ndarray) -> None:
        super().__init__({"data": [np.ones((int(n), 1), "float32") for n in table.max(axis=0)]})
        self._table = table

    def length_variants(self):
        return ("a", "b", "c"), {"data": self._table}

    def read_variant(self, index: int, variant: int):
        return {"data": np.ones((int(self._table[variant, index]), 1), "float32")}


@pytest.mark.parametrize(
    ("planning", "wise"),
    [("indexed", None), ("global", None), ("auto", {(1, 1): {"max_mean_len": 30}})],
)
def test_stats_padding_is_the_planned_variants(planning, wise, monkeypatch, capsys):
    """Also filtered (``epoch_wise_filter``, planned indexed under ``auto``)."""
    base = np.random.default_rng(3).integers(5, 60, 60)
    table = np.stack([base + 7, np.maximum(1, base - 4), np.ceil(base * 1.3).astype(np.int64)])
    src = _Varied(table)
    options = PlanOptions(
        max_frames=200, max_seqs=6, seed=4, planning=planning, epoch_wise_filter=wise
    )
    config = SimpleNamespace(source=SimpleNamespace(describe=lambda: "varied"))
    opened = Opened(config, src, options, WorkerOptions())  # type: ignore[arg-type]
    monkeypatch.setattr(stats, "open_data", lambda args: opened)
    assert main(["stats", "x", "--orderings", "laplace:3,default", "--ranks", "2", "--json"]) == 0
    padding = json.loads(capsys.readouterr().out)["padding_by_ordering"]
    for ordering in ("laplace:3", "default"):
        planner = planner_for(src, replace(options, ordering=ordering))
        batches = planner.global_plan(1, 2).batches
        assert planner.options.planning == ("global" if planning == "global" else "indexed")
        assert wise is None or planner.filtered(1)  # the filter dropped some
        v = batches.variants
        if v is None:  # global planning: its per-sequence draw of the full epoch
            v = variant_of(4, 0, batches.seqs, 3)
        lens = table[v, batches.seqs]
        ends = zip(batches.bounds[:-1], batches.bounds[1:])
        padded = sum(int(z - a) * int(lens[a:z].max()) for a, z in ends)
        assert padding[ordering]["padded_frames"] == padded
        plan = planner.global_plan(1, 2)
        imbalance = list_imbalance(plan, 0, lens, per_slot=True)  # each slot's cost: its length
        assert padding[ordering]["step_imbalance"] == round(imbalance, 5)
