"""What both planners share about an epoch: which sequences take part (``Admission``, one
mask-based ``admit_mask`` and its counts without the mask, ``admit_counts``; the one "fits no
batch" check), epoch numbering (``EpochIndex``, RETURNN's sub-epoch cut ``part_cut``), the
replay of an epoch's segment history (``replay_history``) and the length key batching reads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Protocol, TypeVar

import numpy as np

from seqloader.errors import OptionError, ResumeError, SequenceTooLongError, sequence_named
from seqloader.plan.keyed import resolve_keyed
from seqloader.plan.limits import BatchLimits
from seqloader.plan.options import PlanOptions
from seqloader.validate import int_option

#: lengths read per block by the checks over all sequences (no copy of memory-mapped lengths)
_BLOCK = 1 << 22
#: sequences per block of ``admit_counts`` (its temporaries a few hundred KiB)
_COUNT_BLOCK = 1 << 18


@dataclass(frozen=True)
class Admission:
    """Which sequences take part in epochs, and why the others don't (C6: nothing silent)."""

    admitted: np.ndarray  # int64 [n_admitted] sequence indices, ascending
    filtered: dict[str, int] = field(default_factory=dict)  # reason -> count
    filtered_examples: dict[str, list[int]] = field(default_factory=dict)  # reason -> a few indices

    @property
    def filtered_total(self) -> int:
        return sum(self.filtered.values())

    def without(self, mask: np.ndarray, reason: str) -> Admission:
        """This admission less the admitted sequences in ``mask`` (bool ``[n]``), counted under
        ``reason``."""
        hit = self.admitted[mask[self.admitted]]
        if not len(hit):
            return self
        filtered = {**self.filtered, reason: len(hit)}
        examples = {**self.filtered_examples, reason: hit[:5].tolist()}
        return Admission(self.admitted[~mask[self.admitted]], filtered, examples)


def chunkless_reason(options: PlanOptions) -> str:
    """Why a sequence gives no chunk, in the report's words."""
    m = options.min_chunk_size
    return "empty" if not m else f"empty or shorter than min_chunk_size={m}"


def admit(
    lengths: Mapping[str, np.ndarray],
    length_key: str,
    options: PlanOptions,
    tags: Sequence[str] | None = None,
    origin: str = "",
    excluded: Mapping[str, np.ndarray] | None = None,
    check_fit: bool = True,
) -> Admission:
    """Apply ``excluded`` (reason -> bool mask ``[n]``, e.g. RETURNN's ``seq_list_filter_file``),
    ``max_seq_length`` / ``min_seq_length``; then check that every admitted sequence fits
    ``max_frames`` alone, else raise naming the first offender and the option that filters it
    (``check_fit=False``: the units planned are chunks, or limits are per key; the planner
    checks them itself)."""
    main = lengths[length_key]
    keep, filtered, examples = admit_mask(lengths, length_key, options, excluded)
    if check_fit and isinstance(options.max_frames, int):
        fits = options.cost.longest_fitting(options.max_frames)
        check_fit_alone(main, keep, fits, options, length_key, tags, origin)
    if keep is None:
        return Admission(np.arange(len(main), dtype=np.int64), filtered, examples)
    return Admission(np.flatnonzero(keep).astype(np.int64), filtered, examples)


def check_fit_alone(
    main: np.ndarray,
    keep: np.ndarray | None,
    fits: int,
    options: PlanOptions,
    length_key: str,
    tags: Sequence[str] | None = None,
    origin: str = "",
    keyed: bool = False,
) -> None:
    """The one "fits no batch" check of both planners: every admitted sequence (``keep``, bool
    ``[n]``; None: all) is at most ``fits`` long, else raise naming the first, how many there are
    and the option that filters them. Reads ``main`` in blocks (memory-mapped lengths stay views).

    >>> check_fit_alone(np.array([5, 9]), np.array([True, False]), 8, PlanOptions(max_frames=8), "x")
    """
    first, count = -1, 0
    for a in range(0, len(main), _BLOCK):
        over = np.asarray(main[a : a + _BLOCK]) > fits
        if keep is not None:
            over &= keep[a : a + _BLOCK]
        hit = np.flatnonzero(over)
        if len(hit) and first < 0:
            first = int(hit[0]) + a
        count += len(hit)
    if first < 0:
        return
    cost = options.cost
    what = f"more than max_frames={options.max_frames}"
    if options.max_packed_frames is not None:
        what += f" or max_packed_frames={options.max_packed_frames}"
    if cost.quadratic is not None:
        what = f"costing more than max_frames={options.max_frames} (batch_cost={cost})"
        if options.max_packed_frames is not None:
            what += f" or more than max_packed_frames={options.max_packed_frames}"
    limit = {length_key: fits} if keyed else fits
    raise SequenceTooLongError(
        f"{sequence_named(first, tags, origin)} has {int(main[first])} frames of {length_key!r}, "
        f"{what}, so it fits no batch "
        f"({count} sequence(s) like this). Fix: raise max_frames, or set "
        f"max_seq_length={limit!r} to filter them (counted in the report)."
    )


