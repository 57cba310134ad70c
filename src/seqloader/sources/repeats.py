"""``Repeats``: the 64-bit hash values that occur more than once among blocks of hashes, found
without sorting all of them.

The duplicate-tag screen needs the tag hashes seen twice or more. Sorting ``n`` uint64 at once
(10^8 of them: 800 MB, numpy's introsort) costs about 10 CPU-s and runs out of cache on every
pass. Here each block of hashes is cut by the values' top bits into up to ``2^BITS`` parts as it
arrives (a counting sort of 16-bit keys: numpy's stable argsort of them is a radix sort, linear in
the block), so that equal values land in the same part; at the end each part (its run of every
block, about ``PART`` values) is screened on its own, in cache: a count of its values by the next
bits of the hash (``np.bincount`` into a table of about four slots per value) keeps only the
values that share a slot with another (all repeated values among them, about a sixth of the
rest); a second count of those by the hash's lowest bits (another table, a few times their
number) keeps about a fifth of them again, and only those are sorted to read the repeats off
(the sort is the dear step: about 30 ns a value, a count 2-4). A metadata store feeds the tags'
hashes block by block while it writes them (``hdf_store``) and keeps the result, so the screen
of a stored corpus reads a few values instead of sorting ``n``.
"""

from __future__ import annotations

import numpy as np

from seqloader.sources.scratch import Scratch

#: the most top bits that choose a value's part (2^12 parts: 24,000 values each at 10^8)
BITS = 12
#: values per part aimed at: the parts' count tables stay in cache; fewer values, fewer parts
PART = 1 << 15
#: the most bits of a part's count table (2^20 slots: 8 MiB)
TABLE_BITS = 20
#: a part's values kept by its first count are counted again above this many (fewer: sorted)
SCREEN = 256
#: hashes cut at once by ``repeated_values``
BLOCK = 1 << 20


def part_bits(expected: int) -> int:
    """The top bits that choose a value's part for about ``expected`` values in all."""
    return min(BITS, max(0, (expected // PART).bit_length()))


class Repeats:
    """Collects uint64 hashes block by block (``add``); ``finish()`` gives the values seen more
    than once, sorted and unique. ``expected``: about how many values will come (it sets the
    number of parts; any count is right, only slower). Holds a copy of every block (8 bytes per
    value) until ``finish``.

    >>> r = Repeats(expected=7)
    >>> r.add(np.array([5, 9, 1 << 63], np.uint64))
    >>> r.add(np.array([9, 7, 1 << 63, 9], np.uint64))
    >>> r.finish().tolist()
    [9, 9223372036854775808]
    """

    def __init__(self, expected: int = 0) -> None:
        self._bits = part_bits(expected)
        self._kept = Scratch()  # the keys' temporaries, reused from block to block
        self._blocks: list[np.ndarray] = []  # each block, its values grouped by part
        self._cuts: list[np.ndarray] = []  # each block's part boundaries, int64 [2^bits + 1]

    def add(self, hashes: np.ndarray) -> None:
        """The next block of hashes (copied: the caller may reuse its array)."""
        values = np.asarray(hashes, dtype=np.uint64)
        if not len(values):
            return
        parts = 1 << self._bits
        cuts = np.zeros(parts + 1, dtype=np.int64)
        if self._bits == 0:
            self._blocks.append(values.copy())
            cuts[1] = len(values)
        else:
            top = self._kept.take("top", len(values), np.uint64)
            np.right_shift(values, np.uint64(64 - self._bits), out=top)
            key = self._kept.take("key", len(values), np.uint16)
            np.copyto(key, top, casting="unsafe")  # below 2^BITS: fits
            order = np.argsort(key, kind="stable")  # 16-bit keys: a radix sort
            np.cumsum(np.bincount(key, minlength=parts), out=cuts[1:])
            self._blocks.append(np.take(values, order, mode="clip"))  # in range: no checks
        self._cuts.append(cuts)

    def finish(self) -> np.ndarray:
        """The values added more than once -> uint64, ascending, each once (the parts follow
        each other in the order of their top bits). The blocks are released."""
        blocks, self._blocks = self._blocks, []
        cuts = np.array(self._cuts, dtype=np.int64).reshape(len(blocks), (1 << self._bits) + 1)
        self._cuts = []
        found = [np.zeros(0, np.uint64)]
        for p in range(cuts.shape[1] - 1):
            los, his = cuts[:, p].tolist(), cuts[:, p + 1].tolist()
            runs = [b[x:y] for b, x, y in zip(blocks, los, his, strict=True) if y > x]
            if runs:
                found.append(_repeated(np.concatenate(runs), self._bits))
        return np.concatenate(found)


def _repeated(values: np.ndarray, skip: int) -> np.ndarray:
    """The values of ``values`` (one part: their top ``skip`` bits equal) that occur more than
    once, ascending, each once: the values sharing a slot of a count table indexed by the next
    bits, then those sharing a slot of one indexed by the lowest bits, are sorted; the rest
    cannot repeat (equal values share every slot)."""
    if len(values) < 2:
        return np.zeros(0, np.uint64)
    bits = min(TABLE_BITS, len(values).bit_length() + 2, 64 - skip)
    candidates = _sharing(values, 64 - skip - bits, bits)
    low = min(TABLE_BITS, len(candidates).bit_length() + 2, 64 - skip - bits)
    if len(candidates) > SCREEN and low > 0:  # bits below the first table's: independent
        candidates = _sharing(candidates, 0, low)
    candidates.sort()
    same = candidates[1:] == candidates[:-1]
    return np.unique(candidates[1:][same])


def _sharing(values: np.ndarray, shift: int, bits: int) -> np.ndarray:
    """The values whose ``bits`` bits from ``shift`` up equal another value's (a new array)."""
    slot = ((values >> np.uint64(shift)) & np.uint64((1 << bits) - 1)).astype(np.intp)
    return values[np.bincount(slot, minlength=1 << bits)[slot] > 1]


def repeated_values(hashes: np.ndarray, block: int = BLOCK) -> np.ndarray:
    """The values of ``hashes`` that occur more than once -> uint64, ascending, unique (``hashes``
    is read a block at a time and never written: a read-only mapped column will do).

    >>> repeated_values(np.array([3, 1, 3, 2, 1, 3], np.uint64), block=2).tolist()
    [1, 3]
    """
    r = Repeats(expected=len(hashes))
    for a in range(0, len(hashes), block):
        r.add(hashes[a : a + block])
    return r.finish()
