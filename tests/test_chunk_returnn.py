"""Chunking and per-key / packed batch limits against RETURNN: the same chunks and batches as
RETURNN's own torch pipeline (``LenFilterDataPipe`` -> ``ChunkingIterDataPipe`` ->
``BatchingIterDataPipe``, from the installed ``returnn``), fed the same sequences in the same
order, for random corpora, chunkings, ``min_chunk_size``, length filters and limits
(``batch_size`` / ``packed_batch_size`` as ints and per key, ``max_seqs``). RETURNN's pipeline
imports torch, so this lives apart from the plan's own tests (test_plan_chunks).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqloader.errors import OptionError, SequenceTooLongError
from seqloader.plan import Planner, PlanOptions

returnn_pipeline = pytest.importorskip("returnn.torch.data.pipeline")


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