def admit_mask(
    lengths: Mapping[str, np.ndarray],
    key: str,
    options: PlanOptions,
    excluded: Mapping[str, np.ndarray] | None,
) -> tuple[np.ndarray | None, dict[str, int], dict[str, list[int]]]:
    """(bool mask ``[n]`` of admitted sequences, or None when all are; reason -> count; reason
    -> a few indices): ``excluded`` (reason -> bool mask ``[n]``), then ``max_seq_length`` and
    ``min_seq_length``; the one admission of both planners, without an index array of ``n``.

    >>> from seqloader.plan.options import PlanOptions
    >>> lens = {"x": np.array([3, 9, 5])}
    >>> mask, filtered, _ = admit_mask(lens, "x", PlanOptions(max_seq_length=6), None)
    >>> mask.tolist(), filtered
    ([True, False, True], {'x longer than max_seq_length=6': 1})
    """
    rules = _admission_rules(lengths, key, options, excluded)
    keep, counts, firsts = _admit_block(rules, 0, len(lengths[key]))
    return keep, *_reasons(rules, counts, firsts)


def admit_at(
    lengths: Mapping[str, np.ndarray],
    key: str,
    options: PlanOptions,
    excluded: Mapping[str, np.ndarray] | None,
    seqs: np.ndarray,
) -> np.ndarray | None:
    """``admit_mask``'s verdict on the sequences ``seqs`` alone -> bool ``[len(seqs)]`` (None: no
    rule, all admitted): the same rules read at those sequences, no mask of ``n`` (a ``files``
    rank's own files' sequences).

    >>> lens = {"x": np.array([3, 9, 5, 1])}
    >>> admit_at(lens, "x", PlanOptions(max_seq_length=6), None, np.array([1, 2])).tolist()
    [False, True]
    """
    rules = _admission_rules(lengths, key, options, excluded)
    if not rules:
        return None
    where = np.asarray(seqs, dtype=np.int64)
    keep = np.ones(len(where), dtype=bool)
    for _, rule in rules:
        keep &= ~rule(where)
    return keep


def admit_counts(
    lengths: Mapping[str, np.ndarray],
    key: str,
    options: PlanOptions,
    excluded: Mapping[str, np.ndarray] | None,
) -> tuple[dict[str, int], dict[str, list[int]]]:
    """``admit_mask``'s counts and examples, the same, a block at a time: no mask of ``n``
    (a rank planning from a node's index reads its admitted sequences there; the mask is made
    only where per-sequence admission is read).

    >>> lens = {"x": np.array([3, 9, 5, 1])}
    >>> admit_counts(lens, "x", PlanOptions(max_seq_length=6, min_seq_length=2), None)
    ({'x longer than max_seq_length=6': 1, 'x shorter than min_seq_length=2': 1}, \
{'x longer than max_seq_length=6': [1], 'x shorter than min_seq_length=2': [3]})
    """
    rules = _admission_rules(lengths, key, options, excluded)
    n = len(lengths[key])
    counts: list[int] = [0] * len(rules)
    firsts: list[list[int]] = [[] for _ in rules]
    for a in range(0, n, _COUNT_BLOCK):
        _, got, first = _admit_block(rules, a, min(n, a + _COUNT_BLOCK))
        for r, (c, f) in enumerate(zip(got, first, strict=True)):
            counts[r] += c
            firsts[r].extend(x + a for x in f[: 5 - len(firsts[r])])
    return _reasons(rules, counts, firsts)


#: an admission rule: its reason and its filtered sequences in ``[a, b)`` (bool ``[b - a]``)
#: (reason, what it filters of the sequences ``where`` selects: a slice or an index array)
_Rule = tuple[str, Callable[[slice | np.ndarray], np.ndarray]]


