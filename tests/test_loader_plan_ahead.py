"""The loader's next-epoch planning starts once the loop holds the epoch's first batch (with
torch: kept out of the ``test_plan_*`` files, which run without it)."""

from __future__ import annotations

import numpy as np

import seqloader as sl
from seqloader.plan import ahead
from seqloader.plan.ahead import PlanAhead


def test_the_loader_plans_the_next_epoch_after_handing_the_first_batch(monkeypatch) -> None:
    """Nothing of the next epoch's planning competes with the epoch's start: when it runs, the
    loop already holds the epoch's first batch (num_workers 0 and 1)."""
    # only the event starts it here: the fallback (a loop that never asks) would fire on a busy
    # machine where starting a worker and building the first batch takes longer than it
    monkeypatch.setattr(ahead, "AFTER_TIMEOUT_S", None)

    src = sl.MemorySource({"data": [np.ones((n, 2), "float32") for n in range(1, 40)]})
    for workers in (0, 1):
        loader = sl.SeqLoader(src, max_seqs=4, ordering="random", seed=3, num_workers=workers)
        steps_seen: list[tuple[int, int, int]] = []
        plan_epoch = loader._state._epoch_plan

        def recorded(epoch: int, plan_epoch=plan_epoch, steps_seen=steps_seen, loader=loader):
            report = loader.report()
            seen = (-1, -1) if report is None else (report.epoch, report.steps)
            steps_seen.append((epoch, *seen))
            return plan_epoch(epoch)

        loader._state._ahead = PlanAhead(recorded)
        try:
            for epoch in (1, 2, 3):
                assert sum(1 for _ in loader.epoch(epoch)) == loader.steps(epoch)
            # epoch 4's planning started at epoch 3's first hand-over: wait for it (an event,
            # its thread's end), so that what it recorded is there to check
            assert loader._state._ahead.take(4) is not None
        finally:
            loader.close()
        # epochs 2, 3 and 4 planned ahead, each once epoch - 1 had handed its first batch
        assert [e for e, _, _ in steps_seen] == [2, 3, 4]
        assert all(now == e - 1 and steps >= 1 for e, now, steps in steps_seen), steps_seen
