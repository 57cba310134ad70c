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

import functools
import os

import numpy as np

from benchmarks.side_by_side import run_planning, time_rotated
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
        times = time_rotated(
            {k: functools.partial(plan_once, lengths, ordering, c) for k, c in VARIANTS.items()},
            reps,
        )
        med_w, med_c = times.median_wall(), times.median_cpu()
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
            "cpu_s": times.cpu,
            "wall_s": times.wall,
        }
    return out


def main(argv: list[str] | None = None) -> None:
    result, path = run_planning(
        "python -m benchmarks.chunk_planning",
        __doc__,
        argv,
        {"world_size": WORLD_SIZE, "epochs": EPOCHS},
        lambda n, reps: {"planning": bench(n, reps)},
        (RESULTS, QUICK_RESULTS),
    )
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
