"""``distribution="files"`` with a limit on a batch's sum of lengths (``batch_cost="packed"``,
``max_packed_frames``) under indexed planning: each old rank's buckets are cut by that sum
(``histogram.cut_packed``, a member counted at its bucket's longest length), not by the batch
size of the longest bucket a batch reaches (``cut_runs``).

Properties: the cut covers every row once in batches within the limit and ``max_seqs``, as
few as greedy batching of the bounds gives, never more than ``cut_runs``; and the plans keep the
contracts (exactly once, equal steps, resume chains and elastic resume, replayed consumption
equal to the drawn one) with every planned batch within the packed limit.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plan_contracts import check_plan_contracts
from seqloader.plan import PlanOptions
from seqloader.plan.indexed.histogram import NARROW_SPAN, cut_packed, cut_runs, narrow_edges
from seqloader.plan.indexed.planner import IndexedPlanner


def next_fit(weights: np.ndarray, budget: int, max_seqs: int | None) -> int:
    """Batches of greedy batching (a batch takes the next member while it fits) of one row's
    member weights: the fewest batches of contiguous members within the limits."""
    batches, held, total = 0, 0, 0
    for w in weights.tolist():
        if held and (total + w > budget or (max_seqs is not None and held == max_seqs)):
            batches, held, total = batches + 1, 0, 0
        held, total = held + 1, total + w
    return batches + (held > 0)


@st.composite
def rows(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, int, int | None]:
    n_buckets = draw(st.integers(1, 7))
    counts = np.array(
        draw(
            st.lists(
                st.lists(st.integers(0, 25), min_size=n_buckets, max_size=n_buckets),
                min_size=1,
                max_size=4,
            )
        )
    )
    budget = draw(st.integers(1, 400))
    steps = draw(st.lists(st.integers(0, 60), min_size=n_buckets, max_size=n_buckets))
    weights = np.minimum(np.cumsum(steps), budget)  # each bucket's longest, ascending, fitting
    return counts, weights, budget, draw(st.one_of(st.none(), st.integers(1, 12)))


@settings(max_examples=150, deadline=None)
@given(rows())
def test_cut_packed_covers_rows_within_the_limit_in_the_fewest_batches(case) -> None:
    counts, weights, budget, max_seqs = case
    rows_, starts, runs, sizes = cut_packed(counts, weights, budget, max_seqs)
    k = np.array(
        [min(max_seqs or budget + 1, budget // w) if w else (max_seqs or 0) for w in weights]
    )
    for r in range(len(counts)):
        mine = rows_ == r
        ends = np.cumsum(runs[mine])
        assert starts[mine].tolist() == [0, *ends[:-1].tolist()][: len(ends)]  # no gap
        assert int(ends[-1] if len(ends) else 0) == int(counts[r].sum())
        member = np.repeat(weights, counts[r])  # each position's bound: its bucket's longest
        batches = 0
        for a, c, s in zip(starts[mine].tolist(), runs[mine].tolist(), sizes[mine].tolist()):
            assert s >= 1 and (max_seqs is None or s <= max_seqs)
            for lo in range(a, a + c, s):  # a run's batches; any part of one fits too
                assert int(member[lo : min(lo + s, a + c)].sum()) <= budget
                batches += 1
        assert batches == next_fit(member, budget, max_seqs)
        _, _, old_runs, old_sizes = cut_runs(counts[r : r + 1], k)
        assert batches <= int((-(-old_runs // old_sizes)).sum())


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(1, 5000), min_size=1, max_size=60, unique=True),
    st.lists(st.integers(1, 5000), max_size=6, unique=True),
    st.integers(1, 20_000),
)
def test_narrow_edges_cut_wide_buckets_at_occurring_lengths(values, edges, budget) -> None:
    """Every bucket keeps its edges and is cut only at lengths that occur (no empty bucket);
    each resulting bucket's occurring lengths span at most ``NARROW_SPAN``."""
    values, edges = np.sort(np.array(values)), np.sort(np.array(edges))
    got = narrow_edges(values, edges, budget, None)
    assert set(edges.tolist()) <= set(got.tolist())
    assert set(got.tolist()) - set(edges.tolist()) <= set(values.tolist())
    bucket = np.searchsorted(got, values, side="right")
    for b in np.unique(bucket).tolist():
        held = values[bucket == b]
        assert held.max() <= held.min() * NARROW_SPAN


