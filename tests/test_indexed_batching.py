"""Histogram batching's quality parts: bucket edges where the batch size changes
(``batching_edges``), a rank's buckets cut into runs of one batch size (``cut_runs``; a
sub-epoch's runs drawn as buckets: ``row_runs``, ``RunDraw``), bucket lists sorted by length
within windows (``SortedWindows``), and the
benchmark that compares both with the greedy algorithm."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from plan_contracts import check_plan_contracts
from seqloader.plan.indexed.histogram import (
    batching_edges,
    cut_runs,
    length_counts,
    row_runs,
    sizes_for_units,
)
from seqloader.plan.indexed.plan import MemberDraw, RunDraw, SortedWindows, _windows_of
from test_plan_indexed import check_limits


@settings(max_examples=200, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 300), min_size=1, max_size=400),
    max_seqs=st.sampled_from([None, 3, 50]),
    budget=st.sampled_from([None, 300, 2_000]),
    coarse=st.lists(st.integers(1, 300), max_size=4).map(lambda e: np.unique(e).astype(np.int64)),
)
def test_batching_edges_cut_where_the_batch_size_changes(lengths, max_seqs, budget, coarse):
    """No bucket spans a coarse edge; a bucket batched at its longest length's size costs fewer
    than half a batch per merged run of one size more than batching each length at its own."""
    values, counts = length_counts(np.asarray(lengths, dtype=np.int32))
    assert values.tolist() == sorted(set(lengths))
    assert counts.tolist() == [lengths.count(v) for v in values.tolist()]
    edges = batching_edges(values, counts, values, max_seqs, budget, coarse)
    assert (np.diff(edges) > 0).all() and set(edges.tolist()) <= set(values.tolist())
    bucket = np.searchsorted(edges, values, side="right")
    coarse_of = np.searchsorted(coarse, values, side="right")
    k = sizes_for_units(values, max_seqs, budget)
    for b in np.unique(bucket).tolist():
        inside = bucket == b
        assert len(set(coarse_of[inside].tolist())) == 1
        ks = k[inside]
        if budget is None or (ks == 0).any():
            continue
        runs = 1 + int(np.count_nonzero(np.diff(ks)))
        extra = float((counts[inside] * (1 / ks[-1] - 1 / ks)).sum())
        assert extra < 0.5 * runs


def greedy_runs(row: list[int], sizes: list[int]) -> list[tuple[int, int, int]]:
    """``cut_runs`` of one row as a person cuts it, bucket by bucket with plain integers ->
    (start, count, size) of each run. The open run keeps its batch size while the buckets'
    size stays; where it falls, the open batch moves into the new run when it fits the new
    size, else closes short; where it rises, the open batch first fills from the bucket at its
    size (0: unbounded, one batch)."""
    huge = 2**62
    out, pos, start, size = [], 0, 0, 0  # size 0: no run open yet
    for c, k in zip(row, sizes):
        k = k or huge
        if c and size and k != size:
            held = (pos - start) % size  # the open batch's fill
            if k < size:
                end = pos - held if held <= k else pos
            else:
                end = pos + (min(size - held, c) if held else 0)
            out.append((start, end - start, size))
            start = end
        if c:
            size = k
        pos += c
    out.append((start, pos - start, size))
    return [(a, n, s if s < huge else max(n, 1)) for a, n, s in out if n > 0]


@settings(max_examples=300, deadline=None)
@given(
    counts=st.lists(st.lists(st.integers(0, 40), min_size=6, max_size=6), min_size=1, max_size=4),
    caps=st.lists(st.integers(0, 12), min_size=6, max_size=6),
    falling=st.booleans(),
)
def test_cut_runs_cover_each_row_in_valid_batches_with_fewer_short_ones(counts, caps, falling):
    """A row's runs tile its positions in order; every batch of a run (``size`` sequences, the
    run's last one possibly fewer) holds no more than the smallest size of the buckets its
    members come from (0: unbounded), so it fits whatever it draws; and a row never has more
    batches than batching each bucket alone, and with sizes falling along the buckets (as
    lengths rise) at most one short batch per fall below a batch's fill, plus its last; and the
    runs are those of a plain greedy walk along each row (``greedy_runs``)."""
    grid = np.asarray(counts, dtype=np.int64)
    sizes = np.asarray(sorted(caps, reverse=True) if falling else caps, dtype=np.int64)
    rows, starts, runs, size = cut_runs(grid, sizes)
    walked = [(r, *run) for r, row in enumerate(counts) for run in greedy_runs(row, sizes.tolist())]
    assert list(zip(rows.tolist(), starts.tolist(), runs.tolist(), size.tolist())) == walked
    assert (runs > 0).all() and (size > 0).all()
    cap = np.where(sizes > 0, sizes, 10**9)
    for r, row in enumerate(grid):
        mine = rows == r
        ends = np.cumsum(runs[mine])
        assert starts[mine].tolist() == [0, *ends.tolist()][: len(ends)]
        assert (int(ends[-1]) if len(ends) else 0) == int(row.sum())
        bucket_of = np.repeat(np.arange(len(row)), row)  # the bucket at each position
        batches = 0
        for a, c, k in zip(starts[mine].tolist(), runs[mine].tolist(), size[mine].tolist()):
            for lo in range(a, a + c, k):
                batch = bucket_of[lo : min(lo + k, a + c)]
                assert len(batch) <= cap[batch].min()
                batches += 1
        alone = sum(-(-int(n) // int(k)) if k else int(n > 0) for n, k in zip(row, sizes))
        assert batches <= alone
        short = sum(int(n % k > 0) for n, k in zip(runs[mine].tolist(), size[mine].tolist()))
        if falling:
            falls = int(np.count_nonzero(np.diff(cap[row > 0]) < 0))
            assert short <= falls + 1


@settings(max_examples=200, deadline=None)
@given(
    counts=st.lists(st.integers(0, 40), min_size=1, max_size=7),
    sizes=st.lists(st.integers(1, 12), min_size=7, max_size=7),
    falling=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_row_runs_draw_every_bucket_position_once_in_batches_that_fit(counts, sizes, falling, seed):
    """A sub-epoch's runs (``row_runs``), drawn through ``RunDraw``, give every position of
    every bucket's list exactly once; each batch of a run (``size`` sequences, its last one
    possibly fewer) holds no more than the smallest size of the buckets its members come from;
    ``top`` is the run's longest bucket (its last); and with sizes falling along the buckets
    the sub-epoch has at most one short batch per fall, plus its last, and never more batches
    than batching each bucket alone."""
    counts = np.asarray(counts, dtype=np.int64)
    sizes = np.asarray(sizes[: len(counts)], dtype=np.int64)
    if falling:
        sizes = np.sort(sizes)[::-1].copy()
    starts = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=starts[1:])
    members = np.random.default_rng(seed).permutation(int(starts[-1])).astype(np.int64)
    base = MemberDraw(members, starts, np.zeros(len(counts), np.int64), (seed, 3))
    runs, run_sizes, run_starts, top = row_runs(counts, sizes)
    draw = RunDraw(base, counts, run_starts)
    bucket_of = np.repeat(np.arange(len(counts)), counts)  # member index -> its bucket
    bucket_of = bucket_of[np.argsort(members)]  # sequence -> its bucket
    seen, batches, short = [], 0, 0
    for r, (c, k) in enumerate(zip(runs.tolist(), run_sizes.tolist())):
        got, uses = draw.slots(np.full(c, r, dtype=np.int64), np.arange(c, dtype=np.int64))
        assert uses is None
        assert int(top[r]) == int(bucket_of[got].max())
        for lo in range(0, c, k):
            batch = got[lo : lo + k]
            assert len(batch) <= int(sizes[bucket_of[batch]].min())
            batches += 1
            short += len(batch) < k
        seen.extend(got.tolist())
    assert sorted(seen) == list(range(int(starts[-1])))  # exactly once
    assert batches <= sum(-(-int(n) // int(k)) for n, k in zip(counts, sizes))
    if falling:
        live = sizes[counts > 0]
        assert short <= int(np.count_nonzero(np.diff(live) < 0)) + 1


@settings(max_examples=100, deadline=None)
@given(
    counts=st.lists(st.integers(0, 60), min_size=1, max_size=5),
    sizes=st.lists(st.integers(1, 7), min_size=5, max_size=5),
    batches=st.integers(1, 4),
    picks=st.lists(st.integers(0, 10**6), max_size=30),
    seed=st.integers(0, 2**32 - 1),
    block=st.sampled_from([1, 9, 1 << 17]),
)
def test_sorted_windows_sort_each_window_and_answer_any_position_alone(
    counts, sizes, batches, picks, seed, block
):
    """Each window of ``batches`` batches is the unsorted draw's window sorted by length (ties in
    list order), so every list stays a permutation, and any positions asked alone get the slots
    the whole list has there, whether the windows are drawn ``block`` positions at a time or all
    at once."""
    rng = np.random.default_rng(seed)
    counts = np.asarray(counts, dtype=np.int64)
    sizes = np.asarray(sizes[: len(counts)], dtype=np.int64)
    starts = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, out=starts[1:])
    members = rng.permutation(int(starts[-1])).astype(np.int64)
    lengths = rng.integers(1, 20, int(starts[-1]) + 1)
    offsets = np.zeros(len(counts), dtype=np.int64)
    base = MemberDraw(members, starts, offsets, (seed, 7))
    draw = SortedWindows(base, lengths, counts, sizes, batches, block)
    whole = []
    for b, c in enumerate(counts.tolist()):
        pos = np.arange(c, dtype=np.int64)
        bucket = np.full(c, b, dtype=np.int64)
        got, uses = draw.slots(bucket, pos)
        assert uses is None
        raw = base(bucket, pos)
        m = int(sizes[b]) * batches
        for a in range(0, c, m):
            window = raw[a : a + m]
            expected = window[np.argsort(lengths[window], kind="stable")]
            assert got[a : a + m].tolist() == expected.tolist()
        whole.append(got)
    live = np.flatnonzero(counts > 0)
    if len(live) and picks:
        bucket = live[np.asarray(picks) % len(live)]
        pos = np.asarray(picks, dtype=np.int64) % counts[bucket]
        alone, _ = draw.slots(bucket, pos)
        assert alone.tolist() == [int(whole[b][p]) for b, p in zip(bucket, pos)]


@settings(max_examples=60, deadline=None)
@given(keys=st.lists(st.integers(0, 300), max_size=80), extra=st.integers(1, 400))
def test_windows_of_is_numpys_unique_with_inverse(keys, extra):
    """The windows a draw touches, marked in a table where the keys are dense and sorted where
    they are sparse, are ``np.unique(keys, return_inverse=True)``."""
    key = np.asarray(keys, dtype=np.int64)
    which, inverse = _windows_of(key, int(key.max(initial=0)) + extra)
    expected, expected_inverse = np.unique(key, return_inverse=True)
    assert which.tolist() == expected.tolist()
    assert inverse.tolist() == expected_inverse.tolist()


def test_indexed_batching_benchmark_reports_ratios_against_greedy() -> None:
    from benchmarks.indexed_batching import measure, table

    rows = measure(3_000, 1)
    assert len(rows) == 9
    for row in rows.values():
        for key, ratio in row["ratio"].items():
            assert ratio == row["indexed"][key] / row["global"][key] and ratio > 0
        assert row["indexed"]["padding W8"] >= 1.0 and row["global"]["padding W8"] >= 1.0
    assert table({"rows": rows}).count("\n") == 10


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 50), min_size=1, max_size=200),
    longest=st.sampled_from([None, 30]),
    shortest=st.sampled_from([0, 5]),
    drop=st.lists(st.booleans(), min_size=200, max_size=200),
)
def test_indexed_admission_is_the_global_planners(lengths, longest, shortest, drop):
    """``IndexedPlanner.admission`` (counts at once, the index array only when read) says what
    global planning's admission says: the same admitted sequences, counts and examples."""
    from seqloader.plan import Planner, PlanOptions
    from seqloader.plan.indexed.corpus import MaskAdmission
    from seqloader.plan.indexed.planner import IndexedPlanner

    arr = np.asarray(lengths, dtype=np.int32)
    excluded = {"listed": np.asarray(drop[: len(arr)])}
    limits = {"max_seq_length": longest, "min_seq_length": shortest, "ordering": "laplace"}
    got = IndexedPlanner(
        {"data": arr}, PlanOptions(**limits, planning="indexed"), excluded=excluded
    ).admission
    want = Planner({"data": arr}, PlanOptions(**limits), excluded=excluded).admission
    assert isinstance(got, MaskAdmission)
    assert got.filtered == want.filtered and got.filtered_examples == want.filtered_examples
    assert got.admitted.tolist() == want.admitted.tolist()


