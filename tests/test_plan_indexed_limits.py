"""``planning="indexed"`` with ``batch_cost="quadratic:Q"`` and ``max_packed_frames`` together
(hypothesis; pure numpy): a bucket's batch size is bounded by both, in their own units, so no
batch breaks either limit (the quadratic cost of its longest member times its size, the sum of
its lengths), and every contract holds (``check_plan_contracts``), for the bucket orderings, the
files distribution and the fixed orders (whose batches stay global planning's); with per-key
``max_frames`` every key's own quadratic cost."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from plan_contracts import check_plan_contracts
from seqloader.plan import PlanOptions
from seqloader.plan.greedy.planner import Planner
from seqloader.plan.indexed.planner import IndexedPlanner


@st.composite
def cases(draw: st.DrawFn) -> dict:
    n = draw(st.integers(0, 300))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    data = rng.integers(1, draw(st.sampled_from([40, 290])) + 1, size=n).astype(np.int64)
    distribution = draw(st.sampled_from(["shard", "files", "random_seed_offset"]))
    keyed = st.fixed_dictionaries(  # per key: each key's own quadratic cost
        {"data": st.integers(30_000, 90_000), "classes": st.integers(1_000, 4_000)}
    )
    kinds = ["laplace", "laplace:.9", "laplace:3", "sorted", "default"]  # buckets: no packed limit
    ordering = draw(st.sampled_from(kinds if distribution != "files" else kinds[:3]))
    options = {
        "ordering": ordering,
        "max_seqs": draw(st.one_of(st.none(), st.integers(1, 20))),
        "max_frames": draw(st.one_of(st.none(), st.integers(30_000, 90_000), keyed)),
        "batch_cost": f"quadratic:{draw(st.sampled_from([20, 100, 400]))}",
        "max_packed_frames": draw(st.integers(290, 3000)),
        "partition_epoch": draw(st.integers(1, 2)),
        "uneven": draw(st.sampled_from(["split", "pad"])),
        "distribution": distribution,
    }
    files = np.unique(np.concatenate([[0, n], rng.integers(0, n + 1, 8)])) if n else None
    classes = np.maximum(data // 3 + rng.integers(0, 4, size=n), 1)
    return {"lengths": {"data": data, "classes": classes}, "options": options, "files": files,
            "world": draw(st.integers(1, 4))}  # fmt: skip


def planner_of(case: dict) -> IndexedPlanner:
    options = PlanOptions(**case["options"], planning="indexed")
    return IndexedPlanner(case["lengths"], options, files=case["files"])


def within_both(planner: IndexedPlanner, epoch: int, plan) -> None:
    o, b = planner.options, plan.batches
    sizes = np.diff(b.bounds)
    if not len(sizes):
        return
    lengths = planner.lengths[b.seqs]
    sums = np.add.reduceat(lengths, b.bounds[:-1])
    assert sums.max() <= o.max_packed_frames
    limits = o.max_frames if isinstance(o.max_frames, dict) else {"data": o.max_frames}
    for key, limit in limits.items():  # every key's own quadratic cost
        if limit is not None:
            units = o.cost.units(np.asarray(planner.corpus.batch_lengths[key])[b.seqs])
            longest = np.maximum.reduceat(units, b.bounds[:-1])
            assert (sizes * longest).max() <= limit * o.cost.quadratic, key


@settings(max_examples=80, deadline=None)
@given(cases())
def test_quadratic_and_packed_limits_bound_every_batch(case: dict) -> None:
    if case["files"] is None and case["options"]["distribution"] == "files":
        return  # files needs a layout
    parts = case["options"]["partition_epoch"]
    check_plan_contracts(
        lambda: planner_of(case), [case["world"]], [0.5], range(1, parts + 1),
        each_plan=within_both,
    )  # fmt: skip
    if case["options"]["ordering"] in ("sorted", "default") and not isinstance(
        case["options"]["max_frames"], dict
    ):  # per-key quadratic limits: indexed planning only
        greedy = Planner(case["lengths"], PlanOptions(**case["options"]))
        got = planner_of(case).global_plan(1, 1).batches
        np.testing.assert_array_equal(got.bounds, greedy.global_plan(1, 1).batches.bounds)
