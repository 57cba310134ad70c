"""``docs/contracts.md`` names, for each contract C1–C7, the tests that check it: every test named
there must exist, so the page cannot drift from the tests when one is renamed or moved."""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).parent
DOC = TESTS.parent / "docs" / "contracts.md"

# `test_x.py::test_y` names a file and a test; a following `::test_z` in the same line means the
# same file
_REF = re.compile(r"`(?:(test_\w+\.py))?::(\w+)`")


def named_tests(text: str) -> dict[str, list[tuple[str, str]]]:
    """Contract ("C1".."C7") -> [(file, test)] from its section's lines."""
    out: dict[str, list[tuple[str, str]]] = {}
    contract = None
    for line in text.splitlines():
        heading = re.match(r"## (C[1-7]) ", line)
        if heading:
            contract = heading[1]
            out[contract] = []
        elif line.startswith("## "):
            contract = None
        if contract is None:
            continue
        current = None
        for file, test in _REF.findall(line):
            current = file or current
            assert current, f"{contract}: `::{test}` without a file before it in: {line}"
            out[contract].append((current, test))
    return out


def test_every_contract_names_tests_and_every_named_test_exists() -> None:
    named = named_tests(DOC.read_text())
    assert sorted(named) == [f"C{i}" for i in range(1, 8)]
    missing = []
    for contract, refs in named.items():
        assert refs, f"{contract} names no test"
        for file, test in refs:
            path = TESTS / file
            defined = path.exists() and re.search(
                rf"^\s*(?:def|class) {test}\b", path.read_text(), re.M
            )
            if not defined:
                missing.append(f"{contract}: {file}::{test}")
    assert not missing, f"docs/contracts.md names tests that do not exist: {missing}"
