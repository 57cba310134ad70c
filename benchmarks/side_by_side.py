"""Variants timed side by side in one process, in an order rotated every repetition, so load from
other users of a shared machine hits every variant alike; ratios are taken between medians. Also
the command line and result file the planning benchmarks share."""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple, TypeVar

T = TypeVar("T")


def rotated(items: Sequence[T], rep: int) -> list[T]:
    """``items`` starting at position ``rep`` (mod their count): repetition ``rep``'s order."""
    k = rep % len(items)
    return [*items[k:], *items[:k]]


@dataclass
class Times:
    """Seconds per variant, one entry per repetition."""

    wall: dict[str, list[float]]
    cpu: dict[str, list[float]]  # CPU time of this process

    def median_wall(self) -> dict[str, float]:
        return {k: statistics.median(v) for k, v in self.wall.items()}

    def median_cpu(self) -> dict[str, float]:
        return {k: statistics.median(v) for k, v in self.cpu.items()}


def time_rotated(variants: Mapping[str, Callable[[], object]], reps: int) -> Times:
    """Call every variant once per repetition, ``reps`` times, in rotated order."""
    names = list(variants)
    times = Times({k: [] for k in names}, {k: [] for k in names})
    for r in range(reps):
        for name in rotated(names, r):
            w, c = time.perf_counter(), time.process_time()
            variants[name]()
            times.wall[name].append(time.perf_counter() - w)
            times.cpu[name].append(time.process_time() - c)
    return times


class Sizes(NamedTuple):
    """What a planning benchmark's command line asks for."""

    seqs: int
    reps: int
    quick: bool


def planning_sizes(prog: str, description: str | None, argv: list[str] | None) -> Sizes:
    """``--seqs N --reps R`` (1,000,000 and 7), or ``--quick``: 20k sequences, 3 repetitions."""
    p = argparse.ArgumentParser(prog=prog, description=description)
    p.add_argument("--seqs", type=int, default=1_000_000)
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--quick", action="store_true", help="20k sequences, 3 repetitions")
    args = p.parse_args(argv)
    if args.quick:
        return Sizes(20_000, 3, True)
    return Sizes(args.seqs, args.reps, False)


def machine(load_before: tuple[float, float, float]) -> dict:
    """The machine a result was measured on, with the load average before and after."""
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "loadavg_before_after": [load_before, os.getloadavg()],
    }


def save(result: dict, path: str) -> None:
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    with open(path, "w") as f:
        json.dump(result, f, indent=1)


def append_run(record: dict, path: str) -> None:
    """Add ``record`` to the ``runs`` of the results file at ``path`` (created if missing): the
    scale benchmarks measure sizes in several runs, each kept."""
    runs = []
    if os.path.exists(path):
        with open(path) as f:
            runs = json.load(f).get("runs", [])
    save({"runs": [*runs, record]}, path)


def run_planning(
    prog: str,
    description: str | None,
    argv: list[str] | None,
    settings: Mapping[str, object],
    measure: Callable[[int, int], dict],
    paths: tuple[str, str],
) -> tuple[dict, str]:
    """A planning benchmark's run: its command line, ``measure(seqs, reps)`` (the result's
    sections), the settings and the machine, saved to ``paths`` (full run, ``--quick``) ->
    (result, path written)."""
    sizes = planning_sizes(prog, description, argv)
    load_before = os.getloadavg()
    result = {
        "settings": {"seqs": sizes.seqs, "reps": sizes.reps, **settings},
        **measure(sizes.seqs, sizes.reps),
        "machine": machine(load_before),
    }
    path = paths[1] if sizes.quick else paths[0]
    save(result, path)
    return result, path
