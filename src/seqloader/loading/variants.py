"""Reading the planned length variants (``seqloader.plan.variants``) in the worker: the variant
of each sequence is computed from the same (seed, full epoch, index) the plan drew it from, read
with the source's ``read_variant`` (``sources.base.read_each``), and every delivered length is
checked against the plan, so a sequence that would not fit its planned batch is an error naming
it, never a surprise later."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from seqloader.errors import DataError
from seqloader.plan.variants import variant_of
from seqloader.sources.base import Source, length_variants


@dataclass(frozen=True)
class PlannedVariants:
    """How the plan drew the variants: ``count`` of them, full epochs of ``partition_epoch``
    sub-epochs (global planning's draw is keyed by the full epoch); ``carried``: indexed
    planning's batches carry each slot's variant (``BatchSpec.variants``), nothing to compute.

    >>> PlannedVariants(3, 2).of(7, 4, np.array([0, 1])).tolist() == variant_of(
    ...     7, 1, np.array([0, 1]), 3).tolist()
    True
    >>> PlannedVariants(3, carried=True).of(7, 4, np.array([0, 1]), np.array([2, 0])).tolist()
    [2, 0]
    """

    count: int
    partition_epoch: int = 1
    carried: bool = False

    def of(
        self, seed: int, epoch: int, seqs: np.ndarray, given: np.ndarray | None = None
    ) -> np.ndarray:
        """The variants of ``seqs`` in (1-based, sub-) ``epoch`` -> int64 ``[B]``: the batch's
        own (``given``) where the plan carries them, else global planning's draw."""
        if not self.carried:
            return variant_of(seed, (epoch - 1) // self.partition_epoch, seqs, self.count)
        if given is None or len(given) != len(seqs):
            raise DataError(
                f"epoch {epoch}: the plan carries each sequence's length variant, but this batch "
                "of sequences came without them (a BatchSpec made elsewhere than the plan's "
                "batch list?). Fix: pass BatchSpec(..., variants=share.variants_of(k))"
            )
        return np.asarray(given, dtype=np.int64)


def planned_variants(
    source: Source, partition_epoch: int, carried: bool = False
) -> PlannedVariants | None:
    """What the workers need to read ``source``'s planned variants (None: it has none;
    ``carried``: the plan's batches carry them, indexed planning)."""
    declared = length_variants(source)
    if declared is None:
        return None
    return PlannedVariants(len(declared[0]), partition_epoch, carried)


def check_planned(
    source: Source,
    indices: np.ndarray,
    variants: np.ndarray,
    seqs: list[dict[str, np.ndarray]],
) -> None:
    """Every key of every sequence has the length the plan batched it by (the drawn variant's, or
    the source's for keys that do not vary); else a ``DataError`` naming the first mismatch."""
    declared = length_variants(source)
    assert declared is not None, "check_planned needs a source with length variants"
    labels, table = declared
    for key in source.schema:
        got = np.fromiter((len(s[key]) for s in seqs), dtype=np.int64, count=len(seqs))
        want = _planned(source, table, key, indices, variants)
        bad = np.flatnonzero(got != want)
        if not len(bad):
            continue
        j = int(bad[0])
        i, v = int(indices[j]), int(variants[j])
        raise DataError(
            f"sequence {i} (tag {source.tag(i)!r}) in variant {labels[v]!r} has "
            f"{int(got[j])} frames of {key!r}, but the plan batched it with {int(want[j])} "
            f"({len(bad)} such sequence(s) in this batch). A source with length variants must "
            "read each variant at its declared lengths, and the transform must keep every "
            "planned key's length (put length-changing steps into the source's variants)."
        )


def _planned(
    source: Source,
    table: Mapping[str, np.ndarray],
    key: str,
    indices: np.ndarray,
    variants: np.ndarray,
) -> np.ndarray:
    if key in table:
        return np.asarray(table[key])[variants, indices].astype(np.int64)
    return np.asarray(source.lengths(key))[indices].astype(np.int64)
