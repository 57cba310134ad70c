"""One rank's plan of a large corpus on many ranks: time and private memory, indexed vs global planning.

    python -m benchmarks.scale [--sizes 1e6,1e7,1e8] [--reps 3] [--global-max 1e7]
                               [--base-src DIR] [--base-planning indexed] [--out FILE]

For each size ``n`` (lengths uniform in 50..2000, ``max_seqs=200``, ``max_frames=20000``), world
size 1,024, rank 517, and each case (``distribution="shard"`` with ``laplace`` and ``buckets:30``;
``distribution="files"`` over 10^5 files with ``laplace``): a fresh process maps the lengths from
one column store file (``seqloader.sources.columns``: the per-node metadata, built once by the
parent, counted once) and times constructing the planner until it holds this rank's batches of
epoch 1 (``global_plan(...).rank_share``, what the loader runs). Indexed planning is measured
with the default options (no ``planning`` given: ``auto``, checked to resolve to indexed for
every case; ``--base-src`` asks for it by name); it also maps
the node's bucket index (``BucketIndex``, built once per node and corpus by the parent: its build
time is ``node_index_s``); ``planning="global"`` (the same code, asked for by name) is measured
up to ``--global-max`` sequences (about 60 bytes per sequence), ``--base-src`` (an older
checkout's ``src/``) up to ``--base-max``.
Memory: the child's peak resident set less the file pages it maps (``VmHWM - RssFile``) less what
it held before planning: the private memory of planning; beside it psutil's unique set size
(``benchmarks.runner.PrivateMemory``). Each configuration runs ``--reps`` (>= 3) times in fresh
processes, rotating between the codes; medians (``benchmarks.runner``).

Also measured, each in the same child after the plan: the *epoch boundary* (the loader's state
begins epoch 1, the epoch trains until a plan made ahead is ready, then epoch 2 begins: what the
loop waits for its plan), and an *elastic resume* (a state saved half-way through epoch 1 by 1,024
ranks loaded by 768, until this rank holds its rest of the epoch, constructing the planner
included: a new planner, nothing kept from the first run) as a ratio to the fresh start of the
same code; with ``files`` the full checks also walk the resumed epoch (what the 1,024 ranks
consumed and every one of the 768 ranks' rest: exactly once, equal steps). Beside the fresh
start's and the elastic resume's wall times, the child's CPU time over the same stretches
(``total_cpu_s``, ``elastic_cpu_s``, ``elastic_cpu_over_fresh``): on a shared machine under load
the wall times move with what else runs, the CPU times far less. ``--base-planning indexed``
runs ``--base-src`` with indexed planning (before/after of its own changes).

The child checks, vectorised and never holding the whole epoch at once (chunks of the global
batch list, or rank after rank), what the contracts need: this rank's batches within the limits;
every rank the same steps; every sequence exactly once over all ranks; this rank's share equal to
its part of the global list (the batches its DataLoader workers split, whatever their number);
and the epoch's padding (padded / real frames), compared as a ratio between the plannings.
``results/scale.json`` keeps one entry per run (``runs``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np

from benchmarks import runner
from benchmarks.machine import describe_machine, load_average
from benchmarks.runner import TIME_AND_MEMORY, FreshRuns, PrivateMemory, ratios, summary

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
    "files buckets:30": {"ordering": "buckets:30", "distribution": "files"},
    "shard laplace 500:250": {
        "ordering": "laplace",
        "distribution": "shard",
        "chunking": "500:250",
    },
    "shard buckets:30 500:250": {
        "ordering": "buckets:30",
        "distribution": "shard",
        "chunking": "500:250",
    },
    # a length filter on both sides (about 5 % of the corpus filtered out, counted, not planned)
    "shard laplace filtered": {
        "ordering": "laplace",
        "distribution": "shard",
        "max_seq_length": 1950,
        "min_seq_length": 100,
    },
    # the same filter over files: a rank reads the admission of its own files' sequences
    "files laplace filtered": {
        "ordering": "laplace",
        "distribution": "files",
        "max_seq_length": 1950,
        "min_seq_length": 100,
    },
    "files buckets:30 filtered": {
        "ordering": "buckets:30",
        "distribution": "files",
        "max_seq_length": 1950,
        "min_seq_length": 100,
    },
}
#: the case options that select sequences or cut them (planned by the planner's own index build)
_SHAPING = ("chunking", "max_seq_length", "min_seq_length")
LIMITS = {"max_seqs": 200, "max_frames": 20_000}
_BLOCK = 1 << 22


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


def index_store(store: str, n: int, case: dict, folder: str) -> tuple[str, float]:
    """The node's bucket index of ``case`` over the lengths in ``store`` (built once per node and
    corpus, memory-mapped by every rank) -> (its path, seconds the build took; 0 if it existed)."""
    from seqloader.plan import PlanOptions
    from seqloader.plan.indexed.budget import edges_for
    from seqloader.plan.indexed.histogram import build_bucket_index
    from seqloader.sources.columns import ColumnStore, StoreWriter

    shaped = "".join(f"-{k}{case[k]}" for k in _SHAPING if case.get(k))
    name = f"index-{n}-{case['ordering']}-{case['distribution']}{shaped}.seqcols".replace(":", "_")
    path = os.path.join(folder, name)
    if os.path.exists(path):
        return path, 0.0
    cols = ColumnStore(store)
    lengths = cols.column("len.data")
    files = cols.column("file_bounds") if case["distribution"] == "files" else None
    t0 = time.perf_counter()
    options = PlanOptions(**case, **LIMITS, seed=3, planning="indexed")
    if any(case.get(k) for k in _SHAPING):  # chunks or admitted sequences: the planner's build
        from seqloader.plan.indexed import IndexedPlanner

        index = IndexedPlanner({"data": lengths}, options, files=files).index
    else:
        budget = options.cost.budget(options.max_frames)  # max_frames: an int here
        edges = edges_for(lengths, options, lengths, budget)
        index = build_bucket_index(lengths, edges, None, files)
    w = StoreWriter(path, f"index-{n}", {"n": n})
    for key, column in index.columns().items():
        w.add(key, np.asarray(column))
    w.close()
    return path, time.perf_counter() - t0


def child(config: dict) -> dict:
    from seqloader.plan import Planner, PlanOptions
    from seqloader.sources.columns import ColumnStore

    store = ColumnStore(config["store"])
    lengths = store.column("len.data")
    files = store.column("file_bounds") if config["distribution"] == "files" else None
    indexed = config.get("planning") == "indexed"
    # this checkout's indexed plans run the default options (planning "auto", resolved below);
    # global planning and an older checkout's code are asked for by name
    default = indexed and config.get("code") != "base"
    extra = {} if default else {"planning": config.get("planning", "global")}
    extra.update({k: config[k] for k in _SHAPING if config.get(k)})
    options = PlanOptions(
        ordering=config["ordering"], distribution=config["distribution"], seed=3, **LIMITS, **extra
    )
    resolved = getattr(options, "resolved_planning", options.planning)
    if default and resolved != "indexed":
        raise RuntimeError(f"the default options resolve to {resolved!r} planning, not indexed")

    def make() -> Planner:
        """The planner as a (re)started job constructs it: the node's index mapped, no caches."""
        if indexed:
            from seqloader.plan.indexed.histogram import BucketIndex
            from seqloader.plan.indexed.planner import IndexedPlanner

            try:  # mapped as the loader maps it (some columns checked when first read)
                from seqloader.loading.bucket_store import deferred, mapped_index
            except ImportError:  # a checkout before that: every column checked when mapped
                cols = ColumnStore(config["index"])  # the node's index, memory-mapped
                index = BucketIndex.from_columns({k: cols.column(k) for k in cols.names})
            else:
                defer = deferred(options)
                index = mapped_index(ColumnStore(config["index"], defer=defer), defer)
            return IndexedPlanner({"data": lengths}, options, files=files, index=index)
        return Planner({"data": lengths}, options, files=files)

    with PrivateMemory() as memory:
        c0, t0 = time.process_time(), time.perf_counter()
        planner = make()
        t1 = time.perf_counter()
        plan = planner.global_plan(1, WORLD)
        share, steps = plan.rank_share(RANK), plan.steps
        t2, c2 = time.perf_counter(), time.process_time()
    # vectorised checks of this rank's share: limits and steps
    sizes = np.diff(share.bounds)
    ok = bool(len(sizes) == steps and sizes.min() >= 1 and sizes.max() <= LIMITS["max_seqs"])
    maxes = np.maximum.reduceat(planner.slot_costs(share), share.bounds[:-1])  # frames: lengths
    ok = ok and bool((sizes * maxes).max() <= LIMITS["max_frames"])
    # the epoch over all ranks: equal steps, every sequence exactly once, this rank's share its
    # part of the global list (what the workers split: the same whatever num_workers is), padding
    if config.get("checks", "full") == "full":
        whole = check_epoch(plan, share, np.asarray(lengths) if not indexed else lengths, planner)
    else:  # "share": every 97th rank's step count, each computed alone (no walk over the epoch)
        spread = all(len(plan.rank_share(r)) == steps for r in range(0, WORLD, 97))
        whole = {"ok": spread, "padding": None}
    ok = ok and whole["ok"]
    del plan
    boundary = epoch_boundary(planner) if config.get("boundary") else None
    elastic = elastic_cpu = None
    if config.get("elastic"):
        try:
            elastic, elastic_cpu, rest, position = elastic_resume(planner, make)
            if config.get("checks", "full") == "full" and config["distribution"] == "files":
                whole["elastic_checks_ok"] = check_files_elastic(make(), rest, position, lengths)
                ok = ok and whole["elastic_checks_ok"]
            del rest
        except Exception as e:  # an older version refusing it by name
            elastic = None
            whole["elastic_refused"] = str(e)[:200]
    return {
        "boundary_s": boundary,
        "elastic_s": elastic,
        "elastic_cpu_s": elastic_cpu,
        "total_cpu_s": c2 - c0,
        "construct_s": t1 - t0,
        "plan_s": t2 - t1,
        "total_s": t2 - t0,
        **memory.fields(),
        "steps": int(steps),
        "rank_seqs": len(share.seqs),  # slots: chunks when chunked
        "checks_ok": ok,
        "planning": resolved,
        "default_options": default,
        "padding": whole["padding"],
        **{k: v for k, v in whole.items() if k in ("elastic_refused", "elastic_checks_ok")},
    }


