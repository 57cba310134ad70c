"""The step imbalance of indexed plans without every rank's batch list (``plan/indexed/imbalance.py``).

``shard``: read off the batch table, equal to ``step_imbalance`` over the whole materialised
batch list when every sequence costs its bucket's longest length (the planned cost). ``files``:
one rank's share at a time, equal to ``step_imbalance`` over the materialised list with the real
costs (global planning's figure). Both from any resumed step on; and the loader's report uses
them without ever materialising ``plan.batches``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from seqloader.errors import ResumeError
from seqloader.plan.cost import step_imbalance
from seqloader.plan.indexed.files import Segment
from seqloader.plan.indexed.imbalance import (
    bucket_costs,
    files_imbalance,
    rankwise_imbalance,
    table_imbalance,
)
from seqloader.plan.indexed.plan import IndexedPlan, RankwisePlan
from seqloader.plan.indexed.planner import IndexedPlanner
from test_plan_indexed import cases, files_fit, planner_of


def planned_per_sequence(plan: IndexedPlan, per_bucket: np.ndarray, n: int) -> np.ndarray:
    """Per sequence (``n``), the planned cost of the batch table's bucket its batch comes from:
    under ``laplace`` a run of buckets (``histogram.row_runs``), planned at its longest bucket's
    cost; ``buckets:N``: its own bucket's."""
    slots = plan.slots(0, plan.steps * plan.world_size)
    bucket, _ = plan.table.locate(slots.g)
    out = np.zeros(n, dtype=np.int64)  # filtered ones: unused
    out[plan.batches.seqs] = np.repeat(
        plan.table.unit_costs(per_bucket)[bucket], slots.hi - slots.lo
    )
    return out


def whole_list_imbalance(plan, costs: np.ndarray, first_step: int) -> float:
    """The O(n) computation: ``step_imbalance`` over every rank's batches from ``first_step``."""
    b, first = plan.batches, first_step * plan.world_size
    start = b.bounds[min(first, len(b))]
    return step_imbalance(b.seqs[start:], b.bounds[first:] - start, plan.world_size, costs)


