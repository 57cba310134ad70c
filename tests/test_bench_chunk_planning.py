"""``benchmarks.chunk_planning`` runs, and plans what it says: chunks per sequence as expected,
ratios for each chunked variant (timings themselves are not asserted)."""

from __future__ import annotations

from benchmarks.chunk_planning import VARIANTS, bench


def test_chunk_planning_benchmark_runs_small() -> None:
    result = bench(2000, 1)
    for ordering, r in result.items():
        slots = r["slots_per_epoch"]
        assert slots["unchunked"] == 2000, ordering
        assert slots["unchunked"] < slots["chunking 1000:1000"] < slots["chunking 500:250"]
        assert set(r["ratio_cpu"]) == set(VARIANTS) - {"unchunked"}
        assert all(v > 0 for v in r["ratio_cpu_per_slot"].values())
