"""The DataLoader side: a map-style dataset whose item is one planned batch, and a sampler that
yields this rank's planned batches.

torch's DataLoader hands sampler items to workers round-robin and returns results in sampler order,
so batch content and order never depend on ``num_workers`` (contract C3) — no sharding code in
workers. With ``batch_size=None`` each sampler item (a ``BatchSpec``) goes to ``__getitem__`` as is.
"""

from __future__ import annotations

import os
import weakref
from collections.abc import Iterator

import numpy as np
import torch
from torch.utils.data import Dataset, Sampler, get_worker_info

from seqloader.loading.batch_spec import BatchSpec
from seqloader.loading.collate import numpy_alloc
from seqloader.loading.execute import LoadedBatch, Transform, execute
from seqloader.plan.batches import BatchList
from seqloader.sources.base import Source
from seqloader.torch.batch import Batch
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


def to_batch(loaded: LoadedBatch) -> Batch:
    spec = loaded.spec
    return Batch(
        {k: torch.from_numpy(v) for k, v in loaded.data.items()},
        {k: torch.from_numpy(v) for k, v in loaded.lengths.items()},
        torch.from_numpy(np.ascontiguousarray(spec.seqs, dtype=np.int64)),
        torch.from_numpy(np.ascontiguousarray(spec.real, dtype=bool)),
        loaded.tags,
        spec.epoch,
        spec.step,
        loaded.skipped,  # sequences the source skipped (on_error="skip"): counted in the report
    )


class PlannedBatches(Dataset):
    """Item = a ``BatchSpec``; result = the padded ``Batch``.

    In a worker, the batch is padded straight into one of the worker's reusable shared-memory slots
    and crosses to the trainer as a small message (see ``seqloader.torch.handover``); in the main
    process (``num_workers=0``) it is padded into ordinary memory.
    """

    def __init__(self, source: Source, seed: int, transform: Transform | None = None) -> None:
        self.source = source
        self.seed = seed
        self.transform = transform
        self.owner = new_owner_id()
        self._pool: SlotPool | None = None
        # the trainer's mappings of worker slots go when this object does (e.g. loader.close())
        weakref.finalize(self, drop_received, self.owner)

    def __getitem__(self, spec: BatchSpec) -> Batch | SlotBatchMessage:  # type: ignore[override]
        if get_worker_info() is None:
            return to_batch(execute(self.source, spec, self.seed, self.transform, numpy_alloc))
        pool = self._worker_pool()
        slot = pool.acquire(estimate_bytes(self.source, spec.seqs))
        if slot is None:  # every slot is still held by the trainer: torch's transport
            return to_batch(execute(self.source, spec, self.seed, self.transform, shared_alloc))
        alloc = SlotAllocator(slot)
        try:
            loaded = execute(self.source, spec, self.seed, self.transform, alloc)
            return SlotBatchMessage(pool, slot, alloc, loaded)
        except BaseException:
            slot.state[0] = FREE
            raise

    def _worker_pool(self) -> SlotPool:
        if self._pool is None or self._pool.pid != os.getpid():
            self._pool = SlotPool(self.owner)
        return self._pool

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_pool"] = None  # slots belong to the process that made them
        return state

    def __len__(self) -> int:  # only for repr/debugging; the sampler decides what is read
        return len(self.source)


class PlanSampler(Sampler[BatchSpec]):
    """Yields this rank's planned batches for the current epoch, from the resume position.

    The loader sets the plan before each ``iter(dataloader)``; persistent workers keep running.
    """

    def __init__(self) -> None:
        self._epoch = 0
        self._share = BatchList.empty()
        self._first_step = 0

    def set_plan(self, epoch: int, share: BatchList, first_step: int) -> None:
        self._epoch, self._share, self._first_step = epoch, share, first_step

    def __iter__(self) -> Iterator[BatchSpec]:
        share, epoch, first = self._share, self._epoch, self._first_step
        for k in range(len(share)):
            seqs, real = share.batch(k)
            yield BatchSpec(epoch, first + k, seqs, real)

    def __len__(self) -> int:
        return len(self._share)
