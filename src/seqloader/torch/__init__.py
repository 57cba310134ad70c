"""Torch integration: ``SeqLoader`` runs the plan on torch's DataLoader (workers, hand-over,
worker failures, torch.distributed). The torch-free bookkeeping around it is ``seqloader.trainer``.

The map, top-down: ``loader`` (``SeqLoader``) -> ``run`` (one epoch's loop) -> ``dataloader`` (its
DataLoader's lifecycle) -> ``dataset`` (what workers build) -> ``handover`` (worker -> trainer
memory) -> ``batch`` (``Batch``); ``receiving`` (background receive and dispatch threads),
``worker_errors`` with ``held_batches`` (a failed worker becomes a ``WorkerError`` naming its
batch), ``distributed`` and ``process_rank`` (ranks), and ``_compat`` (torch's privates, nowhere
else).

The names here are imported when first used: a DataLoader worker unpickling its dataset imports
``dataset`` and what it needs, not ``loader`` with the trainer's side and both planners.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from seqloader.plan.lazy_face import lazy_names

if TYPE_CHECKING:
    from seqloader.torch.batch import Batch
    from seqloader.torch.loader import SeqLoader
    from seqloader.torch.process_rank import detect

_HOME = {
    "Batch": "seqloader.torch.batch",
    "SeqLoader": "seqloader.torch.loader",
    "detect": "seqloader.torch.process_rank",
}

__all__ = ["Batch", "SeqLoader", "detect"]


__getattr__, __dir__ = lazy_names(__name__, _HOME)