@st.composite
def keyed_limits(draw):
    """Two keys, limits per key (``max_seq_length``/``min_seq_length`` as mappings)."""
    n = draw(st.integers(1, 120))
    seed = draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    lengths = {"data": rng.integers(1, 60, n), "classes": rng.integers(0, 12, n)}
    longest = draw(st.sampled_from([None, {"data": 45}, {"classes": 9}, {"data": 50, "*": 10}]))
    shortest = draw(st.sampled_from([0, {"classes": 2}, {"data": 5, "classes": 1}]))
    options = {
        "ordering": draw(st.sampled_from(["laplace", "laplace:.5", "buckets:3"])),
        "max_frames": draw(st.sampled_from([60, 200])),
        "max_seqs": draw(st.sampled_from([None, 4])),
        "partition_epoch": draw(st.sampled_from([1, 2])),
        "distribution": draw(st.sampled_from(["shard", "files"])),
        "max_seq_length": longest,
        "min_seq_length": shortest,
        "seed": seed,
    }
    files = np.unique(np.concatenate([[0, n], rng.integers(0, n, 6)])).astype(np.int64)
    worlds = draw(st.lists(st.integers(1, 5), min_size=2, max_size=3))
    return lengths, options, files, worlds, draw(st.sampled_from([0.0, 0.3, 0.5, 1.0]))