def check_epoch(plan: object, share: object, lengths: np.ndarray, planner: object) -> dict:
    """Every rank's batches, rank after rank or in chunks of the global list (never all at once):
    equal steps, each sequence (chunked: each chunk) exactly once, this rank's share equal to its
    part of the global list, and the padding (padded frames / real frames) of the whole epoch."""
    world, steps = plan.world_size, plan.steps  # type: ignore[attr-defined]
    n = len(lengths)
    spec = planner.options.chunking  # type: ignore[attr-defined]
    stride, units = 1, n  # a slot's number: sequence * stride + chunk
    low, high = planner.options.min_seq_length, planner.options.max_seq_length  # type: ignore[attr-defined]
    if low or high:  # the admitted sequences (the filtered case: no chunking): counted in blocks
        units = 0
        for a in range(0, n, _BLOCK):
            block = np.asarray(lengths[a : a + _BLOCK])
            units += int(((block >= (low or 0)) & (block <= (high or block.max()))).sum())
    if spec is not None:
        from seqloader.plan.chunks import chunk_counts

        ((size, step),) = spec.values()
        stride = int(np.max(lengths)) // step + 2
        units = sum(
            int(chunk_counts(np.asarray(lengths[a : a + _BLOCK]), size, step, 0).sum())
            for a in range(0, n, _BLOCK)
        )
    seen = np.zeros(n * stride, dtype=bool)
    ok, padded, real = True, 0, 0
    mine: list[np.ndarray] = []

    def visit(b: object) -> None:
        nonlocal ok, padded, real
        s = b.seqs[b.real]  # type: ignore[attr-defined]
        if spec is not None:
            s = s * stride + b.chunks[b.real]  # type: ignore[attr-defined]
        ok = ok and not seen[s].any() and len(np.unique(s)) == len(s)
        seen[s] = True
        sizes = np.diff(b.bounds)  # type: ignore[attr-defined]
        if len(sizes):
            frames = planner.slot_costs(b)  # type: ignore[attr-defined]  # frames: the lengths
            longest = np.maximum.reduceat(frames, b.bounds[:-1])  # type: ignore[attr-defined]
            padded += int((sizes * longest).sum())
            real += int(np.asarray(frames[b.real], dtype=np.int64).sum())  # type: ignore[attr-defined]

    slots = getattr(plan, "slots", None)
    if slots is not None:  # indexed shard: the global list in chunks of batches
        total, step = steps * world, (1 << 18) // world * world
        for a in range(0, total, step):
            b = plan.members(slots(a, min(a + step, total)))  # type: ignore[attr-defined]
            visit(b)
            mine.append(b.take(np.arange(RANK, len(b), world)).seqs)
    elif hasattr(plan, "_share"):  # indexed files: rank after rank
        for r in range(world):
            b = plan.rank_share(r)  # type: ignore[attr-defined]
            ok = ok and len(b) == steps
            visit(b)
            if r == RANK:
                mine.append(b.seqs)
    else:
        b = plan.batches  # type: ignore[attr-defined]
        ok = ok and len(b) == steps * world
        visit(b)
        mine.append(b.take(np.arange(RANK, len(b), world)).seqs)
    ok = ok and int(seen.sum()) == units and np.array_equal(np.concatenate(mine), share.seqs)  # type: ignore[attr-defined]
    return {"ok": bool(ok), "padding": padded / max(real, 1)}


