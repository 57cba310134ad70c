"""``benchmarks.side_by_side``: every variant runs once per repetition, each repetition's order
rotated by one (so every variant runs first as often as any other); the planning benchmarks that
use it run small (timings themselves are not asserted)."""

from __future__ import annotations

from benchmarks import mix_planning
from benchmarks.side_by_side import planning_sizes, rotated, run_planning, time_rotated


def test_each_repetition_rotates_the_order() -> None:
    assert [rotated("abc", r) for r in range(4)] == [
        ["a", "b", "c"],
        ["b", "c", "a"],
        ["c", "a", "b"],
        ["a", "b", "c"],
    ]
    calls: list[str] = []
    times = time_rotated({k: (lambda k=k: calls.append(k)) for k in "xyz"}, 3)
    assert calls == ["x", "y", "z", "y", "z", "x", "z", "x", "y"]
    assert all(len(v) == 3 for v in (*times.wall.values(), *times.cpu.values()))
    assert set(times.median_cpu()) == set(times.median_wall()) == {"x", "y", "z"}


def test_planning_sizes() -> None:
    assert planning_sizes("p", None, ["--quick"]) == (20_000, 3, True)
    assert planning_sizes("p", None, ["--seqs", "50", "--reps", "2"]) == (50, 2, False)


def test_mix_planning_benchmark_runs_small() -> None:
    planning = mix_planning.bench_planning(2000, 1)
    for ordering, r in planning.items():
        assert r["slots_per_epoch"]["single"] == 2000, ordering
        assert set(r["ratio_cpu"]) == set(mix_planning.MIXES)
    join = mix_planning.bench_join(2000, 1)
    assert join["tags"] == 2000 and join["dict_over_join"] > 0


def test_run_planning_saves_settings_sections_and_machine(tmp_path) -> None:
    import json

    full, quick = str(tmp_path / "full.json"), str(tmp_path / "out" / "quick.json")
    result, path = run_planning(
        "p",
        None,
        ["--seqs", "7", "--reps", "2"],
        {"world_size": 8},
        lambda n, r: {"x": [n, r]},
        (full, quick),
    )
    assert path == full and result["settings"] == {"seqs": 7, "reps": 2, "world_size": 8}
    assert result["x"] == [7, 2] and "loadavg_before_after" in result["machine"]
    with open(full) as f:
        assert json.load(f) == json.loads(json.dumps(result))
    assert run_planning("p", None, ["--quick"], {}, lambda n, r: {}, (full, quick))[1] == quick
