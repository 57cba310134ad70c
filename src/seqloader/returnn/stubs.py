"""Reading a real RETURNN config on a machine without its model code.

Real configs import their experiment packages (``from i6_experiments... import ...``, RETURNN's
old ``from Pretrain import WrapEpochValue``) although their data part needs none of it.
``stub_imports()`` lets exactly the imports that fail resolve to stand-in modules while the config
is read, and records their names; a data option that holds a stand-in value is then an error
naming the option and the module (``find_stub``), never a silently wrong dataset.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import types
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any


class Stub:
    """A stand-in for anything taken from a stubbed module: attributes, calls, subscripts and
    arithmetic give more stand-ins, so module-level model code runs without doing anything."""

    def __init__(self, origin: str) -> None:
        object.__setattr__(self, "_stub_origin", origin)

    def __getattr__(self, name: str) -> Stub:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return Stub(f"{self._stub_origin}.{name}")

    def __call__(self, *args: Any, **kwargs: Any) -> Stub:
        return Stub(f"{self._stub_origin}(...)")

    def __getitem__(self, key: Any) -> Stub:
        return Stub(f"{self._stub_origin}[...]")

    def __iter__(self) -> Iterator[Any]:
        return iter(())

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"<stub {self._stub_origin}>"

    def _same(self, *args: Any) -> Stub:
        return self

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = _same
    __floordiv__ = __or__ = __ror__ = __and__ = __neg__ = _same


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return Stub(f"{self.__name__}.{name}")


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Last on ``sys.meta_path``: reached only by imports every real finder failed, and stubs
    only those the file ``origin`` makes (not the optional imports of the libraries it uses)."""

    def __init__(self, origin: str | None) -> None:
        self.stubbed: list[str] = []
        self.origin = origin

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if self.origin is not None and not _imported_by(self.origin):
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _StubModule(spec.name)
        module.__path__ = []  # a package: its submodules are stubbed too
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        self.stubbed.append(module.__name__)


def _imported_by(origin: str) -> bool:
    """Whether the import being resolved comes from code in the file ``origin``."""
    frame = sys._getframe(2)
    while frame is not None:
        if frame.f_code.co_filename == origin:
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


@contextmanager
def stub_imports(origin: str | None = None) -> Iterator[list[str]]:
    """While active, an import that fails (made by the file ``origin``; None: by anyone)
    resolves to a stand-in module; yields the list of the modules stubbed (filled as they are
    imported). Afterwards the stand-ins are forgotten."""
    finder = _StubFinder(origin)
    sys.meta_path.append(finder)
    try:
        yield finder.stubbed
    finally:
        sys.meta_path.remove(finder)
        for name in finder.stubbed:
            if isinstance(sys.modules.get(name), _StubModule):
                del sys.modules[name]


def find_stub(value: Any, path: str) -> str | None:
    """``path`` of the first stand-in inside ``value`` (dicts, lists, tuples), with what it
    stands for; None when there is none."""
    if isinstance(value, Stub):
        return f"{path} = {value!r}"
    if isinstance(value, Mapping):
        for k, v in value.items():
            found = find_stub(v, f"{path}[{k!r}]")
            if found:
                return found
    elif isinstance(value, list | tuple):
        for i, v in enumerate(value):
            found = find_stub(v, f"{path}[{i}]")
            if found:
                return found
    return None
