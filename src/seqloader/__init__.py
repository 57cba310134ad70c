"""seqloader: exact-epoch loading of variable-length sequences for PyTorch.

One deterministic plan per epoch decides every batch; DataLoader workers only execute it, and ranks
take their share. See docs/architecture.md.

The face also plugs torch's STFT kernel into the audio layer's log-mel (``use_kernel``): audio I/O
imports no torch, and features cost what they cost with torch.
"""

from seqloader.adapters import HFSource, LhotseSource
from seqloader.audio import (
    AudioOptions,
    AudioSource,
    KaldiFbank,
    LogMel,
    ReturnnFeatures,
    SentencePieceVocab,
    TokenVocab,
    Vocabulary,
)
from seqloader.audio.features import use_kernel as _use_kernel
from seqloader.errors import (
    AuditError,
    AuditWarning,
    DataError,
    DataWarning,
    DistributedMismatchError,
    FetchError,
    MissingDependencyError,
    OptionError,
    ResumeError,
    SeqLoaderError,
    SequenceSkipped,
    SequenceTooLongError,
    WorkerError,
)
from seqloader.plan import Ordering, Planner, PlanOptions, Topology
from seqloader.returnn import from_returnn_config
from seqloader.shards import ShardSource
from seqloader.sources import (
    ConcatSource,
    FileCache,
    HDFSource,
    KeySpec,
    MemorySource,
    Source,
    ZipSource,
    convert_contiguous,
    write_hdf,
)
from seqloader.torch import Batch, EpochReport, SeqLoader, WorkerOptions
from seqloader.torch.checks import CheckOptions
from seqloader.torch.signal import log_filterbank as _log_filterbank

_use_kernel(_log_filterbank)

__version__ = "0.1.0"

__all__ = [
    "AudioOptions",
    "AudioSource",
    "AuditError",
    "AuditWarning",
    "Batch",
    "CheckOptions",
    "ConcatSource",
    "DataError",
    "DataWarning",
    "DistributedMismatchError",
    "EpochReport",
    "FetchError",
    "FileCache",
    "HDFSource",
    "HFSource",
    "KaldiFbank",
    "KeySpec",
    "LhotseSource",
    "LogMel",
    "MemorySource",
    "MissingDependencyError",
    "OptionError",
    "Ordering",
    "PlanOptions",
    "Planner",
    "ResumeError",
    "ReturnnFeatures",
    "SentencePieceVocab",
    "SeqLoader",
    "SeqLoaderError",
    "SequenceSkipped",
    "SequenceTooLongError",
    "ShardSource",
    "Source",
    "TokenVocab",
    "Topology",
    "Vocabulary",
    "WorkerError",
    "WorkerOptions",
    "ZipSource",
    "__version__",
    "convert_contiguous",
    "from_returnn_config",
    "write_hdf",
]
