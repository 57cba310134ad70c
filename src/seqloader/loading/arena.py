"""Reusable batch memory for batches built in the process that consumes them (``num_workers=0``).

A fresh multi-MB array per batch costs page faults every time (the allocator hands large blocks
back to the kernel, or the trainer still holds the previous batch): measured 1.5 ms for a 6.6 MB
batch that takes 0.9 ms to fill. A ``BlockPool`` keeps a few blocks and lends one per batch; every
array of the batch is a view of one *lease* object, and when the last view (or tensor made from
one) dies, a finalizer returns the block. So, as with the workers' shared-memory slots
(``seqloader.torch.handover``), a batch's memory is never reused while any part of it is alive;
keeping batches only costs blocks, and beyond ``max_blocks`` batches get ordinary arrays.

A block is (re)allocated at the largest batch seen so far, not at the batch that needed it: sized
to each batch, the pool replaced blocks again and again while an epoch's batches grew (three
fresh 10-13 MB blocks in the first 150 batches of the reference corpus's second epoch, each
first touch of a page a fault of ~4 µs on the 2-core machine: ~40 µs per batch).
"""

from __future__ import annotations

import math
import weakref

import numpy as np

ALIGN = 64  # bytes; every array starts on a cache line
GROWTH = 1.25  # a (re)allocated block gets this much headroom over the batch that needed it


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def padded_bytes(shapes: list[tuple[tuple[int, ...], np.dtype]]) -> int:
    """Bytes a ``BlockAllocator`` needs for arrays of these (shape, dtype)."""
    return sum(_align(math.prod(shape) * np.dtype(dtype).itemsize) for shape, dtype in shapes)


class _Block:
    def __init__(self, capacity: int) -> None:
        self.memory = np.empty(capacity, dtype=np.uint8)
        self.busy = False


class BlockPool:
    """A few reusable blocks in this process; ``lend(nbytes)`` -> an allocator for one batch."""

    def __init__(self, max_blocks: int = 4) -> None:
        self.max_blocks = max_blocks
        self.blocks: list[_Block] = []
        self.high = 0  # the largest batch lent for so far, in bytes: what a new block is sized by

    def lend(self, nbytes: int) -> BlockAllocator | None:
        """An allocator over a free block of at least ``nbytes``; None when all are lent."""
        if nbytes > self.high:
            self.high = nbytes
        free = [b for b in self.blocks if not b.busy]
        fitting = [b for b in free if len(b.memory) >= nbytes]
        if fitting:
            block = min(fitting, key=lambda b: len(b.memory))
        elif free or len(self.blocks) < self.max_blocks:
            block = _Block(_align(int(self.high * GROWTH)))
            if free:  # replace the largest free block by a bigger one
                self.blocks[self.blocks.index(max(free, key=lambda b: len(b.memory)))] = block
            else:
                self.blocks.append(block)
        else:
            return None
        block.busy = True
        return BlockAllocator(block)


def _give_back(block: _Block) -> None:
    block.busy = False


class BlockAllocator:
    """The ``alloc`` callback for padding one batch: bump allocation in a lent block. Arrays that
    do not fit (a wrong size estimate) are ordinary ones."""

    def __init__(self, block: _Block) -> None:
        # A new array object over the block's memory (its base is a memoryview, so numpy does not
        # collapse views onto the block itself): it lives exactly as long as some view does.
        self.lease = np.frombuffer(block.memory.data, dtype=np.uint8)  # .data: a memoryview
        weakref.finalize(self.lease, _give_back, block)
        self.offset = 0

    def __call__(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        dtype = np.dtype(dtype)
        nbytes = math.prod(shape) * dtype.itemsize
        if self.offset + nbytes > len(self.lease):
            return np.empty(shape, dtype=dtype)
        out = self.lease[self.offset : self.offset + nbytes].view(dtype).reshape(shape)
        self.offset = _align(self.offset + nbytes)
        return out

    def release(self) -> None:
        """Drop this allocator's own reference (the arrays it made keep the block lent)."""
        self.lease = None  # type: ignore[assignment]


class BatchBlock:
    """The ``alloc`` of one batch built in this process: the batch's block is lent once its
    arrays' shapes are known (``reserve``, by ``loading.direct.read_padded``, which computes them
    anyway), so the lengths are not gathered twice; without a block (none free, or ``reserve``
    never called), ordinary arrays.

    >>> pool = BlockPool(max_blocks=1)
    >>> alloc = BatchBlock(pool)
    >>> alloc.reserve([((2, 3), np.dtype(np.float32))])
    >>> alloc((2, 3), np.dtype(np.float32)).shape, pool.blocks[0].busy
    ((2, 3), True)
    """

    __slots__ = ("_lent", "_pool")

    def __init__(self, pool: BlockPool) -> None:
        self._pool = pool
        self._lent: BlockAllocator | None = None

    def reserve(self, shapes: list[tuple[tuple[int, ...], np.dtype]]) -> None:
        """Lend the block for arrays of these (shape, dtype), in this order."""
        if self._lent is None:
            self._lent = self._pool.lend(padded_bytes(shapes))

    def __call__(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        lent = self._lent
        return np.empty(shape, dtype=dtype) if lent is None else lent(shape, dtype)