def _admission_rules(
    lengths: Mapping[str, np.ndarray],
    key: str,
    options: PlanOptions,
    excluded: Mapping[str, np.ndarray] | None,
) -> list[_Rule]:
    """The rules in the order they apply: ``excluded``, ``max_seq_length``, ``min_seq_length``."""
    n = len(lengths[key])
    rules: list[_Rule] = []
    for reason, given in (excluded or {}).items():
        m = np.asarray(given, dtype=bool)
        if m.shape != (n,):
            raise OptionError(f"excluded[{reason!r}]: got shape {m.shape}, expected {(n,)}")
        rules.append((reason, partial(_listed, m)))
    keys = list(lengths)
    longest = resolve_keyed("max_seq_length", options.max_seq_length, keys, key)
    for k, limit in sorted(longest.items()):
        rules.append((f"{k} longer than max_seq_length={limit}", partial(_over, lengths[k], limit)))
    shortest = resolve_keyed("min_seq_length", options.min_seq_length or None, keys, key)
    for k, limit in sorted(shortest.items()):
        if limit > 0:
            under = partial(_under, lengths[k], limit)
            rules.append((f"{k} shorter than min_seq_length={limit}", under))
    return rules


def _listed(mask: np.ndarray, where: slice | np.ndarray) -> np.ndarray:
    return mask[where]


def _over(lengths: np.ndarray, limit: int, where: slice | np.ndarray) -> np.ndarray:
    return np.asarray(lengths[where]) > limit


def _under(lengths: np.ndarray, limit: int, where: slice | np.ndarray) -> np.ndarray:
    return np.asarray(lengths[where]) < limit


def _admit_block(
    rules: list[_Rule], a: int, b: int
) -> tuple[np.ndarray | None, list[int], list[list[int]]]:
    """The rules over sequences ``[a, b)``: (kept mask or None: all; per rule the count it
    filters and its first few, relative to ``a``); a sequence counted under its first rule."""
    keep: np.ndarray | None = None
    counts: list[int] = []
    firsts: list[list[int]] = []
    for _, rule in rules:
        mask = rule(slice(a, b))
        hit = mask if keep is None else mask & keep
        count = int(np.count_nonzero(hit))
        counts.append(count)
        firsts.append(np.flatnonzero(hit)[:5].tolist() if count else [])
        if count:
            keep = ~hit if keep is None else keep & ~hit
    return keep, counts, firsts


def _reasons(
    rules: list[_Rule], counts: list[int], firsts: list[list[int]]
) -> tuple[dict[str, int], dict[str, list[int]]]:
    """reason -> count and reason -> examples, in the rules' order, of the rules that filter."""
    hit = [(reason, c, f) for (reason, _), c, f in zip(rules, counts, firsts, strict=True) if c]
    return {r: c for r, c, _ in hit}, {r: f for r, _, f in hit}


def batch_limits(options: PlanOptions, keys: list[str], key: str) -> BatchLimits:
    """The batch limits ``options`` set over the length keys ``keys`` (``key``: the one batching
    measures), as both planners read them.

    >>> batch_limits(PlanOptions(max_frames=100), ["data"], "data").padded
    {'data': 100}
    """
    o = options
    return BatchLimits.of(o.max_seqs, o.max_frames, o.max_packed_frames, o.cost, keys, key)


def excluded_bytes(excluded: Mapping[str, np.ndarray] | None) -> bytes:
    """What the source's filters (reason -> bool mask ``[n]``) add to a plan's fingerprint:
    each reason and its packed mask, by reason."""
    out = b""
    for reason, mask in sorted((excluded or {}).items()):
        out += reason.encode() + np.packbits(np.asarray(mask, dtype=bool)).tobytes()
    return out


def part_cut(n: np.ndarray, parts: int, part: int) -> tuple[np.ndarray, np.ndarray]:
    """(offset, count) of sub-epoch ``part`` in each run of ``n`` (int64 ``[...]``) sequences
    cut into ``parts`` contiguous parts: RETURNN's rule, the first ``n % parts`` parts hold one
    more. The one sub-epoch cut: of an epoch's order (``part_bounds``), of each bucket's list
    (indexed planning) and of each (bucket, corpus) stream (an indexed mix).

    >>> part_cut(np.array([7, 2]), 3, 1)
    (array([3, 1]), array([2, 1]))
    """
    q, r = np.divmod(n, parts)
    return part * q + np.minimum(part, r), q + (part < r)


