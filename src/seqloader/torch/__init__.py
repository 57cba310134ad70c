"""Torch integration: ``SeqLoader`` runs the plan on torch's DataLoader (workers, hand-over,
worker failures, torch.distributed). The torch-free bookkeeping around it is ``seqloader.trainer``.

The map, top-down: ``loader`` (``SeqLoader``) -> ``run`` (one epoch's loop) -> ``dataloader`` (its
DataLoader's lifecycle) -> ``dataset`` (what workers build) -> ``handover`` (worker -> trainer
memory) -> ``batch`` (``Batch``); ``receiving`` (background receive and dispatch threads),
``worker_errors`` with ``held_batches`` (a failed worker becomes a ``WorkerError`` naming its
batch), ``distributed`` and ``process_rank`` (ranks), and ``_compat`` (torch's privates, nowhere
else).
"""

from seqloader.torch.batch import Batch
from seqloader.torch.loader import SeqLoader
from seqloader.torch.process_rank import detect

__all__ = ["Batch", "SeqLoader", "detect"]
