"""Checksums of a ``ColumnStore``'s contents: one XXH3-64 per ``BLOCK`` bytes of every column.

A node's store is read by every rank and worker for the whole job, and a changed byte in it
(a disk error, a stray write, a hand edit) would be served as data: a length one frame short, a
tag that is another's. So the writer sums every column in blocks as it streams them out, and a
reader checks a block before it serves a value from it: the columns a loader scans anyway
(lengths, bucket index) in full when a process maps the store, the ones read a few rows at a time
(tags, row offsets) per block on first use, so that a rank of a 10^8-sequence corpus does not read
gigabytes it never needs before its first batch. A block is checked once per process.

Each block's hash is seeded by the store's identity and the column's name: a header copied from
another store, or a column moved to another's place, fails the check even where the bytes are
equal. XXH3 (``xxhash``: 6-12 GB/s per core here, against 1-3.6 GB/s for ``zlib.crc32``) catches
changed, swapped and zeroed bytes; it is no defence against someone who rewrites the sums too.
"""

from __future__ import annotations

import numpy as np
import xxhash

#: bytes per checksummed block (a block is checked whole the first time any byte of it is read)
BLOCK = 1 << 16


def seed(identity: str, name: str) -> int:
    """The hash seed of column ``name``'s blocks in a store of ``identity``."""
    return xxhash.xxh3_64_intdigest(f"{identity}\0{name}".encode())


def block_sum(data: memoryview | bytes, start: int) -> int:
    """The sum of one block (or of the sums array) with seed ``start``."""
    return xxhash.xxh3_64_intdigest(data, start)


class BlockSums:
    """Sums a column's bytes block by block as they are written, in chunks of any size."""

    def __init__(self, start: int) -> None:
        self._hash = xxhash.xxh3_64(seed=start)  # of the current block (streamed: same digest)
        self._filled = 0  # bytes of the current block summed so far
        self.sums: list[int] = []

    def update(self, data: memoryview) -> None:
        pos = 0
        while pos < len(data):
            take = min(BLOCK - self._filled, len(data) - pos)
            self._hash.update(data[pos : pos + take])
            self._filled += take
            pos += take
            if self._filled == BLOCK:
                self.sums.append(self._hash.intdigest())
                self._hash.reset()
                self._filled = 0

    def finish(self) -> list[int]:
        """The sums, the last (partial) block included."""
        if self._filled:
            self.sums.append(self._hash.intdigest())
            self._hash.reset()
            self._filled = 0
        return self.sums


def first_mismatch(
    column: memoryview, blocks: np.ndarray, expected: np.ndarray, start: int
) -> int | None:
    """The first of ``blocks`` of ``column`` (a view of the column's bytes alone, so that its
    last block ends with it) whose sum differs from ``expected`` (uint64, one per block), or
    None. Every block is summed: one call per block in a comprehension and one comparison of
    the arrays, a quarter of the per-block Python work of a loop that compares as it goes (a
    full check of a 10^8-sequence column is 6,100 blocks)."""
    h = xxhash.xxh3_64_intdigest
    got = [h(column[a : a + BLOCK], start) for a in (blocks * BLOCK).tolist()]
    bad = np.flatnonzero(np.array(got, dtype=np.uint64) != expected)
    return int(blocks[bad[0]]) if len(bad) else None


def block_count(nbytes: int) -> int:
    return -(-nbytes // BLOCK)


def blocks_of_ranges(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """The block numbers covering byte ranges ``[lo, hi)`` (empty ranges cover none), sorted and
    unique."""
    lo, hi = np.asarray(lo, dtype=np.int64), np.asarray(hi, dtype=np.int64)
    keep = hi > lo
    lo, hi = lo[keep], hi[keep]
    first, last = lo // BLOCK, (hi - 1) // BLOCK
    parts = [first, last]
    wide = np.flatnonzero(last - first > 1)  # a range over three blocks or more (rare)
    parts += [np.arange(first[i] + 1, last[i], dtype=np.int64) for i in wide.tolist()]
    if not len(lo):
        return np.zeros(0, np.int64)
    # sorted and unique without np.unique: numpy 2's asks np.ma.is_masked, whose first use imports
    # numpy.ma (~40 ms), in each forked worker's first batch (its first tags)
    blocks = np.sort(np.concatenate(parts))
    return blocks[np.concatenate(([True], blocks[1:] != blocks[:-1]))]
