"""What ``FileCache(verify="checksum")`` costs against the default ``verify="stat"``.

    python -m benchmarks.cache_verify [--files 4] [--seqs-per-file 400] [--reps 7] [--quick]

A corpus of HDF files in a local "store" (``file://`` URLs: the cache treats them like any
remote, without a network in the measurement), fetched once into a cache directory. Then, side by
side in one process in rotating order (load from other users of the shared machine hits every
variant alike), medians of the repetitions:

- ``local``: a new ``HDFSource`` over the store's files themselves, every sequence read once (what
  a user without the cache would run);
- ``stat``: the same over the URLs through the cache (each copy checked by one stat per open);
- ``checksum``: the same with ``verify="checksum"`` (each copy's MD5 at every open).

Reported as ratios: stat / local, checksum / local and checksum / stat for a full pass, and the
open-time check alone (``ensure`` of every cached copy) checksum / stat. Results:
``benchmarks/results/cache_verify.json`` (``--quick``: ``benchmarks/out/``, git-ignored).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable

import numpy as np

import seqloader as sl
from seqloader.sources.remote import FileCache

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results", "cache_verify.json")
QUICK_RESULTS = os.path.join(HERE, "out", "cache_verify.json")


def write_store(root: str, files: int, per_file: int) -> list[str]:
    rng = np.random.default_rng(0)
    paths = []
    for f in range(files):
        lens = rng.integers(100, 300, per_file)
        data = [rng.standard_normal((int(t), 80)).astype(np.float32) for t in lens]
        src = sl.MemorySource({"data": data}, tags=[f"f{f}/{i}" for i in range(per_file)])
        path = os.path.join(root, f"part{f:02d}.hdf")
        sl.write_hdf(path, src)
        paths.append(path)
    return paths


def read_all(source: sl.Source) -> int:
    n = 0
    for i in range(len(source)):
        n += int(source.read(i)["data"].shape[0])
    return n


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.cache_verify")
    p.add_argument("--files", type=int, default=4)
    p.add_argument("--seqs-per-file", type=int, default=400)
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--quick", action="store_true", help="2 files of 50 sequences, 3 reps")
    args = p.parse_args(argv)
    if args.quick:
        args.files, args.seqs_per_file, args.reps = 2, 50, 3
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        os.makedirs(store)
        paths = write_store(store, args.files, args.seqs_per_file)
        urls = [f"file://{p}" for p in paths]
        cache_dir = os.path.join(tmp, "cache")
        sl.HDFSource(urls, cache=FileCache(cache_dir))  # index at open
        fetcher = FileCache(cache_dir)
        remote = fetcher.stat(urls)
        for f in remote:
            fetcher.ensure(f)  # fetched once: every variant below reads cached copies
        total_bytes = sum(f.size for f in remote)

        def pass_of(make: Callable[[], sl.Source]) -> Callable[[], None]:
            return lambda: read_all(make())

        caches = {v: FileCache(cache_dir, verify=v) for v in ("stat", "checksum")}
        variants: dict[str, Callable[[], object]] = {
            "local": pass_of(lambda: sl.HDFSource(paths)),
            "stat": pass_of(lambda: sl.HDFSource(urls, cache=caches["stat"])),
            "checksum": pass_of(lambda: sl.HDFSource(urls, cache=caches["checksum"])),
            "open stat": lambda: [caches["stat"].ensure(f) for f in remote],
            "open checksum": lambda: [caches["checksum"].ensure(f) for f in remote],
        }
        times: dict[str, list[float]] = {k: [] for k in variants}
        names = list(variants)
        for rep in range(args.reps):
            for k in names[rep % len(names) :] + names[: rep % len(names)]:
                start = time.perf_counter()
                variants[k]()
                times[k].append(time.perf_counter() - start)
    med = {k: statistics.median(v) for k, v in times.items()}
    ratios = {
        "pass stat / local": med["stat"] / med["local"],
        "pass checksum / local": med["checksum"] / med["local"],
        "pass checksum / stat": med["checksum"] / med["stat"],
        "open checksum / open stat": med["open checksum"] / med["open stat"],
        "open checksum / pass local": med["open checksum"] / med["local"],
    }
    out = {
        "what": "FileCache verify='checksum' vs 'stat' (file:// store, page-cached copies)",
        "files": args.files,
        "seqs_per_file": args.seqs_per_file,
        "cached_bytes": total_bytes,
        "reps": args.reps,
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs",
        "ratios": {k: round(v, 3) for k, v in ratios.items()},
    }
    path = QUICK_RESULTS if args.quick else RESULTS
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as fh:
        json.dump(out, fh, indent=2)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
