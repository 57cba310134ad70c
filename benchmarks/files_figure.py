"""The report's step imbalance of ``planning="indexed"`` + ``distribution="files"``: the planned
figure from counts (``files_imbalance``) against walking every rank's drawn share
(``rankwise_imbalance``, what the report computed before), in one run.

    python -m benchmarks.files_figure [--n 1e7] [--reps 3] [--out FILE]

``benchmarks.loader_scale``'s setup without the column store: ``n`` lengths uniform in 50..2000,
10^5 equal files, 1,024 ranks, ``laplace``, ``max_seqs=200, max_frames=20_000``. Measured: the
fresh epoch from step 0, and a segment resumed on 768 ranks after half the steps (both figures
from its step 0). Timings alternate between the two ways; medians of ``reps``. Results go to
``results/files_figure.json`` with the machine's load average. A last row: the report's
per-corpus planned counts (three unmixed named corpora, their bounds inside files) from the
files' counts against counting the sub-epoch's drawn order.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np

from benchmarks.loader_scale import FILES, LIMITS, WORLD
from benchmarks.machine import describe_machine, load_average
from seqloader.plan import PlanOptions
from seqloader.plan.indexed.imbalance import bucket_costs, files_imbalance, rankwise_imbalance
from seqloader.plan.indexed.planner import IndexedPlanner
from seqloader.plan.mix import Corpora

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results", "files_figure.json")


def planner_of(n: int, files: int = FILES) -> IndexedPlanner:
    """Three named corpora (unmixed), their bounds inside files."""
    lengths = np.random.default_rng(0).integers(50, 2001, size=n).astype(np.int32)
    bounds = np.linspace(0, n, files + 1).astype(np.int64)
    options = PlanOptions(
        ordering="laplace", distribution="files", planning="indexed", seed=3, **LIMITS
    )
    corpora = Corpora(("a", "b", "c"), np.array([0, n // 5 + 1, n // 2 + 1, n]))
    return IndexedPlanner({"data": lengths}, options, files=bounds, corpora=corpora)


def measure(n: int, reps: int, world: int = WORLD, files: int = FILES) -> list[dict]:
    planner = planner_of(n, files)
    per_bucket = bucket_costs(planner)
    fresh, _ = planner.files_plan(1, world)
    half = fresh.steps // 2
    resumed, _ = planner.files_segment(1, world * 3 // 4, [(world, half)])
    rows = []
    for name, plan in (("fresh", fresh), ("resumed 3/4 W after half", resumed)):
        counts: list[float] = []
        walk: list[float] = []
        figures: dict[str, float] = {}
        for _ in range(reps):
            for way, out, fn, costs in (
                ("counts", counts, files_imbalance, per_bucket),
                ("walk", walk, rankwise_imbalance, planner.costs),
            ):
                t0 = time.perf_counter()
                figures[way] = fn(plan, costs)  # type: ignore[operator]
                out.append(time.perf_counter() - t0)
        rows.append(
            {
                "n": n,
                "segment": name,
                "world_size": plan.world_size,
                "steps": plan.steps,
                "counts_s": statistics.median(counts),
                "walk_s": statistics.median(walk),
                "ratio": statistics.median(counts) / statistics.median(walk),
                "planned_figure": figures["counts"],
                "real_figure": figures["walk"],
                "load": load_average(),
            }
        )
    corpora = planner.corpora
    assert corpora is not None
    counts, walk = [], []
    for _ in range(reps):  # the report's per-corpus planned counts at an epoch start
        t0 = time.perf_counter()
        got = [slots for _, slots, _ in planner.corpus_plan(1)]
        counts.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        want = corpora.counts(planner.sub_epoch_order(1)).tolist()
        walk.append(time.perf_counter() - t0)
    assert got == want
    rows.append(
        {
            "n": n,
            "segment": "corpus counts (3 unmixed corpora)",
            "counts_s": statistics.median(counts),
            "walk_s": statistics.median(walk),
            "ratio": statistics.median(counts) / statistics.median(walk),
            "load": load_average(),
        }
    )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", default="1e7")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default=RESULTS)
    args = ap.parse_args()
    rows = measure(int(float(args.n)), args.reps)
    for row in rows:
        print(json.dumps(row))
    with open(args.out, "w") as f:
        json.dump({"machine": describe_machine(), "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
