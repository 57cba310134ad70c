"""Printing: human text or one JSON object on stdout; progress bars on stderr."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, TypeVar

import numpy as np

T = TypeVar("T")


def progress(
    items: Iterable[T], enabled: bool, desc: str, total: int | None = None, unit: str = "it"
) -> Iterator[T]:
    """A tqdm bar on stderr when ``enabled`` and stderr is a terminal (never pollutes --json)."""
    if not enabled:
        yield from items
        return
    try:
        from tqdm import tqdm
    except ModuleNotFoundError:  # tqdm is in the [cli] extra; work without it
        yield from items
        return
    yield from tqdm(items, desc=desc, total=total, unit=unit, disable=None, leave=False)


def progress_bar(enabled: bool, desc: str, total: int, unit: str = "it"):
    """A tqdm bar to ``update()`` by hand (for library callbacks); a no-op without a terminal."""
    try:
        from tqdm import tqdm
    except ModuleNotFoundError:
        enabled = False
    if not enabled:
        return _NoBar()
    return tqdm(total=total, desc=desc, unit=unit, disable=None, leave=False)


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass

    def close(self) -> None:
        pass


def print_notes(notes: Iterable[str]) -> None:
    """Remarks the human should read (e.g. a default the command chose), with the output."""
    for n in notes:
        print(f"note: {n}")


def print_header(out: Mapping[str, Any], after_data: str = "") -> None:
    """The lines a command's text output starts with: DATA (``Opened.header``), the notes."""
    print(f"data: {out['data']}{after_data}")
    print_notes(out["notes"])


def print_json(obj: object) -> None:
    json.dump(obj, sys.stdout, indent=2, default=_jsonable)
    sys.stdout.write("\n")


def _jsonable(obj: object) -> object:
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    raise TypeError(f"not JSON serializable: {type(obj).__name__}")


def human(n: float) -> str:
    """1234567 -> '1.23M' (for frames and bytes-like counts in text output)."""
    for unit, scale in (("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.3g}{unit}"
    return f"{n:.4g}" if isinstance(n, float) else str(n)


def mib(n_bytes: float) -> str:
    return f"{n_bytes / 2**20:.0f} MiB"


def planning_text(asked: str, resolved: str) -> str:
    """The planning that plans, as ``check`` and ``stats`` show it: ``planning="auto"`` is
    shown with what it resolved to, so a user sees which algorithm planned the epoch.

    >>> planning_text("auto", "indexed")
    'indexed (auto)'
    """
    return f"{resolved} (auto)" if asked == "auto" else resolved
