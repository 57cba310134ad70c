"""``benchmarks/files_figure.py`` runs and its two figures describe the same plans: the planned
figure from counts next to the walk's real one, for a fresh and a resumed segment."""

from __future__ import annotations

from benchmarks.files_figure import measure


def test_files_figure_benchmark_measures_both_ways() -> None:
    rows = measure(20_000, 1, world=8, files=200)
    assert [r["segment"] for r in rows][:2] == ["fresh", "resumed 3/4 W after half"]
    assert [r["world_size"] for r in rows[:2]] == [8, 6]
    assert rows[2]["counts_s"] > 0 and rows[2]["walk_s"] > 0  # corpus counts: checked equal
    for row in rows[:2]:
        assert row["steps"] > 0 and row["counts_s"] > 0 and row["walk_s"] > 0
        assert row["planned_figure"] >= 1.0 and row["real_figure"] >= 1.0
