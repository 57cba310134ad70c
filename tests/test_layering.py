"""The layer map of docs/architecture.md, enforced on the import graph of ``src/seqloader``.

Every import statement counts, also one inside a function or under ``TYPE_CHECKING`` (a lazy
import is still a dependency of the layer), and so does a lookup by name
(``importlib.import_module("...")``): each such lookup must be declared in ``LOOKUPS``. The graph
has no loops. The runtime check imports the torch-free layers in a fresh interpreter, with the
package's real ``__init__``, and looks at ``sys.modules``, so an indirect import of torch fails too.
"""

from __future__ import annotations

import ast
import functools
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "seqloader"

_BELOW_FACE = {
    "errors", "validate", "extras", "parts", "plan", "sources", "loading", "audio", "shards",
    "synthetic", "trainer", "torch"
}  # fmt: skip
# layer -> the seqloader layers it may import (itself included). Lower layers first.
ALLOWED: dict[str, set[str]] = {
    "errors": {"errors"},
    "validate": {"errors", "validate"},  # option checks, beside errors at the bottom
    "extras": {"errors", "extras"},  # optional packages, imported lazily, named when missing
    "parts": {"parts"},  # which part holds an index (numpy), beside errors at the bottom
    "plan": {"errors", "validate", "parts", "plan"},
    "sources": {"errors", "validate", "extras", "parts", "sources"},
    "loading": {"errors", "validate", "parts", "plan", "sources", "loading"},
    "audio": {"errors", "validate", "extras", "sources", "loading", "audio"},
    "shards": {"errors", "validate", "extras", "sources", "loading", "audio", "shards"},
    "adapters": {"errors", "validate", "extras", "sources", "loading", "audio", "shards",
                 "adapters"},
    "synthetic": {"errors", "validate", "sources", "audio", "synthetic"},
    "trainer": {"errors", "validate", "parts", "plan", "sources", "loading", "trainer"},
    "torch": {"errors", "validate", "plan", "sources", "loading", "trainer", "torch"},
    "returnn": {"errors", "validate", "extras", "plan", "sources", "loading", "audio", "adapters",
                "trainer", "torch", "returnn"},
    "datamodule": {"errors", "validate", "plan", "sources", "trainer", "torch", "datamodule"},
    "lightning": {"errors", "validate", "extras", "plan", "sources", "trainer", "torch",
                  "datamodule", "lightning"},
    "pytorch_lightning": {"errors", "validate", "extras", "plan", "sources", "trainer", "torch",
                          "datamodule", "pytorch_lightning"},
    "cli": _BELOW_FACE | {"adapters", "returnn", "cli", "face"},
    "face": _BELOW_FACE | {"adapters", "returnn", "face"},
}  # fmt: skip
# layers that must not import PyTorch (the I/O layers, pure planning, batch execution, corpora,
# the trainer's bookkeeping); the adapters' packages (lhotse) may import it themselves, when used,
# as any user code may
TORCH_FREE = {
    "errors", "validate", "extras", "parts", "plan", "sources", "loading", "audio", "shards",
    "synthetic",
    "adapters", "trainer"
}  # fmt: skip
# modules looked up by name at runtime (importlib.import_module), each declared with its reason:
# (importing module, looked-up module) -> why
LOOKUPS: dict[tuple[str, str], str] = {}
# modules of torch-free layers that import torch inside their functions only (and under
# TYPE_CHECKING), so importing them loads no torch: module -> why
TORCH_INSIDE_FUNCTIONS: dict[str, str] = {
    "seqloader.audio.torch_kernels":
        "torch's feature kernels (log-mel STFT, Kaldi filterbank), chosen when features are first "
        "computed and torch is installed: importing audio loads no torch",
    "seqloader.audio.device_features":
        "features of a collated batch on its device (DeviceFeatures): torch only when called",
}  # fmt: skip
# third-party packages pure planning may use
PLAN_THIRD_PARTY = {"numpy"}
# Inside plan/: a shared core (the modules directly in plan/) and one package per algorithm.
# room -> the plan rooms it may import. Neither algorithm imports the other; the core imports
# neither, except the face modules that build planners (PLAN_BUILDERS). Outside plan/, callers
# import only the core (plan/__init__ and the modules directly in plan/, with plan/planners.py
# naming what they need of an algorithm), never plan.greedy or plan.indexed.
PLAN_ALLOWED: dict[str, set[str]] = {
    "plan": {"plan"},
    "plan.greedy": {"plan", "plan.greedy"},
    "plan.indexed": {"plan", "plan.indexed"},
}
PLAN_BUILDERS = {"seqloader.plan", "seqloader.plan.planners"}


def layer_of(module: str) -> str:
    """``seqloader.plan.greedy.planner`` -> ``plan``; ``python -m seqloader`` is the CLI; the other
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


@functools.cache
def nodes(path: Path) -> tuple[ast.AST, ...]:
    """Every node of ``path``'s syntax tree, the module first: each file is parsed once for all
    of this module's tests (the cache is emptied after them; nothing changes the nodes)."""
    return tuple(ast.walk(ast.parse(path.read_text(), str(path))))


