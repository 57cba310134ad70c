"""Zero-copy hand-over of padded batches from DataLoader workers to the trainer process.

torch's own transport gives every tensor of every batch a fresh shared-memory segment: the worker
allocates it, the trainer receives its file descriptor over a socket, maps it, faults its pages in
and unmaps it when the batch dies — about 1-3 ms of the trainer's time per multi-MB batch on a
small machine. Here each worker keeps a small pool of reusable shared-memory *slots*:

- the worker pads a batch directly into a free slot (one block holds every key), marks the slot
  busy and sends a few hundred bytes (slot number, offsets, lengths, tags);
- the trainer maps a slot once (the first message of a slot generation carries its storage) and
  builds each batch's tensors as views of that mapping: no copy, no mmap, no page faults;
- when the last tensor viewing a batch's block dies, the trainer marks the slot free again, and
  only then may the worker reuse it.

Rule (what users may rely on): a batch's memory is never overwritten while any tensor of that
batch (or any view of one, or a numpy array made from one) is alive. Keeping batches is therefore
always safe; it only costs slots. A worker never waits for a slot: when all its slots are held
(at most ``MAX_SLOTS``) it falls back to torch's per-batch shared tensors for that batch.

Slots are allocated through torch's file-descriptor sharing (no names left in /dev/shm); the
trainer's mappings are dropped when the dataset object that owns them is garbage-collected or
``drop_received`` is called.
"""

from __future__ import annotations

import math
import os
import threading
import uuid
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, replace

import numpy as np
import torch

from seqloader.loading.execute import LoadedBatch
from seqloader.sources.base import Source
from seqloader.torch._compat import new_shared_storage
from seqloader.torch.batch import Batch, build_batch

ALIGN = 64  # bytes; every array in a slot starts on a cache line
HEADER = ALIGN  # slot header: int32 state at offset 0 (FREE or BUSY)
FREE, BUSY = 0, 1
MAX_SLOTS = 8  # per worker; in a steady state prefetch_factor + the batches the loop holds
# unreleased (up to trainer.release.EVERY) + the one it works on
GROWTH = 1.25  # a (re)allocated slot gets this much headroom over the batch that needed it
ROUND = 1 << 20  # slot sizes are multiples of 1 MiB


def _align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def torch_dtype(dtype: np.dtype) -> torch.dtype:
    return torch.from_numpy(np.empty(0, dtype=dtype)).dtype


def new_shared_tensor(shape: tuple[int, ...], dtype: np.dtype) -> torch.Tensor:
    """A new tensor in shared memory (what torch's transport would make of it anyway)."""
    tdtype = torch_dtype(np.dtype(dtype))
    storage = new_shared_storage(max(math.prod(shape), 1) * tdtype.itemsize)
    # torch's stubs require a stride here; torch itself defaults it to contiguous
    return torch.empty(0, dtype=tdtype).set_(storage, 0, shape)  # type: ignore[call-overload]


