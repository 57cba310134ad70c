"""The DataLoader side: a map-style dataset whose item is one planned batch, and a sampler that
yields this rank's planned batches.

torch's DataLoader hands sampler items to workers round-robin and returns results in sampler order,
so batch content and order never depend on ``num_workers`` (contract C3) — no sharding code in
workers. With ``batch_size=None`` each sampler item (a ``BatchSpec``) goes to ``__getitem__`` as is.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import threading
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from multiprocessing.reduction import ForkingPickler

import numpy as np
import torch
from torch.utils.data import Dataset, Sampler, get_worker_info

from seqloader.errors import SeqLoaderError
from seqloader.loading.arena import BatchBlock, BlockPool
from seqloader.loading.batch_spec import BatchSpec
from seqloader.loading.collate import Alloc, numpy_alloc
from seqloader.loading.direct import reads_into
from seqloader.loading.execute import LoadedBatch, execute
from seqloader.loading.worker_spec import WorkerSpec
from seqloader.plan.batches import BatchList
from seqloader.sources.base import Source
from seqloader.torch.batch import Batch, build_batch
from seqloader.torch.handover import (
    FREE,
    SlotAllocator,
    SlotBatchMessage,
    SlotPool,
    drop_received,
    estimate_bytes,
    new_owner_id,
    shared_alloc,
)
from seqloader.torch.held_batches import WorkerProgress
from seqloader.torch.worker_errors import WorkerRaised


def to_batch(loaded: LoadedBatch) -> Batch:
    """The ``Batch`` of a batch padded in this process (its arrays become the tensors)."""
    return build_batch(loaded, {k: torch.from_numpy(v) for k, v in loaded.data.items()})


class PlannedBatches(Dataset):
    """Item = a ``BatchSpec``; result = the padded ``Batch``.

    In a worker, the batch is padded straight into one of the worker's reusable shared-memory slots
    and crosses to the trainer as a small message (see ``seqloader.torch.handover``); in the main
    process (``num_workers=0``) it is padded into ordinary memory. ``worker``: how every batch is
    built (``WorkerSpec``); ``progress``: the board where workers mark the batch each builds (a
    death names it), None without workers.
    """

    def __init__(
        self, source: Source, worker: WorkerSpec, progress: WorkerProgress | None = None
    ) -> None:
        self._source: Source | None = source
        self._pickled: bytes | None = None  # the source, in a worker that was not forked
        self.worker = worker
        self.progress = progress
        self.owner = new_owner_id()
        self._pool: SlotPool | None = None
        self._local: BlockPool | None = None  # reusable batch memory with num_workers=0
        # the trainer's mappings of worker slots go when this object does (e.g. loader.close())
        weakref.finalize(self, drop_received, self.owner)

    @property
    def source(self) -> Source:
        """The source; in a spawned worker, unpickled on its first batch (``__getstate__``)."""
        if self._source is None:
            assert self._pickled is not None
            self._source = pickle.loads(self._pickled)
            self._pickled = None
        return self._source

    def __getitem__(self, spec: BatchSpec) -> Batch | SlotBatchMessage | WorkerRaised:
        info = get_worker_info()
        if info is None:
            alloc = self._local_alloc(spec)
            return to_batch(self._execute(spec, alloc))
        progress = self.progress
        try:
            if progress is None:
                return self._build_in_worker(spec)
            progress.begin(info.id, spec.epoch, spec.step)
            try:
                return self._build_in_worker(spec)
            finally:
                progress.end(info.id)
        except SeqLoaderError as e:  # the trainer raises it itself (WorkerRaised)
            raised = WorkerRaised.capture(e, info.id)
            if raised is None:
                raise
            return raised

    def _build_in_worker(self, spec: BatchSpec) -> Batch | SlotBatchMessage:
        pool = self._worker_pool()
        slot = pool.acquire(estimate_bytes(self.source, spec.seqs))
        if slot is None:  # every slot is still held by the trainer: torch's transport
            return to_batch(self._execute(spec, shared_alloc))
        alloc = SlotAllocator(slot)
        try:
            loaded = self._execute(spec, alloc)
            return SlotBatchMessage(pool, slot, alloc, loaded)
        except BaseException:
            slot.state[0] = FREE
            raise

    def _execute(self, spec: BatchSpec, alloc: Alloc) -> LoadedBatch:
        return execute(self.source, spec, self.worker, alloc)

    def _local_alloc(self, spec: BatchSpec) -> Alloc:
        """Memory for a batch built in this process: a reused block when the batch's size is known
        exactly (no transform, no chunks), so no batch pays fresh pages (``loading.arena``)."""
        w = self.worker
        exact = w.transform is None and reads_into(self.source) and not w.packed
        if not exact or spec.chunks is not None:
            return numpy_alloc
        if self._local is None:
            self._local = BlockPool()
        return BatchBlock(self._local)  # lent by ``read_padded``, which knows the shapes

    def _worker_pool(self) -> SlotPool:
        if self._pool is None or self._pool.pid != os.getpid():
            self._pool = SlotPool(self.owner)
        return self._pool

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_pool"] = None  # slots belong to the process that made them
        state["_local"] = None
        # a worker that is not forked maps the node's stores again by path as the source
        # unpickles; torch unpickles the dataset before any of our code runs there, so a store
        # replaced by a damaged copy killed the worker (a bare "exited with code 1", the file
        # named on its stderr only). Unpickled on its first batch, the refusal reaches the loop
        # as itself (``WorkerRaised``).
        state["_source"] = None
        state["_pickled"] = bytes(ForkingPickler.dumps(self.source))
        return state

    def __len__(self) -> int:  # only for repr/debugging; the sampler decides what is read
        return len(self.source)


def whole_batch(x: object) -> object:
    """``collate_fn``: with ``batch_size=None`` each item is already a whole ``Batch``. Defined
    here, beside the dataset, because a spawned worker imports the module of every object torch
    sends it: this one imports only what building a batch needs (``dataloader``'s imports bring
    the trainer's options and both planners)."""
    return x


@dataclass(frozen=True)
class RunPlan:
    """One run of an epoch as the sampler yields it: this rank's ``share`` from step
    ``first_step``; ``plan`` and ``position`` say which run it is (``same_run``)."""

    epoch: int
    share: BatchList
    first_step: int
    plan: object = None  # the global plan the share was drawn from (compared by identity)
    position: object = None  # where in it the run starts (``seqloader.plan.position.Position``)

    def same_run(self, other: RunPlan | None) -> bool:
        """Whether ``other`` is this run: the same epoch plan object from the same position
        (then the shares are equal: a share is a function of plan, rank and position)."""
        return (
            other is not None
            and self.plan is not None
            and other.plan is self.plan
            and other.position == self.position
            and other.epoch == self.epoch
        )


class PlanSampler(Sampler[BatchSpec]):
    """Yields this rank's planned batches for the current epoch, from the resume position.

    The loader sets the plan before each ``iter(dataloader)``; persistent workers keep running.
    ``upcoming``: what the loader's next run most likely is (``SeqLoader``: the next epoch from its
    start, once planned ahead), asked by the dispatch thread at an epoch's end so the workers build
    its first batches before the loop asks (``seqloader.torch.receiving``); None: never.
    """

    def __init__(self) -> None:
        self.run = RunPlan(0, BatchList.empty(), 0)
        self.upcoming: Callable[[int], RunPlan | None] | None = None
        self._once: RunPlan | None = None  # what the first iteration in ``iterating`` yields
        self._lock = threading.Lock()

    def set_plan(
        self, epoch: int, share: BatchList, first_step: int, plan: object = None, position=None
    ) -> None:
        self.run = RunPlan(epoch, share, first_step, plan, position)

    def next_run(self, ended: int) -> RunPlan | None:
        """The run the loader will most likely ask for after epoch ``ended``'s run (None:
        unknown, or none)."""
        upcoming = self.upcoming
        return None if upcoming is None else upcoming(ended)

    @contextlib.contextmanager
    def iterating(self, run: RunPlan) -> Iterator[None]:
        """Inside: the first iteration (the reset made ahead for ``run``, by the thread that
        holds the dispatch lock) yields ``run`` instead of the loader's plan. Whatever happens
        inside, nothing of it is left for a later iteration: the loop's own reset iterates the
        loader's plan (``set_plan`` has nothing to reset)."""
        with self._lock:
            self._once = run
        try:
            yield
        finally:
            with self._lock:
                self._once = None

    def __iter__(self) -> Iterator[BatchSpec]:
        with self._lock:  # which run: decided at iter(), not at the first item
            run, self._once = self._once or self.run, None
        return _specs(run)

    def __len__(self) -> int:
        return len(self.run.share)


def _specs(run: RunPlan) -> Iterator[BatchSpec]:
    share, epoch, first = run.share, run.epoch, run.first_step
    for k in range(len(share)):
        seqs, real = share.batch(k)
        uses, chunks, variants = share.uses_of(k), share.chunks_of(k), share.variants_of(k)
        yield _WireSpec(epoch, first + k, seqs, real, uses, chunks, variants)


class _WireSpec(BatchSpec):
    """A ``BatchSpec`` that pickles as two byte strings.

    torch's index queue pickles every spec in a feeder thread of the trainer process, which takes
    the GIL from the training thread: a dataclass holding numpy arrays took 19 µs per pickle (hot;
    several times that after a step), bytes take 3 µs. The worker gets a plain ``BatchSpec``.
    """

    def __reduce__(self):
        seqs = np.ascontiguousarray(self.seqs, dtype=np.int64).tobytes()
        real = np.ascontiguousarray(self.real, dtype=bool).tobytes()
        if self.uses is None and self.chunks is None and self.variants is None:
            return (_unwire_spec, (self.epoch, self.step, seqs, real))
        uses = None if self.uses is None else _int64_bytes(self.uses)
        chunks = None if self.chunks is None else _int64_bytes(self.chunks)
        variants = None if self.variants is None else _int64_bytes(self.variants)
        return (_unwire_spec, (self.epoch, self.step, seqs, real, uses, chunks, variants))


def _int64_bytes(values: np.ndarray) -> bytes:
    return np.ascontiguousarray(values, dtype=np.int64).tobytes()


def _int64s(values: bytes | None) -> np.ndarray | None:
    return None if values is None else np.frombuffer(bytearray(values), dtype=np.int64)


def _unwire_spec(
    epoch: int,
    step: int,
    seqs: bytes,
    real: bytes,
    uses: bytes | None = None,
    chunks: bytes | None = None,
    variants: bytes | None = None,
) -> BatchSpec:
    return BatchSpec(
        epoch,
        step,
        np.frombuffer(bytearray(seqs), dtype=np.int64),  # writable, like an unpickled array
        np.frombuffer(bytearray(real), dtype=bool),
        _int64s(uses),
        _int64s(chunks),
        _int64s(variants),
    )
