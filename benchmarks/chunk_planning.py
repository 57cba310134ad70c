"""Chunked planning against unchunked planning of the same corpus.

    python -m benchmarks.chunk_planning [--seqs 1000000] [--reps 7] [--quick]

Side by side in one process, in rotating order every repetition (so load from other users of the
shared machine hits every variant alike); medians of the repetitions, as ratios. The corpus: N
sequences, lengths uniform in 50..2000 frames; ``max_seqs`` 200, ``max_frames`` 20000, world size
8; one repetition = ``Planner`` creation (admission and, chunked, the chunk table) and
``global_plan`` of epochs 1, 2 and 3. Variants:

- ``unchunked``: the sequences themselves;
- ``chunking 1000:1000``: non-overlapping windows (about 1.5 chunks per sequence);
- ``chunking 500:250``: overlapping windows, RETURNN's "size:step" as hybrid setups use it
  (about 4.6 chunks per sequence);

for the orderings ``laplace:.1000`` and ``random``. A chunked plan holds one slot per chunk but
batches from per-sequence fits (``seqloader.plan.chunk_batching``); the results give the time
ratio (acceptance: <= 1.5 for chunked / unchunked) and the same per planned unit. Results: ``benchmarks/results/
chunk_planning.json`` (``--quick``: ``benchmarks/out/``, git-ignored).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time

import numpy as np

from seqloader.plan import Planner, PlanOptions

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results", "chunk_planning.json")
QUICK_RESULTS = os.path.join(HERE, "out", "chunk_planning.json")
ORDERINGS = ("laplace:.1000", "random")
EPOCHS = (1, 2, 3)
WORLD_SIZE = 8
VARIANTS = {"unchunked": None, "chunking 1000:1000": "1000:1000", "chunking 500:250": "500:250"}


def plan_once(lengths: dict[str, np.ndarray], ordering: str, chunking: str | None) -> int:
    """Planner creation and three epochs' global plans -> the slots planned per epoch."""
    options = PlanOptions(ordering=ordering, max_seqs=200, max_frames=20_000, chunking=chunking)
    planner = Planner(lengths, options)
    slots = [int(planner.global_plan(e, WORLD_SIZE).batches.bounds[-1]) for e in EPOCHS]
    return slots[0]


def bench(n: int, reps: int) -> dict:
    lengths = {"data": np.random.default_rng(0).integers(50, 2001, n)}
    out = {}
    for ordering in ORDERINGS:
        slots = {k: plan_once(lengths, ordering, c) for k, c in VARIANTS.items()}  # warm-up
        wall: dict[str, list[float]] = {k: [] for k in VARIANTS}
        cpu: dict[str, list[float]] = {k: [] for k in VARIANTS}
        names = list(VARIANTS)
        for r in range(reps):
            for name in names[r % len(names) :] + names[: r % len(names)]:  # rotate the order
                w, c = time.perf_counter(), time.process_time()
                plan_once(lengths, ordering, VARIANTS[name])
                wall[name].append(time.perf_counter() - w)
                cpu[name].append(time.process_time() - c)
        med_w = {k: statistics.median(v) for k, v in wall.items()}
        med_c = {k: statistics.median(v) for k, v in cpu.items()}
        chunked = [k for k in VARIANTS if k != "unchunked"]
        out[ordering] = {
            "slots_per_epoch": slots,
            "ratio_cpu": {k: round(med_c[k] / med_c["unchunked"], 3) for k in chunked},
            "ratio_wall": {k: round(med_w[k] / med_w["unchunked"], 3) for k in chunked},
            "ratio_cpu_per_slot": {
                k: round(med_c[k] / slots[k] / (med_c["unchunked"] / slots["unchunked"]), 3)
                for k in chunked
            },
            "median_cpu_s": med_c,
            "median_wall_s": med_w,
            "cpu_s": cpu,
            "wall_s": wall,
        }
    return out


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.chunk_planning", description=__doc__)
    p.add_argument("--seqs", type=int, default=1_000_000)
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--quick", action="store_true", help="20k sequences, 3 repetitions")
    args = p.parse_args(argv)
    n, reps = (20_000, 3) if args.quick else (args.seqs, args.reps)
    load_before = os.getloadavg()
    result = {
        "settings": {"seqs": n, "reps": reps, "world_size": WORLD_SIZE, "epochs": EPOCHS},
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "planning": bench(n, reps),
    }
    result["machine"]["loadavg_before_after"] = [load_before, os.getloadavg()]
    path = QUICK_RESULTS if args.quick else RESULTS
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(result, f, indent=1)
    for ordering, r in result["planning"].items():
        for name in r["ratio_cpu"]:
            print(
                f"{ordering:>14} {name}: {r['slots_per_epoch'][name]} slots/epoch vs "
                f"{r['slots_per_epoch']['unchunked']}; chunked / unchunked = "
                f"{r['ratio_cpu'][name]:.2f} (CPU), {r['ratio_wall'][name]:.2f} (wall), "
                f"{r['ratio_cpu_per_slot'][name]:.2f} per slot (CPU)"
            )
    print(f"results: {path}")


if __name__ == "__main__":
    main()
