"""The node's one-time builds, before and after, side by side: what the first process of a node
pays before any rank holds a plan (default options: ``planning="auto"``, indexed for these cases).

    python -m benchmarks.node_builds --base-src OLD/src [--sizes 1e7] [--reps 3] [--out FILE]

The corpus is ``benchmarks.loader_scale``'s (one column store file: int32 lengths uniform in
50..2000, tags ``corpus/rec<i>/seg<i>``, 10^5 equal files), opened as its ``StoreSource``. Each
measurement runs in a fresh process, alternating between this checkout and ``--base-src``:

- ``hdf metadata``: ``HDFSource(path, index_dir=...)`` over one HDF file of the same ``n``
  sequences written as RETURNN's ``SimpleHDFWriter`` does (variable-length tags; 1-3 frames
  each, ``hdf_corpus``): the metadata store built from the file, what the first open on a node
  pays; its digest is the corpus fingerprint;
- ``verdict``: the duplicate-tag screen of every tag (``trainer.checks.duplicate_tags``: hash
  every tag, find repeated hashes), as the first process computes it for the node's file;
- ``index <case>``: the bucket index for the case's options (``IndexedPlanner`` without a
  prebuilt index, what ``loading/bucket_store.py`` runs under the file's lock);
- ``first loader <case>``: ``SeqLoader(source, rank=517, world_size=1024, ...)`` with the
  default options (planning ``auto``; the planning it resolved to is recorded) in an empty
  ``XDG_CACHE_HOME``: both builds, written to the node's files (fsynced), then
  the rank's plan; what ``seqloader prepare`` does ahead of a job.

Time is wall time; memory the peak of ``RssAnon`` (private, anonymous pages; the mapped corpus is
page cache) above its value before, sampled every millisecond. Medians over ``--reps``; the
results append to ``results/node_builds.json``. Each child checks its result (no repeated tags;
the index holds every sequence once, in the base's layout: compared by digest across codes).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from typing import Any

from benchmarks.fresh import run_child
from benchmarks.loader_scale import CASES, LIMITS, RANK, WORLD, PeakAnon, StoreSource, corpus_store
from benchmarks.machine import describe_machine, load_average
from benchmarks.side_by_side import append_run

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results", "node_builds.json")
BUILD_CASES = ("shard buckets:30", "files laplace")
#: the node stage's options (one HDF file: ``distribution="files"`` has no file per rank)
NODE_CASE = "shard buckets:30"


def child(config: dict) -> dict:
    import torch  # noqa: F401 - as in a training script

    source: Any = StoreSource(config["store"]) if config.get("store") else None
    stage, case = config["stage"], config.get("case")
    options = {**CASES[case], **LIMITS} if case else {}
    built: Any = None
    planning = "indexed" if stage == "index" else None
    with PeakAnon() as mem:
        t0 = time.perf_counter()
        if stage == "verdict":
            from seqloader.trainer.checks import duplicate_tags

            built = duplicate_tags(source.tags)
        elif stage == "hdf metadata":
            from seqloader.sources.hdf import HDFSource

            opened = HDFSource(config["hdf"], index_dir=config["cache"])
            built = opened.fingerprint()
            opened.close()
        elif stage == "index":
            from seqloader.plan.indexed.planner import IndexedPlanner
            from seqloader.plan.options import PlanOptions

            plan_options = PlanOptions(seed=3, **options)  # the defaults: planning "auto"
            if plan_options.resolved_planning != "indexed":
                raise RuntimeError(f"{case}: the default options do not resolve to indexed")
            built = IndexedPlanner(
                {"data": source.lengths("data")},
                plan_options,
                files=source.file_layout() if options["distribution"] == "files" else None,
            ).index
        elif stage in ("node first", "node other"):
            return _node(config, options, mem.before)
        else:
            from seqloader.torch.loader import SeqLoader

            os.environ["XDG_CACHE_HOME"] = config["cache"]
            loader = SeqLoader(source, rank=RANK, world_size=WORLD, seed=3, **options)  # defaults
            loader.global_plan(1).rank_share(RANK)
            planning = loader.planner.options.planning
        seconds = time.perf_counter() - t0
    # the result's digest, after the measured block (hashing copies the arrays)
    if built is None or isinstance(built, str):  # none, or the HDF corpus's fingerprint
        digest = built or ""
    else:
        digest = str(len(built)) if stage == "verdict" else _digest(built)
    return {
        "seconds": seconds,
        "private_bytes": mem.peak - mem.before,
        "digest": digest,
        "planning": planning,
    }


def _node(config: dict, options: dict, before: int) -> dict:
    """A process of the node over the HDF corpus, timed step by step: open the file
    (``HDFSource``: the metadata store, built by the node's first process, mapped by the
    others), ``SeqLoader`` with the default options (the duplicate-tag verdict and the bucket
    index: built or mapped), rank 517's plan of epoch 1. Each step's wall time and the peak of
    private memory (``RssAnon``) above the process's value before the first step."""
    from seqloader.sources.hdf import HDFSource
    from seqloader.torch.loader import SeqLoader

    os.environ["XDG_CACHE_HOME"] = config["cache"]
    steps: dict[str, list[float]] = {}
    started, cpu = time.perf_counter(), time.process_time()
    with PeakAnon() as mem:
        source = HDFSource(config["hdf"], index_dir=os.path.join(config["cache"], "hdf"))
    steps["open"] = [time.perf_counter() - started, mem.peak - before]
    t0 = time.perf_counter()
    with PeakAnon() as mem:
        loader = SeqLoader(source, rank=RANK, world_size=WORLD, seed=3, **options)
    steps["loader"] = [time.perf_counter() - t0, mem.peak - before]
    t0 = time.perf_counter()
    with PeakAnon() as mem:
        share = loader.global_plan(1).rank_share(RANK)
    steps["plan"] = [time.perf_counter() - t0, mem.peak - before]
    seconds = time.perf_counter() - started
    cpu = time.process_time() - cpu  # this process's CPU time (all its threads)
    import h5py

    with h5py.File(config["hdf"], "r") as f:
        tags_dtype = str(f["seqTags"].dtype) + (
            " (variable-length)"
            if (h5py.check_string_dtype(f["seqTags"].dtype) or None) is not None
            and h5py.check_string_dtype(f["seqTags"].dtype).length is None
            else ""
        )
    return {
        "seconds": seconds,
        "private_bytes": max(v[1] for v in steps.values()),
        "cpu_seconds": cpu,
        "digest": f"{source.fingerprint()} {len(share)} batches",
        "planning": loader.planner.options.planning,
        "steps": steps,
        "seq_tags": tags_dtype,
    }


