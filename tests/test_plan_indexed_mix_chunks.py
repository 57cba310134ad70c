"""``mix`` under ``distribution="shard"`` with chunking and ``laplace``/``buckets:N`` under indexed
planning (``seqloader.plan.indexed.mix_chunks``; hypothesis, pure numpy).

The mix selects sequences per (corpus, length class) stream; every chunk of each selected slot
(sequence, corpus epoch) is planned, bucketed by its window as unmixed chunked plans are. Every
contract holds (``check_plan_contracts``: each chunk of each slot once per corpus epoch, equal
steps, a rank's share computed alone, determinism, resume chains ``W -> W' -> W''``).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plan_contracts import check_plan_contracts
from seqloader.errors import OptionError
from seqloader.plan import PlanOptions
from seqloader.plan.epochs import EpochIndex
from seqloader.plan.indexed.mix_chunks import CellFinder, ChunkedBucketMix
from seqloader.plan.indexed.planner import IndexedPlanner
from seqloader.plan.mix import Corpora

pytestmark = pytest.mark.filterwarnings("ignore::seqloader.errors.DataWarning")  # tiny rates


@st.composite
def cases(draw: st.DrawFn) -> dict:
    sizes = draw(st.lists(st.integers(1, 14), min_size=1, max_size=3))
    names = tuple(f"c{i}" for i in range(len(sizes)))
    lengths = np.array(
        draw(st.lists(st.integers(1, 20), min_size=sum(sizes), max_size=sum(sizes))), np.int64
    )
    options = {
        "ordering": draw(st.sampled_from(["laplace:.3", "laplace:2", "buckets:2", "buckets:3:2"])),
        "max_seqs": draw(st.sampled_from([None, 2, 4])),
        "max_frames": draw(st.sampled_from([None, 30, 60])),
        "partition_epoch": draw(st.integers(1, 2)),
        "uneven": draw(st.sampled_from(["split", "pad", "drop"])),
        "seed": draw(st.integers(0, 3)),
        "mix": {n: draw(st.sampled_from([0.5, 1.0, 1.5, "2/3", 2])) for n in names},
        "chunking": draw(st.sampled_from(["4:2", "5:5", "7:3"])),
        "min_chunk_size": draw(st.sampled_from([0, 0, 2])),
    }
    bounds = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    worlds = draw(st.lists(st.integers(1, 4), min_size=2, max_size=3))
    return {"lengths": lengths, "corpora": Corpora(names, bounds), "options": options,
            "worlds": worlds}  # fmt: skip


def planner(case: dict) -> IndexedPlanner:
    options = PlanOptions(**case["options"])
    assert options.resolved_planning == "indexed"
    return IndexedPlanner({"data": case["lengths"]}, options, corpora=case["corpora"])


@settings(max_examples=8, deadline=None)
@given(cases())
def test_every_chunk_of_the_mixed_slots_once_and_every_contract_holds(case: dict) -> None:
    """On one rank a sub-epoch plans every chunk of the mix's slots once (the slots' counts per
    corpus those of the mix's (corpus, class) streams), each batch within the limits by its
    windows; the contracts hold on the chain ``worlds``."""
    try:
        indexed = planner(case)
    except OptionError as refused:  # a corpus whose sequences all lack a chunk
        assert "no admitted sequences" in str(refused)
        return
    mix, o = indexed.mix, indexed.options
    assert isinstance(mix, ChunkedBucketMix)
    size, step = o.chunking["*"]  # type: ignore[index]
    lengths = case["lengths"]
    for epoch in range(1, o.partition_epoch + 1):
        b = indexed.global_plan(epoch, 1).batches
        assert b.uses is not None and b.chunks is not None and b.real.all()
        ep = EpochIndex(epoch, o.partition_epoch)
        seqs, uses = mix.listed_slots(ep, o.partition_epoch)
        want = mix.part(ep.full_epoch, ep.part, o.partition_epoch)[1].sum(axis=0)
        np.testing.assert_array_equal(case["corpora"].counts(seqs), want)
        starts = np.arange(0, 20, step)  # every window of a slot, none twice
        got = sorted(zip(b.seqs.tolist(), b.uses.tolist(), b.chunks.tolist(), strict=True))
        expect = sorted(
            (s, u, c)
            for s, u in zip(seqs.tolist(), uses.tolist(), strict=True)
            for c, a in enumerate(starts.tolist())
            if a < lengths[s] and min(size, lengths[s] - a) >= o.min_chunk_size
        )
        assert got == expect
        window = np.minimum(lengths[b.seqs] - b.chunks * step, size)
        sizes = np.diff(b.bounds)
        longest = np.maximum.reduceat(window, b.bounds[:-1]) if len(sizes) else window
        if o.max_frames is not None:
            assert (sizes * longest <= o.max_frames).all()
    cut = [0.5, 1][: len(case["worlds"]) - 1]
    check_plan_contracts(lambda: planner(case), case["worlds"], cut, workers=(2,))


@settings(max_examples=10, deadline=None)
@given(cases(), st.randoms(use_true_random=False))
def test_the_draw_by_bucket_runs_gives_the_generic_draws_slots(case: dict, rnd) -> None:
    """``MixChunkDraw.slots`` (a run of one bucket: its bijection alone, its cells found by
    ``CellFinder``; scattered buckets: grouped as ``MemberDraw.positions`` does) gives the slots
    of the generic composition, bit for bit: ``MemberDraw.positions`` -> ``ChunkBuckets.locate``
    -> the class's ``j``-th listed slot. So planning's faster path plans what it planned. Its
    ``sort_keys`` (what ``SortedWindows`` sorts a window by, from the cells, before any slot is
    drawn) are the drawn chunks' window lengths (``ChunkWindows``), and its slots of any subset
    of the positions those of ``slots``."""
    try:
        indexed = planner(case)
    except OptionError:
        return
    o = indexed.options
    ep = EpochIndex(1, o.partition_epoch)
    draw = indexed.mix.bucket_draw(ep, o.partition_epoch)
    counts = draw.units.counts
    live = np.flatnonzero(counts)
    runs = [int(b) for b in live for _ in range(rnd.randint(0, 2))]
    rnd.shuffle(runs)
    bucket = np.array([b for b in runs for _ in range(int(counts[b]))], np.int64)
    pos = np.concatenate([np.arange(counts[b]) for b in runs] or [np.zeros(0)]).astype(np.int64)
    mixed = np.arange(len(pos))
    rnd.shuffle(mixed)  # the same positions with the buckets scattered
    one_run = [(np.full(int(counts[b]), b), np.arange(counts[b])) for b in runs]  # run path
    for b_at, p_at in [(bucket, pos), (bucket[mixed], pos[mixed]), *one_run]:
        codes, uses = draw.slots(b_at, p_at)
        g, j, chunk = draw.units.locate(draw.positions(b_at, p_at))
        slot = draw.listed.starts[g] + j
        np.testing.assert_array_equal(codes, draw.listed.seqs[slot] * draw.units.stride + chunk)
        np.testing.assert_array_equal(uses, draw.listed.uses[slot])
        lengths, take = draw.sort_keys(b_at, p_at)
        np.testing.assert_array_equal(lengths, indexed.planned.lengths[codes])
        some = np.array(sorted(rnd.sample(range(len(codes)), len(codes) // 2)), np.int64)
        got_codes, got_uses = take(some)
        np.testing.assert_array_equal(got_codes, codes[some])
        np.testing.assert_array_equal(got_uses, uses[some])


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.integers(0, 40), min_size=1, max_size=30).filter(lambda w: sum(w) > 0),
    st.integers(0, 50),
    st.integers(0, 9),
)
def test_cell_finder_finds_what_searchsorted_finds(widths: list[int], start: int, first: int):
    """``CellFinder.find`` is ``searchsorted(ends, at, "right") + first`` at every position of
    the bucket (cells of any widths, empty ones too)."""
    ends = start + np.cumsum(widths)
    at = np.arange(start, int(ends[-1]))
    got = CellFinder(ends, start, first).find(at)
    np.testing.assert_array_equal(got, np.searchsorted(ends, at, side="right") + first)


@settings(max_examples=10, deadline=None)
@given(cases(), st.randoms(use_true_random=False))
def test_windows_that_sort_alike_are_drawn_in_list_order(case: dict, rnd) -> None:
    """``SortedWindows.slots`` leaves a window whose chunks all have one window length
    (``alike_windows``: of its buckets' ``alike_keys``) in list order and draws only the
    positions asked: the slots of the window-by-window draw (``_windowed``), for any subset of
    the positions in any order."""
    try:
        indexed = planner(case)
    except OptionError:
        return
    o = indexed.options
    draw = indexed.draw(1)
    counts = np.asarray(draw.counts, dtype=np.int64)
    bucket = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    pos = np.arange(len(bucket), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
    some = np.array(rnd.sample(range(len(pos)), rnd.randint(0, len(pos))), np.int64)
    for b_at, p_at in [(bucket, pos), (bucket[some], pos[some])]:
        got, want = draw.slots(b_at, p_at), draw._windowed(b_at, p_at)
        np.testing.assert_array_equal(got[0], want[0])
        np.testing.assert_array_equal(got[1], want[1])
    assert o.chunking is not None
