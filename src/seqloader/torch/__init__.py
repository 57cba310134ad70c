"""Torch integration: DataLoader execution, torch.distributed glue, state, reports."""

from seqloader.torch.batch import Batch
from seqloader.torch.loader import SeqLoader, WorkerOptions
from seqloader.torch.report import EpochReport
from seqloader.torch.topology import detect

__all__ = ["Batch", "EpochReport", "SeqLoader", "WorkerOptions", "detect"]
