"""``epoch_wise_filter`` with a chunked ``mix`` and ``random``, ``default`` or ``reverse``
(``shard`` or ``random_seed_offset``): the kept set as ``mix_random_filter``'s rule.

The meaning is ``mix_filter``'s (the sub-epoch's slots filtered as one set by the length key, or
by a source's own sort key where it gives one, the shortest by (length, sequence, corpus epoch) kept, then every kept slot's chunks cut). These
orders' mix streams over one bucket, so ``mix_kept`` listed the whole sub-epoch for its length
sum, again for its sorted lengths and lexsort, then the listing path listed the left-out slots and
matched them against the listed order. Here the kept set is found in passes over the sub-epoch's
slots as a set (``KeptSet``, by that key), and the listed order the chunked cut makes
anyway is masked by the rule: one listing. The plans are those of listing (the same kept slots,
order and chunks).
"""

from __future__ import annotations

import numpy as np

from seqloader.plan.epochs import EpochIndex
from seqloader.plan.indexed.mix_filter import MixKept
from seqloader.plan.indexed.mix_kind import ChunkedShardMix
from seqloader.plan.indexed.mix_random_filter import rule_kept, rule_left


class ChunkedRuleMix(ChunkedShardMix):
    """``ChunkedShardMix`` over one bucket whose filtered sub-epochs keep by the rule (its
    ``keeps`` masks the listing, ``ChunkedShardMix.listed_slots``)."""

    def kept(self, ep: EpochIndex, parts: int) -> MixKept | None:
        return rule_kept(self, ep, parts)

    def _left_per_corpus(self, ep: EpochIndex, parts: int, count: np.ndarray) -> np.ndarray:
        return rule_left(self, ep, parts, count)
