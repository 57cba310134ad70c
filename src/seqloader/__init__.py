"""seqloader: exact-epoch loading of variable-length sequences for PyTorch.

One deterministic plan per epoch decides every batch; DataLoader workers only execute it, and ranks
take their share. See docs/architecture.md.
"""

from seqloader.errors import (
    DataError,
    DistributedMismatchError,
    OptionError,
    ResumeError,
    SeqLoaderError,
    SequenceTooLongError,
    WorkerError,
)
from seqloader.plan import Ordering, Planner, PlanOptions, Topology
from seqloader.sources import KeySpec, MemorySource, Source
from seqloader.torch import Batch, EpochReport, SeqLoader, WorkerOptions

__version__ = "0.1.0"

__all__ = [
    "Batch",
    "DataError",
    "DistributedMismatchError",
    "EpochReport",
    "KeySpec",
    "MemorySource",
    "OptionError",
    "Ordering",
    "PlanOptions",
    "Planner",
    "ResumeError",
    "SeqLoader",
    "SeqLoaderError",
    "SequenceTooLongError",
    "Source",
    "Topology",
    "WorkerError",
    "WorkerOptions",
    "__version__",
]
