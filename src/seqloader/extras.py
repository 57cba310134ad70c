"""Optional dependencies: the one place that imports them and says which extra installs them.

Every optional package is imported lazily, where the feature that needs it is used, through
``require``; a missing package is a ``MissingDependencyError`` that names the feature and the
``pip install 'seqloader[EXTRA]'`` line, instead of a bare ``ModuleNotFoundError`` from deep inside.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from seqloader.errors import MissingDependencyError

# module imported -> (distribution to install, extra of pyproject.toml that installs it)
EXTRAS: dict[str, tuple[str, str]] = {
    "soundfile": ("soundfile", "audio"),
    "sentencepiece": ("sentencepiece", "audio"),
    "miniaudio": ("miniaudio", "audio"),  # FLAC by dr_flac (audio.flac); soundfile without it
    "matplotlib": ("matplotlib", "cli"),
    "tqdm": ("tqdm", "cli"),
    "lhotse": ("lhotse", "lhotse"),
    "datasets": ("datasets", "hf"),
    "pyarrow": ("pyarrow", "hf"),
    "lightning": ("lightning", "lightning"),
    "pytorch_lightning": ("pytorch-lightning", "pytorch-lightning"),
    "returnn": ("returnn", "returnn"),
    "fsspec": ("fsspec", "remote"),
    "s3fs": ("s3fs", "remote"),
    "lilcom": ("lilcom", "shards"),
}


def require(module: str, purpose: str) -> ModuleType:
    """Import ``module`` (a key of ``EXTRAS``, or a submodule of one) for ``purpose``.

    Raises ``MissingDependencyError``: "PURPOSE needs the PACKAGE package: pip install
    'seqloader[EXTRA]'" when it (or one of its own dependencies) is missing."""
    top = module.partition(".")[0]
    if top not in EXTRAS:
        raise KeyError(f"{top!r} is not an optional dependency of seqloader: {sorted(EXTRAS)}")
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise MissingDependencyError(missing_message(top, purpose, e)) from e


def missing_message(top: str, purpose: str, error: ImportError | None = None) -> str:
    package, extra = EXTRAS[top]
    cause = ""
    if error is not None and error.name not in (None, top):  # the package is there, its dep is not
        cause = f" (importing {top} failed: {error})"
    return f"{purpose} needs the {package} package{cause}: pip install 'seqloader[{extra}]'"
