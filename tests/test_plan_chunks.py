"""Chunking and per-key / packed batch limits in the plan, as properties.

1. The same chunks and batches as RETURNN's own torch pipeline (``LenFilterDataPipe`` ->
   ``ChunkingIterDataPipe`` -> ``BatchingIterDataPipe``, from the installed ``returnn``), fed the
   same sequences in the same order, for random corpora, chunkings, ``min_chunk_size``, length
   filters and limits (``batch_size`` / ``packed_batch_size`` as ints and per key, ``max_seqs``).
2. Every contract for chunks: each chunk of an epoch exactly once across ranks, equal steps,
   determinism, sub-epochs that form the full epoch, every batch within its limits, and the
   resume harness over chunked epochs (exact and elastic: positions count chunks).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chunk_units import chunk_ids
from seqloader.errors import OptionError, SequenceTooLongError
from seqloader.plan import Planner, PlanOptions, Position, continue_plan
from seqloader.plan.chunks import chunk_counts, chunking_option
from test_resume_plan import assert_equal_steps

returnn_pipeline = pytest.importorskip("returnn.torch.data.pipeline")

UNEVEN = ["split", "pad", "drop"]


@st.composite
def two_key_corpora(draw: st.DrawFn, classes: str, max_n: int = 60) -> dict[str, np.ndarray]:
    """``data`` (0..300 frames) and ``classes``: ``"same"`` lengths, ``"rate"`` = a 4x lower
    frame rate (``ceil(data / 4)``: chunking both by (4s, 4t) and (s, t) gives equal chunk
    counts) or ``"free"`` (independent; chunk counts of both keys then mostly differ)."""
    n = draw(st.integers(1, max_n))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    data = rng.integers(0, draw(st.sampled_from([8, 60, 300])) + 1, size=n).astype(np.int64)
    other = {
        "same": data.copy(),
        "rate": -(-data // 4),
        "free": rng.integers(0, 80, size=n).astype(np.int64),
    }[classes]
    return {"data": data, "classes": other}


@st.composite
def chunk_cases(draw: st.DrawFn) -> tuple[dict[str, np.ndarray], dict, dict]:
    """(lengths, RETURNN options, seqloader options) with the same meaning."""
    size, step = draw(st.integers(1, 40)), draw(st.integers(1, 40))
    form = draw(st.sampled_from(["int", "str", "tuple", "per_key", "data_only"]))
    mode = {"int": "same", "str": "same", "tuple": "same", "per_key": "rate", "data_only": "free"}
    rare = draw(st.integers(0, 9)) == 0  # now and then keys whose chunk counts differ
    lengths = draw(two_key_corpora("free" if rare else mode[form]))
    chunking: object
    if form == "int":
        chunking = size
    elif form == "str":
        chunking = f"{size}:{step}"
    elif form == "tuple":
        chunking = (size, step)
    elif form == "per_key":
        chunking = ({"data": 4 * size, "classes": size}, {"data": 4 * step, "classes": step})
    else:
        chunking = ({"data": size}, {"data": step})
    min_chunk = draw(st.sampled_from([0, 0, 1, 3]))
    max_seqs = draw(st.one_of(st.none(), st.integers(1, 12)))
    limit_form = draw(st.sampled_from(["int", "dict", "data", "none"]))
    budget = draw(st.integers(40, 400))
    batch_size: object = {"int": budget, "dict": {"data": budget, "classes": budget // 2},
                          "data": {"data": budget}, "none": None}[limit_form]  # fmt: skip
    packed = draw(st.one_of(st.none(), st.integers(400, 2000)))
    max_len = draw(st.one_of(st.none(), st.integers(100, 300)))
    returnn = {
        "chunking": chunking,
        "min_chunk_size": min_chunk,
        "batch_size": batch_size,
        "max_seqs": max_seqs,
        "packed_batch_size": packed,
        "max_seq_length": max_len,
    }
    frames = {"*": batch_size} if isinstance(batch_size, int) else batch_size
    ours = {
        "chunking": chunking,
        "min_chunk_size": min_chunk,
        "max_frames": frames,
        "max_seqs": max_seqs,
        "max_packed_frames": None if packed is None else {"*": packed},
        "max_seq_length": None if max_len is None else {"*": max_len},
    }
    return lengths, returnn, ours


def returnn_batches(lengths: dict[str, np.ndarray], opts: dict) -> list[list[tuple]]:
    """RETURNN's pipeline over sequences ``0..n-1``: each batch as ``(seq, {key: (start,
    length)})`` per entry (the values of sequence i's key are ``i * 10**6 + frame``)."""
    n = len(lengths["data"])
    seqs = [
        {k: (i * 10**6 + np.arange(v[i], dtype=np.int64)) for k, v in lengths.items()}
        for i in range(n)
    ]
    pipe: object = seqs
    if opts["max_seq_length"] is not None:
        pipe = returnn_pipeline.LenFilterDataPipe(pipe, max_seq_length=opts["max_seq_length"])
    pipe = returnn_pipeline.ChunkingIterDataPipe(
        pipe, opts["chunking"], min_chunk_size=opts["min_chunk_size"]
    )
    pipe = returnn_pipeline.BatchingIterDataPipe(
        pipe,
        batch_size=opts["batch_size"],
        max_seqs=opts["max_seqs"],
        packed_batch_size=opts["packed_batch_size"],
    )
    out = []
    for batch in pipe:
        rows = []
        for d in batch:
            first = d["data"] if len(d["data"]) else d["classes"]
            seq = int(first[0] // 10**6) if len(first) else -1
            rows.append(
                (seq, {k: (int(v[0] % 10**6) if len(v) else 0, len(v)) for k, v in d.items()})
            )
        out.append(rows)
    return out


def our_batches(planner: Planner, lengths: dict[str, np.ndarray]) -> list[list[tuple]]:
    """The planner's epoch-1 batches (one rank) in the same form."""
    plan = planner.global_plan(1, 1)
    b = plan.batches
    spec = planner.chunks.spec if planner.chunks is not None else {}
    out = []
    for k in range(len(b)):
        seqs, _ = b.batch(k)
        chunks = b.chunks_of(k)
        rows = []
        for i, c in zip(seqs.tolist(), chunks.tolist() if chunks is not None else [0] * len(seqs)):
            entry = {}
            for key, v in lengths.items():
                if key in spec:
                    size, step = spec[key]
                    start = c * step
                    entry[key] = (start, min(start + size, int(v[i])) - start)
                else:
                    entry[key] = (0, int(v[i]))
            rows.append((i, entry))
        out.append(rows)
    return out


def _comparable(batches: list[list[tuple]]) -> list[list[tuple]]:
    """Empty keys carry no values to read the sequence from: compare by shape there."""
    return [[(seq, tuple(sorted(e.items()))) for seq, e in b] for b in batches]


@settings(max_examples=120, deadline=None)
@given(chunk_cases())
def test_chunks_and_batches_equal_returnns_pipeline(case: tuple) -> None:
    lengths, returnn_opts, ours = case
    try:
        want = returnn_batches(lengths, returnn_opts)
    except AssertionError:  # RETURNN refuses chunk counts that differ across keys: so do we
        with pytest.raises(OptionError, match="same number of chunks"):
            Planner(lengths, PlanOptions(**ours))
        return
    try:
        planner = Planner(lengths, PlanOptions(**ours))
    except SequenceTooLongError:  # RETURNN gives an overlong chunk a batch of its own
        budgets = returnn_opts["batch_size"], returnn_opts["packed_batch_size"]
        assert any(b is not None for b in budgets)
        return
    got = our_batches(planner, lengths)
    # RETURNN reads a chunk's sequence from its values; where a row has no frames at all it
    # cannot, so compare those rows by shape only
    for gb, wb in zip(got, want):
        for gr, wr in zip(gb, wb):
            if wr[0] == -1:
                gr = (-1, gr[1])
            assert gr[0] == wr[0] and gr[1] == wr[1], (gr, wr)
        assert len(gb) == len(wb)
    assert len(got) == len(want)


def test_chunking_forms_and_off_values() -> None:
    assert chunking_option(None) is None
    assert chunking_option(0) is None
    assert chunking_option("0") is None
    assert chunking_option(50) == {"*": (50, 50)}
    assert chunking_option("50:25") == {"*": (50, 25)}
    assert chunking_option((50, None)) == {"*": (50, 50)}
    assert chunking_option(({"data": 40, "classes": 10}, None)) == {
        "classes": (10, 10),
        "data": (40, 40),
    }
    assert chunking_option({"data": (40, 20)}) == {"data": (40, 20)}
    for bad in ("x:y", (0, 5), ({"data": 4}, {"classes": 4}), "1:2:3", 1.5):
        with pytest.raises(OptionError, match="chunking"):
            chunking_option(bad)
    with pytest.raises(OptionError, match="'labels' is not in the data"):
        Planner({"data": np.array([5])}, PlanOptions(chunking={"labels": 3}))


@pytest.mark.parametrize("min_size", [0, 1, 3, 5, 9])
def test_chunk_counts_match_a_direct_count(min_size: int) -> None:
    lengths = np.arange(0, 40)
    for size, step in ((5, 5), (5, 2), (3, 7)):
        want = [sum(1 for s in range(0, n, step) if min(size, n - s) >= min_size) for n in lengths]
        assert chunk_counts(lengths, size, step, min_size).tolist() == want


def test_sequences_without_chunks_are_counted() -> None:
    lengths = {"data": np.array([0, 10, 2, 7])}
    planner = Planner(lengths, PlanOptions(chunking="5:5", min_chunk_size=3))
    assert planner.admission.filtered == {"no chunk (empty or shorter than min_chunk_size=3)": 2}
    assert planner.admission.admitted.tolist() == [1, 3]
    b = planner.global_plan(1, 1).batches
    assert list(zip(b.seqs.tolist(), b.chunks.tolist())) == [(1, 0), (1, 1), (3, 0)]


def test_overlong_chunk_names_sequence_key_and_fix() -> None:
    lengths = {"data": np.array([10, 30]), "classes": np.array([3, 40])}
    with pytest.raises(SequenceTooLongError) as info:
        Planner(lengths, PlanOptions(chunking={"data": 10}, max_frames={"*": 20}))
    message = str(info.value)
    assert "sequence 1" in message and "'classes'" in message and "max_seq_length" in message


@st.composite
def contract_cases(draw: st.DrawFn) -> tuple[Planner, int]:
    n = draw(st.integers(1, 200))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    data = rng.integers(0, draw(st.sampled_from([20, 300])), size=n).astype(np.int64)
    size = draw(st.integers(1, 60))
    options = PlanOptions(
        ordering=draw(st.sampled_from(["default", "random", "laplace:.7", "sorted", "random:2"])),
        chunking=(size, draw(st.integers(1, 60))),
        min_chunk_size=draw(st.sampled_from([0, 1, 5])),
        max_seqs=draw(st.one_of(st.none(), st.integers(1, 16))),
        max_frames=draw(st.one_of(st.none(), st.integers(60, 400))),
        batch_cost=draw(st.sampled_from(["frames", "packed"])),
        partition_epoch=draw(st.integers(1, 3)),
        uneven=draw(st.sampled_from(UNEVEN)),
        seed=draw(st.integers(0, 100)),
    )
    return Planner({"data": data}, options), draw(st.integers(1, 6))


@settings(max_examples=60, deadline=None)
@given(contract_cases())
def test_every_chunk_exactly_once_with_equal_steps(case: tuple[Planner, int]) -> None:
    planner, world = case
    o = planner.options
    assert planner.chunks is not None
    full: list[np.ndarray] = []
    for epoch in range(1, o.partition_epoch + 1):
        plan = planner.global_plan(epoch, world)
        b = plan.batches
        assert b.chunks is not None
        assert len(b) == plan.steps * world  # equal steps (C2)
        units = chunk_ids(planner, b.seqs, b.chunks)
        real = units[b.real]
        sub = planner.sub_epoch_units(epoch)
        order = chunk_ids(planner, sub.seqs, sub.chunks)
        if o.uneven == "drop":  # a prefix of the sub-epoch's chunks, the rest counted
            np.testing.assert_array_equal(real, order[: len(real)])
            assert len(order) - len(real) == plan.dropped
        else:  # every chunk exactly once, in order; fillers are marked
            np.testing.assert_array_equal(real, order)
        full.append(order)
        for k in range(len(b)):  # within the limits, per chunk
            seqs, _ = b.batch(k)
            lens = planner.chunks.window("data", planner.lengths[seqs], b.chunks_of(k))
            if o.max_seqs is not None:
                assert len(seqs) <= o.max_seqs
            if o.max_frames is not None and len(seqs) > 1:
                cost = lens.sum() if o.cost.packed else len(seqs) * lens.max()
                assert cost <= o.max_frames
        again = planner.global_plan(epoch, world)  # determinism (C4)
        np.testing.assert_array_equal(again.batches.seqs, b.seqs)
        np.testing.assert_array_equal(again.batches.chunks, b.chunks)
    # the sub-epochs together are every admitted sequence's chunks, each once
    everything = np.sort(np.concatenate(full))
    np.testing.assert_array_equal(everything, np.arange(planner.chunks.num_units))


def test_chunks_of_a_sequence_stay_consecutive_in_order() -> None:
    lengths = {"data": np.array([12, 3, 7, 20])}
    planner = Planner(lengths, PlanOptions(ordering="sorted", chunking="5:3"))
    b = planner.global_plan(1, 1).batches
    pairs = list(zip(b.seqs.tolist(), b.chunks.tolist()))
    # sorted by the whole sequences' lengths, then each sequence's chunks in order
    assert pairs == [(1, 0), (2, 0), (2, 1), (2, 2), (0, 0), (0, 1), (0, 2), (0, 3)] + [
        (3, c) for c in range(7)
    ]


@settings(max_examples=60, deadline=None)
@given(contract_cases(), st.lists(st.integers(1, 5), min_size=2, max_size=3),
       st.lists(st.floats(0, 1), min_size=2, max_size=2))  # fmt: skip
def test_elastic_resume_over_chunks_exactly_once(
    case: tuple[Planner, int], worlds: list[int], cuts: list[float]
) -> None:
    """The resume harness over a chunked epoch: run with ``worlds[0]`` ranks, stop part-way,
    save the position as JSON, continue with the next world size...: every chunk of the epoch
    is consumed exactly once (``drop``: at most once, the rest counted), with equal steps."""
    planner, _ = case
    assert planner.chunks is not None
    cuts = cuts[: len(worlds) - 1]  # the last segment runs to the end
    epoch = 1
    position = Position(epoch, 0, worlds[0], 0)
    consumed = []
    plan = None
    for i, world in enumerate(worlds):
        plan, position = continue_plan(planner, position, world)
        assert_equal_steps(plan, position.steps)
        stop = plan.steps
        if i < len(cuts):
            stop = position.steps + int(cuts[i] * (plan.steps - position.steps))
        b = plan.batches
        # a finished epoch stays finished (and keeps its plan's world size) whatever the new one
        w = plan.world_size
        lo, hi = b.bounds[position.steps * w], b.bounds[stop * w]
        real = b.real[lo:hi]
        assert b.chunks is not None
        consumed.append(chunk_ids(planner, b.seqs[lo:hi][real], b.chunks[lo:hi][real]))
        position = position.advanced(stop - position.steps)
        position = Position.from_fields(json.loads(json.dumps(position.to_fields())))
    got = np.concatenate(consumed)
    sub = planner.sub_epoch_units(epoch)
    order = chunk_ids(planner, sub.seqs, sub.chunks)
    assert len(np.unique(got)) == len(got), "a chunk was consumed twice"
    if planner.options.uneven == "drop":
        assert plan is not None and len(order) - len(got) == plan.dropped
        assert set(got.tolist()) <= set(order.tolist())
    else:
        np.testing.assert_array_equal(got, order)  # in order, too: positions count chunks
