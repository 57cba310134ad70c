"""One rank's planning with length variants: the variant classes mapped from the node's store
against built in the rank, and the node's one-time build of the store.

    python -m benchmarks.variants_store [--sizes 1e7,1e8] [--reps 3] [--data DIR] [--out FILE]

``benchmarks.variants_scale``'s setup (lengths uniform in 50..2000, speed factors 0.9, 1.0,
1.1, ``ordering="laplace"``, ``max_seqs=200``, ``max_frames=20000``, rank 517 of 1,024). Each
run a fresh process makes the lengths and the variant table (not measured), then measures one of:

- ``build``: the node's first process building the store (``shared_variant_classes`` with no
  file there: the classes built and written, sealed with per-block checksums);
- ``mapped``: a rank mapping the store (checked in full when mapped) and planning its batches of
  epoch 1 with it (``PlanInputs.variant_classes``);
- ``built``: a rank planning its batches of epoch 1 building the classes itself (no store).

CPU time (``time.process_time``) and private memory (``PrivateMemory``, the process's peak
resident set reset just before the measured part, so the setup's peak is not counted; USS
beside it counts the store's pages too, as only this process maps them here: on a node every
rank shares them). ``--reps`` runs each, rotating; medians, and ratios mapped / built. The
mapped and built plans are checked to be identical (a digest of the rank's batches).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import time
from dataclasses import replace

import numpy as np

from benchmarks import runner
from benchmarks.machine import describe_machine, load_average
from benchmarks.runner import FreshRuns, PrivateMemory, ratios, summary
from benchmarks.variants_scale import FACTORS, LIMITS, RANK, WORLD

RESULTS = "benchmarks/results/variants_store.json"
MODES = ("build", "mapped", "built")


def child(config: dict) -> dict:
    os.environ["XDG_CACHE_HOME"] = config["cache"]
    from seqloader.loading import variant_store
    from seqloader.plan import PlanOptions, make_planner
    from seqloader.plan.inputs import PlanInputs
    from seqloader.plan.planners import resolve_planning
    from seqloader.plan.variants import LengthVariants

    n, mode = int(config["n"]), config["mode"]
    base = np.random.default_rng(0).integers(50, 2001, n).astype(np.int32)
    table = np.stack([np.ceil(base / f).astype(np.int32) for f in FACTORS])
    variants = LengthVariants({"data": table}, tuple(str(f) for f in FACTORS))
    options = PlanOptions(ordering="laplace", seed=3, **LIMITS)
    given = PlanInputs({"data": table.max(axis=0)}, options, variants=variants)
    del base
    inputs = resolve_planning(given)
    fingerprint = lambda: f"benchmark {n}"  # noqa: E731
    if mode == "build":
        path, _ = variant_store.variant_classes_path(inputs, fingerprint())
        if os.path.exists(path):
            os.remove(path)
    with PrivateMemory() as memory:
        c0, t0 = time.process_time(), time.perf_counter()
        digest = ""
        if mode == "build":
            variant_store.shared_variant_classes(inputs, fingerprint)
        else:
            classes = None
            if mode == "mapped":
                classes = variant_store.shared_variant_classes(inputs, fingerprint)
            planner = make_planner(replace(inputs, variant_classes=classes))
            share = planner.global_plan(1, WORLD).rank_share(RANK)
            parts = (share.seqs, share.bounds, np.asarray(share.variants))
            digest = hashlib.sha256(b"".join(p.tobytes() for p in parts)).hexdigest()
        c1, t1 = time.process_time(), time.perf_counter()
    return {"cpu_s": c1 - c0, "wall_s": t1 - t0, **memory.fields(), "digest": digest,
            "checks_ok": True}  # fmt: skip


def measure(args: argparse.Namespace) -> dict:
    fresh = FreshRuns("benchmarks.variants_store", args.reps, args.timeout)
    cache = runner.data_folder(args, "seqloader-variants-store")
    rows: dict[str, dict] = {}
    load = [load_average()]
    keys = ("cpu_s", "wall_s", "private_bytes", "uss_bytes")
    for n in args.sizes:
        configs = {m: {"n": n, "mode": m, "cache": cache} for m in MODES}
        runs = fresh.side_by_side(configs)
        got = {m: summary(runs[m], keys, ("digest",)) for m in MODES}
        same = {r["digest"] for m in ("mapped", "built") for r in runs[m]}
        names = {"cpu_ratio": "cpu_s", "wall_ratio": "wall_s", "memory_ratio": "private_bytes",
                 "uss_ratio": "uss_bytes"}  # fmt: skip
        rows[str(n)] = {
            **got,
            "plans_identical": len(same) == 1,
            "mapped_over_built": ratios(got["mapped"], got["built"], names),
            "build_over_built": ratios(got["build"], got["built"], names),
        }
        load.append(load_average())
        print(n, rows[str(n)]["plans_identical"], rows[str(n)]["mapped_over_built"], flush=True)
    return {"machine": describe_machine(), "load": load, "reps": args.reps, "rows": rows}


def main() -> None:
    runner.main(runner.parser(__doc__), child, measure, RESULTS)


if __name__ == "__main__":
    main()
