"""Executing one planned batch: read its sequences, apply the per-sequence transform, pad.

Runs in DataLoader workers (or the main process with ``num_workers=0``); the result depends only on
the ``BatchSpec`` and the seed — never on which worker runs it (contract C3/C4).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from seqloader.errors import DataError, SeqLoaderError, SequenceSkipped
from seqloader.loading.batch_spec import BatchSpec
from seqloader.loading.collate import Alloc, numpy_alloc, pack_batch, pad_batch, pad_empty
from seqloader.loading.corpora import CorpusCounts, corpus_names, count_by_corpus
from seqloader.loading.direct import read_padded, reads_into
from seqloader.loading.screen import nonfinite_messages
from seqloader.loading.variants import check_planned
from seqloader.loading.worker_spec import Transform, WorkerSpec
from seqloader.plan.chunks import chunk_spans
from seqloader.plan.seeding import PURPOSE_MIX_TRANSFORM, PURPOSE_TRANSFORM, rng_for
from seqloader.sources.base import (
    KeySpec,
    Source,
    loader_needs,
    read_batch,
    read_each,
    tags_at,
    where,
)
from seqloader.sources.remote.stats import COUNTERS

__all__ = ["LoadedBatch", "Transform", "WorkerSpec", "cut_chunks", "execute", "transform_rng"]


@dataclass
class LoadedBatch:
    """A padded batch as numpy arrays (the torch layer wraps them into tensors)."""

    spec: BatchSpec
    data: dict[str, np.ndarray]  # key -> [B, T_max, *feat]
    lengths: dict[str, np.ndarray]  # key -> int64 [B]
    tags: list[str]
    skipped: list[str] = field(default_factory=list)  # messages of sequences the source skipped
    nonfinite: list[str] = field(
        default_factory=list
    )  # sequences with NaN/Inf (seqloader.loading.screen)
    # sources of named corpora (ConcatSource): each sequence's corpus, and per corpus its counts
    corpus: list[str] | None = None
    corpus_counts: dict[str, CorpusCounts] = field(default_factory=dict)
    # remote files: seconds this batch's reader waited for files not yet cached, bytes it fetched
    fetch_wait_s: float = 0.0
    fetch_bytes: int = 0
    # chunked plans: per chunked key, each row's [start, end) in its whole sequence, int64 [B, 2]
    spans: dict[str, np.ndarray] = field(default_factory=dict)
    packed: bool = False  # data is key -> [sum T_i, *feat] (layout="packed"), not padded


def transform_rng(
    seed: int, epoch: int, seq_index: int, use: int | None = None
) -> np.random.Generator:
    """The RNG a transform gets for one sequence: a function of (seed, epoch, index) only. In a
    mixed epoch (``use`` = the slot's corpus epoch) it is keyed by (seed, corpus epoch, index)
    instead: one sequence can fill several slots of an epoch, one per corpus epoch, and every
    (sequence, corpus epoch) pair is used exactly once over a training, so each use draws anew."""
    if use is None:
        return rng_for(seed, PURPOSE_TRANSFORM, epoch, int(seq_index))
    return rng_for(seed, PURPOSE_MIX_TRANSFORM, int(use), int(seq_index))


def _check_keys(
    source: Source, indices: np.ndarray, seqs: list[dict], transformed: bool, deferred: bool
) -> None:
    """Every sequence must carry the source's keys: planning and batch reports rely on them, and a
    transform that drops one (or a deferred feature step that never ran) must say so, not fail
    later with a bare KeyError. ``deferred``: ``data`` comes later (``features_on``); the
    waveforms it is computed from must be there."""
    want = set(source.schema.keys())
    if deferred:
        want = (want - {"data"}) | {"audio"}
    for i, seq in zip(indices, seqs):
        missing = want - seq.keys()
        if not missing:
            continue
        needs = loader_needs(source)
        hint = (
            f" (the source {needs.why}. Fix: {needs.fix})"
            if transformed and missing & set(needs.transform_keys)
            else ""
        )
        fix = (
            ""
            if hint
            else ". Fix: the source's read (and a transform) must return every key it plans"
        )
        raise DataError(
            f"sequence {int(i)} (tag {source.tag(int(i))!r}) has no key(s) {sorted(missing)} "
            f"{'after the transform' if transformed else 'as read'}; the source plans keys "
            f"{sorted(want)}{hint} (the sequence: {where(source, int(i))}){fix}"
        )


def execute(
    source: Source, spec: BatchSpec, worker: WorkerSpec, alloc: Alloc = numpy_alloc
) -> LoadedBatch:
    """The padded batch of ``spec`` as ``worker`` (``WorkerSpec``) says to build it: seeded
    transform, NaN/Inf screen, a chunked plan's windows (each slot holds chunk ``spec.chunks[j]``
    of its sequence: each chunked key cut to its window after the transform, as RETURNN chunks
    what its dataset yields, the other keys whole), padded or packed layout.

    Without a transform, a source with ``read_into`` (HDF) copies each sequence straight into
    the padded batch (``loading.direct``); same bytes, one copy instead of two plus a screen.
    A source of remote files may wait for a file to arrive in its cache: the batch carries that
    wait (and the bytes it fetched itself), so the report can tell fetch wait from read time."""
    wait, fetched = COUNTERS.wait_s, COUNTERS.fetched_bytes
    loaded = _execute(source, spec, worker, alloc)
    loaded.fetch_wait_s = COUNTERS.wait_s - wait
    loaded.fetch_bytes = COUNTERS.fetched_bytes - fetched
    return loaded


def _execute(source: Source, spec: BatchSpec, worker: WorkerSpec, alloc: Alloc) -> LoadedBatch:
    seed, transform, screen, packed = worker.seed, worker.transform, worker.screen, worker.packed
    chunking = worker.chunk_spec
    chunked = spec.chunks is not None
    if chunked and not chunking:
        raise DataError(
            f"epoch {spec.epoch} step {spec.step}: the plan holds chunks, but the executor was "
            "given no chunking; pass WorkerSpec(chunking=WorkerSpec.pairs(planner.chunks.spec))"
        )
    planned = worker.variants
    if transform is None and reads_into(source) and not chunked and not packed and not planned:
        try:
            return _execute_direct(source, spec, alloc, screen)
        except SequenceSkipped:
            pass  # read again below: the skipped sequence is left out of the batch and counted
    skipped: list[tuple[int, str]] = []
    variants = None if planned is None else planned.of(seed, spec.epoch, spec.seqs, spec.variants)
    if chunked:  # each sequence read (and transformed) once, however many of its chunks
        seqs, skipped = _read_once_per_sequence(source, spec, seed, transform)
    elif variants is not None:  # each sequence in the variant the plan batched it by
        seqs = read_each(source, spec.seqs, skipped, variants)
    else:
        seqs = read_batch(source, spec.seqs, skipped)
    if skipped:  # the batch holds fewer sequences; the report counts them (C6)
        keep = np.ones(len(spec.seqs), dtype=bool)
        keep[[pos for pos, _ in skipped]] = False
        variants = None if variants is None else variants[keep]
        uses = None if spec.uses is None else spec.uses[keep]
        chunks = None if spec.chunks is None else spec.chunks[keep]
        spec = BatchSpec(
            spec.epoch, spec.step, spec.seqs[keep], spec.real[keep], uses, chunks, variants
        )
    if transform is not None and not chunked:
        for j, i in enumerate(spec.seqs):
            use = None if spec.uses is None else spec.uses[j]
            seqs[j] = _transformed(source, transform, seqs[j], i, seed, spec.epoch, use)
    _check_keys(source, spec.seqs, seqs, transform is not None, worker.deferred is not None)
    if variants is not None:
        check_planned(source, spec.seqs, variants, seqs)
    spans: dict[str, np.ndarray] = {}
    if spec.chunks is not None:
        seqs, spans = cut_chunks(source, spec, seqs, chunking)
    if not seqs:
        schema = dict(source.schema)
        if worker.deferred is not None:  # the waveforms stand in for data
            schema.pop("data", None)
            schema["audio"] = KeySpec(np.dtype(np.float32))
        data, lengths = pad_empty(schema, alloc, packed)
    else:
        data, lengths = (pack_batch if packed else pad_batch)(seqs, alloc)
    if worker.deferred is not None:  # data: computed on the trainer's device; its frames now
        lengths["data"] = np.asarray(worker.deferred.num_frames(lengths["audio"]), np.int64)
    tags = [source.tag(int(i)) for i in spec.seqs]
    where = f"epoch {spec.epoch} step {spec.step}"
    bad = nonfinite_messages(source, spec.seqs, seqs, where) if screen else []
    loaded = LoadedBatch(spec, data, lengths, tags, [msg for _, msg in skipped], bad)
    loaded.spans = spans
    loaded.packed = packed
    return _with_corpora(source, loaded)


def _transformed(
    source: Source,
    transform: Transform,
    seq: dict,
    i: int,
    seed: int,
    epoch: int,
    use: int | None = None,
) -> dict:
    """``transform`` applied to sequence ``i``, its failure named (tag) as a ``DataError``."""
    try:
        return transform(seq, transform_rng(seed, epoch, i, use))
    except SeqLoaderError:
        raise
    except Exception as e:
        raise DataError(
            f"transform failed on sequence {int(i)} (tag {source.tag(int(i))!r}): "
            f"{type(e).__name__}: {e} (the sequence: {where(source, int(i))}). Fix: correct "
            f"the transform; to reproduce: transform(source.read({int(i)}), rng)"
        ) from e


def _read_once_per_sequence(
    source: Source, spec: BatchSpec, seed: int, transform: Transform | None
) -> tuple[list[dict[str, np.ndarray]], list[tuple[int, str]]]:
    """Chunked batches hold several chunks of one sequence (consecutive in the plan): read each
    sequence once and transform it once per use (in a mix, two uses of a sequence are two
    draws of its transform) -> (one whole sequence per kept slot, skipped (slot, message), one
    per slot of a skipped sequence, as the report and the audit count slots)."""
    slot_seqs = spec.seqs.tolist()
    slot_uses = [None] * len(slot_seqs) if spec.uses is None else spec.uses.tolist()
    order: dict[int, None] = dict.fromkeys(slot_seqs)
    unique = np.fromiter(order, dtype=np.int64, count=len(order))
    failed: list[tuple[int, str]] = []
    wholes = read_batch(source, unique, failed)
    bad = {int(unique[pos]): message for pos, message in failed}
    by_seq = dict(zip([i for i in unique.tolist() if i not in bad], wholes))
    by_use: dict[tuple[int, int | None], dict] = {}
    seqs, skipped = [], []
    for j, (i, use) in enumerate(zip(slot_seqs, slot_uses)):
        if i in bad:
            skipped.append((j, bad[i]))
            continue
        got = by_use.get((i, use))
        if got is None:
            got = by_seq[i]
            if transform is not None:
                got = _transformed(source, transform, got, i, seed, spec.epoch, use)
            by_use[i, use] = got
        seqs.append(got)
    return seqs, skipped


def cut_chunks(
    source: Source,
    spec: BatchSpec,
    seqs: list[dict[str, np.ndarray]],
    chunking: Mapping[str, tuple[int, int]],
) -> tuple[list[dict[str, np.ndarray]], dict[str, np.ndarray]]:
    """Each sequence's chunked keys cut to the slot's window (``plan.chunks.chunk_spans``, the
    planner's own windows; views, no copy) -> (the chunks, ``{key: int64 [B, 2]}`` the windows)."""
    assert spec.chunks is not None
    lengths = {key: np.array([len(seq[key]) for seq in seqs], dtype=np.int64) for key in chunking}
    spans = chunk_spans(chunking, lengths, spec.chunks)
    _check_windows(source, spec, lengths, spans)
    out = [
        {**seq, **{key: seq[key][w[j, 0] : w[j, 1]] for key, w in spans.items()}}
        for j, seq in enumerate(seqs)
    ]
    return out, spans


def _check_windows(
    source: Source,
    spec: BatchSpec,
    lengths: Mapping[str, np.ndarray],
    spans: Mapping[str, np.ndarray],
) -> None:
    """A window must start inside its sequence as read (a transform that shortened a chunked key
    would otherwise yield empty chunks): name the first slot, and key, where one does not."""
    bad = np.zeros(len(spec.seqs), dtype=bool)
    for key, windows in spans.items():
        bad |= windows[:, 0] >= lengths[key]
    if not bad.any():
        return
    j = int(np.flatnonzero(bad)[0])
    key = next(k for k, w in spans.items() if w[j, 0] >= lengths[k][j])
    start, length = int(spans[key][j, 0]), int(lengths[key][j])
    assert spec.chunks is not None
    i, c = int(spec.seqs[j]), int(spec.chunks[j])
    raise DataError(
        f"sequence {i} (tag {source.tag(i)!r}): chunk {c} of {key!r} starts at frame "
        f"{start}, but the sequence has {length} frames (the plan counted "
        f"{int(source.lengths(key)[i])}; the sequence: {where(source, i)}). Fix: a transform "
        "must keep a chunked key's length, or the source's lengths must be those after the "
        f"transform; to reproduce: transform(source.read({i}), rng)"
    )


def _execute_direct(source: Source, spec: BatchSpec, alloc: Alloc, screen: bool) -> LoadedBatch:
    data, lengths, rows = read_padded(source, spec, alloc, screen)
    tags = tags_at(source, spec.seqs)
    bad: list[str] = []
    if rows:  # the exact check names them as the per-sequence screen does (same messages)
        views = [{k: data[k][j, : lengths[k][j]] for k in data} for j in rows]
        bad = nonfinite_messages(
            source, spec.seqs[rows], views, f"epoch {spec.epoch} step {spec.step}"
        )
    return _with_corpora(source, LoadedBatch(spec, data, lengths, tags, [], bad))


def _with_corpora(source: Source, loaded: LoadedBatch) -> LoadedBatch:
    """Name each sequence's corpus and count per corpus, for a source of named corpora."""
    corpus = corpus_names(source, loaded.spec.seqs)
    if corpus is not None:
        loaded.corpus = corpus
        loaded.corpus_counts = count_by_corpus(
            corpus, loaded.spec.real.astype(bool), loaded.lengths
        )
    return loaded
