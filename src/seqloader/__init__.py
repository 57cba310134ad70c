"""seqloader: exact-epoch loading of variable-length sequences for PyTorch.

One deterministic plan per epoch decides every batch; DataLoader workers only execute it, and ranks
take their share. See docs/architecture.md.
"""

from seqloader.audio import (
    AudioOptions,
    AudioSource,
    LogMel,
    SentencePieceVocab,
    TokenVocab,
    Vocabulary,
)
from seqloader.errors import (
    AuditError,
    AuditWarning,
    DataError,
    DataWarning,
    DistributedMismatchError,
    OptionError,
    ResumeError,
    SeqLoaderError,
    SequenceSkipped,
    SequenceTooLongError,
    WorkerError,
)
from seqloader.plan import Ordering, Planner, PlanOptions, Topology
from seqloader.sources import (
    HDFSource,
    KeySpec,
    MemorySource,
    Source,
    convert_contiguous,
    write_hdf,
)
from seqloader.torch import Batch, EpochReport, SeqLoader, WorkerOptions
from seqloader.torch.checks import CheckOptions

__version__ = "0.1.0"

__all__ = [
    "AudioOptions",
    "AudioSource",
    "AuditError",
    "AuditWarning",
    "Batch",
    "CheckOptions",
    "DataError",
    "DataWarning",
    "DistributedMismatchError",
    "EpochReport",
    "HDFSource",
    "KeySpec",
    "LogMel",
    "MemorySource",
    "OptionError",
    "Ordering",
    "PlanOptions",
    "Planner",
    "ResumeError",
    "SentencePieceVocab",
    "SeqLoader",
    "SeqLoaderError",
    "SequenceSkipped",
    "SequenceTooLongError",
    "Source",
    "TokenVocab",
    "Topology",
    "Vocabulary",
    "WorkerError",
    "WorkerOptions",
    "__version__",
    "convert_contiguous",
    "write_hdf",
]
