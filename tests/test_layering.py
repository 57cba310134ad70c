"""The layer map of docs/architecture.md, enforced on the import graph of ``src/seqloader``.

Every import statement counts, also one inside a function (a lazy import is still a dependency of
the layer). The runtime check imports the torch-free layers in a fresh interpreter and looks at
``sys.modules``, so an indirect import of torch fails too.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "seqloader"

_BELOW_FACE = {
    "errors", "validate", "extras", "plan", "sources", "loading", "audio", "shards", "synthetic",
    "torch"
}  # fmt: skip
# layer -> the seqloader layers it may import (itself included). Lower layers first.
ALLOWED: dict[str, set[str]] = {
    "errors": {"errors"},
    "validate": {"errors", "validate"},  # option checks, beside errors at the bottom
    "extras": {"errors", "extras"},  # optional packages, imported lazily, named when missing
    "plan": {"errors", "validate", "plan"},
    "sources": {"errors", "validate", "extras", "sources"},
    "loading": {"errors", "validate", "plan", "sources", "loading"},
    "audio": {"errors", "validate", "extras", "sources", "loading", "audio"},
    "shards": {"errors", "validate", "extras", "sources", "loading", "audio", "shards"},
    "adapters": {"errors", "validate", "extras", "sources", "loading", "audio", "shards",
                 "adapters"},
    "synthetic": {"errors", "validate", "sources", "audio", "synthetic"},
    "torch": {"errors", "validate", "plan", "sources", "loading", "torch"},
    "returnn": {"errors", "validate", "extras", "plan", "sources", "loading", "audio", "torch",
                "returnn"},
    "lightning": {"errors", "validate", "extras", "plan", "sources", "torch", "lightning"},
    "cli": _BELOW_FACE | {"cli", "face"},
    "face": _BELOW_FACE | {"adapters", "returnn", "face"},
}  # fmt: skip
# layers that must not import PyTorch (the I/O layers, pure planning, batch execution, corpora);
# the adapters' packages (lhotse) may import it themselves, when used, as any user code may
TORCH_FREE = {
    "errors", "validate", "extras", "plan", "sources", "loading", "audio", "shards", "synthetic",
    "adapters"
}  # fmt: skip
# third-party packages pure planning may use
PLAN_THIRD_PARTY = {"numpy"}


def layer_of(module: str) -> str:
    """``seqloader.plan.planner`` -> ``plan``; ``python -m seqloader`` is the CLI; the other
    top-level modules except errors are the package face."""
    parts = module.split(".")
    if module == "seqloader.__main__":
        return "cli"
    if len(parts) == 1 or parts[1] == "transforms":
        return "face"
    return parts[1]


def module_name(path: Path) -> str:
    rel = path.relative_to(PACKAGE.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    """Absolute names of every module ``path`` imports (anywhere in the file)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative import (the project uses absolute ones)"
            if node.module:
                found.add(node.module)
    return found


def graph() -> dict[str, set[str]]:
    return {module_name(p): imports_of(p) for p in sorted(PACKAGE.rglob("*.py"))}


def test_every_layer_is_known():
    """A new subpackage must be placed in the map (and in docs/architecture.md)."""
    assert {layer_of(m) for m in graph()} <= set(ALLOWED)


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_layer_imports_only_layers_below(layer):
    bad = []
    for module, imported in graph().items():
        if layer_of(module) != layer:
            continue
        for name in sorted(imported):
            if name.split(".")[0] != "seqloader":
                continue
            target = layer_of(name) if name != "seqloader" else "face"
            if target not in ALLOWED[layer]:
                bad.append(f"{module} imports {name} (layer {target!r})")
    assert not bad, f"layer {layer!r} may import only {sorted(ALLOWED[layer])}:\n" + "\n".join(bad)


def test_plan_imports_only_numpy_and_errors():
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    bad = [
        f"{module} imports {name}"
        for module, imported in graph().items()
        if layer_of(module) == "plan"
        for name in imported
        if name.split(".")[0] not in stdlib | PLAN_THIRD_PARTY | {"seqloader"}
    ]
    assert not bad, "\n".join(bad)


def test_torch_only_in_torch_glue():
    """Only ``seqloader.torch`` (and the CLI, the RETURNN adapter and the package face above it)
    import ``seqloader.torch``; the torch-free layers import no torch at all."""
    bad = []
    for module, imported in graph().items():
        layer = layer_of(module)
        for name in imported:
            if name.startswith("seqloader.torch") and layer not in {
                "torch",
                "lightning",
                "returnn",
                "cli",
                "face",
            }:
                bad.append(f"{module} imports {name}")
            if name.split(".")[0] == "torch" and layer in TORCH_FREE:
                bad.append(f"{module} imports {name}")
    assert not bad, "\n".join(bad)


def test_torch_free_layers_load_without_torch():
    """Importing the torch-free layers in a fresh interpreter does not load torch indirectly. The
    package face (``seqloader/__init__.py``) loads everything, so it is replaced by a bare package
    whose ``__path__`` is the source folder: only the layers' own imports run."""
    modules = sorted(m for m in graph() if layer_of(m) in TORCH_FREE)
    code = (
        "import importlib, json, sys, types\n"
        "face = types.ModuleType('seqloader')\n"
        f"face.__path__ = [{str(PACKAGE)!r}]\n"
        "sys.modules['seqloader'] = face\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'torch')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert json.loads(out) == []
