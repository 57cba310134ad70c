"""A mix of three corpora for one rank of 1,024: indexed against global planning, time and memory.

    python -m benchmarks.mix_scale [--sizes 1e6,1e7] [--reps 3] [--cases ...] [--out FILE]

What a foundation-scale job runs: ``mix={corpus: rate}`` over a ``ConcatSource`` of three corpora
(50 % / 30 % / 20 % of the sequences at rates 0.5 / 1 / 2), ``max_seqs=200``,
``max_frames=20000``, lengths uniform in 50..2000 (the column store of ``benchmarks.scale``,
memory-mapped), world size 1,024, rank 517, epoch 1; global planning up to ``--global-max``. Cases: ``laplace`` with
``planning="indexed"`` against ``planning="global"`` (what a user runs today), and
``buckets:30`` with ``planning="indexed"`` (global planning refuses ``buckets:N`` with a mix)
against the same global ``laplace`` mix, and ``laplace`` with ``distribution="files"`` under
indexed planning (whole files per rank, ``benchmarks.scale``'s equal files; global planning
refuses a mix over files) against the same sharded global ``laplace`` mix. Each configuration runs in a fresh process (rotating
order, ``--reps`` (>= 3) times, medians: ``benchmarks.runner``), timed from constructing the
planner until it holds this rank's batches of epoch 1; private memory is the child's peak resident
set less the file pages it maps, less what it held before planning, and psutil's unique set size
beside it (``benchmarks.runner.PrivateMemory``, as in ``benchmarks.scale``). Indexed planning maps the
node's bucket index (built once per node and corpus by the parent, as ``benchmarks.scale``).
Also timed: the report's per-corpus planned slots and progress (``corpus_plan``).

``--loader``: the loader instead of the planner. The three corpora are column stores of lengths
and tags (``benchmarks.loader_scale``'s ``StoreSource``, one file each), joined by a
``ConcatSource``; a child times ``ConcatSource(...)`` + ``SeqLoader(mix=..., planning="indexed",
ordering="buckets:30")`` until it holds rank 517's batches of epoch 1, private memory as
``benchmarks.loader_scale`` measures it (peak ``RssAnon``). ``mapped``: the concatenation's node
store (``sources/concat_store.py``, built by a first child, then mapped); ``in memory``: the
concatenation copied in the process (what ``ConcatSource`` does below ``MIN_SEQUENCES``).

After measuring, the child checks the epoch (chunks of the global list, never all at once for
indexed plans): this rank's batches within the limits, every 97th rank the same steps, this rank's
share its part of the global list, per corpus every sequence at most once per corpus epoch and
every slot's corpus epoch right (``mix.check``), the per-corpus counts those the mix plans, and
the epoch's padding (padded / real frames). ``results/mix_scale.json`` keeps one entry per run.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

from benchmarks import runner
from benchmarks.fresh import run_child
from benchmarks.machine import describe_machine, load_average
from benchmarks.runner import TIME_AND_MEMORY, FreshRuns, PrivateMemory, ratios, summary
from benchmarks.scale import LIMITS, RANK, WORLD, index_store, lengths_store

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results", "mix_scale.json")
NAMES = ("read", "conversational", "accented")
SHARES = (0.5, 0.3, 0.2)  # of the sequences, corpus after corpus
RATES = {"read": 0.5, "conversational": 1.0, "accented": 2.0}
CASES = {
    "mix laplace": {"indexed": "laplace", "global": "laplace"},
    "mix buckets:30": {"indexed": "buckets:30", "global": "laplace"},
    # indexed: whole files per rank (benchmarks.scale's FILES equal files; global planning
    # refuses a mix over files, so its side is the sharded global mix a user runs today)
    "mix files laplace": {"indexed": "laplace", "global": "laplace", "files": True},
}


def corpus_bounds(n: int) -> np.ndarray:
    cuts = np.round(np.cumsum((0.0, *SHARES)) * n).astype(np.int64)
    cuts[-1] = n
    return cuts


def child(config: dict) -> dict:
    from seqloader.plan import Planner, PlanOptions
    from seqloader.plan.mix import Corpora
    from seqloader.sources.columns import ColumnStore

    store = ColumnStore(config["store"])
    lengths = store.column("len.data")
    n = len(lengths)
    corpora = Corpora(NAMES, corpus_bounds(n))
    indexed = config["planning"] == "indexed"
    extra: dict = {}  # indexed: the default options (planning "auto", checked to resolve below)
    files = None
    if indexed and config.get("files"):
        extra["distribution"], files = "files", store.column("file_bounds")
    options = PlanOptions(ordering=config["ordering"], seed=3, mix=RATES, **LIMITS, **extra)
    resolved = options.resolved_planning if indexed else "global"  # global: its planner by name
    if resolved != config["planning"]:
        raise RuntimeError(f"the default options resolve to {resolved!r} planning")
    with PrivateMemory() as memory:
        t0 = time.perf_counter()
        if indexed:
            from seqloader.plan.indexed.histogram import BucketIndex
            from seqloader.plan.indexed.planner import IndexedPlanner

            cols = ColumnStore(config["index"])  # the node's index, memory-mapped
            index = BucketIndex.from_columns({k: cols.column(k) for k in cols.names})
            planner: Planner = IndexedPlanner(
                {"data": lengths}, options, corpora=corpora, index=index, files=files
            )
        else:
            planner = Planner({"data": lengths}, options, corpora=corpora)
        t1 = time.perf_counter()
        plan = planner.global_plan(1, WORLD)
        share, steps = plan.rank_share(RANK), plan.steps
        t2 = time.perf_counter()
    t3 = time.perf_counter()
    planned = planner.corpus_plan(1)
    corpus_plan_s = time.perf_counter() - t3
    sizes = np.diff(share.bounds)
    ok = bool(len(sizes) == steps and sizes.min() >= 1 and sizes.max() <= LIMITS["max_seqs"])
    maxes = np.maximum.reduceat(np.asarray(lengths)[share.seqs], share.bounds[:-1])
    ok = ok and bool((sizes * maxes).max() <= LIMITS["max_frames"])
    ok = ok and all(len(plan.rank_share(r)) == steps for r in range(0, WORLD, 97))
    whole = check_epoch(planner, plan, share, lengths) if config["checks"] else {}
    counts = [slots for _, slots, _ in planned]
    ok = ok and counts == list(planner.mix.epoch_counts(0))  # type: ignore[union-attr]
    return {
        "construct_s": t1 - t0,
        "plan_s": t2 - t1,
        "total_s": t2 - t0,
        **memory.fields(),
        "corpus_plan_s": corpus_plan_s,
        "steps": int(steps),
        "rank_slots": len(share.seqs),
        "planning": resolved,
        "epoch_slots": int(sum(counts)),
        "corpus_slots": counts,
        "checks_ok": ok and whole.get("ok", True),
        "padding": whole.get("padding"),
    }


def loader_child(config: dict) -> dict:
    import torch  # noqa: F401 - a training script has torch imported before it builds a loader

    import seqloader as sl
    from benchmarks.loader_scale import PeakAnon, StoreSource
    from seqloader.sources import concat_store

    if config["code"] == "in memory":
        concat_store.MIN_SEQUENCES = 1 << 62
    parts = {name: StoreSource(path) for name, path in config["stores"].items()}
    with PeakAnon() as mem:
        t0 = time.perf_counter()
        loader = sl.SeqLoader(
            sl.ConcatSource(parts), mix=RATES, planning="indexed", ordering="buckets:30",
            rank=RANK, world_size=WORLD, seed=3, **LIMITS,
            checks=sl.CheckOptions(duplicate_tags="off"),  # the corpora repeat their tags
        )  # fmt: skip
        share = loader.global_plan(1).rank_share(RANK)
        t1 = time.perf_counter()
    sizes = np.diff(share.bounds)
    ok = bool(sizes.min() >= 1 and sizes.max() <= LIMITS["max_seqs"])
    stored = loader.source._store is not None  # type: ignore[attr-defined]
    ok = ok and stored == (config["code"] == "mapped")
    return {"total_s": t1 - t0, "private_bytes": mem.peak - mem.before, "checks_ok": ok}


def measure_loader(args: argparse.Namespace) -> dict:
    from benchmarks.loader_scale import corpus_store

    folder = runner.data_folder(args, "seqloader-mix-loader")
    runs = FreshRuns("benchmarks.mix_scale", args.reps, args.timeout)
    os.environ["XDG_CACHE_HOME"] = os.path.join(folder, "cache")
    rows = []
    for size in args.sizes:
        stores = {}
        for name, share in zip(NAMES, SHARES):
            sub = os.path.join(folder, f"{name}-{size}")
            os.makedirs(sub, exist_ok=True)
            stores[name] = corpus_store(int(share * size), sub)
        config = {"stores": stores, "code": "mapped", "label": f"loader {size} node store"}
        t0 = time.perf_counter()
        run_child("benchmarks.mix_scale", {**config, "loader": True}, None, args.timeout)
        node_s = time.perf_counter() - t0  # the first process of the node builds the stores
        codes = ["mapped", "in memory"] if size <= args.global_max else ["mapped"]
        configs = {
            code: {**config, "code": code, "loader": True, "label": f"loader {size} {code}"}
            for code in codes
        }
        row: dict = {"n": size, "first_child_s": node_s}
        for code, got in runs.side_by_side(configs).items():
            row[code] = summary(got, ("total_s", "private_bytes"))
        if "in memory" in row:
            row.update(ratios(row["mapped"], row["in memory"], TIME_AND_MEMORY))
        print(json.dumps(row), flush=True)
        rows.append(row)
    return {"machine": describe_machine(), "load_average": load_average(), "mode": "loader",
            "world_size": WORLD, "rank": RANK, "rates": RATES, "shares": SHARES,
            "reps": args.reps, "rows": rows}  # fmt: skip


def check_epoch(planner: object, plan: object, share: object, lengths: np.ndarray) -> dict:
    """Per-corpus exactly-once per corpus epoch over the epoch's real slots (``mix.check``),
    this rank's share its part of the global list, the per-corpus counts, and the padding."""
    world, steps = plan.world_size, plan.steps  # type: ignore[attr-defined]
    seqs, uses, mine = [], [], []
    padded = real = 0
    slots = getattr(plan, "slots", None)
    parts = []
    if slots is not None:  # indexed: the global list in chunks of batches
        total, step = steps * world, (1 << 18) // world * world
        parts = (plan.members(slots(a, min(a + step, total))) for a in range(0, total, step))  # type: ignore[attr-defined]
    else:
        parts = iter([plan.batches])  # type: ignore[attr-defined]
    for b in parts:
        seqs.append(b.seqs[b.real])
        uses.append(b.uses[b.real])
        mine.append(b.take(np.arange(RANK, len(b), world)).seqs)
        sizes = np.diff(b.bounds)
        longest = np.maximum.reduceat(np.asarray(lengths[b.seqs]), b.bounds[:-1])
        padded += int((sizes * longest).sum())
        real += int(np.asarray(lengths[b.seqs[b.real]], dtype=np.int64).sum())
    all_seqs, all_uses = np.concatenate(seqs), np.concatenate(uses)
    mix = planner.mix  # type: ignore[attr-defined]
    check = mix.check([0], all_seqs, all_uses)
    counts = mix.corpora.counts(all_seqs).tolist()
    ok = check.ok and counts == list(mix.epoch_counts(0))
    ok = ok and np.array_equal(np.concatenate(mine), share.seqs)  # type: ignore[attr-defined]
    return {"ok": bool(ok), "padding": padded / max(real, 1)}


