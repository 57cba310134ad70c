"""A package face whose names are imported when first used (PEP 562's module ``__getattr__``).

``seqloader.plan`` and ``seqloader.torch`` name their public objects in their ``__init__`` without
importing the modules that define them: importing one piece of a package (a DataLoader worker
unpickling its dataset needs ``plan.batches``, not both planners) then loads only that piece.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(
    package: str, home: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: ``home`` maps each public name to the module
    that defines it; a name is imported on first use and then kept as a plain attribute."""

    def get(name: str) -> Any:
        where = home.get(name)
        if where is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(where), name)
        setattr(sys.modules[package], name, value)
        return value

    def names() -> list[str]:
        return sorted({*vars(sys.modules[package]), *home})

    return get, names
