"""A source that orders its own sub-epochs (``plan/orders.py``): the planner batches its order as
it comes, so the order is checked: each sequence at most once, all of them its own; its plans
keep every planning contract (``check_plan_contracts``)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plan_contracts import check_plan_contracts
from seqloader.errors import DataError
from seqloader.plan.options import PlanOptions
from seqloader.plan.planners import make_planner


class Fixed:
    """An order per sub-epoch given by hand; ``left``: how many sequences each leaves out (default:
    those of the six in ``LENGTHS`` it does not name)."""

    def __init__(self, by_epoch: dict[int, list[int]], left: dict[int, int] | None = None) -> None:
        self.by_epoch = by_epoch
        self.left = left if left is not None else {e: 6 - len(set(o)) for e, o in by_epoch.items()}

    def order(self, epoch: int, seed: int, order_rank: int) -> np.ndarray:
        return np.asarray(self.by_epoch[epoch], dtype=np.int64)

    def identity(self) -> bytes:
        return repr(sorted(self.by_epoch.items())).encode()

    def filtered(self, epoch: int, seed: int) -> dict[str, int]:
        return {"left out by the source's order": self.left[epoch]}


LENGTHS = {"data": np.array([5, 9, 3, 7, 4, 8])}


def planner(by_epoch: dict[int, list[int]]):
    return make_planner(LENGTHS, PlanOptions(max_seqs=2), orders=Fixed(by_epoch))


def test_the_source_order_is_planned_as_it_comes_each_sequence_once() -> None:
    plan = planner({1: [4, 0, 5, 2]}).global_plan(1, 2)
    real = plan.batches.seqs[plan.batches.real]
    assert real.tolist() == [4, 0, 5, 2]


@pytest.mark.parametrize(
    ("order", "match"),
    [
        ([4, 0, 4, 2], r"epoch 1 names sequence 4 twice \(1 repeats in all\)"),
        ([4, 0, 6], r"epoch 1 names sequence 6, outside 0\.\.5"),
        ([-1, 0], r"epoch 1 names sequence -1, outside 0\.\.5"),
    ],
)
def test_a_source_order_that_repeats_or_strays_is_refused(order: list[int], match: str) -> None:
    with pytest.raises(DataError, match=match):
        planner({1: order}).global_plan(1, 2)


@settings(max_examples=20)
@given(
    lengths=st.lists(st.integers(1, 30), min_size=1, max_size=30),
    parts=st.integers(1, 3),
    uneven=st.sampled_from(["split", "pad", "drop"]),
    data=st.data(),
)
def test_a_source_order_keeps_every_planning_contract(
    lengths: list[int], parts: int, uneven: str, data: st.DataObject
) -> None:
    """Each full epoch the source names some of its sequences in its own order, cut into the
    sub-epochs (what it leaves out counted in the first): every sub-epoch is its order once, on
    equal steps, shares alone, through resumes on other world sizes (C1-C5)."""
    n = len(lengths)
    by_epoch, left = {}, {}
    for full in range(2):
        named = data.draw(st.permutations(range(n)))[: data.draw(st.integers(0, n))]
        for p, piece in enumerate(np.array_split(np.asarray(named, dtype=np.int64), parts)):
            by_epoch[full * parts + p + 1] = piece.tolist()
            left[full * parts + p + 1] = 0 if p else n - len(named)
    options = PlanOptions(max_seqs=3, partition_epoch=parts, uneven=uneven)
    worlds = data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=3))
    cuts = data.draw(st.lists(st.floats(0, 1), min_size=len(worlds) - 1, max_size=len(worlds) - 1))

    def make():
        return make_planner({"data": np.array(lengths)}, options, orders=Fixed(by_epoch, left))

    check_plan_contracts(make, worlds, cuts, range(1, 2 * parts + 1), ordered=True, workers=())
