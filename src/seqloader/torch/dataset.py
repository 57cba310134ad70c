"""The DataLoader side: a map-style dataset whose item is one planned batch, and a sampler that
yields this rank's planned batches.

torch's DataLoader hands sampler items to workers round-robin and returns results in sampler order,
so batch content and order never depend on ``num_workers`` (contract C3) — no sharding code in
workers. With ``batch_size=None`` each sampler item (a ``BatchSpec``) goes to ``__getitem__`` as is.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import torch
from torch.utils.data import Dataset, Sampler, get_worker_info

from seqloader.loading.batch_spec import BatchSpec
from seqloader.loading.execute import LoadedBatch, Transform, execute
from seqloader.plan.batches import BatchList
from seqloader.sources.base import Source
from seqloader.torch.batch import Batch


def shared_alloc(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    """A numpy view of a new tensor in shared memory: written once by the worker, then passed to
    the trainer by handle (what torch's default collate does for its own stacking)."""
    tdtype = torch.from_numpy(np.empty(0, dtype=dtype)).dtype
    numel = math.prod(shape)
    storage = torch.UntypedStorage._new_shared(max(numel, 1) * tdtype.itemsize)
    t = torch.empty(0, dtype=tdtype).set_(storage, 0, shape)
    return t.numpy()


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
        loaded.skipped,
    )


class PlannedBatches(Dataset):
    """Item = a ``BatchSpec``; result = the padded ``Batch``."""

    def __init__(self, source: Source, seed: int, transform: Transform | None = None) -> None:
        self.source = source
        self.seed = seed
        self.transform = transform

    def __getitem__(self, spec: BatchSpec) -> Batch:  # type: ignore[override]
        in_worker = get_worker_info() is not None
        alloc = shared_alloc if in_worker else _plain_alloc
        return to_batch(execute(self.source, spec, self.seed, self.transform, alloc))

    def __len__(self) -> int:  # only for repr/debugging; the sampler decides what is read
        return len(self.source)


def _plain_alloc(shape: tuple[int, ...], dtype: np.dtype) -> np.ndarray:
    return np.empty(shape, dtype=dtype)


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