@settings(max_examples=80, deadline=None)
@given(cases(), st.floats(0, 1), st.integers(1, 3))
def test_shard_table_figure_equals_the_whole_list_at_planned_costs(
    case: dict, cut: float, epoch: int
) -> None:
    planner = planner_of(case)
    plan = planner.global_plan(epoch, case["world"])
    assert isinstance(plan, IndexedPlan)
    per_bucket = bucket_costs(planner)
    planned = planned_per_sequence(plan, per_bucket, len(case["lengths"]))
    first = int(cut * plan.steps)
    want = whole_list_imbalance(plan, planned, first)
    assert table_imbalance(plan, per_bucket, first) == pytest.approx(want, rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(cases("files"), st.floats(0, 1))
def test_files_rankwise_figure_equals_the_whole_list(case: dict, cut: float) -> None:
    planner = planner_of(case)
    used = int(planner.distribution.file_counts.astype(bool).sum())
    assume(not 0 < used < case["options"].partition_epoch * case["world"])  # refused: too few
    plan = planner.global_plan(1, case["world"])
    assert isinstance(plan, RankwisePlan)
    first = int(cut * plan.steps)
    want = whole_list_imbalance(plan, planner.costs, first)
    assert rankwise_imbalance(plan, planner.costs, first) == pytest.approx(want, rel=1e-12)


def group_costs_per_sequence(
    planner: IndexedPlanner, epoch: int, world: int, history: list[tuple[int, int]]
) -> np.ndarray:
    """Per sequence of the segment's sub-epoch, the planned cost of its unit: the largest bucket
    cost among the buckets its old rank's run reaches (its members drawn, old rank by old rank;
    each bucket's cost written out from the lengths of the run's members)."""
    units = planner.distribution._segment_at(epoch, world, history).units
    per_bucket = bucket_costs(planner)
    members = planner.distribution.members_of(units)
    out = np.zeros(len(planner.lengths), dtype=np.int64)
    for r in np.unique(units.rank).tolist():
        seqs, starts = members(r)
        for a, b in zip(starts[:-1].tolist(), starts[1:].tolist(), strict=True):
            run = seqs[a:b]
            bucket = np.searchsorted(planner.bucket_edges, planner.lengths[run], side="right")
            out[run] = max(per_bucket[j] for j in bucket.tolist())
    return out


@settings(max_examples=80, deadline=None)
@given(cases("files"), st.integers(1, 3), st.integers(1, 6), st.floats(0, 1), st.floats(0, 1))
def test_files_counts_figure_equals_the_whole_list_at_planned_costs(
    case: dict, epoch: int, world2: int, cut: float, at: float
) -> None:
    """Fresh (W) and resumed (W -> W' after any step) segments, from any step on."""
    planner = planner_of(case)
    world = case["world"]
    epoch = min(epoch, case["options"].partition_epoch)
    assume(files_fit(planner, world))
    history: list[tuple[int, int]] = []
    plan, _ = planner.files_plan(epoch, world)
    for step in (int(cut * plan.steps), None):
        assert isinstance(plan, RankwisePlan)
        costs = group_costs_per_sequence(planner, epoch, plan.world_size, history)
        first = int(at * plan.steps)
        want = whole_list_imbalance(plan, costs, first)
        got = files_imbalance(plan, bucket_costs(planner), first)
        assert got == pytest.approx(want, rel=1e-12)
        if step is not None:  # resume after `step` steps on world2 ranks
            history = [(world, step)]
            try:
                plan, _ = planner.files_plan(epoch, world2, history)
            except ResumeError as e:  # drop on more ranks than have remainders: refused
                assert case["options"].uneven == "drop" and "no batch" in str(e)
                return


def test_table_figure_over_runs_equals_the_batch_by_batch_figure() -> None:
    """Runs spanning many steps and steps spanning many runs (laplace bins of few batches over
    7 ranks; buckets:N runs of W batches) give the figure of the plan's batches one by one."""
    from seqloader.plan import PlanOptions

    lengths = np.random.default_rng(1).integers(1, 300, size=5000)
    for ordering, world in (("laplace:3", 7), ("laplace:40", 7), ("buckets:5", 3)):
        options = PlanOptions(ordering=ordering, max_frames=900, planning="indexed")
        planner = IndexedPlanner({"data": lengths}, options)
        plan = planner.global_plan(1, world)
        per_bucket = bucket_costs(planner)
        slots = plan.slots(0, plan.steps * world)
        bucket, _ = plan.table.locate(slots.g)
        per = (
            ((slots.hi - slots.lo) * plan.table.unit_costs(per_bucket)[bucket])
            .reshape(-1, world)
            .astype(float)
        )
        want = float((per.max(axis=1) / per.mean(axis=1)).mean())
        assert table_imbalance(plan, per_bucket) == pytest.approx(want, rel=1e-12)
        assert want > 1.0


def refusing_for_the_report(batches: property) -> Callable:
    """``plan.batches``, but an error when the report's figures thread asks for it."""

    def get(plan):
        if "seqloader-figures" in threading.current_thread().name:
            raise AssertionError("every rank's batches materialised for the report")
        return batches.fget(plan)

    return get


@pytest.mark.parametrize("distribution", ["shard", "files"])
def test_the_loader_report_never_materialises_every_rank(monkeypatch, distribution) -> None:
    """The report's figure under indexed planning (also from a resumed step on) comes without
    ``plan.batches``: every rank's batch list is never drawn, and under ``files`` no rank's
    members either (planned costs from counts)."""
    import seqloader as sl

    lengths = np.random.default_rng(3).integers(1, 60, size=300)
    data = [np.zeros((int(t), 1), np.float32) for t in lengths]
    src = sl.MemorySource({"data": data}, file_bounds=list(range(0, 301, 10)))
    options = {
        "ordering": "laplace",
        "max_frames": 200,
        "world_size": 3,
        "planning": "indexed",
        "distribution": distribution,
    }
    loader = sl.SeqLoader(src, rank=1, **options)
    planner = loader.planner
    plan = planner.global_plan(1, 3)
    if distribution == "shard":
        costs = planned_per_sequence(plan, bucket_costs(planner), len(lengths))
    else:
        costs = group_costs_per_sequence(planner, 1, 3, [])
    want_full = whole_list_imbalance(plan, costs, 0)
    want_rest = whole_list_imbalance(plan, costs, 2)

    for cls in (IndexedPlan, RankwisePlan):  # (the files state_dict still lists them)
        monkeypatch.setattr(cls, "batches", property(refusing_for_the_report(cls.batches)))
    share = Segment.share

    def drawing(self, *args):  # files: no rank's members drawn for the figure either
        if "seqloader-figures" in threading.current_thread().name:
            raise AssertionError("a rank's members drawn for the report")
        return share(self, *args)

    monkeypatch.setattr(Segment, "share", drawing)
    it = loader.epoch(1)
    next(it)
    next(it)
    state = loader.state_dict()
    for _ in it:
        pass
    report = loader.report()
    assert report is not None and report.step_imbalance == pytest.approx(want_full, rel=1e-12)
    resumed = sl.SeqLoader(src, rank=1, **options)
    resumed.load_state_dict(state)
    for _ in resumed.epoch(1):
        pass
    report = resumed.report()
    assert report is not None and report.step_imbalance == pytest.approx(want_rest, rel=1e-12)


def test_the_table_figure_is_computed_when_read_without_a_thread(monkeypatch) -> None:
    """Milliseconds at any size: no thread is started for it at the epoch boundary."""
    import seqloader as sl
    import seqloader.plan.indexed.plan as indexed_module

    threads: list[str] = []

    def recording(*args):
        threads.append(threading.current_thread().name)
        return table_imbalance(*args)

    monkeypatch.setattr(indexed_module, "table_imbalance", recording)
    lengths = np.random.default_rng(4).integers(1, 60, size=200)
    src = sl.MemorySource({"data": [np.zeros((int(t), 1), np.float32) for t in lengths]})
    loader = sl.SeqLoader(
        src, rank=0, world_size=2, planning="indexed", ordering="laplace", max_frames=200
    )
    for _ in loader.epoch(1):
        pass
    assert threads == []  # not computed yet
    report = loader.report()
    assert report is not None and report.step_imbalance >= 1.0
    assert threads == [threading.current_thread().name]
