"""The next epoch planned ahead on a background thread: the same plans as planned on the spot,
computed off the caller's thread, and errors still raised on the caller's thread."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from seqloader.errors import OptionError
from seqloader.plan import Planner, PlanOptions
from seqloader.plan.ahead import PlanAhead
from seqloader.plan.greedy.distribute import GlobalPlan
from seqloader.plan.position import Position, continue_plan
from seqloader.plan.state import LoaderState

LENGTHS = {"data": np.random.default_rng(0).integers(1, 400, 3000)}
FILES = np.arange(0, 3001, 100)


def same(a: GlobalPlan, b: GlobalPlan) -> None:
    for field in ("seqs", "bounds", "real"):
        np.testing.assert_array_equal(getattr(a.batches, field), getattr(b.batches, field))
    assert (a.world_size, a.dropped) == (b.world_size, b.dropped)


class Recording(Planner):
    """A planner that notes which thread planned which epoch."""

    threads: list[tuple[int, str]]

    def global_plan(self, epoch: int, world_size: int, *args: object, **kw: object) -> GlobalPlan:
        self.threads.append((epoch, threading.current_thread().name))
        return super().global_plan(epoch, world_size, *args, **kw)  # type: ignore[arg-type]

    def files_segment(self, epoch: int, world_size: int, *args: object) -> tuple[GlobalPlan, int]:
        self.threads.append((epoch, threading.current_thread().name))
        return super().files_segment(epoch, world_size, *args)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "options",
    [
        {"ordering": "laplace:.50", "max_frames": 2000, "partition_epoch": 2},
        {"ordering": "buckets:5", "max_frames": 2000},
        {"ordering": "random", "max_seqs": 7, "distribution": "files", "partition_epoch": 3},
    ],
)
def test_each_epoch_is_planned_ahead_off_the_callers_thread(options: dict) -> None:
    world = 3
    planner = Recording(LENGTHS, PlanOptions(seed=4, **options), files=FILES)
    planner.threads = []
    ahead = LoaderState(planner, "fp", world)
    on_the_spot = LoaderState(Planner(LENGTHS, PlanOptions(seed=4, **options), files=FILES), "fp",
                              world, plan_ahead=False)  # fmt: skip
    for epoch in range(1, 5):
        plan, position = ahead.begin(epoch)
        assert ahead._ahead is not None and ahead._ahead.pending == epoch + 1
        want, want_position = on_the_spot.begin(epoch)
        same(plan, want)
        assert position == want_position
        ahead.consumed = plan.steps  # the epoch runs to its end
    main = threading.current_thread().name
    planned_by = dict(planner.threads)  # epoch -> the thread that planned it (the last one)
    assert planned_by[1] == main  # nothing to plan ahead of the first epoch
    assert all(planned_by[e].startswith("seqloader-plan-ahead-") for e in (2, 3, 4, 5))
    assert [e for e, name in planner.threads if name == main] == [1]


def test_a_resumed_epoch_takes_its_own_plan_and_plans_on() -> None:
    """A state loaded mid-epoch begins from its position, not from a plan made ahead."""
    options = PlanOptions(ordering="laplace:.50", max_frames=2000, seed=2)
    first = LoaderState(Planner(LENGTHS, options), "fp", 2)
    first.begin(1)
    first.begin(2)
    first.consumed = 3
    saved = first.to_dict()
    resumed = LoaderState(Planner(LENGTHS, options), "fp", 2)
    resumed.begin(1)  # plans epoch 2 ahead, then the state moves elsewhere
    resumed.load(saved)
    rest, position = resumed.begin(2)
    assert position.steps == 3
    same(rest, first.segment)  # type: ignore[arg-type]
    nxt, _ = resumed.begin(3)
    same(nxt, Planner(LENGTHS, options).global_plan(3, 2))


def test_a_failure_ahead_is_raised_on_the_callers_thread() -> None:
    calls: list[str] = []

    def compute(epoch: int) -> int:
        calls.append(threading.current_thread().name)
        if epoch == 2:
            raise OptionError("no epoch 2 here")
        return epoch * 10

    ahead: PlanAhead[int] = PlanAhead(compute)
    ahead.request(2)
    assert ahead.take(2) is None  # failed in the background: the caller plans itself...
    with pytest.raises(OptionError, match="no epoch 2"):
        compute(2)  # ...and sees the error
    ahead.request(3)
    ahead.request(4)  # replaces 3: its result is dropped
    assert ahead.take(3) is None
    assert ahead.take(4) == 40
    assert ahead.take(4) is None  # taken once
    ahead_calls = [name for name in calls if name.startswith("seqloader-plan-ahead-")]
    assert len(ahead_calls) == 3 and len(calls) == 4  # epochs 2, 3, 4 ahead; 2 once here


@pytest.mark.parametrize("ordering", ["laplace:.50", "buckets:5"])
def test_an_elastic_resume_orders_the_epoch_once(ordering: str) -> None:
    """Loading a mid-epoch state on another world size plans the saved segment and the new one
    from one order (then drops it), and continues exactly as planning them apart does."""
    options = PlanOptions(ordering=ordering, max_frames=2000, seed=3)
    saver = LoaderState(Planner(LENGTHS, options), "fp", 4, plan_ahead=False)
    plan, _ = saver.begin(1)
    saver.consumed = plan.steps // 2
    saved = saver.to_dict()

    class Counting(Planner):
        orders = 0

        def _sub_epoch_slots(self, epoch: int, order_rank: int) -> tuple:
            Counting.orders += 1
            return super()._sub_epoch_slots(epoch, order_rank)

    planner = Counting(LENGTHS, options)
    state = LoaderState(planner, "fp", 3, plan_ahead=False)
    state.load(saved)
    assert Counting.orders == 1 and planner._reused_orders is None
    rest, position = state.begin(1)
    assert Counting.orders == 1
    apart = Planner(LENGTHS, options)
    want, want_position = continue_plan(apart, Position.from_fields(saved), 3)
    same(rest, want)
    assert position == want_position


def test_planning_ahead_waits_for_its_event_unless_the_plan_is_needed() -> None:
    """The loader lets the next epoch's planning start only once the epoch's first batch is
    handed (``after``); a caller that needs the plan before that gets it all the same."""
    started: list[int] = []
    gate = threading.Event()

    def compute(epoch: int) -> int:
        started.append(epoch)
        return epoch * 10

    ahead: PlanAhead[int] = PlanAhead(compute)
    ahead.request(2, after=gate)
    assert started == []  # parked until the event
    gate.set()
    assert ahead.take(2) == 20 and started == [2]
    ahead.request(3, after=threading.Event())  # never set by anyone
    assert ahead.take(3) == 30  # needed now: take starts it