def _digest(index: Any) -> str:
    columns = index.columns()
    h = hashlib.sha256()
    for name in sorted(columns):
        h.update(name.encode())
        h.update(str(columns[name].dtype).encode())
        h.update(columns[name].tobytes())
    return h.hexdigest()[:16]


def hdf_corpus(n: int, folder: str, block: int = 1 << 20) -> str:
    """An HDF file of ``n`` sequences as RETURNN's ``SimpleHDFWriter`` lays it out (variable-length
    utf-8 tags ``corpus/rec<i>/seg<i>``, int32 ``seqLengths`` with the dummy ``classes`` column,
    ``inputs`` float32 ``[T, 1]``),
    1-3 frames each so that the file stays small: what ``HDFSource`` builds its metadata store
    from. Written once per size, in blocks."""
    import h5py
    import numpy as np

    path = os.path.join(folder, f"corpus-{n}.hdf")
    if os.path.exists(path):
        return path
    lengths = (np.arange(n, dtype=np.int64) % 3 + 1).astype(np.int32)
    with h5py.File(path + ".part", "w") as f:
        f.create_dataset("seqLengths", data=np.stack([lengths, lengths], axis=1))  # + classes
        tags = f.create_dataset("seqTags", shape=(n,), dtype=h5py.string_dtype("utf-8"))
        for a in range(0, n, block):
            ids = range(a, min(n, a + block))
            tags[a : a + len(ids)] = np.array([f"corpus/rec{i}/seg{i}" for i in ids], object)
        f.create_dataset("inputs", data=np.zeros((int(lengths.sum()), 1), np.float32))
        f.attrs["inputPattSize"] = 1
        f.attrs["numSeqs"] = n
    os.replace(path + ".part", path)
    return path


