"""benchmarks/indexed_options.py at a small size: every case's child plans a rank's share with
both plannings over the node's index, within the case's limits, and reports padding and steps
(no timing assertions)."""

from __future__ import annotations

import pytest
from benchmarks import indexed_options
from benchmarks.scale import lengths_store


@pytest.mark.parametrize("name", indexed_options.SMOKE)
def test_children_plan_every_case_within_its_limits(tmp_path, name: str) -> None:
    store = lengths_store(20_000, str(tmp_path))
    case = indexed_options.CASES[name]
    index = indexed_options.index_store(store, 20_000, name, case, str(tmp_path))
    got = {}
    for planning in ("indexed", "global"):
        config = {"case": case, "store": store, "index": index, "planning": planning}
        got[planning] = indexed_options.child({**config, "world": case.get("world", 1024)})
        assert got[planning]["checks_ok"]
        assert got[planning]["padding"] >= 1.0 and got[planning]["steps"] >= 1
    if "fixed_random_subset" in case:  # the same sequences planned
        assert got["indexed"]["real"] == got["global"]["real"]