@pytest.fixture(scope="module", autouse=True)
def _parsed_once():
    yield
    nodes.cache_clear()


def imports_of(path: Path) -> set[str]:
    """Absolute names of every module ``path`` imports (anywhere in the file): ``from a.b import
    c`` counts as ``a.b.c`` when that is a module of the package, else as ``a.b``."""
    found: set[str] = set()
    for node in nodes(path):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: relative import (the project uses absolute ones)"
            if node.module:
                submodules = {f"{node.module}.{a.name}" for a in node.names} & MODULES
                found.update(submodules)
                if len(submodules) < len(node.names):  # names defined in node.module itself
                    found.add(node.module)
    return found


def lookups_of(path: Path) -> set[str]:
    """Modules ``path`` looks up by name: ``import_module("literal")`` anywhere in the file."""
    found: set[str] = set()
    for node in nodes(path):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute | ast.Name)
            and (getattr(node.func, "attr", None) or getattr(node.func, "id", None))
            == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            found.add(node.args[0].value)
    return found


MODULES = {module_name(p) for p in PACKAGE.rglob("*.py")}


@functools.cache
def graph() -> dict[str, set[str]]:
    """Module -> the modules it imports, or looks up by name (declared in ``LOOKUPS``). Parsed
    once per session (every test reads the same files; callers do not change it)."""
    return {module_name(p): imports_of(p) | lookups_of(p) for p in sorted(PACKAGE.rglob("*.py"))}


def seqloader_edges() -> dict[str, set[str]]:
    """The graph restricted to the package's own modules (what a loop can run through)."""
    return {m: {n for n in imported if n in MODULES and n != m} for m, imported in graph().items()}


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
            if name.split(".")[0] != "seqloader" or (module, name) in LOOKUPS:
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


#: the planning core stays readable function by function (docs/architecture.md: "the longest
#: function in plan/"); a longer one is split into named steps
PLAN_FUNCTION_LINES = 60


def function_start(node: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    """Its first line, decorators included (as docs/architecture.md counts)."""
    return min([node.lineno, *(d.lineno for d in node.decorator_list)])


def test_plan_functions_stay_short():
    long = [
        f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name}: {lines} lines"
        for path in sorted((PACKAGE / "plan").rglob("*.py"))
        for node in nodes(path)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and (lines := node.end_lineno - function_start(node) + 1) > PLAN_FUNCTION_LINES
    ]
    assert not long, f"over {PLAN_FUNCTION_LINES} lines (split into named steps):\n" + "\n".join(
        long
    )


def plan_room_of(module: str) -> str:
    """``seqloader.plan.indexed.mix`` -> ``plan.indexed``; ``seqloader.plan.files`` -> ``plan``."""
    parts = module.split(".")
    if len(parts) >= 3 and f"plan.{parts[2]}" in PLAN_ALLOWED:
        return f"plan.{parts[2]}"
    return "plan"


@pytest.mark.parametrize("room", sorted(PLAN_ALLOWED))
def test_plan_rooms_import_only_allowed_rooms(room):
    """The two algorithm packages stay apart, and the shared core depends on neither."""
    bad = [
        f"{module} imports {name} (room {plan_room_of(name)!r})"
        for module, imported in graph().items()
        if layer_of(module) == "plan" and module not in PLAN_BUILDERS
        and plan_room_of(module) == room
        for name in sorted(imported)
        if name in MODULES and layer_of(name) == "plan"
        and plan_room_of(name) not in PLAN_ALLOWED[room]
    ]  # fmt: skip
    allowed = sorted(PLAN_ALLOWED[room])
    assert not bad, f"room {room!r} may import only {allowed}:\n" + "\n".join(bad)


def test_callers_import_only_the_plan_face():
    """Outside ``plan/``, no module imports ``plan.greedy`` or ``plan.indexed``."""
    bad = [
        f"{module} imports {name}"
        for module, imported in graph().items()
        if layer_of(module) != "plan"
        for name in sorted(imported)
        if name.startswith("seqloader.plan.") and plan_room_of(name) != "plan"
    ]
    assert not bad, "\n".join(bad)


def test_plan_rooms_cover_the_algorithm_packages():
    """Every subpackage of ``plan/`` is a room of the map (a new one must be placed)."""
    packages = {p.parent.name for p in (PACKAGE / "plan").glob("*/__init__.py")}
    assert {f"plan.{p}" for p in packages} == set(PLAN_ALLOWED) - {"plan"}


def test_torch_only_in_torch_glue():
    """Only ``seqloader.torch`` (and the CLI, the RETURNN adapter and the package face above it)
    import ``seqloader.torch``; the torch-free layers import no torch at all."""
    bad = []
    for module, imported in graph().items():
        layer = layer_of(module)
        for name in imported:
            if (module, name) in LOOKUPS:
                continue
            if name.startswith("seqloader.torch") and layer not in {
                "torch",
                "datamodule",
                "lightning",
                "pytorch_lightning",
                "returnn",
                "cli",
                "face",
            }:
                bad.append(f"{module} imports {name}")
            if (
                name.split(".")[0] == "torch"
                and layer in TORCH_FREE
                and module not in TORCH_INSIDE_FUNCTIONS
            ):
                bad.append(f"{module} imports {name}")
    assert not bad, "\n".join(bad)


