"""Indexed against global planning with the options indexed planning took over from global planning.

    python -m benchmarks.indexed_options [--sizes 1e6,1e7] [--reps 3] [--cases ...] [--out FILE]
                                         [--base-src OLD/src]

For each size ``n`` (lengths uniform in 50..2000, ``max_seqs=200``, ``max_frames=20000``,
``ordering="laplace"`` unless the case names one, the lengths of ``benchmarks.scale``'s column store) and each option case,
a fresh process maps the lengths and times constructing the planner until it holds one rank's
batches of epoch 1 (``global_plan(...).rank_share``; wall time, and beside it the process' CPU
time, ``cpu_s``: on a loaded machine the less noisy): rank 517 of 1,024 (``random_seed_offset``:
rank 3 of 4, as every rank plans the whole data there and global planning plans every rank's).
``planning="indexed"`` maps the node's bucket index for the case's options (built once by the
parent, not timed: the node's one-time build). Memory: the child's peak resident set less the
file pages it maps, less what it held before planning, and psutil's unique set size beside it
(``benchmarks.runner.PrivateMemory``, ``benchmarks.scale``'s measure). After
the measured part, the child plans the whole epoch (every rank's batches) for its padding
(padded frames / real frames) and steps, and the steps on 8 ranks. ``--reps`` (>= 3) fresh processes per
configuration, alternating between the plannings; medians; ratios indexed / global from the same run
(``benchmarks.runner``). ``--base-src OLD/src`` adds the indexed planning of an older checkout
(``indexed@base``, in the same rotation) and the ratios ``*_vs_base`` (this checkout / it).
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

from benchmarks import runner
from benchmarks.machine import describe_machine, load_average
from benchmarks.runner import TIME_AND_MEMORY, FreshRuns, PrivateMemory, ratios, summary
from benchmarks.scale import lengths_store

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results", "indexed_options.json")
LIMITS = {"max_seqs": 200, "max_frames": 20_000, "ordering": "laplace"}
#: the filtered mixes' cases: three corpora at rates 0.5, 1, 2, one filter in epoch 1, 8 ranks;
#: global planning plans neither a filtered mix nor a buckets:N mix (its run: without them)
MIX3 = {"mix": {"c0": 0.5, "c1": 1.0, "c2": 2.0}, "corpora": 3, "world": 8}
FILTER = {"epoch_wise_filter": {"(1, 1)": {"max_mean_len": 700}}}
UNFILTERED, LAPLACE = {"epoch_wise_filter": None}, {"ordering": "laplace"}
CASES: dict[str, dict] = {
    "fixed_random_subset=0.5": {"fixed_random_subset": 0.5},
    "length filters + epoch_wise_filter": {
        "max_seq_length": 1800,
        "min_seq_length": 100,
        "epoch_wise_filter": {"(1, 1)": {"max_mean_len": 700}},
    },
    "fixed_random_seed": {"fixed_random_seed": 7},
    "random_seed_offset (4 ranks)": {"distribution": "random_seed_offset", "world": 4},
    "batch_cost=packed": {"batch_cost": "packed"},
    "max_packed_frames=15000": {"max_packed_frames": 15_000},
    # "files": the corpus cut into that many files of equal sequence counts
    "files + uneven=drop": {"distribution": "files", "uneven": "drop", "files": 4096},
    # "selection": epoch 1 keeps the sequences whose index % 10 is below it (a subdirs selection)
    "epoch selection (subdirs: 60 %)": {"selection": 6},
    "random_seed_offset + epoch_wise_filter + partition_epoch=2 (4 ranks)": {
        "distribution": "random_seed_offset",
        "epoch_wise_filter": {"(1, 1)": {"max_mean_len": 700}},
        "partition_epoch": 2,
        "world": 4,
    },
    # the fixed orders: global planning's batches, cut once per node (plan/indexed/fixed.py)
    "ordering=default": {"ordering": "default"},
    "ordering=sorted": {"ordering": "sorted"},
    "ordering=sorted_reverse partition_epoch=3": {
        "ordering": "sorted_reverse",
        "partition_epoch": 3,
    },
    # chunked: every slot a chunk, its padding and the limits by its window (``slot_costs``)
    "chunking 500:250 + files (4096 files)": {
        "chunking": "500:250",
        "distribution": "files",
        "files": 4096,
    },
    "chunking 500:250 + epoch_wise_filter": {
        "chunking": "500:250",
        "epoch_wise_filter": {"(1, 1)": {"max_mean_len": 700}},
    },
    "chunking 500:250 + random_seed_offset (4 ranks)": {
        "chunking": "500:250",
        "distribution": "random_seed_offset",
        "world": 4,
    },
    # random: greedy cuts of each epoch's keyed order, cut by every rank (plan/indexed/random_order.py)
    "ordering=random": {"ordering": "random"},
    "ordering=random partition_epoch=3": {"ordering": "random", "partition_epoch": 3},
    # fixed and random orders over files: global planning's plan, each rank's files cut greedily
    # (plan/indexed/files_cut.py); 8 ranks, 1,024 files
    **{
        f"ordering={o} + files (1024 files; 8 ranks)": {
            "ordering": o,
            "distribution": "files",
            "files": 1024,
            "world": 8,
        }
        for o in ("default", "reverse", "sorted", "sorted_reverse", "random")
    },
    # ... chunked: each rank's files' sequences' chunks cut greedily (plan/indexed/files_cut.py)
    **{
        f"ordering={o} + chunking 500:250 + files (1024 files; 8 ranks)": {
            "ordering": o,
            "chunking": "500:250",
            "distribution": "files",
            "files": 1024,
            "world": 8,
        }
        for o in ("default", "sorted", "random")
    },
    # fixed and random orders with a mix under shard: the mix's sub-epoch cut greedily
    # (plan/indexed/mix_cuts.py); "corpora": the corpus cut into that many equal corpora
    **{
        f"ordering={o} + mix (3 corpora; 8 ranks)": {
            "ordering": o,
            "mix": {"c0": 0.5, "c1": 1.0, "c2": 2.0},
            "corpora": 3,
            "world": 8,
        }
        for o in ("random", "default", "sorted")
    },
    # ... chunked: the mix's slots' chunks cut greedily (mix_cuts.chunked_mix_cut)
    **{
        f"ordering={o} + mix + chunking 500:250 (3 corpora; 8 ranks)": {
            "ordering": o,
            "mix": {"c0": 0.5, "c1": 1.0, "c2": 2.0},
            "chunking": "500:250",
            "corpora": 3,
            "world": 8,
        }
        for o in ("random", "default", "sorted")
    },
    # laplace and buckets:N with a mix, unfiltered: the filtered mixes' baselines below (global
    # planning plans no buckets:N mix: its laplace mix beside)
    **{
        f"ordering={o} + mix (3 corpora; 8 ranks)": {"ordering": o, **MIX3, "global": LAPLACE}
        for o in ("laplace", "buckets:30")
    },
    # epoch_wise_filter with a mix: each sub-epoch's slots filtered as one set (mix_filter.py;
    # random unchunked in blocks: mix_random_filter.py); against the unfiltered cases (global
    # planning plans no filtered mix: its unfiltered mix beside)
    **{
        f"ordering={o} + mix + epoch_wise_filter (3 corpora; 8 ranks)": {
            "ordering": o,
            **MIX3,
            **FILTER,
            "global": {**UNFILTERED, **(LAPLACE if o[0] == "b" else {})},
        }
        for o in ("random", "default", "sorted", "sort_bin_shuffle:.100", "laplace", "buckets:30")
    },
    # chunked: random by the rule in passes (mix_chunks_rule.py), sorted and sort_bin_shuffle by
    # the rule from the one-bucket-per-value index's counts (mix_sorted_filter.ChunkedValueMix)
    **{
        f"ordering={o} + mix + chunking 500:250 + epoch_wise_filter (3 corpora; 8 ranks)": {
            "ordering": o,
            "chunking": "500:250",
            **MIX3,
            **FILTER,
            "global": UNFILTERED,
        }
        for o in ("random", "sorted", "sort_bin_shuffle:.100")
    },
    # random and sort_bin_shuffle with a mix under random_seed_offset: each rank its own slots
    # of the shared cut (plan/indexed/mix_rank_slots.py); global planning plans no mix there:
    # its sharded mix beside
    **{
        f"ordering={o} + mix + random_seed_offset (3 corpora; 4 ranks)": {
            "ordering": o,
            **MIX3,
            "distribution": "random_seed_offset",
            "world": 4,
            "global": {"distribution": "shard"},
        }
        for o in ("random", "sort_bin_shuffle:.100")
    },
    # laplace with a mix and chunking: every chunk of the mix's slots (plan/indexed/mix_chunks.py)
    "mix + chunking 500:250 (3 corpora; 8 ranks)": {
        "mix": {"c0": 0.5, "c1": 1.0, "c2": 2.0},
        "chunking": "500:250",
        "corpora": 3,
        "world": 8,
    },
    # chunked, subset and filtered fixed and random orders (plan/indexed/fixed_chunks.py): 8 ranks
    **{
        f"ordering={o} + chunking 500:250 (8 ranks)": {
            "ordering": o,
            "chunking": "500:250",
            "world": 8,
        }
        for o in ("default", "sorted", "random")
    },
    "ordering=sorted + fixed_random_subset=0.5 (8 ranks)": {
        "ordering": "sorted",
        "fixed_random_subset": 0.5,
        "world": 8,
    },
    **{
        f"ordering={o} + epoch_wise_filter (8 ranks)": {
            "ordering": o,
            "epoch_wise_filter": {"(1, 1)": {"max_mean_len": 700}},
            "world": 8,
        }
        for o in ("default", "random")
    },
    # sort_bin_shuffle[_x2]: greedy cuts of each epoch's keyed RETURNN order, cut by every rank
    # (plan/indexed/sort_bins.py); 8 ranks
    **{
        f"ordering={o} (8 ranks)": {"ordering": o, "world": 8}
        for o in ("sort_bin_shuffle:.100", "sort_bin_shuffle_x2:.100")
    },
    "ordering=sort_bin_shuffle:.100 + mix (3 corpora; 8 ranks)": {
        "ordering": "sort_bin_shuffle:.100",
        "mix": {"c0": 0.5, "c1": 1.0, "c2": 2.0},
        "corpora": 3,
        "world": 8,
    },
    "ordering=sort_bin_shuffle:.100 partition_epoch=3 (8 ranks)": {
        "ordering": "sort_bin_shuffle:.100",
        "partition_epoch": 3,
        "world": 8,
    },
    # fixed and random orders with a mix over files: the mix's file pieces cut greedily per rank
    # (plan/indexed/files_mix_cut.py); global planning plans no mix over files: against its
    # sharded mix ("global": the options its run takes instead)
    **{
        f"ordering={o} + mix + files (1026 files; 3 corpora; 8 ranks)": {
            "ordering": o,
            "mix": {"c0": 0.5, "c1": 1.0, "c2": 2.0},
            "corpora": 3,
            "distribution": "files",
            "files": 1026,
            "world": 8,
            "global": {"distribution": "shard"},
        }
        for o in ("random", "sorted")
    },
    # ... chunked: each rank's pieces' slots expanded into their chunks, cut greedily
    # (files_mix_cut with files_cut's ChunkSlots); against global planning's sharded chunked mix
    **{
        f"ordering={o} + mix + chunking 500:250 + files (1026 files; 3 corpora; 8 ranks)": {
            "ordering": o,
            "mix": {"c0": 0.5, "c1": 1.0, "c2": 2.0},
            "chunking": "500:250",
            "corpora": 3,
            "distribution": "files",
            "files": 1026,
            "world": 8,
            "global": {"distribution": "shard"},
        }
        for o in ("random", "sorted", "sort_bin_shuffle:.100")
    },
}
#: the cases the smoke test (tests/test_bench_indexed_options.py) runs: all but the orderings that
#: plan like one it runs (files: random's; mix: random's and default's; chunked and filtered
#: default: sorted's and random's)
SMOKE = [
    name
    for name in CASES
    if not name.startswith(
        (
            *(f"ordering={o} + files" for o in ("default", "reverse", "sorted", "sorted_reverse")),
            # chunked over files: random's cut runs the fixed orders' code (files_cut)
            *(f"ordering={o} + chunking 500:250 + files" for o in ("default", "sorted")),
            "ordering=sorted + mix",
            "ordering=default + mix + chunking",  # plans like random's (chunked_mix_cut)
            "mix + chunking",  # its plans: tests/test_plan_indexed_mix_chunks.py
            "ordering=default + chunking",  # plans like sorted's (fixed_chunks)
            "ordering=default + epoch_wise_filter",  # plans like random's (a filtered part)
            "ordering=sort_bin_shuffle:.100 (",  # plans like the _x2 one (plan/indexed/sort_bins)
            "ordering=sort_bin_shuffle:.100 partition_epoch",
            "ordering=sorted + mix + files",  # plans like random's (files_mix_cut)
            # each rank's own slots: their plans, tests/test_plan_indexed_mix_per_rank.py
            *(
                f"ordering={o} + mix + random_seed_offset"
                for o in ("random", "sort_bin_shuffle:.100")
            ),
            # mixes planned from counts, and the filtered mixes that list their slots (their
            # plans: tests/test_plan_indexed_mix_filter.py)
            *(f"ordering={o} + mix (" for o in ("laplace", "buckets:30")),
            *(
                f"ordering={o} + mix + epoch_wise_filter"
                for o in ("default", "sorted", "sort_bin_shuffle:.100", "laplace", "buckets:30")
            ),
            *(
                f"ordering={o} + mix + chunking 500:250 + epoch_wise_filter"
                for o in ("random", "sorted", "sort_bin_shuffle:.100")
            ),
            # chunked mix over files: random's cut runs the same code (files_mix_cut)
            *(
                f"ordering={o} + mix + chunking 500:250 + files"
                for o in ("sorted", "sort_bin_shuffle:.100")
            ),
        )
    )
]
#: keys of a case that are not plan options
NOT_OPTIONS = ("world", "files", "selection", "corpora", "global")


def case_for(case: dict, planning: str) -> dict:
    """The case as ``planning`` runs it (``"global"``: what global planning's run takes instead,
    where it does not plan the case's options)."""
    if planning != "global":
        return case
    return {**case, **case.get("global", {})}


def plan_options(case: dict, planning: str) -> object:
    from seqloader.plan import PlanOptions

    opts = {k: v for k, v in case.items() if k not in NOT_OPTIONS}
    if opts.get("epoch_wise_filter"):  # JSON keys: "(first, last)"
        opts["epoch_wise_filter"] = {
            tuple(json.loads(k.replace("(", "[").replace(")", "]"))): v
            for k, v in opts["epoch_wise_filter"].items()
        }
    return PlanOptions(**{**LIMITS, **opts}, seed=3, planning=planning)  # type: ignore[arg-type]


def file_bounds(case: dict, n: int) -> np.ndarray | None:
    """The case's file layout (``"files": F``: F files of about equal sequence counts), or None."""
    if "files" not in case:
        return None
    return np.linspace(0, n, int(case["files"]) + 1).astype(np.int64)


def corpora_of(case: dict, n: int) -> object:
    """The case's corpora (``"corpora": C``: C named corpora of about equal sizes), or None."""
    from seqloader.plan.mix import Corpora

    if "corpora" not in case:
        return None
    count = int(case["corpora"])
    names = tuple(f"c{i}" for i in range(count))
    files = file_bounds(case, n)
    if files is not None:  # corpora of whole files (a mix over files needs them)
        at = np.linspace(0, len(files) - 1, count + 1).astype(np.int64)
        return Corpora(names, files[at])
    return Corpora(names, np.linspace(0, n, count + 1).astype(np.int64))


def selections(case: dict, n: int) -> tuple:
    """The case's epoch selections (``"selection": K``: epoch 1 keeps indices with ``i % 10 < K``)."""
    from seqloader.plan.selections import EpochSelection

    if "selection" not in case:
        return ()
    keep = np.arange(n) % 10 < int(case["selection"])
    return (EpochSelection(1, 1, keep, f"subdirs (i % 10 < {case['selection']})"),)


def index_store(store: str, n: int, name: str, case: dict, folder: str) -> str:
    """The node's bucket index for ``case`` (the admitted sequences of its options)."""
    from seqloader.plan.indexed.planner import IndexedPlanner
    from seqloader.sources.columns import ColumnStore, StoreWriter

    tag = "".join(c if c.isalnum() else "_" for c in name)
    path = os.path.join(folder, f"options-index-{n}-{tag}.seqcols")
    if os.path.exists(path):
        return path
    lengths = ColumnStore(store).column("len.data")
    files = file_bounds(case, len(lengths))
    options = plan_options(case, "indexed")
    corpora = corpora_of(case, len(lengths))
    index = IndexedPlanner(
        {"data": lengths},
        options,
        files=files,
        corpora=corpora,  # type: ignore[arg-type]
    ).index
    w = StoreWriter(path + ".tmp", f"options-index-{n}", {"n": n})
    for key, column in index.columns().items():
        w.add(key, np.asarray(column))
    w.close()
    os.replace(path + ".tmp", path)
    return path


def child(config: dict) -> dict:
    from seqloader.plan import make_planner
    from seqloader.plan.indexed.histogram import BucketIndex
    from seqloader.sources.columns import ColumnStore

    lengths = ColumnStore(config["store"]).column("len.data")
    world = config.get("world", 1024)
    rank = min(517, world - 1)
    case = case_for(config["case"], config["planning"])
    options = plan_options(case, config["planning"])
    # the source's declared inputs (its file layout, its selections' masks): made before timing
    files = file_bounds(case, len(lengths))
    chosen = selections(case, len(lengths))
    corpora = corpora_of(case, len(lengths))
    with PrivateMemory() as memory:
        t0, c0 = time.perf_counter(), time.process_time()
        index = None
        if config["planning"] == "indexed":
            cols = ColumnStore(config["index"])  # the node's index, memory-mapped
            index = BucketIndex.from_columns({k: cols.column(k) for k in cols.names})
        planner = make_planner(
            {"data": lengths},
            options,  # type: ignore[arg-type]
            files=files,
            index=index,
            selections=chosen,
            corpora=corpora,
        )
        plan = planner.global_plan(1, world)
        share = plan.rank_share(rank)
        t1, c1 = time.perf_counter(), time.process_time()
    # not measured: the whole epoch, every rank's batches, for padding and the limits
    b = plan.batches
    lens = np.asarray(lengths)[b.seqs].astype(np.int64)
    if b.chunks is not None:  # a chunk's window (frames cost: its cost units)
        lens = np.asarray(planner.slot_costs(b), dtype=np.int64)
    sizes = np.diff(b.bounds)
    longest = np.maximum.reduceat(lens, b.bounds[:-1]) if len(sizes) else lens
    sums = np.add.reduceat(lens, b.bounds[:-1]) if len(sizes) else lens
    padded = int((sizes * longest).sum())
    o = planner.options
    ok = len(share) == plan.steps and bool((sizes <= LIMITS["max_seqs"]).all())
    if o.cost.packed:
        ok = ok and bool((sums <= LIMITS["max_frames"]).all())
    else:
        ok = ok and bool((sizes * longest <= LIMITS["max_frames"]).all())
    if o.max_packed_frames is not None:
        ok = ok and bool((sums <= o.max_packed_frames).all())
    return {
        "total_s": t1 - t0,
        "cpu_s": c1 - c0,  # the process' CPU time: what the load on a shared machine moves least
        **memory.fields(),
        "steps": int(plan.steps),
        "dropped": int(plan.dropped),
        "real": int(lens[b.real].sum()),
        "padding": padded / max(int(lens[b.real].sum()), 1),
        "steps_8": int(planner.global_plan(1, 8).steps) if world > 8 else int(plan.steps),
        "checks_ok": ok,
    }


def measure(args: argparse.Namespace) -> dict:
    folder = runner.data_folder(args)
    runs = FreshRuns("benchmarks.indexed_options", args.reps, args.timeout, args.base_src)
    plannings = ("indexed", "global") + (("indexed@base",) if args.base_src else ())
    medians = ("total_s", "cpu_s", "private_bytes", "uss_bytes")
    firsts = ("steps", "dropped", "steps_8", "padding")
    names = {
        **TIME_AND_MEMORY,
        "cpu_ratio": "cpu_s",
        "padding_ratio": "padding",
        "steps_ratio": "steps",
        "steps_8_ratio": "steps_8",
    }
    rows = []
    for size in args.sizes:
        store = lengths_store(size, folder)
        for name, case in CASES.items():
            if name not in args.cases.split(","):
                continue
            index = index_store(store, size, name, case, folder)
            configs = {
                planning: {
                    "case": case,
                    "world": case.get("world", 1024),
                    "store": store,
                    "index": index,
                    "planning": planning.split("@")[0],
                    "label": f"{name} {size} {planning}",
                    **({"code": "base"} if planning.endswith("@base") else {}),
                }
                for planning in plannings
            }
            row: dict = {"case": name, "n": size}
            for planning, got in runs.side_by_side(configs).items():
                row[planning] = summary(got, medians, firsts)
            row.update(ratios(row["indexed"], row["global"], names))
            if args.base_src:  # this checkout's indexed planning against the base's
                row.update(ratios(row["indexed"], row["indexed@base"], names, "_vs_base"))
            print(json.dumps(row), flush=True)
            rows.append(row)
    return {"machine": describe_machine(), "load_average": load_average(), "limits": LIMITS,
            "reps": args.reps, "base_src": args.base_src, "rows": rows}  # fmt: skip


def main() -> None:
    p = runner.parser(__doc__)
    p.add_argument("--cases", default=",".join(CASES))
    p.add_argument(
        "--base-src",
        help="src/ of another checkout: its indexed planning measured beside (indexed@base)",
    )
    runner.main(p, child, measure, RESULTS)


if __name__ == "__main__":
    main()
