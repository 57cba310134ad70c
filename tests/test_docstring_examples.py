"""Every public name of ``seqloader.__all__`` shows its use: a short ``>>>`` example in its own
docstring, run here as a doctest.

A new public name without an example fails ``test_public_name_has_an_example``. Examples run in
the globals of the module that defines the name, plus ``np`` (numpy) and ``sl`` (seqloader); they
use tiny in-memory data (``MemorySource``, synthetic arrays, temporary files), so they are fast.
"""

from __future__ import annotations

import doctest
import importlib
import pkgutil
import sys

import numpy as np
import pytest

import seqloader

NAMES = sorted(n for n in seqloader.__all__ if not n.startswith("__"))
FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


def _doctest(name: str) -> doctest.DocTest | None:
    obj = getattr(seqloader, name)
    module = sys.modules[obj.__module__]
    globs = {**vars(module), "np": np, "sl": seqloader}
    finder = doctest.DocTestFinder(recurse=False, exclude_empty=True)
    found = finder.find(obj, name, module=module, globs=globs)
    return found[0] if found and found[0].examples else None


@pytest.mark.parametrize("name", NAMES)
def test_public_name_has_an_example(name: str) -> None:
    assert _doctest(name) is not None, (
        f"seqloader.{name} has no '>>>' example in its docstring: add a short runnable one "
        "(tests/test_docstring_examples.py runs it)"
    )


@pytest.mark.parametrize("name", NAMES)
def test_public_name_example_runs(name: str, tmp_path, monkeypatch) -> None:
    test = _doctest(name)
    if test is None:
        pytest.skip("no example (test_public_name_has_an_example fails)")
    monkeypatch.chdir(tmp_path)  # examples that write files write them here
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    out: list[str] = []
    runner.run(test, out=out.append)
    assert runner.failures == 0, "".join(out)


def test_every_name_is_checked() -> None:
    assert set(NAMES) | {"__version__"} == set(seqloader.__all__)


def _module_examples() -> list[doctest.DocTest]:
    """The ``>>>`` examples of every other docstring in the package (internal functions too): an
    example that no longer runs says something wrong about the code beside it."""
    public = {
        f"{obj.__module__}.{obj.__qualname__}"
        for obj in (getattr(seqloader, n) for n in NAMES)
        if hasattr(obj, "__qualname__")
    }
    found = []
    for info in pkgutil.walk_packages(seqloader.__path__, "seqloader."):
        if info.name.endswith("__main__"):  # runs the command line on import
            continue
        module = importlib.import_module(info.name)
        globs = {**vars(module), "np": np, "sl": seqloader}
        finder = doctest.DocTestFinder(exclude_empty=True)
        for test in finder.find(module, info.name, module=module, globs=globs):
            if test.examples and test.name not in public:
                found.append(test)
    return sorted(found, key=lambda t: t.name)


MODULE_EXAMPLES = _module_examples()


@pytest.mark.parametrize("test", MODULE_EXAMPLES, ids=lambda t: t.name)
def test_every_docstring_example_runs(test: doctest.DocTest, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    out: list[str] = []
    runner.run(test, out=out.append)
    assert runner.failures == 0, "".join(out)