def measure(args: argparse.Namespace) -> dict:
    folder = runner.data_folder(args)
    runs = FreshRuns("benchmarks.mix_scale", args.reps, args.timeout)
    medians = ("construct_s", "plan_s", "total_s", "private_bytes", "uss_bytes", "corpus_plan_s")
    firsts = ("padding", "steps", "epoch_slots", "corpus_slots", "rank_slots", "planning")
    rows = []
    for size in args.sizes:
        store = lengths_store(size, folder)
        for name in args.cases.split(","):
            orderings = CASES[name]
            case = {
                "ordering": orderings["indexed"],
                "distribution": "files" if orderings.get("files") else "shard",
            }
            index, index_s = index_store(store, size, case, folder)
            codes = ["indexed", "global"] if size <= args.global_max else ["indexed"]
            configs = {
                code: {
                    "store": store,
                    "index": index,
                    "planning": code,
                    "ordering": orderings[code],
                    "files": bool(orderings.get("files")),
                    "label": f"{name} {size} {code}",
                    "checks": args.checks,
                }
                for code in codes
            }
            row: dict = {"case": name, "n": size, "node_index_s": index_s, "checks": args.checks}
            for code, got in runs.side_by_side(configs).items():
                row[code] = {"ordering": orderings[code], **summary(got, medians, firsts)}
            if "global" in row:
                new, old = row["indexed"], row["global"]
                names = {
                    **TIME_AND_MEMORY,
                    "corpus_plan_ratio": "corpus_plan_s",
                    "steps_ratio": "steps",
                }
                if new["padding"] and old["padding"]:
                    names["padding_ratio"] = "padding"
                row.update(ratios(new, old, names))
            print(json.dumps(row), flush=True)
            rows.append(row)
    return {"machine": describe_machine(), "load_average": load_average(), "world_size": WORLD,
            "rank": RANK, "limits": LIMITS, "rates": RATES, "shares": SHARES, "reps": args.reps,
            "rows": rows}  # fmt: skip


def main() -> None:
    p = runner.parser(__doc__)
    p.add_argument(
        "--global-max",
        type=float,
        default=1e7,
        help="largest size planned with planning='global' too (~90 bytes per slot); --loader: "
        "the largest concatenated in memory too (~45 bytes per sequence)",
    )
    p.add_argument(
        "--no-checks",
        dest="checks",
        action="store_false",
        help="skip the walk over the whole epoch (per-corpus exactly-once, padding): minutes at "
        "10^8; the rank's limits, every 97th rank's steps and the counts are still checked",
    )
    p.add_argument("--cases", default=",".join(CASES), help="comma-separated names of CASES")
    p.add_argument("--loader", action="store_true", help="SeqLoader over a ConcatSource instead")
    runner.main(p, any_child, measure_either, RESULTS)


def any_child(config: dict) -> dict:
    return loader_child(config) if config.get("loader") else child(config)


def measure_either(args: argparse.Namespace) -> dict:
    return measure_loader(args) if args.loader else measure(args)


if __name__ == "__main__":
    main()