@st.composite
def packed_files(draw: st.DrawFn) -> dict:
    """A small corpus in files, a packed limit (``batch_cost="packed"``, ``max_packed_frames``
    alone, or next to a padded ``max_frames``: the cut by counts), world sizes and cuts."""
    n = draw(st.integers(30, 200))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    limit = draw(st.integers(60, 900))
    high = limit // draw(st.sampled_from([1, 4, 12]))  # about 1, 4 or 12 sequences a batch
    lengths = rng.integers(draw(st.integers(0, 1)), high + 1, n)
    kind = draw(st.sampled_from(["packed", "max_packed_frames", "both"]))
    limits = {
        "packed": {"batch_cost": "packed", "max_frames": limit},
        "max_packed_frames": {"max_packed_frames": limit},
        "both": {"max_packed_frames": limit, "max_frames": 3 * limit},
    }[kind]
    worlds = draw(st.lists(st.integers(1, 5), min_size=2, max_size=3, unique=True))
    parts = draw(st.integers(1, 2))
    want = parts * worlds[0] + draw(st.integers(0, 6))
    cuts = rng.permutation(np.arange(1, max(n, 1)))[: max(want - 1, 0)]
    options = PlanOptions(
        ordering=draw(st.sampled_from(["laplace", "laplace:3", "laplace:.7"])),
        max_seqs=draw(st.one_of(st.none(), st.integers(1, 12))),
        max_seq_length=limit,  # what fits no batch alone is filtered, counted
        partition_epoch=parts,
        distribution="files",
        uneven=draw(st.sampled_from(["split", "pad", "drop"])),
        seed=draw(st.integers(0, 3)),
        planning="indexed",
        **limits,
    )
    return {
        "lengths": lengths.astype(np.int64),
        "files": np.concatenate([[0], np.unique(np.concatenate([[n], cuts]))]).astype(np.int64),
        "options": options,
        "limit": limit,
        "worlds": worlds,
        "cuts": draw(
            st.lists(st.one_of(st.floats(0.1, 0.9), st.integers(-1, 8)), min_size=2, max_size=2)
        ),
    }


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(packed_files())
def test_files_packed_plans_keep_the_contracts_and_the_limit(case: dict) -> None:
    """Exactly once, equal steps, resume chains over world sizes (elastic), the consumption
    replayed from counts equal to what the drawn batches consumed, and no batch over the
    packed limit (its sum of lengths) or ``max_seqs``, in every plan and resumed segment."""
    lengths, o = case["lengths"], case["options"]
    files = case["files"]
    planner = IndexedPlanner({"data": lengths}, o, files=files)
    have = int(planner.distribution.file_counts.astype(bool).sum())
    if have and have < o.partition_epoch * case["worlds"][0]:
        return  # too few files for the first world size: refused by name elsewhere

    def within(plan) -> None:
        b = plan.batches
        if len(b.seqs):
            assert np.add.reduceat(lengths[b.seqs], b.bounds[:-1]).max() <= case["limit"]
            assert o.max_seqs is None or np.diff(b.bounds).max() <= o.max_seqs

    def segment(planner, position, plan, done) -> None:
        within(plan)
        if position.history:
            epoch = position.epoch
            _, drawn = planner.files_plan(epoch, position.segment_world_size, position.history)
            assert sorted(drawn.tolist()) == sorted(done.seqs[: position.segment_start].tolist())

    check_plan_contracts(
        lambda: IndexedPlanner({"data": lengths}, o, files=files),
        case["worlds"],
        case["cuts"],
        [1],
        workers=(),
        each_plan=lambda planner, epoch, plan: within(plan),
        each_segment=segment,
    )