def _module_level_imports(tree: ast.Module) -> set[str]:
    """Names imported by statements that run when the module is imported: not inside a function,
    nor under ``if TYPE_CHECKING``."""
    found: set[str] = set()
    todo: list[ast.stmt] = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
        elif isinstance(node, ast.If):
            if not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
                todo.extend(node.body + node.orelse)
        elif isinstance(node, ast.Try | ast.With | ast.ClassDef):
            todo.extend(node.body)
    return found


def test_torch_inside_functions_only():
    """The torch-free layers' modules that do use torch import it inside their functions only."""
    for module, _why in TORCH_INSIDE_FUNCTIONS.items():
        path = PACKAGE.parent.joinpath(*module.split(".")).with_suffix(".py")
        tree = nodes(path)[0]
        assert isinstance(tree, ast.Module)
        assert not {n for n in _module_level_imports(tree) if n.split(".")[0] == "torch"}, module
        assert layer_of(module) in TORCH_FREE


def test_lookups_by_name_are_declared():
    """A module looked up by name is a dependency the import statements do not show: each one is
    declared, with its reason, and exists."""
    found = {
        (module_name(p), name)
        for p in sorted(PACKAGE.rglob("*.py"))
        for name in lookups_of(p)
        if name.split(".")[0] == "seqloader"
    }
    assert found == set(LOOKUPS), f"undeclared or stale lookups: {found ^ set(LOOKUPS)}"
    assert all(target in MODULES for _, target in LOOKUPS)


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_cycles_finds_a_loop():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_loops():
    """No two modules import each other, directly or through others (function-level and
    ``TYPE_CHECKING`` imports and lookups by name included)."""
    loops = _cycles(seqloader_edges())
    assert not loops, "import loops:\n" + "\n".join(" -> ".join(c) for c in loops)


def test_torch_free_layers_load_without_torch():
    """Importing every module of the torch-free layers in a fresh interpreter, through the
    package's real ``__init__``, loads no torch, directly or indirectly."""
    modules = sorted(m for m in graph() if layer_of(m) in TORCH_FREE)
    code = (
        "import importlib, json, sys\n"
        f"for m in {modules!r}: importlib.import_module(m)\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'torch')))"
    )
    env = {**os.environ, "PYTHONPATH": str(PACKAGE.parent)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    ).stdout
    assert json.loads(out) == []


def test_face_and_core_layers_load_without_torch():
    """``import seqloader.plan, seqloader.sources, seqloader.audio`` (and the face itself) in a
    fresh interpreter loads no torch: the face imports its names when first used. And what a
    DataLoader worker needs (``seqloader.loading``, the sources) loads neither planner nor the
    trainer's side (``plan``'s face is lazy too: a spawned worker imports only what it runs)."""
    code = (
        "import json, sys\n"
        "import seqloader.loading, seqloader.sources\n"
        "worker = sorted(m for m in sys.modules if m.startswith(("
        "'seqloader.plan.greedy', 'seqloader.plan.indexed', 'seqloader.plan.planners', "
        "'seqloader.trainer')))\n"
        "import seqloader, seqloader.plan, seqloader.sources, seqloader.audio\n"
        "assert seqloader.__file__.startswith(sys.argv[1]), seqloader.__file__\n"
        "assert not worker, worker\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'torch')))"
    )
    env = {**os.environ, "PYTHONPATH": str(PACKAGE.parent)}
    out = subprocess.run(
        [sys.executable, "-c", code, str(PACKAGE)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
    ).stdout
    assert json.loads(out) == []


def test_face_names_resolve():
    """Every name in ``seqloader.__all__`` resolves (the lazy face's table has no typo)."""
    import seqloader

    missing = [n for n in seqloader.__all__ if not hasattr(seqloader, n)]
    assert not missing, missing


@pytest.mark.parametrize("command", ["check", "stats"])
def test_cli_check_and_stats_load_no_torch(tmp_path, command):
    """``seqloader check``/``stats`` plan and count; they pay for no torch import."""
    from seqloader.sources.hdf_write import write_hdf
    from seqloader.synthetic import SyntheticSpec, synthetic_corpus

    path = tmp_path / "corpus.hdf"
    write_hdf(str(path), synthetic_corpus(SyntheticSpec(num_seqs=40)))
    code = (
        "import json, runpy, sys\n"
        f"sys.argv = ['seqloader', {command!r}, {str(path)!r}, '--max-seqs', '8']\n"
        "try:\n"
        "    runpy.run_module('seqloader', run_name='__main__')\n"
        "except SystemExit as e:\n"
        "    assert not e.code, e.code\n"
        "print('\\n' + json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'torch')))"
    )
    env = {**os.environ, "PYTHONPATH": str(PACKAGE.parent)}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    ).stdout
    assert json.loads(out.strip().splitlines()[-1]) == []
