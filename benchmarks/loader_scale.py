"""One rank of 1,024 constructing ``SeqLoader(planning="indexed")`` over memory-mapped metadata:
time and private memory from the constructor to holding the rank's plan of epoch 1.

    python -m benchmarks.loader_scale [--sizes 1e7,1e8] [--reps 2] [--base-src DIR] [--out FILE]
                                      [--profile N] [--source store|hdf] [--cases ...]

The corpus: one column store file per node (``seqloader.sources.columns``) with ``n`` int32
lengths (uniform in 50..2000), ``n`` tags ``corpus/rec<i>/seg<i>`` (a strings column) and the
bounds of 10^5 equal files, opened as ``StoreSource`` (below: a ``Source`` whose metadata are
views of the store, as ``HDFSource``'s are once its store is built); ``--source hdf``: one RETURNN
HDF file (``benchmarks.metadata``'s corpus) opened as ``HDFSource``, ``shard`` cases only. A
first child builds the node's stores (the bucket index, and whatever the code keeps per node), in
a fresh ``XDG_CACHE_HOME``; the measured children then open them, as every later rank of the
node does.

Each measured child (a fresh process, rotating between this checkout and ``--base-src``) opens the
source, then times ``SeqLoader(source, rank=517, world_size=1024, planning="indexed", ...)`` and
``loader.global_plan(1).rank_share(517)`` (torch and seqloader imported before, as in a training
script). Private memory: the peak of ``RssAnon`` (anonymous pages: not the mapped store, which
is page cache shared by the node), sampled every millisecond by a thread, less its value before
construction. ``--profile N`` runs ``cProfile`` on one child of
``N`` sequences and prints the top entries instead. Medians; ``results/loader_scale.json`` keeps
one entry per run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from typing import Any

import numpy as np

from benchmarks.fresh import run_child
from benchmarks.machine import describe_machine, load_average
from benchmarks.side_by_side import append_run

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results", "loader_scale.json")
WORLD = 1024
RANK = 517
FILES = 100_000
CASES = {
    "shard laplace": {"ordering": "laplace", "distribution": "shard"},
    "shard buckets:30": {"ordering": "buckets:30", "distribution": "shard"},
    "files laplace": {"ordering": "laplace", "distribution": "files"},
}
LIMITS = {"max_seqs": 200, "max_frames": 20_000}
_STEP = 5_000_000


def _tag_chunk(a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
    """Tags ``a..b-1`` as utf-8 bytes and their lengths."""
    idx = np.arange(a, b).astype(str)
    tags = np.char.add(np.char.add(np.char.add("corpus/rec", idx), "/seg"), idx)
    raw = tags.astype(bytes)
    sizes = np.char.str_len(raw).astype(np.int64)
    width = raw.dtype.itemsize
    flat = np.frombuffer(raw.tobytes(), np.uint8).reshape(len(raw), width)
    keep = np.arange(width)[None, :] < sizes[:, None]
    return flat[keep], sizes


def corpus_store(n: int, folder: str) -> str:
    """The node's metadata store of ``n`` sequences (written once, in chunks)."""
    from seqloader.sources.base import fingerprint_of
    from seqloader.sources.columns import StoreWriter

    path = os.path.join(folder, f"corpus-{n}.seqcols")
    if os.path.exists(path):
        return path
    rng = np.random.default_rng(0)
    w = StoreWriter(path, f"loader-scale-{n}")
    w.add_chunks(
        "len.data",
        np.int32,
        (),
        (rng.integers(50, 2001, min(_STEP, n - a)).astype(np.int32) for a in range(0, n, _STEP)),
    )
    sizes: list[np.ndarray] = []

    def tag_bytes() -> Any:
        for a in range(0, n, _STEP):
            data, s = _tag_chunk(a, min(n, a + _STEP))
            sizes.append(s)
            yield data

    w.add_chunks("tags.bytes", np.uint8, (), tag_bytes())

    def offsets() -> Any:
        end = 0
        yield np.zeros(1, np.int64)
        for s in sizes:
            c = np.cumsum(s) + end
            end = int(c[-1])
            yield c

    w.add_chunks("tags.offsets", np.int64, (), offsets())
    w.add("file_bounds", (np.arange(FILES + 1, dtype=np.int64) * n) // FILES)
    store = w.close()
    src = StoreSource(path)
    fp = fingerprint_of(src.tags, {"data": src.lengths("data")}, src.schema, "store")
    del store, src
    with open(path + ".fingerprint", "w") as fh:
        fh.write(fp)
    return path


class StoreSource:
    """A source whose metadata are views of a column store (what ``HDFSource`` holds once its
    node store is built); reads return zeros (construction and planning read no data)."""

    def __init__(self, path: str) -> None:
        from seqloader.sources.base import KeySpec
        from seqloader.sources.columns import ColumnStore

        self._path = path
        self._store = ColumnStore(path)
        self._schema = {"data": KeySpec(np.dtype(np.float32), (8,))}
        self._lengths = {"data": self._store.column("len.data")}
        self._tags = self._store.strings("tags")
        self._files = self._store.column("file_bounds")

    def __len__(self) -> int:
        return len(self._tags)

    @property
    def keys(self) -> tuple[str, ...]:
        return ("data",)

    @property
    def schema(self) -> Any:
        return self._schema

    def lengths(self, key: str) -> np.ndarray:
        return self._lengths[key]

    @property
    def tags(self) -> Any:
        return self._tags

    def tag(self, index: int) -> str:
        return self._tags[index]

    def file_layout(self) -> np.ndarray:
        return self._files

    def read(self, index: int) -> dict[str, np.ndarray]:
        return {"data": np.zeros((int(self._lengths["data"][index]), 8), np.float32)}

    def fingerprint(self) -> str:
        with open(self._path + ".fingerprint") as fh:
            return fh.read()

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled (to spawned workers) as its path, as ``HDFSource`` is: the lengths column
        is a view of the mapped store and would otherwise be pickled as data."""
        return (StoreSource, (self._path,))

    def __repr__(self) -> str:
        return f"StoreSource({self._path!r})"


def _rss_anon() -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
    return 0


class PeakAnon:
    """The peak of ``RssAnon`` while the block runs, sampled by a thread."""

    def __enter__(self) -> PeakAnon:
        self.before = self.peak = _rss_anon()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def _watch(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, _rss_anon())
            time.sleep(0.001)

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _rss_anon())


def hdf_corpus(n: int, folder: str) -> str:
    """One RETURNN HDF file of ``n`` sequences (``benchmarks.metadata``'s corpus: the same
    lengths distribution and tags), for ``--source hdf``."""
    from benchmarks.metadata import write_corpus

    path = os.path.join(folder, f"corpus-{n}.hdf")
    if not os.path.exists(path):
        write_corpus(path + ".tmp", n)
        os.replace(path + ".tmp", path)
    return path


def open_source(config: dict) -> Any:
    """``StoreSource`` over the column store, or ``HDFSource`` (its metadata store in the
    folder's ``hdf-index``) for ``--source hdf``."""
    if config.get("source") == "hdf":
        from seqloader.sources.hdf import HDFSource

        index = os.path.join(os.path.dirname(config["store"]), "hdf-index")
        return HDFSource(config["store"], index_dir=index)
    return StoreSource(config["store"])


def child(config: dict) -> dict:
    import torch  # noqa: F401 - a training script has torch imported before it builds a loader

    from seqloader.torch.loader import SeqLoader

    source = open_source(config)
    options = {"ordering": config["ordering"], "distribution": config["distribution"]}
    with PeakAnon() as mem:
        t0 = time.perf_counter()
        loader = SeqLoader(
            source, rank=RANK, world_size=WORLD, seed=3, planning="indexed", **options, **LIMITS
        )
        t1 = time.perf_counter()
        share = loader.global_plan(1).rank_share(RANK)
        t2 = time.perf_counter()
    sizes = np.diff(share.bounds)
    ok = bool(sizes.min() >= 1 and sizes.max() <= LIMITS["max_seqs"])
    return {
        "construct_s": t1 - t0,
        "plan_s": t2 - t1,
        "total_s": t2 - t0,
        "private_bytes": mem.peak - mem.before,
        "rank_batches": len(sizes),
        "checks_ok": ok,
    }


def profile(n: int, case: str, folder: str) -> None:
    import cProfile
    import pstats

    store = corpus_store(n, folder)
    os.environ["XDG_CACHE_HOME"] = os.path.join(folder, "cache")
    config = {"store": store, **CASES[case]}
    child(config)  # the node's stores
    prof = cProfile.Profile()
    prof.enable()
    out = child(config)
    prof.disable()
    print(json.dumps(out))
    pstats.Stats(prof).sort_stats("cumulative").print_stats(35)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1e7")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--base-src", default=None)
    ap.add_argument("--base-max", type=float, default=1e8)
    ap.add_argument("--folder", default=None, help="where the corpus stores are kept")
    ap.add_argument("--out", default=RESULTS)
    ap.add_argument("--profile", type=float, default=None)
    ap.add_argument(
        "--source", choices=("store", "hdf"), default="store", help="hdf: shard cases only"
    )
    ap.add_argument("--child", default=None)
    args = ap.parse_args()
    if args.child is not None:
        print(json.dumps(child(json.loads(args.child))))
        return
    folder = args.folder or tempfile.mkdtemp(prefix="loader-scale-")
    if args.profile:
        profile(int(args.profile), args.cases.split(",")[0], folder)
        return
    rows = []
    for size in args.sizes.split(","):
        n = int(float(size))
        t0 = time.perf_counter()
        store = corpus_store(n, folder) if args.source == "store" else hdf_corpus(n, folder)
        print(f"n={n}: corpus store {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        codes = ["new"] + (["base"] if args.base_src and n <= args.base_max else [])
        for case in args.cases.split(","):
            results: dict[str, list[dict]] = {c: [] for c in codes}
            for code in codes:  # the node's stores, once per code (each its own cache folder)
                cfg = {"store": store, **CASES[case], "code": code, "source": args.source}
                os.environ["XDG_CACHE_HOME"] = os.path.join(folder, f"cache-{code}")
                t0 = time.perf_counter()
                run_child("benchmarks.loader_scale", cfg, args.base_src, 3600)
                results[code + ":node"] = [{"first_s": time.perf_counter() - t0}]
            for _ in range(args.reps):
                for code in codes:
                    os.environ["XDG_CACHE_HOME"] = os.path.join(folder, f"cache-{code}")
                    cfg = {
                        "store": store,
                        **CASES[case],
                        "code": code,
                        "label": f"{n} {case}",
                        "source": args.source,
                    }
                    results[code].append(
                        run_child("benchmarks.loader_scale", cfg, args.base_src, 3600)
                    )
            row: dict[str, Any] = {"n": n, "case": case, "source": args.source}
            row["load"] = load_average()
            for code in codes:
                runs = results[code]
                row[code] = {
                    k: statistics.median(r[k] for r in runs)
                    for k in ("construct_s", "plan_s", "total_s", "private_bytes")
                }
                row[code]["checks_ok"] = all(r["checks_ok"] for r in runs)
                row[code]["node_first_child_s"] = results[code + ":node"][0]["first_s"]
            if "base" in row:
                row["time_ratio"] = row["new"]["total_s"] / row["base"]["total_s"]
                row["memory_ratio"] = row["new"]["private_bytes"] / max(
                    row["base"]["private_bytes"], 1
                )
            print(json.dumps(row), file=sys.stderr)
            rows.append(row)
    record = {"machine": describe_machine(), "world": WORLD, "rank": RANK, "rows": rows}
    append_run(record, args.out)


if __name__ == "__main__":
    main()