def shared_alloc(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A numpy view of a new shared-memory tensor: the fallback when no slot is free."""
    return new_shared_tensor(shape, dtype).numpy()


def estimate_bytes(source: Source, seqs: np.ndarray) -> int:
    """Bytes the padded batch of ``seqs`` needs in a slot, from the lengths known at open.

    Exact unless a transform changes lengths or adds keys; then the bump allocator falls back for
    the keys that do not fit, so a wrong estimate costs speed, never correctness.
    """
    total = HEADER
    for key in source.keys:
        spec = source.schema[key]
        t_max = int(source.lengths(key)[seqs].max()) if len(seqs) else 0
        frame = math.prod(spec.feature_shape) * np.dtype(spec.dtype).itemsize
        total += _align(len(seqs) * t_max * frame)
    return total


class _Slot:
    """One reusable shared block on the worker side."""

    def __init__(self, index: int, capacity: int, generation: int) -> None:
        self.index = index
        self.generation = generation
        self.storage = new_shared_storage(capacity)
        self.bytes = torch.empty(0, dtype=torch.uint8).set_(self.storage).numpy()  # [capacity]
        self.state = self.bytes[:4].view(np.int32)  # [1], written by both processes
        self.sent = False  # has the trainer been sent this generation's storage?

    @property
    def capacity(self) -> int:
        return len(self.bytes)

    def is_free(self) -> bool:
        return int(self.state[0]) == FREE


class SlotPool:
    """A worker's slots. Lives only in the worker process that created it."""

    def __init__(self, owner: str, max_slots: int | None = None) -> None:
        self.owner = owner  # the dataset's id: the trainer keys its mappings by (owner, pid)
        self.pid = os.getpid()
        self.max_slots = MAX_SLOTS if max_slots is None else max_slots
        self.slots: list[_Slot] = []
        self._generations = 0

    def acquire(self, need: int) -> _Slot | None:
        """A free slot of at least ``need`` bytes, marked busy; None when all are held."""
        free = [s for s in self.slots if s.is_free()]
        fitting = [s for s in free if s.capacity >= need]
        if fitting:
            slot = min(fitting, key=lambda s: s.capacity)
        elif free or len(self.slots) < self.max_slots:
            capacity = max(ROUND, -(-int(need * GROWTH) // ROUND) * ROUND)
            self._generations += 1
            if free:  # replace the largest free slot by a bigger one
                old = max(free, key=lambda s: s.capacity)
                slot = _Slot(old.index, capacity, self._generations)
                self.slots[old.index] = slot
            else:
                slot = _Slot(len(self.slots), capacity, self._generations)
                self.slots.append(slot)
        else:
            return None
        slot.state[0] = BUSY
        return slot


class SlotAllocator:
    """The ``alloc`` callback for padding: bump allocation inside one slot."""

    def __init__(self, slot: _Slot) -> None:
        self.slot = slot
        self.offset = HEADER
        self.placed: list[tuple[np.ndarray, int]] = []  # (array, offset in the slot)

    def __call__(self, shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
        dtype = np.dtype(dtype)
        nbytes = math.prod(shape) * dtype.itemsize
        if self.offset + nbytes > self.slot.capacity:
            return shared_alloc(shape, dtype)  # estimate was short (a transform grew data)
        raw = self.slot.bytes[self.offset : self.offset + nbytes]
        out = raw.view(dtype).reshape(shape)
        self.placed.append((out, self.offset))
        self.offset = _align(self.offset + nbytes)
        return out

    def offset_of(self, array: np.ndarray) -> int | None:
        for placed, offset in self.placed:
            if placed is array:
                return offset
        return None


@dataclass(frozen=True)
class KeyLayout:
    offset: int
    shape: tuple[int, ...]
    dtype: str


class SlotBatchMessage:
    """What a worker returns for a batch built in a slot; unpickles into a ``Batch`` in the trainer.

    Only small things travel: layouts, lengths, indices, tags — and, once per slot generation,
    the slot's storage (a file descriptor).
    """

    def __init__(self, pool: SlotPool, slot: _Slot, alloc: SlotAllocator, loaded: LoadedBatch):
        self.key = (pool.owner, pool.pid, slot.index, slot.generation)
        self.storage = None if slot.sent else slot.storage
        slot.sent = True
        self.order = list(loaded.data)
        self.layouts: dict[str, KeyLayout] = {}
        self.extra: dict[str, torch.Tensor] = {}  # keys that did not fit (torch's transport)
        for key, arr in loaded.data.items():
            offset = alloc.offset_of(arr)
            if offset is None:
                self.extra[key] = torch.from_numpy(arr)
            else:
                self.layouts[key] = KeyLayout(offset, tuple(arr.shape), arr.dtype.str)
        self.loaded = replace(loaded, data={})  # the bookkeeping; the data is in the slot

    def __reduce__(self):
        return (
            receive,
            (self.key, self.storage, self.order, self.layouts, self.extra, self.loaded),
        )


# ---- trainer side ----

# reentrant: a garbage collection inside ``receive`` (which allocates while holding it) can run
# another dataset's finalizer, ``drop_received``, in the same thread (a plain lock deadlocked)
_received_lock = threading.RLock()
# owner -> {(pid, slot index): (generation, uint8 view of the whole slot)}
_received: dict[str, dict[tuple[int, int], tuple[int, np.ndarray]]] = {}


def drop_received(owner: str) -> None:
    """Forget the trainer's mappings of ``owner``'s slots (batches still held keep theirs)."""
    with _received_lock:
        _received.pop(owner, None)


def received_slots(owner: str) -> int:
    with _received_lock:
        return len(_received.get(owner, {}))


def _release(state: np.ndarray) -> None:
    state[0] = FREE


def receive(
    key: tuple[str, int, int, int],
    storage: torch.UntypedStorage | None,
    order: list[str],
    layouts: Mapping[str, KeyLayout],
    extra: Mapping[str, torch.Tensor],
    loaded: LoadedBatch,
) -> Batch:
    """Build the ``Batch`` from a slot message (runs while unpickling, in the trainer)."""
    owner, pid, index, generation = key
    with _received_lock:
        slots = _received.setdefault(owner, {})
        if storage is not None:
            whole = torch.empty(0, dtype=torch.uint8).set_(storage).numpy()
            slots[(pid, index)] = (generation, whole)
        got = slots.get((pid, index))
    if got is None or got[0] != generation:
        raise RuntimeError(
            f"seqloader hand-over: batch (epoch {loaded.spec.epoch}, step {loaded.spec.step}) "
            f"refers to slot {index} generation {generation} of worker pid {pid}, which this "
            f"process never received (have {None if got is None else got[0]}); this is a bug in "
            "seqloader, please report"
        )
    whole = got[1]
    # One new array object per batch: every key's view has it as base, so it lives exactly as
    # long as some tensor of this batch does; its death frees the slot.
    lease = np.frombuffer(whole.data, dtype=np.uint8)  # .data: a memoryview
    weakref.finalize(lease, _release, whole[:4].view(np.int32))
    data: dict[str, torch.Tensor] = {}
    for name in order:
        lay = layouts.get(name)
        if lay is None:
            data[name] = extra[name]
            continue
        dtype = np.dtype(lay.dtype)
        nbytes = math.prod(lay.shape) * dtype.itemsize
        view = lease[lay.offset : lay.offset + nbytes].view(dtype).reshape(lay.shape)
        data[name] = torch.from_numpy(view)
    return build_batch(loaded, data)  # counts computed here: off the training thread


def new_owner_id() -> str:
    return uuid.uuid4().hex
