"""plan/ and its tests need no torch: the planning tests (``test_plan_*`` and the plan's resume,
mix and ``files`` modules, with ``plan_contracts``) run in a fresh interpreter in which every
import of torch fails. test_layering checks plan/'s own imports; this checks that the tests of
planning exercise it without torch too (a user planning on a machine without it).

The child runs every test of those modules, each hypothesis property with at most
``EXAMPLES`` examples: the full runs are the ordinary suite's, here what counts is that every
test's code runs without torch.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).parent
#: the plan's test modules besides ``test_plan_*``
PURE = ["test_resume_plan.py", "test_mix_plan.py", "test_files_plan.py"]
EXAMPLES = 1  # one example runs a property's code; its examples are the ordinary suite's
#: tests whose code runs in an interpreter of their own, which the block does not reach (the
#: ordinary suite runs them; here they would only start that interpreter again)
OWN_INTERPRETER = ["test_plan_orderings.py::test_plans_are_identical_in_another_process"]

CHILD = """
import importlib.abc, sys

blocked = []

class NoTorch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name == "torch" or name.startswith("torch."):
            blocked.append(name)
            raise ImportError(f"torch is blocked in this run: {name}")
        return None

sys.meta_path.insert(0, NoTorch())

import pytest
from hypothesis import settings

class FewExamples:
    def pytest_collection_modifyitems(self, items):
        for item in items:
            test = getattr(item, "obj", None)
            given = getattr(test, "_hypothesis_internal_use_settings", None)
            if given is not None:
                few = settings(given, max_examples=min(given.max_examples, EXAMPLES))
                test._hypothesis_internal_use_settings = few

    def pytest_terminal_summary(self, terminalreporter):
        skipped = len(terminalreporter.stats.get("skipped", []))
        print(f"\\nNO-TORCH-RUN blocked={sorted(set(blocked))} skipped={skipped}")
        print(f"NO-TORCH-RUN torch_loaded={'torch' in sys.modules}")

sys.exit(pytest.main(sys.argv[1:], plugins=[FewExamples()]))
"""


def plan_test_modules() -> list[Path]:
    found = sorted(TESTS.glob("test_plan_*.py")) + [TESTS / name for name in PURE]
    found.append(TESTS / "plan_contracts.py")  # its docstring's example, as a doctest
    assert len(found) >= 14 and all(p.exists() for p in found)
    return found


def test_plan_tests_run_without_torch(tmp_path: Path) -> None:
    modules = plan_test_modules()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS.parent / "src"), str(TESTS)])}
    child = CHILD.replace("EXAMPLES", str(EXAMPLES))
    args = ["-q", "-p", "no:cacheprovider", f"--basetemp={tmp_path / 'bt'}", "-x"]
    args.append("--doctest-modules")
    args += [f"--deselect={TESTS.name}/{test}" for test in OWN_INTERPRETER]
    done = subprocess.run(
        [sys.executable, "-c", child, *args, *map(str, modules)],
        cwd=TESTS.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    assert "NO-TORCH-RUN blocked=[] skipped=0" in out, out[-4000:]
    assert "NO-TORCH-RUN torch_loaded=False" in out, out[-4000:]
