"""One rank's plan with length variants (planned speed perturbation): indexed vs global planning.

    python -m benchmarks.variants_scale [--sizes 1e6,1e7] [--reps 3] [--orderings laplace]
                                        [--out FILE]

For each size ``n`` (lengths uniform in 50..2000, three speed factors 0.9, 1.0, 1.1: each
variant ``ceil(L / factor)``, the source's lengths the slowest's; ``max_seqs=200``,
``max_frames=20000``, each of ``--orderings`` (default ``laplace``; ``default`` and ``random``
are cut greedily every epoch on every rank) with ``distribution="shard"``), world size 1,024,
rank 517: a fresh process builds the lengths and the variant table (not measured), then times
constructing the planner until it holds this rank's batches of epoch 1, and then of epoch 2 (a
new full epoch: new variants). Indexed planning runs the default options (``planning="auto"``,
checked to resolve to indexed); global planning is asked for by name. Memory: the private memory
of planning (``benchmarks.runner.PrivateMemory``: peak resident set less file pages less what
the process held before; psutil's USS beside it). Each configuration runs ``--reps`` (>= 3)
times in fresh processes, rotating between the plannings; medians, and ratios indexed / global.
The child checks this rank's batches: within the limits at the drawn variants' lengths.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from benchmarks import runner
from benchmarks.machine import describe_machine, load_average
from benchmarks.runner import TIME_AND_MEMORY, FreshRuns, PrivateMemory, ratios, summary

WORLD, RANK = 1024, 517
FACTORS = (0.9, 1.0, 1.1)
LIMITS = {"max_seqs": 200, "max_frames": 20_000}
RESULTS = "benchmarks/results/variants_scale.json"


def child(config: dict) -> dict:
    from seqloader.plan import PlanOptions, make_planner
    from seqloader.plan.inputs import PlanInputs
    from seqloader.plan.planners import resolve_planning
    from seqloader.plan.variants import LengthVariants

    n = int(config["n"])
    base = np.random.default_rng(0).integers(50, 2001, n).astype(np.int32)
    table = np.stack([np.ceil(base / f).astype(np.int32) for f in FACTORS])
    variants = LengthVariants({"data": table}, tuple(str(f) for f in FACTORS))
    longest = table.max(axis=0)
    extra = {} if config["planning"] == "indexed" else {"planning": "global"}
    options = PlanOptions(ordering=config.get("ordering", "laplace"), seed=3, **LIMITS, **extra)
    inputs = PlanInputs({"data": longest}, options, variants=variants)
    resolved = resolve_planning(inputs).options.planning
    if resolved != config["planning"]:
        raise RuntimeError(f"resolved {resolved!r}, expected {config['planning']!r}")
    with PrivateMemory() as memory:
        c0, t0 = time.process_time(), time.perf_counter()
        planner = make_planner(inputs)
        t1 = time.perf_counter()
        plan = planner.global_plan(1, WORLD)
        share, steps = plan.rank_share(RANK), plan.steps
        t2, c2 = time.perf_counter(), time.process_time()
        second = planner.global_plan(2, WORLD).rank_share(RANK)
        t3 = time.perf_counter()
    ok = True
    for got, epoch in ((share, 1), (second, 2)):
        if got.variants is not None:  # indexed: the batch carries each slot's variant
            lens = table[got.variants, got.seqs].astype(np.int64)
        else:  # global: the drawn variant of the full epoch
            lens = variants.at(3, epoch - 1, {"data": longest})["data"][got.seqs]
        sizes = np.diff(got.bounds)
        maxes = np.maximum.reduceat(lens, got.bounds[:-1])
        ok = ok and bool((sizes * maxes).max() <= LIMITS["max_frames"])
        ok = ok and bool(sizes.max() <= LIMITS["max_seqs"])
    return {
        "construct_s": t1 - t0,
        "plan_s": t2 - t1,
        "total_s": t2 - t0,
        "total_cpu_s": c2 - c0,
        "next_epoch_s": t3 - t2,
        **memory.fields(),
        "steps": int(steps),
        "checks_ok": ok,
        "planning": resolved,
    }


def measure(args: argparse.Namespace) -> dict:
    fresh = FreshRuns("benchmarks.variants_scale", args.reps, args.timeout)
    rows: dict[str, dict] = {}
    load = [load_average()]
    for ordering in args.orderings.split(","):
        for n in args.sizes:
            configs = {p: {"n": n, "planning": p, "ordering": ordering} for p in PLANNINGS}
            runs = fresh.side_by_side(configs)
            keys = ("construct_s", "plan_s", "total_s", "total_cpu_s", "next_epoch_s",
                    "private_bytes", "uss_bytes")  # fmt: skip
            got = {p: summary(runs[p], keys, ("steps",)) for p in configs}
            more = {"next_epoch_ratio": "next_epoch_s", "cpu_ratio": "total_cpu_s"}
            name = str(n) if ordering == "laplace" else f"{ordering} {n}"
            rows[name] = {
                **got,
                "indexed_over_global": ratios(
                    got["indexed"], got["global"], {**TIME_AND_MEMORY, **more}
                ),
            }
            load.append(load_average())
            print(name, rows[name]["indexed_over_global"], flush=True)
    return {"machine": describe_machine(), "load": load, "reps": args.reps, "rows": rows}


PLANNINGS = ("global", "indexed")


def main() -> None:
    p = runner.parser(__doc__)
    p.add_argument("--orderings", default="laplace", help="comma-separated orderings")
    runner.main(p, child, measure, RESULTS)


if __name__ == "__main__":
    main()