def epoch_boundary(planner: object) -> float:
    """What the loop waits at the boundary of epochs 1 and 2 for this rank's plan: the loader's
    state begins epoch 1, the epoch trains (here: until a plan made ahead is ready, as an epoch of
    10^8 sequences outlasts planning), then epoch 2 begins."""
    from seqloader.plan.state import LoaderState

    mine = {"rank": RANK} if "rank" in LoaderState.__init__.__code__.co_varnames else {}
    state = LoaderState(planner, "fingerprint", WORLD, **mine)  # type: ignore[arg-type]
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


def elastic_resume(planner: object, make: object) -> tuple[float, float, object, object]:
    """Loading a state saved mid-epoch 1 (half its steps) by 1,024 ranks into a loader of 768
    ranks and beginning the epoch there, until this rank holds its rest of the epoch, the
    planner constructed anew (as a restarted job does: nothing kept from the first run) ->
    (seconds, CPU seconds of the process, the resumed plan, its position)."""
    from seqloader.plan.state import LoaderState

    quiet = (
        {"plan_ahead": False} if "plan_ahead" in LoaderState.__init__.__code__.co_varnames else {}
    )
    saver = LoaderState(planner, "fingerprint", WORLD, **quiet)  # type: ignore[arg-type]
    plan, _ = saver.begin(1)
    saver.consumed = plan.steps // 2
    saved = saver.to_dict()
    del plan, saver
    c0, t0 = time.process_time(), time.perf_counter()
    state = LoaderState(make(), "fingerprint", ELASTIC, **quiet)  # type: ignore[operator]
    state.load(saved)
    rest, position = state.begin(1)
    rest.rank_share(RANK % ELASTIC, position.steps)
    return time.perf_counter() - t0, time.process_time() - c0, rest, position


