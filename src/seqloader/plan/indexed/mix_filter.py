"""``epoch_wise_filter`` with a sharded mix under indexed planning (``laplace``, ``buckets:N``).

The meaning (docs/planning.md, "epoch_wise_filter over files under indexed planning", its mix
paragraph): the filter is a property of the mix's sub-epoch, not of a rank. Sub-epoch ``e``'s
set is its ``(sequence, corpus epoch)`` slots (every corpus' at its rate, the mix's per
(bucket, corpus) streams cut as without the filter); each ``max_mean_len`` of the epoch keeps,
in turn, the shortest slots by (length, sequence, corpus epoch) whose mean stays about ``M``
(RETURNN's binary search on the buckets' counts, ``filter.epoch_filtered``: the buckets are
length ranges, so only the one bucket cut inside is listed). The sub-epoch list is the same on
every rank and world size (the mix's draw is keyed by seed, epoch, part and bucket alone), so
the kept set is too, and a resume on another world size plans the rest of the same set. A
filtered slot's corpus epoch is not made up later (the streams move on as without the filter);
what each filter left out is counted per epoch in the report.

Cost: in the epochs a filter applies to, the buckets' length sums are drawn from the
sub-epoch's lists (O(slots) time per rank per filtered sub-epoch, as an unmixed sub-epoch's
filter with ``partition_epoch > 1``); other epochs are planned from counts as before.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from seqloader.plan.admission import EpochFilter, epoch_filters, filter_reasons
from seqloader.plan.epochs import EpochIndex
from seqloader.plan.indexed.filter import epoch_filtered
from seqloader.plan.mix import USES_DTYPE

if TYPE_CHECKING:
    from seqloader.plan.indexed.plan import Draw


@dataclass(frozen=True)
class MixFilter:
    """``epoch_wise_filter`` (normalised) on a mix of ``parts`` sub-epochs per full epoch;
    ``by``: what it keeps the shortest by, per sequence, where that is not what the mix's
    buckets bucket by (chunked with the length key unchunked: the length key, not the length
    classes); None: the mix's lengths."""

    spec: EpochFilter
    parts: int
    by: np.ndarray | None = dataclasses.field(default=None, compare=False)


@dataclass(frozen=True)
class MixKept:
    """A filtered mixed sub-epoch: kept slots per bucket (``counts``) and their ``draw``, what
    each filter left out (``reasons``), and the unfiltered ``full`` counts and ``base`` draw."""

    counts: np.ndarray
    draw: Draw
    reasons: dict[str, int]
    full: np.ndarray
    base: Draw

    def left_out(self) -> tuple[np.ndarray, np.ndarray]:
        """(sequence, corpus epoch) of every slot the filters left out: the buckets cut, listed
        (O(their slots): for checks).

        >>> class Listed:
        ...     def slots(self, bucket, pos):
        ...         return pos + 3 * bucket, pos % 2
        >>> kept = mix_kept(((1, 1, 1.0),), EpochIndex(1, 1), np.array([2, 1]), Listed(),
        ...                 np.array([1, 1, 5, 5]))
        >>> kept.counts.tolist(), kept.reasons, [a.tolist() for a in kept.left_out()]
        ([2, 0], {'epoch_wise_filter max_mean_len=1 (epoch 1)': 1}, [[3], [0]])
        """
        seqs, uses = [np.zeros(0, np.int64)], [np.zeros(0, USES_DTYPE)]
        for b in np.flatnonzero(self.counts < self.full).tolist():
            s, k = _listed(self.base, b, int(self.full[b]))
            ks, kk = _listed(self.draw, b, int(self.counts[b]))
            n = int(max(s.max(initial=0), ks.max(initial=0))) + 1
            out = ~np.isin(k.astype(np.int64) * n + s, kk.astype(np.int64) * n + ks)
            seqs.append(s[out])
            uses.append(k[out].astype(USES_DTYPE))
        return np.concatenate(seqs), np.concatenate(uses)

    def keeps(self, seqs: np.ndarray, uses: np.ndarray) -> np.ndarray:
        """Bool mask of the listed slots (``seqs``, ``uses``: a fixed ordering's or ``random``'s
        sub-epoch) this filtered sub-epoch keeps: here by matching them against ``left_out``
        (the buckets cut, listed); a kept set with a rule masks by it (``OrderKept``)."""
        gone_s, gone_u = self.left_out()
        n = int(max(seqs.max(initial=0), gone_s.max(initial=0))) + 1
        return ~np.isin(uses.astype(np.int64) * n + seqs, gone_u.astype(np.int64) * n + gone_s)


def _listed(draw: Draw, b: int, count: int) -> tuple[np.ndarray, np.ndarray]:
    """Bucket ``b``'s first ``count`` slots of a mix's ``draw``: (sequences, corpus epochs)."""
    pos = np.arange(count, dtype=np.int64)
    seqs, uses = draw.slots(np.full(count, b, dtype=np.int64), pos)
    assert uses is not None  # a mix's draw carries corpus epochs
    return seqs, uses


def mix_kept(
    spec: EpochFilter | None, ep: EpochIndex, counts: np.ndarray, draw: Draw, lengths: np.ndarray
) -> MixKept | None:
    """The filters of sub-epoch ``ep`` on its mixed slots (``counts`` per bucket, drawn by
    ``draw``; ``lengths``: what the buckets bucket by) -> ``MixKept``; None where no filter
    applies to ``ep``."""
    means = epoch_filters(spec, ep.epoch)
    if not means:
        return None
    kept, kept_draw, dropped = epoch_filtered(counts, draw, lengths, means)
    reasons = filter_reasons(means, ep.epoch, dropped)
    return MixKept(kept, kept_draw, reasons, np.asarray(counts, dtype=np.int64), draw)
