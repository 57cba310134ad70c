"""One rank's plan with length variants (planned speed perturbation): indexed vs global planning.

    python -m benchmarks.variants_scale [--sizes 1e6,1e7] [--reps 3] [--orderings laplace]
                                        [--with plain] [--out FILE]

For each size ``n`` (lengths uniform in 50..2000, three speed factors 0.9, 1.0, 1.1: each
variant ``ceil(L / factor)``, the source's lengths the slowest's; ``max_seqs=200``,
``max_frames=20000``, each of ``--orderings`` (default ``laplace``; ``default`` and ``random``
are cut greedily every epoch on every rank) with ``distribution="shard"``), world size 1,024,
rank 517; ``--with`` (comma-separated) adds options to each: ``plain`` none, ``filter``
``epoch_wise_filter={(1, 2): {"max_mean_len": 900}}`` (both epochs timed filtered),
``filter20`` the same with ``partition_epoch=20`` (RETURNN's LibriSpeech recipes), ``keyed`` a
second key ``classes`` (a twentieth of the audio, not varying) with per-key
``max_frames={"data": 20000, "classes": 1500}``, ``packed`` ``max_packed_frames=15000``: a fresh
process builds the lengths and the variant table (not measured), then times
constructing the planner until it holds this rank's batches of epoch 1, and then of epoch 2 (a
new full epoch: new variants). Each planning is asked for by name (``auto`` resolves ``keyed``
and ``packed`` with ``laplace`` to global: ``benchmarks.variants_quality``). Memory: the private memory
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
#: ``--with``: the options (and the extra key) each adds
WITH = {
    "plain": {},
    "filter": {"epoch_wise_filter": {(1, 2): {"max_mean_len": 900}}},
    "filter20": {"epoch_wise_filter": {(1, 2): {"max_mean_len": 900}}, "partition_epoch": 20},
    "keyed": {"max_frames": {"data": 20_000, "classes": 1500}},
    "packed": {"max_packed_frames": 15_000},
}


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
    extra = {"planning": config["planning"]}
    added = WITH[config.get("with", "plain")]
    lengths = {"data": longest}
    if "max_frames" in added:  # per-key: a second key, not varying
        lengths["classes"] = (base // 20 + 1).astype(np.int32)
    limits = {**LIMITS, **added}
    options = PlanOptions(ordering=config.get("ordering", "laplace"), seed=3, **limits, **extra)
    inputs = PlanInputs(lengths, options, variants=variants)
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
        ok = ok and bool((sizes * maxes).max() <= 20_000)
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
    for ordering, added in (
        (o, w) for o in args.orderings.split(",") for w in args.with_.split(",")
    ):
        for n in args.sizes:
            configs = {p: {"n": n, "planning": p, "ordering": ordering, "with": added}
                       for p in PLANNINGS}  # fmt: skip
            runs = fresh.side_by_side(configs)
            keys = ("construct_s", "plan_s", "total_s", "total_cpu_s", "next_epoch_s",
                    "private_bytes", "uss_bytes")  # fmt: skip
            got = {p: summary(runs[p], keys, ("steps",)) for p in configs}
            more = {"next_epoch_ratio": "next_epoch_s", "cpu_ratio": "total_cpu_s"}
            name = str(n) if ordering == "laplace" else f"{ordering} {n}"
            name = name if added == "plain" else f"{added} {name}"
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
    p.add_argument(
        "--with", dest="with_", default="plain", help="comma-separated: " + ",".join(WITH)
    )
    runner.main(p, child, measure, RESULTS)


if __name__ == "__main__":
    main()