def check_files_elastic(planner: object, rest: object, position: object, lengths: object) -> bool:
    """``files`` resumed on 768 ranks: what the 1,024 ranks consumed (drawn rank by rank from
    the history) and every new rank's rest hold every sequence of the sub-epoch exactly once,
    and the new ranks have equal steps."""
    n = len(lengths)  # type: ignore[arg-type]
    seen = np.zeros(n, dtype=np.uint8)
    _, before = planner.files_plan(1, ELASTIC, position.history)  # type: ignore[attr-defined]
    np.add.at(seen, before, 1)
    ok = len(before) == position.segment_start  # type: ignore[attr-defined]
    steps = rest.steps - position.steps  # type: ignore[attr-defined]
    for r in range(ELASTIC):
        share = rest.rank_share(r, position.steps)  # type: ignore[attr-defined]
        ok = ok and len(share) == steps
        np.add.at(seen, share.seqs[share.real], 1)
    order = planner.order_size(1, ELASTIC)  # type: ignore[attr-defined]
    return bool(ok and seen.max() == 1 and int(seen.sum()) == order)


def measure(args: argparse.Namespace) -> dict:
    folder = runner.data_folder(args)
    runs = FreshRuns("benchmarks.scale", args.reps, args.timeout, args.base_src)
    rows = []
    for size in args.sizes:
        store = lengths_store(size, folder)
        for name, case in CASES.items():
            if name not in args.cases.split(","):
                continue
            index, index_s = index_store(store, size, case, folder)
            codes = ["indexed"]
            if size <= args.global_max:
                codes.append("global")
            if args.base_src and size <= args.base_max:
                codes.append("base")
            configs = {
                code: {
                    **case,
                    "store": store,
                    "index": index,
                    "code": "base" if code == "base" else "new",
                    "planning": "indexed"
                    if code == "indexed" or (code == "base" and args.base_planning == "indexed")
                    else "global",
                    "label": f"{name} {size} {code}",
                    "boundary": args.boundary,
                    "elastic": args.elastic,
                    "checks": args.checks,
                }
                for code in codes
            }
            row: dict = {"case": name, "n": size, "node_index_s": index_s, "checks": args.checks}
            for code, got in runs.side_by_side(configs).items():
                row[code] = code_row(args, got)
            for other in ("global", "base"):
                if other in row:
                    new, old = row["indexed"], row[other]
                    names = {**TIME_AND_MEMORY}
                    if new.get("padding") and old.get("padding"):
                        names["padding_ratio"] = "padding"
                    if args.boundary:
                        names["boundary_ratio"] = "boundary_s"
                    row.update(ratios(new, old, names, f"_{other}"))
            print(json.dumps(row), flush=True)
            rows.append(row)
    return {"machine": describe_machine(), "load_average": load_average(), "world_size": WORLD,
            "rank": RANK, "files": FILES, "limits": LIMITS, "reps": args.reps, "rows": rows}  # fmt: skip