@settings(max_examples=60, deadline=None)
@given(keyed_limits())
def test_per_key_seq_length_limits_keep_every_contract(case):
    """Per-key ``max_seq_length``/``min_seq_length`` under indexed planning: the admitted
    sequences are global planning's, every one exactly once per full epoch, equal steps, shares
    computed alone, limits; resumes on other world sizes exactly once."""
    from seqloader.errors import OptionError
    from seqloader.plan import Planner, PlanOptions
    from seqloader.plan.indexed.planner import IndexedPlanner

    lengths, options, files, worlds, cut = case

    def planner() -> IndexedPlanner:
        return IndexedPlanner(lengths, PlanOptions(**options, planning="indexed"), files=files)

    try:
        planner()
    except OptionError:  # nothing admitted: refused by name
        return
    glob = Planner(lengths, PlanOptions(**{**options, "distribution": "shard"}))
    admitted = glob.admission.admitted.tolist()
    assert planner().admission.admitted.tolist() == admitted
    assert planner().filtered(1) == glob.filtered(1)
    # files: a world size with fewer files holding sequences than ranks is refused (checked)
    check_plan_contracts(planner, worlds, [cut] * (len(worlds) - 1), each_plan=check_limits)


def test_indexed_quality_benchmark_times_one_ranks_share() -> None:
    """The timing benchmark's child plans rank 517 of 1,024 (every rank the same steps) and its
    table has a row per distribution and case."""
    from benchmarks.indexed_quality import TIMED, child, table

    got = child({"n": 3_000, "dist": "long-tailed", "case": TIMED["files laplace"]})
    assert got["share"] == got["steps"] > 0 and got["seconds"] > 0
    row = {"new": got, "base": got, "time_ratio": 1.0}
    text = table({"rows": {f"uniform / {name}": row for name in TIMED}})
    assert text.count("\n") == 1 + len(TIMED) and "| 1.00x |" in text
