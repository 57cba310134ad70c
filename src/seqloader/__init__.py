"""seqloader: exact-epoch loading of variable-length sequences for PyTorch.

One deterministic plan per epoch decides every batch; DataLoader workers only execute it, and ranks
take their share. See docs/architecture.md.

The face is lazy: each public name is imported from its layer when first used, so
``import seqloader`` (and ``import seqloader.plan``, ``.sources``, ``.audio``) loads no torch;
``seqloader.SeqLoader`` does.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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
    from seqloader.plan import (
        Ordering,
        Planner,
        PlanOptions,
        Topology,
    )
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
    from seqloader.torch.batch import Batch
    from seqloader.torch.loader import SeqLoader
    from seqloader.trainer.checks import CheckOptions
    from seqloader.trainer.loader_options import WorkerOptions
    from seqloader.trainer.prepare import prepare
    from seqloader.trainer.report import EpochReport

__version__ = "0.1.0"

# public name -> the module that defines it
_HOME: dict[str, str] = {
    "HFSource": "seqloader.adapters",
    "LhotseSource": "seqloader.adapters",
    "AudioOptions": "seqloader.audio",
    "AudioSource": "seqloader.audio",
    "KaldiFbank": "seqloader.audio",
    "LogMel": "seqloader.audio",
    "ReturnnFeatures": "seqloader.audio",
    "SentencePieceVocab": "seqloader.audio",
    "TokenVocab": "seqloader.audio",
    "Vocabulary": "seqloader.audio",
    "AuditError": "seqloader.errors",
    "AuditWarning": "seqloader.errors",
    "DataError": "seqloader.errors",
    "DataWarning": "seqloader.errors",
    "DistributedMismatchError": "seqloader.errors",
    "FetchError": "seqloader.errors",
    "MissingDependencyError": "seqloader.errors",
    "OptionError": "seqloader.errors",
    "ResumeError": "seqloader.errors",
    "SeqLoaderError": "seqloader.errors",
    "SequenceSkipped": "seqloader.errors",
    "SequenceTooLongError": "seqloader.errors",
    "WorkerError": "seqloader.errors",
    "Ordering": "seqloader.plan",
    "Planner": "seqloader.plan",
    "PlanOptions": "seqloader.plan",
    "Topology": "seqloader.plan",
    "from_returnn_config": "seqloader.returnn",
    "ShardSource": "seqloader.shards",
    "ConcatSource": "seqloader.sources",
    "FileCache": "seqloader.sources",
    "HDFSource": "seqloader.sources",
    "KeySpec": "seqloader.sources",
    "MemorySource": "seqloader.sources",
    "Source": "seqloader.sources",
    "ZipSource": "seqloader.sources",
    "convert_contiguous": "seqloader.sources",
    "write_hdf": "seqloader.sources",
    "Batch": "seqloader.torch.batch",
    "SeqLoader": "seqloader.torch.loader",
    "WorkerOptions": "seqloader.trainer.loader_options",
    "EpochReport": "seqloader.trainer.report",
    "CheckOptions": "seqloader.trainer.checks",
    "prepare": "seqloader.trainer.prepare",
}

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
    "prepare",
    "write_hdf",
]


# the subpackages and modules, reachable as attributes (``seqloader.plan.continue_plan``)
_MODULES = frozenset(
    [
        "adapters",
        "audio",
        "cli",
        "errors",
        "extras",
        "lightning",
        "loading",
        "plan",
        "returnn",
        "sources",
        "synthetic",
        "torch",
        "trainer",
        "transforms",
        "validate",
    ]
)


def __getattr__(name: str) -> Any:
    """Import a public name (or a subpackage) on first use, and keep it here."""
    if name in _MODULES:
        return importlib.import_module(f"seqloader.{name}")
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module 'seqloader' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
