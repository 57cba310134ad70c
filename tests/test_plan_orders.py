"""A source that orders its own sub-epochs (``plan/orders.py``): the planner batches its order as
it comes, so the order is checked: each sequence at most once, all of them its own."""

from __future__ import annotations

import numpy as np
import pytest

from seqloader.errors import DataError
from seqloader.plan.options import PlanOptions
from seqloader.plan.planners import make_planner


class Fixed:
    """An order per epoch given by hand."""

    def __init__(self, by_epoch: dict[int, list[int]]) -> None:
        self.by_epoch = by_epoch

    def order(self, epoch: int, seed: int, order_rank: int) -> np.ndarray:
        return np.asarray(self.by_epoch[epoch], dtype=np.int64)

    def identity(self) -> bytes:
        return repr(sorted(self.by_epoch.items())).encode()

    def filtered(self, epoch: int, seed: int) -> dict[str, int]:
        return {"left out by the source's order": 6 - len(set(self.by_epoch[epoch]))}


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
