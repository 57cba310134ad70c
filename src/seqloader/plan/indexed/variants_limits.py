"""Length variants with limits on other keys than the length key (per-key ``max_frames``,
``max_packed_frames`` of another key) under indexed planning.

Global planning batches each full epoch on every key's drawn lengths (a key the variants list
varies; the others keep the source's), so a batch's other keys are limited at their drawn
variant. Here the same holds per planned unit ``sequence * F + variant``:

- the bucketed orders (class draw): a bucket's batch size also fits the longest of the other
  key among the units it holds. A class's members in variant ``f`` land in bucket
  ``buckets[c, f]``, so that longest is the most, over the (class, variant) pairs of the
  bucket, of the class's longest in that variant (``bucket_key_longest``: O(n F) once);
- the greedy cuts (fixed, random and sorting orders) read every varying key at the unit's
  variant (``DrawnUnits.greedy_cut``; the sorting orders' codes: ``coded_keys``).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from seqloader.plan.indexed.variants import VariantClasses, VariantLengths


def bucket_key_longest(
    classes: VariantClasses, table: np.ndarray | None, class_longest: np.ndarray
) -> np.ndarray:
    """Another key's longest per epoch bucket -> int64 ``[N]``: ``table`` its lengths per
    variant ``[F, n]`` (None: it does not vary, ``class_longest`` ``[C]`` its longest per
    class), the most of each bucket's (class, variant) pairs.

    >>> table = np.array([[10, 20, 11, 30], [9, 18, 10, 27]])
    >>> from seqloader.plan.options import PlanOptions
    >>> vc = VariantClasses(table, None, PlanOptions(ordering="buckets:2", max_frames=60,
    ...                                               planning="indexed"), 60)
    >>> other = np.array([[1, 2, 3, 4], [5, 6, 7, 8]])
    >>> bucket_key_longest(vc, other, np.zeros(len(vc.sizes), np.int64)).tolist()
    [7, 6, 8]
    """
    sizes = np.asarray(classes.sizes, dtype=np.int64)
    per = np.zeros((len(sizes), classes.count), dtype=np.int64)  # [C, F]
    held = np.flatnonzero(sizes)
    if table is None:
        per[:] = np.asarray(class_longest, dtype=np.int64)[:, None]
    elif len(held):
        members = np.asarray(classes.index.members, dtype=np.int64)
        starts = np.asarray(classes.index.starts, dtype=np.int64)[held]
        for f in range(classes.count):
            values = np.asarray(np.asarray(table[f])[members], dtype=np.int64)
            per[held, f] = np.maximum.reduceat(values, starts)
    out = np.zeros(len(classes.longest), dtype=np.int64)
    np.maximum.at(out, classes.buckets[held].ravel(), per[held].ravel())
    return out


def coded_keys(
    lengths: Mapping[str, np.ndarray], tables: Mapping[str, np.ndarray], count: int
) -> dict[str, np.ndarray]:
    """Every key's lengths read by unit code ``sequence * count + variant``: a varying key's at
    the variant (``tables``), the others' the sequence's (``lengths``)."""
    out: dict[str, np.ndarray] = {}
    for k, base in lengths.items():
        table = tables.get(k)
        if table is None:
            table = np.broadcast_to(np.asarray(base), (count, len(base)))
        out[k] = VariantLengths(table)  # type: ignore[assignment]
    return out
