"""Executing planned batches: read, transform, pad. Runs inside DataLoader workers."""

from seqloader.loading.batch_spec import BatchSpec
from seqloader.loading.collate import pad_batch, pad_key
from seqloader.loading.execute import LoadedBatch, Transform, execute, transform_rng
from seqloader.loading.worker_spec import WorkerSpec

__all__ = [
    "BatchSpec",
    "LoadedBatch",
    "Transform",
    "WorkerSpec",
    "execute",
    "pad_batch",
    "pad_key",
    "transform_rng",
]
