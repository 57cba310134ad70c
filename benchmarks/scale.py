"""One rank's plan of a large corpus on many ranks: time and private memory, before and after.

    python -m benchmarks.scale [--sizes 1e6,1e7,1e8] [--reps 3] [--base-src DIR] [--out FILE]

For each size ``n`` (lengths uniform in 50..2000, ``max_seqs=200``, ``max_frames=20000``), world
size 1,024, rank 517, and each case (``distribution="shard"`` with ``laplace`` and ``buckets:30``;
``distribution="files"`` over 10^5 files with ``laplace``): a fresh process maps the lengths from
one column store file (``seqloader.sources.columns``: the per-node metadata, built once by the
parent, counted once) and times constructing the ``Planner`` until it holds this rank's batches of
epoch 1 (``global_plan(...).rank_share``, what the loader runs).
Memory: the child's peak resident set less the file pages it maps (``VmHWM - RssFile``) less what
it held before planning: the private memory of planning. Each configuration runs ``--reps`` times
in fresh processes, rotating between the code under test and ``--base-src`` (the ``src/`` of an
older checkout, for before/after ratios measured in the same run); medians. A configuration whose
base run would exceed the memory guard (``--base-max``) is measured for the new code only.

Also measured, each in the same child after the plan: the *epoch boundary* (the loader's state
begins epoch 1, the epoch trains until a plan made ahead is ready, then epoch 2 begins: what the
loop waits for its plan; before, planning on the spot), and an *elastic resume* (a state saved
half-way through epoch 1 by 1,024 ranks loaded by 768, until this rank holds its rest of the
epoch, constructing the planner included) as a ratio to the fresh start of the same code.

The child checks, vectorised, what the contracts need of the plan (this rank's batches within the
limits; every rank the same steps; every sequence exactly once over all ranks), and the before and after step counts must agree (the plans
are the same). ``results/scale.json`` keeps one entry per run (``runs``): several sizes need
several runs on a shared 2-core machine (fewer repetitions at 10^7, the base code not at 10^8).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import numpy as np

from benchmarks.fresh import run_child
from benchmarks.machine import describe_machine, load_average

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results", "scale.json")
WORLD = 1024
RANK = 517
ELASTIC = 768  # the world size a resumed job runs on
FILES = 100_000
CASES = {
    "shard laplace": {"ordering": "laplace", "distribution": "shard"},
    "shard buckets:30": {"ordering": "buckets:30", "distribution": "shard"},
    "files laplace": {"ordering": "laplace", "distribution": "files"},
}
LIMITS = {"max_seqs": 200, "max_frames": 20_000}


def lengths_store(n: int, folder: str) -> str:
    """The column store with ``n`` lengths (int32) and file bounds of ``FILES`` equal files."""
    from seqloader.sources.columns import StoreWriter

    path = os.path.join(folder, f"lengths-{n}.seqcols")
    if os.path.exists(path):
        return path
    w = StoreWriter(path, f"scale-{n}", {"n": n})
    rng = np.random.default_rng(0)
    step = 10_000_000
    chunks = (rng.integers(50, 2001, min(step, n - a)).astype(np.int32) for a in range(0, n, step))
    w.add_chunks("len.data", np.int32, (), chunks)
    w.add("file_bounds", (np.arange(FILES + 1, dtype=np.int64) * n) // FILES)
    w.close()
    return path


def _status() -> dict[str, int]:
    out = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            key, _, rest = line.partition(":")
            if key in ("VmHWM", "VmRSS", "RssAnon", "RssFile"):
                out[key] = int(rest.split()[0]) * 1024
    return out


def child(config: dict) -> dict:
    from seqloader.plan import Planner, PlanOptions
    from seqloader.sources.columns import ColumnStore

    store = ColumnStore(config["store"])
    lengths = store.column("len.data")
    files = store.column("file_bounds") if config["distribution"] == "files" else None
    options = PlanOptions(
        ordering=config["ordering"], distribution=config["distribution"], seed=3, **LIMITS
    )
    before = _status()
    t0 = time.perf_counter()
    planner = Planner({"data": lengths}, options, files=files)
    t1 = time.perf_counter()
    plan = planner.global_plan(1, WORLD)
    share, steps = plan.rank_share(RANK), plan.steps
    t2 = time.perf_counter()
    after = _status()
    private = after["VmHWM"] - after["RssFile"] - (before["VmRSS"] - before["RssFile"])
    # vectorised checks of this rank's share: limits and steps
    sizes = np.diff(share.bounds)
    ok = bool(len(sizes) == steps and sizes.min() >= 1 and sizes.max() <= LIMITS["max_seqs"])
    maxes = np.maximum.reduceat(np.asarray(lengths)[share.seqs], share.bounds[:-1])
    ok = ok and bool((sizes * maxes).max() <= LIMITS["max_frames"])
    # the epoch over all ranks: equal steps, every sequence exactly once
    b = plan.batches
    ok = ok and len(b) == steps * WORLD
    counts = np.bincount(b.seqs[b.real], minlength=len(lengths))
    ok = ok and bool(counts.min() == 1 and counts.max() == 1)
    del plan, b, counts
    boundary = epoch_boundary(planner) if config.get("boundary") else None
    elastic = t1 - t0 + elastic_resume(planner) if config.get("elastic") else None
    return {
        "boundary_s": boundary,
        "elastic_s": elastic,
        "construct_s": t1 - t0,
        "plan_s": t2 - t1,
        "total_s": t2 - t0,
        "private_bytes": private,
        "steps": int(steps),
        "rank_seqs": len(share.seqs),
        "checks_ok": ok,
    }


def epoch_boundary(planner: object) -> float:
    """What the loop waits at the boundary of epochs 1 and 2 for this rank's plan: the loader's
    state begins epoch 1, the epoch trains (here: until a plan made ahead is ready, as an epoch of
    10^8 sequences outlasts planning), then epoch 2 begins."""
    from seqloader.plan.state import LoaderState

    state = LoaderState(planner, "fingerprint", WORLD)  # type: ignore[arg-type]
    plan, _ = state.begin(1)
    state.consumed = plan.steps
    ahead = getattr(state, "_ahead", None)
    if ahead is not None and ahead._thread is not None:
        ahead._thread.join()
    t0 = time.perf_counter()
    plan, position = state.begin(2)
    plan.rank_share(RANK, position.steps)
    took = time.perf_counter() - t0
    if ahead is not None and ahead._thread is not None:
        ahead._thread.join()  # epoch 3, planned ahead: not to load what is measured next
    return took


def elastic_resume(planner: object) -> float:
    """Loading a state saved mid-epoch 1 (half its steps) by 1,024 ranks into a loader of 768
    ranks and beginning the epoch there, until this rank holds its rest of the epoch (the caller
    adds constructing the planner, as a restarted job constructs it)."""
    from seqloader.plan.state import LoaderState

    quiet = (
        {"plan_ahead": False} if "plan_ahead" in LoaderState.__init__.__code__.co_varnames else {}
    )
    saver = LoaderState(planner, "fingerprint", WORLD, **quiet)  # type: ignore[arg-type]
    plan, _ = saver.begin(1)
    saver.consumed = plan.steps // 2
    saved = saver.to_dict()
    del plan, saver
    t0 = time.perf_counter()
    state = LoaderState(planner, "fingerprint", ELASTIC, **quiet)  # type: ignore[arg-type]
    state.load(saved)
    rest, position = state.begin(1)
    rest.rank_share(RANK % ELASTIC, position.steps)
    return time.perf_counter() - t0


def measure(args: argparse.Namespace) -> dict:
    folder = args.data or os.path.join(tempfile.gettempdir(), "seqloader-scale")
    os.makedirs(folder, exist_ok=True)
    rows = []
    for size in args.sizes:
        store = lengths_store(size, folder)
        for name, case in CASES.items():
            if name not in args.cases:
                continue
            codes = ["new"]
            if args.base_src and size <= args.base_max:
                codes.append("base")
            runs: dict[str, list[dict]] = {c: [] for c in codes}
            for rep in range(args.reps):
                for code in codes[rep % len(codes) :] + codes[: rep % len(codes)]:
                    config = {
                        **case,
                        "store": store,
                        "code": code,
                        "label": f"{name} {size} {code}",
                        "boundary": args.boundary,
                        "elastic": args.elastic,
                    }
                    runs[code].append(
                        run_child("benchmarks.scale", config, args.base_src, args.timeout)
                    )
            row: dict = {"case": name, "n": size}
            for code, got in runs.items():
                row[code] = {
                    k: statistics.median(r[k] for r in got)
                    for k in ("construct_s", "plan_s", "total_s", "private_bytes")
                }
                for extra, on in (("boundary_s", args.boundary), ("elastic_s", args.elastic)):
                    if on:
                        row[code][extra] = statistics.median(r[extra] for r in got)
                if args.elastic:  # a resume 1,024 -> 768 against a fresh start, same code
                    row[code]["elastic_over_fresh"] = row[code]["elastic_s"] / row[code]["total_s"]
                row[code]["checks_ok"] = all(r["checks_ok"] for r in got)
                row[code]["steps"] = got[0]["steps"]
            if "base" in row:
                row["time_ratio"] = row["new"]["total_s"] / row["base"]["total_s"]
                row["memory_ratio"] = row["new"]["private_bytes"] / row["base"]["private_bytes"]
                row["same_steps"] = row["new"]["steps"] == row["base"]["steps"]
                if args.boundary:
                    row["boundary_ratio"] = row["new"]["boundary_s"] / row["base"]["boundary_s"]
            print(json.dumps(row), flush=True)
            rows.append(row)
    return {"machine": describe_machine(), "load_average": load_average(), "world_size": WORLD,
            "rank": RANK, "files": FILES, "limits": LIMITS, "reps": args.reps, "rows": rows}  # fmt: skip


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--child")
    p.add_argument("--sizes", default="1e6,1e7")
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--base-src")
    p.add_argument("--base-max", type=float, default=1e7)
    p.add_argument("--data", help="folder for the column stores (default: the temp folder)")
    p.add_argument("--timeout", type=float, default=1200)
    p.add_argument("--out")
    p.add_argument(
        "--no-boundary",
        dest="boundary",
        action="store_false",
        help="skip measuring the epoch boundary (plans epochs 1 and 2 once more)",
    )
    p.add_argument(
        "--no-elastic",
        dest="elastic",
        action="store_false",
        help="skip measuring an elastic resume 1,024 -> 768 ranks (plans epoch 1 three more times)",
    )
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return
    args.sizes = [int(float(s)) for s in args.sizes.split(",")]
    args.cases = args.cases.split(",")
    result = measure(args)
    out = args.out or RESULTS
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as fh:
        json.dump(result, fh, indent=1)
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    main()