def part_bounds(n: int, parts: int, part: int) -> tuple[int, int]:
    """``[lo, hi)`` of sub-epoch ``part`` when ``n`` sequences are cut into ``parts`` contiguous
    parts (``part_cut``)."""
    lo, count = part_cut(np.asarray(n, dtype=np.int64), parts, part)
    return int(lo), int(lo + count)


class Stepped(Protocol):
    """A segment's plan, as far as a replay reads it: its steps."""

    @property
    def steps(self) -> int: ...


SegmentT = TypeVar("SegmentT", bound=Stepped)


@dataclass(frozen=True)
class At:
    """Where a segment of an epoch starts: at sequence position ``start`` of the epoch's order,
    or after the segments of ``history`` (``(world_size, steps)`` each, ``distribution="files"``).
    ``order_world_size``: the world size the epoch started with (``buckets:N`` orders). Both
    planners' distributions take it (``segment(epoch, world_size, at)``).

    >>> At(start=40).history, At(history=((4, 10),)).start
    ((), 0)
    """

    start: int = 0
    history: tuple[tuple[int, int], ...] = ()
    order_world_size: int | None = None


#: the whole (sub-)epoch, from its first sequence
START = At()


def refuse_history(name: str, history: Sequence[tuple[int, int]]) -> None:
    """Refuse a segment history for a distribution that resumes at a sequence position."""
    if history:
        raise OptionError(
            f"distribution={name!r} resumes at a sequence position (start), not from a segment "
            "history; only distribution='files' replays one"
        )


def replay_history(
    epoch: int, history: Sequence[tuple[int, int]], segment: Callable[[int, int], SegmentT]
) -> Iterator[tuple[SegmentT, int, int]]:
    """(segment i's plan, its world size, the steps it consumed) for each ``(world_size, steps)``
    of ``history``, each planned by ``segment(i, world_size)`` when the one before has been
    consumed (the caller applies each before asking for the next), and refused when it has fewer
    steps than the history says were consumed: the one replay of both planners' elastic resumes.

    >>> @dataclass
    ... class Seg:
    ...     steps: int
    >>> [(s.steps, w, k) for s, w, k in replay_history(1, [(2, 3)], lambda i, w: Seg(5))]
    [(5, 2, 3)]
    """
    for i, (w, steps) in enumerate(history):
        seg = segment(i, w)
        if steps > seg.steps:
            raise ResumeError(
                f"segment {i} of epoch {epoch} (world size {w}) has {seg.steps} steps, but "
                f"{steps} are said consumed: the history belongs to other data or options"
            )
        yield seg, w, steps


EPOCH_EXPECTED = "an int >= 1 (epochs count from 1)"


@dataclass(frozen=True)
class EpochIndex:
    """Epoch numbers count from 1; with ``partition_epoch=P``, epoch e is sub-epoch ``(e-1) % P`` of
    full epoch ``(e-1) // P`` (RETURNN's convention)."""

    epoch: int
    partition: int

    def __post_init__(self) -> None:
        epoch = int_option("epoch", self.epoch, 1, expected=EPOCH_EXPECTED)
        object.__setattr__(self, "epoch", epoch)

    @property
    def full_epoch(self) -> int:
        return (self.epoch - 1) // self.partition

    @property
    def part(self) -> int:
        return (self.epoch - 1) % self.partition


def default_length_key(keys: Sequence[str]) -> str:
    """The key planning measures lengths on by default: ``data`` if present, else the first."""
    return "data" if "data" in keys else keys[0]


def length_key_of(lengths: Mapping[str, np.ndarray], options: PlanOptions) -> str:
    """The key whose lengths a planner batches by (``options.length_key``, else
    ``default_length_key``), refused when there are no lengths or the key names none of them.

    >>> length_key_of({"audio": np.zeros(2), "text": np.zeros(2)}, PlanOptions())
    'audio'
    """
    if not lengths:
        raise OptionError("Planner: no length arrays given")
    key = options.length_key or default_length_key(list(lengths))
    if key not in lengths:
        raise OptionError(f"length_key: got {key!r}, expected one of {sorted(lengths)}")
    return key
