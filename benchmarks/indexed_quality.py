"""Time to one rank's plan under ``planning="indexed"``, this code against another's, in one run:
the side of batch quality that ``benchmarks.indexed_batching`` does not measure.

    python -m benchmarks.indexed_quality --base-src OLD/src [--n 1e6] [--reps 3] [--json FILE]

For each of ``benchmarks.indexed_batching``'s three length distributions and each case (its
``shard``/``files`` cases and ``files buckets:30``; ``max_seqs=200, max_frames=20_000``), a fresh
process makes the lengths and the node's bucket index (untimed: the node's one-time build), then
is timed from constructing the planner with that index until it holds rank 517 of 1,024's
batches of epoch 1 (``global_plan(1, 1024).rank_share(517)``). It reports the steps on 1,024
ranks beside. ``--reps`` fresh processes per code and configuration, alternating between the
codes; medians; the ratio this code / base code from the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from benchmarks.fresh import parse_or_run_child, run_child
from benchmarks.indexed_batching import CASES, FILES, LIMITS, distributions
from benchmarks.machine import describe_machine, load_average

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results", "indexed_quality.json")
TIMED: dict[str, dict] = {
    **CASES,
    "files buckets:30": {"ordering": "buckets:30", "distribution": "files"},
}
WORLD, RANK = 1024, 517


def child(config: dict) -> dict:
    """One timed plan (see the module doc)."""
    import numpy as np

    from seqloader.plan import PlanOptions
    from seqloader.plan.indexed.planner import IndexedPlanner
    from seqloader.plan.planners import make_planner

    lengths = distributions(config["n"])[config["dist"]]
    options = PlanOptions(**config["case"], **LIMITS, seed=3, planning="indexed")
    files = np.linspace(0, len(lengths), FILES + 1).astype(np.int64)
    index = IndexedPlanner({"data": lengths}, options, files=files).index  # the node's build
    t0 = time.perf_counter()
    planner = make_planner({"data": lengths}, options, files=files, index=index)
    plan = planner.global_plan(1, WORLD)
    share = plan.rank_share(RANK)
    seconds = time.perf_counter() - t0
    return {"seconds": seconds, "steps": int(plan.steps), "share": len(share)}


def measure(n: int, reps: int, base_src: str, timeout: float = 1800) -> dict:
    rows: dict = {}
    for dist in ("uniform", "log-normal", "long-tailed"):
        for name, case in TIMED.items():
            runs: dict[str, list[dict]] = {"new": [], "base": []}
            for rep in range(reps):
                for code in ("new", "base")[:: 1 if rep % 2 == 0 else -1]:
                    config = {"n": n, "dist": dist, "case": case, "code": code}
                    config["label"] = f"{dist} / {name} ({code})"
                    runs[code].append(
                        run_child("benchmarks.indexed_quality", config, base_src, timeout)
                    )
            row = {
                code: {
                    "seconds": statistics.median(r["seconds"] for r in got),
                    "steps": got[0]["steps"],
                }
                for code, got in runs.items()
            }
            row["time_ratio"] = row["new"]["seconds"] / row["base"]["seconds"]
            rows[f"{dist} / {name}"] = row
            print(f"{dist:12s} {name:17s} " + json.dumps(row), flush=True)
    return rows


def table(result: dict) -> str:
    """Markdown: time to rank 517's plan, this code / base code, and the steps on 1,024 ranks."""
    head = "| distribution | case | time (new / base) | steps W1024 (new, base) |\n| --- | --- | --- | --- |"
    rows = []
    for key, row in result["rows"].items():
        dist, case = key.split(" / ")
        rows.append(
            f"| {dist} | `{case}` | {row['time_ratio']:.2f}x | "
            f"{row['new']['steps']}, {row['base']['steps']} |"
        )
    return "\n".join([head, *rows])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", default="1e6", help="sequences per distribution")
    args = parse_or_run_child(parser, argv, child)
    if args is None:
        return 0
    if not args.base_src:
        parser.error("--base-src: the src/ directory of the code to measure against")
    n = int(float(args.n))
    result = {
        "settings": {"seqs": n, "reps": args.reps, **LIMITS, "files": FILES, "rank": RANK},
        "base": args.base_src,
        "machine": describe_machine(),
        "load_average": load_average(),
        "rows": measure(n, args.reps, args.base_src),
    }
    print(table(result))
    out = args.json or RESULTS
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    with open(out, "w") as f:
        json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
