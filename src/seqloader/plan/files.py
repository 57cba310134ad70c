"""``distribution="files"``: every rank reads its own files (the pieces of the plan it needs).

A corpus larger than one disk lives in many files on shared or object storage; with ``shard``
every rank reads from every file. Here each (sub-)epoch gives each rank whole files, so a rank
reads (and a cache fetches) about ``1 / (partition_epoch * world_size)`` of the files per
sub-epoch. The steps, pure and deterministic (numpy only):

1. **Epoch files.** Per full epoch the files holding admitted sequences are shuffled with the
   epoch seed and cut into ``partition_epoch`` contiguous parts of about equal frames (a file goes
   to the part its frames' midpoint falls in; every part gets at least one file). Sub-epoch p
   uses part p only, so a full epoch uses every file once. The cut does not depend on the world
   size, so sub-epochs planned for different world sizes (elastic resume) still cover each file
   once per full epoch.
2. **Units.** A segment (the sub-epoch, or what is left of it after an elastic resume) is a list
   of *units*: per file, its sequences not consumed yet. Fewer units than ranks (a sub-epoch of
   few, or very unequal files; the tail of an epoch resumed on more ranks) are split in halves,
   largest first, so no rank is left without data while data is left; only then do two ranks
   share a file.
3. **Assignment.** Units go to ranks largest first, each to the rank with the fewest frames so far
   (LPT; ties: fewer units, then the lower rank). Every rank computes the same assignment.
4. **Per rank.** Each rank orders its sequences with the configured ordering (its own stream,
   keyed by seed, epoch, sub-epoch, segment and rank) and batches them greedily.
5. **Equal steps.** ``uneven="split"``: ranks with fewer batches split their largest batches into
   near-equal contiguous pieces (a piece of a valid batch is valid) until every rank has the most
   batches; a rank with fewer sequences than steps gets filler repeats (``real=False``). ``pad``:
   repeats of the rank's own early batches (``real=False``). ``drop``: every rank keeps as many
   batches as the shortest; the rest is counted as dropped.

The result is an ordinary ``GlobalPlan`` (global batch ``k * W + r`` is rank r's step k), so
workers, audit and report need nothing new.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache

import numpy as np

from seqloader.errors import OptionError
from seqloader.parts import part_of
from seqloader.plan.batches import BatchList
from seqloader.plan.options import Uneven


def checked_file_bounds(bounds: object, n: int, origin: str) -> np.ndarray:
    """A source's file layout as int64 ``[F + 1]`` (file f holds sequences ``[b[f], b[f+1])``);
    raises ``OptionError`` naming the source when it does not describe ``n`` sequences."""
    b = np.asarray(bounds)
    ok = b.ndim == 1 and len(b) >= 2 and np.issubdtype(b.dtype, np.integer)
    if ok:
        b = b.astype(np.int64)
        ok = int(b[0]) == 0 and int(b[-1]) == n and bool(np.all(np.diff(b) >= 0))
    if not ok:
        raise OptionError(
            f"{origin or 'the source'}: file_layout() gave {np.asarray(bounds).tolist()[:8]}, "
            f"expected ascending int bounds [F + 1] from 0 to its {n} sequences (file f holds "
            "sequences bounds[f]..bounds[f+1]-1); fix the source's file_layout()"
        )
    return b


@dataclass(frozen=True)
class EpochFiles:
    """One full epoch's files: ``files`` int64 ``[F']`` (the files holding admitted sequences, in
    the epoch's shuffled order) cut into sub-epochs at ``part_starts`` int64 ``[P + 1]``."""

    files: np.ndarray
    part_starts: np.ndarray

    def part(self, p: int) -> np.ndarray:
        """The files of sub-epoch ``p`` (0-based), in shuffled order."""
        return self.files[self.part_starts[p] : self.part_starts[p + 1]]


def distributed_files(distribution: str, files: object, n: int, origin: str) -> np.ndarray | None:
    """The source's file layout (int64 ``[F + 1]``, checked) when ``distribution="files"``
    plans by it; None otherwise. Refuses a source without one, naming the fix."""
    if distribution != "files":
        return None
    if files is None:
        raise OptionError(
            f"distribution='files' needs a source that says which sequences each of its "
            f"files holds (file_layout()), but {origin or 'the source'} does not. Fix: "
            "use distribution='shard', or give the source a file_layout() (HasFiles)."
        )
    return checked_file_bounds(files, n, origin)


def refuse_files_start(start: int) -> None:
    """``distribution="files"`` plans continue after an elastic resume from their segment
    history (``files_plan``), never from a start position: refuse one."""
    if start:
        raise OptionError(
            "distribution='files' plans continue after an elastic resume from their "
            "segment history (files_plan), not from a start position"
        )


def check_file_count(counts: np.ndarray, parts: int, world_size: int, origin: str) -> None:
    """A sub-epoch should give every rank at least one file: refuse fewer files than
    ``parts * world_size`` (counting files that hold admitted sequences: ``counts`` per file)."""
    have = int(np.count_nonzero(counts))
    if have == 0 or have >= parts * world_size:
        return
    raise OptionError(
        f"distribution='files' needs at least partition_epoch * world_size = {parts} * "
        f"{world_size} = {parts * world_size} files holding sequences (each sub-epoch gives "
        f"every rank whole files), but {origin or 'the source'} has {have}. Fix: split "
        "the data into more (smaller) files, use fewer sub-epochs, or "
        "distribution='shard'."
    )


def files_read(bounds: np.ndarray, seqs: np.ndarray) -> np.ndarray:
    """The files holding ``seqs`` (a rank's slots), in the order they are first read -> int64
    ``[f]`` (what a cache fetches for the rank; fillers count, they are read).

    >>> files_read(np.array([0, 2, 5]), np.array([3, 4, 0, 2])).tolist()
    [1, 0]
    """
    files = part_of(bounds, seqs)  # [slots]
    _, first = np.unique(files, return_index=True)
    return files[np.sort(first)].astype(np.int64)


def file_frames(bounds: np.ndarray, admitted: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Admitted frames per file -> int64 ``[F]`` (``admitted`` ascending sequence indices)."""
    cum = np.zeros(len(admitted) + 1, dtype=np.int64)
    np.cumsum(lengths[admitted], out=cum[1:])
    at = np.searchsorted(admitted, bounds)  # [F + 1] admitted position of each file's start
    return np.diff(cum[at])


def file_counts(bounds: np.ndarray, admitted: np.ndarray) -> np.ndarray:
    """Admitted sequences per file -> int64 ``[F]``."""
    return np.diff(np.searchsorted(admitted, bounds)).astype(np.int64)


def epoch_files(
    frames: np.ndarray, counts: np.ndarray, parts: int, rng: np.random.Generator
) -> EpochFiles:
    """Shuffle the files with admitted sequences (``counts > 0``) and cut them into ``parts``
    sub-epochs of about equal ``frames`` (int64 ``[F]`` each)."""
    used = np.flatnonzero(counts > 0).astype(np.int64)  # [F']
    files = used[rng.permutation(len(used))]
    return EpochFiles(files, cut_parts(frames[files], parts))


def cut_parts(weights: np.ndarray, parts: int) -> np.ndarray:
    """Starts int64 ``[parts + 1]`` that cut items of ``weights`` (int ``[u]``, in order) into
    ``parts`` contiguous runs of about equal weight: an item goes to the part its weight's midpoint
    falls in; with at least ``parts`` items every part gets one or more."""
    u = len(weights)
    w = np.asarray(weights, dtype=np.int64)
    total = int(w.sum())
    if total == 0:  # only empty sequences: balance by count
        w, total = np.ones(u, dtype=np.int64), u
    mid2 = (2 * np.cumsum(w) - w) * parts  # [u] 2 * parts * midpoint of each item
    starts = np.searchsorted(mid2, 2 * total * np.arange(parts + 1), side="left").astype(np.int64)
    starts[0], starts[-1] = 0, u
    if u >= parts:  # at least one item per part
        for p in range(1, parts):
            starts[p] = min(max(int(starts[p]), int(starts[p - 1]) + 1), u - (parts - p))
    return starts


def units_of(
    bounds: np.ndarray, files: np.ndarray, remaining: np.ndarray
) -> tuple[BatchList, np.ndarray]:
    """(units, file of each unit int64 ``[u]``): per file of ``files`` (in that order) its
    sequences with ``remaining`` (bool ``[n]``) set, ascending; files with none are left out. The
    units are a ``BatchList`` (one "batch" per unit) so they slice like batches."""
    lo, hi = bounds[files], bounds[files + 1]  # [f]
    sizes = hi - lo
    total = int(sizes.sum())
    seqs = np.repeat(lo - (np.cumsum(sizes) - sizes), sizes) + np.arange(total, dtype=np.int64)
    keep = remaining[seqs]  # [total]
    counts = np.bincount(np.repeat(np.arange(len(files)), sizes)[keep], minlength=len(files))
    nonempty = counts > 0
    unit_bounds = np.zeros(int(nonempty.sum()) + 1, dtype=np.int64)
    np.cumsum(counts[nonempty], out=unit_bounds[1:])
    return BatchList.from_bounds(seqs[keep], unit_bounds), files[nonempty].astype(np.int64)


def split_units(
    units: BatchList, files: np.ndarray, world_size: int
) -> tuple[BatchList, np.ndarray]:
    """Halve the largest unit (by sequences; ties: the latest) while there are fewer units than
    ranks and one holds two or more sequences, so that every rank gets data while data is left.
    The halves keep their file (two ranks then share it)."""
    bounds, files = units.bounds, files
    while len(bounds) - 1 < world_size:
        s = np.diff(bounds)
        if len(s) == 0 or int(s.max()) < 2:
            break
        k = len(s) - 1 - int(np.argmax(s[::-1]))
        bounds = np.insert(bounds, k + 1, bounds[k] + s[k] // 2 + s[k] % 2)
        files = np.insert(files, k + 1, files[k])
    return BatchList.from_bounds(units.seqs, bounds), files


def equalise(per_rank: list[BatchList], uneven: Uneven) -> tuple[list[BatchList], int]:
    """Give every rank the same number of batches (see the module doc) -> (batch lists, real
    sequences dropped)."""
    if uneven == "drop":
        steps = min(len(b) for b in per_rank)
        dropped = sum(b.real_count() - b.real_count(steps) for b in per_rank)
        return [b.first(steps) for b in per_rank], dropped
    steps = max(len(b) for b in per_rank)

    @cache
    def segment() -> tuple[np.ndarray, np.ndarray | None]:  # once, however many ranks have none
        seqs = np.concatenate([b.seqs[b.real] for b in per_rank])
        if per_rank[0].chunks is None:
            return seqs, None
        return seqs, np.concatenate([np.asarray(b.chunks)[b.real] for b in per_rank])

    def pool(need: int) -> tuple[np.ndarray, np.ndarray | None]:  # fillers of a rank with no data
        return segment()

    return [fill_rank(b, steps, uneven, pool) for b in per_rank], 0


def fill_rank(
    b: BatchList,
    steps: int,
    uneven: Uneven,
    pool: Callable[[int], tuple[np.ndarray, np.ndarray | None]],
) -> BatchList:
    """One rank's batches brought to ``steps`` (``uneven`` "pad" or "split", see the module
    doc); ``pool(need)``: the segment's sequences (and chunks) for the fillers of a rank with
    none, at least ``need`` of them or all."""
    if uneven == "split":
        b = split_batches(b, steps)
    missing = steps - len(b)
    if missing:
        if uneven == "pad" and len(b):  # repeat early batches, marked as repeats
            extra = b.take(np.arange(missing) % len(b))
        else:  # one sequence per filler batch: the rank's own, else any of the segment's
            own, own_chunks = (b.seqs, b.chunks) if len(b.seqs) else pool(missing)
            pick = np.arange(missing) % len(own)
            extra = BatchList.from_bounds(
                own[pick],
                np.arange(missing + 1, dtype=np.int64),
                chunks=None if own_chunks is None else own_chunks[pick],
            )
        b = b.concat(extra.with_real(np.zeros(len(extra.seqs), dtype=bool)))
    return b


def split_batches(batches: BatchList, target: int) -> BatchList:
    """Split batches into near-equal contiguous pieces until there are ``target`` (or every
    piece is one sequence): each time the batch whose pieces are largest (ties: the latest) gets
    one piece more. Order is kept; a piece of a valid batch is valid."""
    n = len(batches)
    need = target - n
    if need <= 0 or n == 0:
        return batches
    sizes = batches.sizes  # [n]
    pieces = np.ones(n, dtype=np.int64)
    heap = [(-int(s), -k) for k, s in enumerate(sizes.tolist())]
    heapq.heapify(heap)
    while need > 0:
        neg_size, neg_k = heap[0]
        if -neg_size <= 1:
            break
        k = -neg_k
        pieces[k] += 1
        heapq.heapreplace(heap, (-int(sizes[k]) // int(pieces[k]), neg_k))  # -ceil
        need -= 1
    batch_of = np.repeat(np.arange(n), pieces)  # [n']
    within = np.arange(len(batch_of)) - np.repeat(np.cumsum(pieces) - pieces, pieces)
    q, r = np.divmod(sizes, pieces)
    piece = q[batch_of] + (within < r[batch_of])  # [n'] sizes; the first r pieces one longer
    bounds = np.zeros(len(piece) + 1, dtype=np.int64)
    np.cumsum(piece, out=bounds[1:])
    return BatchList(
        batches.seqs, bounds + batches.bounds[0], batches.real, batches.uses, batches.chunks
    )