def code_row(args: argparse.Namespace, got: list[dict]) -> dict:
    """One code's runs of a case: medians, padding and steps, the optional measures."""
    row = summary(got, ("construct_s", "plan_s", "total_s", "private_bytes", "uss_bytes"))
    row["padding"] = got[0].get("padding")
    for extra, on in (
        ("boundary_s", args.boundary),
        ("elastic_s", args.elastic),
        ("elastic_cpu_s", args.elastic),
        ("total_cpu_s", True),
    ):
        values = [r[extra] for r in got if r.get(extra) is not None]
        if on and values:
            row[extra] = statistics.median(values)
    if args.elastic and "elastic_s" in row:  # 1,024 -> 768 against a fresh start
        row["elastic_over_fresh"] = row["elastic_s"] / row["total_s"]
    if args.elastic and row.get("elastic_cpu_s") and row.get("total_cpu_s"):  # the same in CPU
        row["elastic_cpu_over_fresh"] = row["elastic_cpu_s"] / row["total_cpu_s"]
    if "elastic_refused" in got[0]:
        row["elastic_refused"] = got[0]["elastic_refused"]
    if "elastic_checks_ok" in got[0]:
        row["elastic_checks_ok"] = all(r.get("elastic_checks_ok") for r in got)
    row["checks_ok"] = all(r["checks_ok"] for r in got)
    row["steps"] = got[0]["steps"]
    row["planning"] = got[0].get("planning")  # as resolved; default_options: none given
    row["default_options"] = got[0].get("default_options", False)
    return row


def main() -> None:
    p = runner.parser(__doc__)
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument("--base-src")
    p.add_argument("--base-max", type=float, default=1e7)
    p.add_argument(
        "--base-planning",
        choices=["global", "indexed"],
        default="global",
        help="the planning --base-src runs with (indexed: before/after of indexed planning)",
    )
    p.add_argument(
        "--global-max",
        type=float,
        default=1e7,
        help="largest size planned with planning='global' too (~60 bytes per sequence)",
    )
    p.add_argument(
        "--checks",
        choices=["full", "share"],
        default="full",
        help="full: walk every rank's batches (exactly once, padding); share: this rank's limits "
        "and every 97th rank's step count only (the full walk at 10^8 takes minutes)",
    )
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
    runner.main(p, child, measure, RESULTS)


if __name__ == "__main__":
    main()
