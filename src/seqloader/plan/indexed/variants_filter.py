"""Length variants with ``epoch_wise_filter`` and epoch selections under indexed planning.

Global planning filters each sub-epoch's order by the source's lengths (the longest variant's,
what admission reads too) or a source's own sort key, whatever variant each sequence was drawn
in, and batches what it kept on the drawn lengths. Both plannings' filter keeps the same set of
a sub-epoch, so here the meaning is the same: the selections, then each ``max_mean_len`` in turn
(``mean_len_keep``: the shortest by (length, sequence)), on the sub-epoch's *sequences*, their
units (``sequence * F + variant``) keeping their drawn variants.

The bucketed orders' buckets are ranges of the *drawn* length, so the filter's key is not
bucket-major there (the counts-only search of ``seqloader.plan.indexed.filter`` needs that): each
rank lists the sub-epoch's units (O(n / P) time and memory per rank and filtered sub-epoch, as
the fixed and random orders' filtered parts are), filters them, and keeps every bucket's kept
units as a list of its own (``FilteredDraw``), in the unfiltered lists' order.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from seqloader.plan.admission import counted_filters, filter_reason, mean_len_keep
from seqloader.plan.indexed.filter import FilteredDraw
from seqloader.plan.indexed.units import CutAsk, CutPlanner, EpochCut
from seqloader.plan.selections import EpochSelection

#: units -> their sequences (``VariantCodes.split``'s first; identity for plain sequences)
SeqOf = Callable[[np.ndarray], np.ndarray]


def filtered_units(
    selections: Sequence[EpochSelection],
    means: Sequence[float],
    epoch: int,
    units: np.ndarray,
    seq_of: SeqOf,
    by: np.ndarray,
) -> tuple[np.ndarray, dict[str, int]]:
    """The epoch's selections, then each ``max_mean_len`` of ``means`` in turn, on a sub-epoch's
    order of ``units`` (each on what the ones before kept; the filters read the units' sequences
    ``seq_of(units)`` and the lengths ``by`` of them) -> (kept units in order, dropped per
    report reason): global planning's ``apply_selections`` and ``mean_filtered``, on units.

    >>> split = lambda u: u // 3  # units sequence * 3 + variant
    >>> filtered_units([], [1.5], 1, np.array([1, 5, 8, 10]), split, np.array([1, 50, 2, 4]))
    (array([1, 8]), {'epoch_wise_filter max_mean_len=1.5 (epoch 1)': 2})
    """

    def selection(sel: EpochSelection) -> Callable[[np.ndarray], np.ndarray]:
        return lambda u: np.asarray(sel.keep[seq_of(u)], dtype=bool)

    def mean(m: float) -> Callable[[np.ndarray], np.ndarray]:
        def keep(u: np.ndarray) -> np.ndarray:
            seqs = seq_of(u)
            return mean_len_keep(np.asarray(by[seqs], dtype=np.int64), seqs, m)

        return keep

    applying = [s for s in selections if s.applies(epoch)]
    return counted_filters(
        units,
        [
            *((f"epoch_wise_filter {s.name} (epoch {epoch})", selection(s)) for s in applying),
            *((filter_reason(m, epoch), mean(m)) for m in means),
        ],
    )


def listed_cut(planner: CutPlanner, ask: CutAsk, seq_of: SeqOf, by: np.ndarray) -> EpochCut:
    """The bucketed orders with length variants: the sub-epoch's bucket lists (units) listed,
    the selections and ``epoch_wise_filter`` applied to their sequences (``filtered_units``, as
    global planning filters them), each bucket keeping its kept units in its list's order."""
    ep = ask.ep
    counts, lo = planner.base_counts(ep)
    draw = planner.member_draw(ep, lo, ask.order_rank)
    buckets = np.flatnonzero(counts)
    lists = [
        draw.slots(np.full(int(counts[b]), b, dtype=np.int64), np.arange(int(counts[b])))[0]
        for b in buckets.tolist()
    ]
    units = np.concatenate([np.zeros(0, dtype=np.int64), *lists]).astype(np.int64)
    bucket = np.repeat(buckets, counts[buckets])
    at = np.arange(len(units), dtype=np.int64)  # positions kept, ascending
    reasons: dict[str, int] = {}
    dropped: list[int] = []
    for sel in ask.chosen:  # each on what the ones before kept, as global planning's
        at, more = filtered_units([sel], [], ep.epoch, at, lambda a: seq_of(units[a]), by)
        for reason, count in more.items():
            reasons[reason] = reasons.get(reason, 0) + count
    for m in ask.means:
        before = len(at)
        at, _ = filtered_units([], [m], ep.epoch, at, lambda a: seq_of(units[a]), by)
        dropped.append(before - len(at))
    kept = np.bincount(bucket[at], minlength=len(counts)).astype(np.int64)
    ends = np.cumsum(kept)
    explicit = {int(b): units[at[ends[b] - kept[b] : ends[b]]] for b in buckets.tolist()}
    return EpochCut(kept, FilteredDraw(draw, explicit), dropped, reasons)
