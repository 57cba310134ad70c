"""The planned step imbalance of ``buckets:N`` in the loader's epoch report (through
``SeqLoader``; the plan's own figures are in test_plan_buckets, which needs no torch)."""

from __future__ import annotations

import numpy as np
import pytest

from seqloader.plan.cost import step_imbalance


def test_epoch_report_shows_the_planned_step_imbalance() -> None:
    import seqloader as sl

    lengths = np.random.default_rng(2).integers(1, 40, size=60)
    src = sl.MemorySource({"data": [np.zeros((int(t), 1), np.float32) for t in lengths]})
    # the greedy algorithm's figure over its global batch list (indexed: test_indexed_imbalance)
    options = {"ordering": "buckets:3", "max_frames": 120, "world_size": 2, "planning": "global"}
    planner = sl.SeqLoader(src, rank=0, **options).planner
    plan = planner.global_plan(1, 2)
    expected = step_imbalance(plan.batches.seqs, plan.batches.bounds, 2, planner.costs)
    for rank in range(2):
        loader = sl.SeqLoader(src, rank=rank, **options)
        for _ in loader.epoch(1):
            pass
        report = loader.report()
        assert report is not None and report.step_imbalance == pytest.approx(expected)
        assert f"step imbalance {expected:.3f}" in report.format()
        assert report.to_dict()["step_imbalance"] == round(expected, 5)


def test_the_step_imbalance_is_computed_off_the_loop_thread_and_unchanged(monkeypatch) -> None:
    """The epoch boundary does not compute the O(n) figure: a background thread does, and the
    figure (also from a resumed step on, also pickled) equals the one computed on the spot."""
    import copy
    import pickle
    import threading

    import seqloader as sl
    import seqloader.plan.epoch_plan as epoch_plan_module

    threads: list[str] = []

    def recording(*args):
        threads.append(threading.current_thread().name)
        return step_imbalance(*args)

    monkeypatch.setattr(epoch_plan_module, "step_imbalance", recording)
    lengths = np.random.default_rng(5).integers(1, 40, size=80)
    src = sl.MemorySource({"data": [np.zeros((int(t), 1), np.float32) for t in lengths]})
    # the greedy algorithm's figure over its global batch list (indexed: test_indexed_imbalance)
    options = {"ordering": "buckets:3", "max_frames": 120, "world_size": 2, "planning": "global"}
    loader = sl.SeqLoader(src, rank=1, **options)
    plan = loader.planner.global_plan(1, 2)
    it = loader.epoch(1)
    next(it)
    next(it)
    state = loader.state_dict()  # two steps consumed
    for _ in it:
        pass
    report = loader.report()
    assert report is not None
    expected = step_imbalance(plan.batches.seqs, plan.batches.bounds, 2, loader.planner.costs)
    assert report.step_imbalance == pytest.approx(expected)
    assert threads and "seqloader-figures" in threads[0] and "MainThread" not in threads
    assert pickle.loads(pickle.dumps(report)).step_imbalance == report.step_imbalance
    assert copy.deepcopy(report).to_dict() == report.to_dict()
    resumed = sl.SeqLoader(src, rank=1, **options)
    resumed.load_state_dict(state)
    for _ in resumed.epoch(1):
        pass
    b, first = plan.batches, 2 * 2  # from step 2 on, both ranks' batches
    start = b.bounds[first]
    tail = step_imbalance(b.seqs[start:], b.bounds[first:] - start, 2, loader.planner.costs)
    got = resumed.report()
    assert got is not None and got.step_imbalance == pytest.approx(tail)