def stages() -> list[tuple[str, str | None]]:
    out: list[tuple[str, str | None]] = [("hdf metadata", None), ("verdict", None)]
    out += [("index", c) for c in BUILD_CASES]
    out += [("first loader", c) for c in BUILD_CASES]
    out += [("node", NODE_CASE)]
    return out


def _row(
    n: int, stage: str, case: str | None, loads: list, codes: list[str], runs: dict[str, list]
) -> dict[str, Any]:
    """One result row: each code's medians, its runs and digests, and the ratios."""
    row: dict[str, Any] = {"n": n, "stage": stage, "case": case, "load": loads}
    for code in codes:
        row[code] = {
            k: statistics.median(r[k] for r in runs[code]) for k in ("seconds", "private_bytes")
        }
        row[code]["runs"] = [(r["seconds"], r["private_bytes"]) for r in runs[code]]
        row[code]["digest"] = sorted({r["digest"] for r in runs[code]})
        # the planning the default options resolved to (None: a stage that plans nothing)
        row[code]["planning"] = sorted({str(r.get("planning")) for r in runs[code]})
        if runs[code] and "cpu_seconds" in runs[code][0]:
            row[code]["cpu_seconds"] = statistics.median(r["cpu_seconds"] for r in runs[code])
        if runs[code] and "steps" in runs[code][0]:
            row[code]["steps"] = [r["steps"] for r in runs[code]]
            row["seq_tags"] = runs[code][0]["seq_tags"]
    if "base" in row:
        row["same_result"] = row["new"]["digest"] == row["base"]["digest"]
        row["time_ratio"] = row["new"]["seconds"] / row["base"]["seconds"]
        row["memory_ratio"] = row["new"]["private_bytes"] / max(row["base"]["private_bytes"], 1)
    print(json.dumps({k: v for k, v in row.items() if k != "load"}), file=sys.stderr)
    return row


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1e7")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--base-src", required=False, default=None)
    ap.add_argument("--folder", default=None, help="where the corpus stores are kept")
    ap.add_argument("--stages", default=None, help="e.g. verdict,index (default: all)")
    ap.add_argument("--out", default=RESULTS)
    ap.add_argument("--label", default=None, help="the run's label in the result file")
    ap.add_argument("--child", default=None)
    args = ap.parse_args()
    if args.child is not None:
        print(json.dumps(child(json.loads(args.child))))
        return
    folder = args.folder or tempfile.mkdtemp(prefix="node-builds-")
    codes = ["new"] + (["base"] if args.base_src else [])
    wanted = None if args.stages is None else set(args.stages.split(","))
    rows = []
    for size in args.sizes.split(","):
        n = int(float(size))
        store = None
        for stage, case in stages():
            if wanted is not None and stage not in wanted:
                continue
            if store is None and stage not in ("hdf metadata", "node"):
                store = corpus_store(n, folder)
            hdf = hdf_corpus(n, folder) if stage in ("hdf metadata", "node") else None
            # the node stage: the first process (empty cache), then another on its stores
            parts = ["node first", "node other"] if stage == "node" else [stage]
            runs: dict[str, dict[str, list[dict]]] = {p: {c: [] for c in codes} for p in parts}
            loads = []
            for _ in range(args.reps):
                for code in codes:
                    cache = tempfile.mkdtemp(prefix="cache-", dir=folder)
                    try:
                        for part in parts:
                            cfg = {"store": store, "stage": part, "case": case, "code": code}
                            cfg["hdf"], cfg["cache"] = hdf, cache
                            cfg["label"] = f"{n} {part} {case} {code}"
                            result = run_child("benchmarks.node_builds", cfg, args.base_src, 7200)
                            runs[part][code].append(result)
                    finally:
                        shutil.rmtree(cache, ignore_errors=True)
                    loads.append(load_average())
            for part in parts:
                rows.append(_row(n, part, case, loads, codes, runs[part]))
    record: dict[str, Any] = {"machine": describe_machine(), "rows": rows}
    if args.label:
        record["label"] = args.label
    append_run(record, args.out)


if __name__ == "__main__":
    main()
