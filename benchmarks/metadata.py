"""Per-sequence metadata of an HDF corpus: private memory of a rank and its DataLoader workers,
and open time, with the metadata memory-mapped from one file per node vs. held per process.

    python -m benchmarks.metadata [--sizes 1e6,1e7] [--reps 3] --base-src DIR [--out FILE]

The corpus: one RETURNN HDF file of ``n`` sequences (lengths uniform in 50..2000, tags
``corpus/rec<i>/seg<i>``), written with h5py; its ``inputs`` dataset is chunked and never written
(HDF5 allocates no chunk), since opening reads only ``seqLengths``, ``seqTags`` and shapes.

Each configuration runs in a fresh process (``benchmarks.fresh``), rotating between the code
under test and ``--base-src`` (an older checkout's ``src/``, where ``HDFSource`` read its metadata
into private arrays of every process):

1. ``HDFSource(path)`` is opened (timed: ``open_s``), and its fingerprint taken (``fingerprint_s``;
   the loader asks for it at construction). The new code runs a *first open* (the metadata store
   is built, in a fresh index directory) and a *second open* (it is mapped).
2. A DataLoader with 2 workers (``fork`` or ``spawn``) gets a dataset holding the source; each
   worker touches all of the metadata a reader uses (sums every length column, reads the file
   bounds and one batch of tags) and reports its memory.
3. Memory is private memory, not RSS: ``Pss_Anon + Pss_Shmem`` of ``/proc/<pid>/smaps_rollup``
   (anonymous pages, each shared page split among the processes that map it, so the sum over the
   rank and its workers counts every physical page once; page-cache pages of mapped files, the
   store included, are not private). From it, the same figure of a run with a corpus of 1,000
   sequences (same code, same start method) is subtracted: what the metadata of ``n`` sequences
   costs the rank, each worker, and all three together.

Medians over ``--reps``; ratios after/before. ``results/metadata.json`` keeps one entry per run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np

from benchmarks.fresh import run_child
from benchmarks.machine import describe_machine, load_average

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results", "metadata.json")
TINY = 1000  # the baseline corpus: what a rank and its workers hold without metadata


def write_corpus(path: str, n: int, seed: int = 0) -> None:
    """A RETURNN HDF file of ``n`` sequences whose data is never written (see the docstring)."""
    import h5py

    rng = np.random.default_rng(seed)
    lengths = rng.integers(50, 2001, size=n).astype(np.int32)
    width = len(f"corpus/rec{n}/seg{n}")
    idx = np.arange(n).astype(str)
    tags = np.char.add(np.char.add(np.char.add("corpus/rec", idx), "/seg"), idx).astype(f"S{width}")
    with h5py.File(path, "w") as f:
        total = int(lengths.sum(dtype=np.int64))
        f.create_dataset("inputs", shape=(total, 8), dtype="float32", chunks=(1 << 14, 8))
        f.create_dataset("seqLengths", data=lengths[:, None])
        f.create_dataset("seqTags", data=tags)
        f.create_group("targets/data")
        f.create_group("targets/size")


def private_bytes(pid: int | str = "self") -> int:
    """``Pss_Anon + Pss_Shmem`` of one process (bytes)."""
    total = 0
    with open(f"/proc/{pid}/smaps_rollup") as fh:
        for line in fh:
            if line.startswith(("Pss_Anon:", "Pss_Shmem:")):
                total += int(line.split()[1]) * 1024
    return total


class Touch:
    """A dataset whose items make a worker touch the source's metadata and report its memory."""

    def __init__(self, source: object) -> None:
        self.source = source

    def __len__(self) -> int:
        return 2

    def __getitem__(self, i: int) -> dict:
        import torch

        src = self.source
        total = sum(int(np.asarray(src.lengths(k)).sum()) for k in src.keys)
        bounds = src.file_layout()
        picks = np.random.default_rng(i).integers(0, len(src), size=64)
        tags = src.tags_at(picks)
        info = torch.utils.data.get_worker_info()
        time.sleep(0.3)  # both workers alive together when the parent samples
        return {
            "worker": -1 if info is None else info.id,
            "private": private_bytes(),
            "frames": total,
            "files": len(bounds) - 1,
            "tag": tags[0],
        }


def child(config: dict) -> dict:
    import torch

    import seqloader as sl
    from benchmarks.metadata import Touch as ByName  # pickled by module name (spawn)

    kwargs = {} if config["code"] == "base" else {"index_dir": config["index_dir"]}
    before = private_bytes()
    t0 = time.perf_counter()
    src = sl.HDFSource(config["path"], **kwargs)
    open_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    src.fingerprint()
    fingerprint_s = time.perf_counter() - t0
    rank_bytes = private_bytes() - before
    loader = torch.utils.data.DataLoader(
        ByName(src),
        batch_size=None,
        num_workers=2,
        multiprocessing_context=config["start"],
    )
    workers = [item["private"] for item in loader]
    return {
        "open_s": open_s,
        "fingerprint_s": fingerprint_s,
        "rank_bytes": rank_bytes,
        "rank_total_bytes": private_bytes(),
        "worker_bytes": workers,
        "built": bool(getattr(src, "index_built", False)),
        "lengths_dtype": str(src.lengths("data").dtype),
    }


def measure(path: str, n: int, code: str, start: str, opening: str, base_src: str, timeout: float):
    """One fresh-process run; ``opening``: "first" (a fresh index directory) or "second"."""
    index_dir = os.path.join(os.path.dirname(path), "index")
    if opening == "first":
        shutil.rmtree(index_dir, ignore_errors=True)
    config = {"code": code, "path": path, "start": start, "index_dir": index_dir, "n": n}
    config["label"] = f"{code} {start} n={n} {opening}"
    return run_child("benchmarks.metadata", config, base_src, timeout)


def median_of(runs: list[dict], key: str) -> float:
    return float(statistics.median(r[key] for r in runs))


def summary(runs: list[dict], tiny: dict) -> dict:
    """Medians, less the tiny corpus' memory: rank, each worker, rank + workers."""
    worker = statistics.median(w for r in runs for w in r["worker_bytes"])
    tiny_worker = statistics.median(tiny["worker_bytes"])
    node = statistics.median(r["rank_total_bytes"] + sum(r["worker_bytes"]) for r in runs)
    tiny_node = tiny["rank_total_bytes"] + sum(tiny["worker_bytes"])
    return {
        "open_s": median_of(runs, "open_s"),
        "fingerprint_s": median_of(runs, "fingerprint_s"),
        "rank_metadata_bytes": median_of(runs, "rank_bytes") - tiny["rank_bytes"],
        "worker_metadata_bytes": worker - tiny_worker,
        "node_metadata_bytes": node - tiny_node,
        "lengths_dtype": runs[0]["lengths_dtype"],
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--child")
    p.add_argument("--sizes", default="1e6,1e7")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--starts", default="fork,spawn")
    p.add_argument("--base-src")
    p.add_argument("--timeout", type=float, default=900)
    p.add_argument("--out", default=RESULTS)
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return
    if not args.base_src:
        p.error("--base-src (an older checkout's src/) is needed for the before/after ratios")
    sizes = [int(float(s)) for s in args.sizes.split(",")]
    starts = args.starts.split(",")
    result: dict = {"machine": describe_machine(), "load_before": load_average(), "sizes": {}}
    work = tempfile.mkdtemp(prefix="seqloader-metadata-")
    try:
        for n in [TINY, *sizes]:
            folder = os.path.join(work, str(n))
            os.makedirs(folder)
            path = os.path.join(folder, "corpus.hdf")
            t0 = time.perf_counter()
            write_corpus(path, n)
            print(f"n={n}: corpus written in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
            entry: dict = {}
            for start in starts:
                runs: dict[str, list[dict]] = {"base": [], "first": [], "second": []}
                for _ in range(1 if n == TINY else args.reps):  # rotating between the codes
                    runs["base"].append(measure(path, n, "base", start, "-", *_rest(args)))
                    runs["first"].append(measure(path, n, "new", start, "first", *_rest(args)))
                    runs["second"].append(measure(path, n, "new", start, "second", *_rest(args)))
                entry[start] = runs
            result["sizes"][str(n)] = entry
            if n != TINY:
                tiny = result["sizes"][str(TINY)]
                report = {}
                for start in starts:
                    got = entry[start]
                    base = summary(got["base"], tiny[start]["base"][0])
                    first = summary(got["first"], tiny[start]["second"][0])
                    second = summary(got["second"], tiny[start]["second"][0])
                    report[start] = {
                        "before": base,
                        "first_open": first,
                        "second_open": second,
                        "ratios": _ratios(base, first, second),
                    }
                    print(f"n={n} {start}: {json.dumps(report[start]['ratios'])}", file=sys.stderr)
                result.setdefault("summary", {})[str(n)] = report
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result["load_after"] = load_average()
    history = {"runs": []}
    if os.path.exists(args.out):
        with open(args.out) as fh:
            history = json.load(fh)
    history["runs"].append(result)
    with open(args.out, "w") as fh:
        json.dump(history, fh, indent=1)
        fh.write("\n")


def _rest(args: argparse.Namespace) -> tuple[str, float]:
    return args.base_src, args.timeout


def _ratios(base: dict, first: dict, second: dict) -> dict:
    def r(a: float, b: float) -> float | None:
        return None if b <= 0 else round(a / b, 3)

    return {
        "node_memory_after_over_before": r(
            second["node_metadata_bytes"], base["node_metadata_bytes"]
        ),
        "rank_memory_after_over_before": r(
            second["rank_metadata_bytes"], base["rank_metadata_bytes"]
        ),
        "worker_memory_after_over_before": r(
            second["worker_metadata_bytes"], base["worker_metadata_bytes"]
        ),
        "second_open_over_first_open": r(second["open_s"], first["open_s"]),
        "second_open_over_before": r(second["open_s"], base["open_s"]),
        "first_open_over_before": r(first["open_s"], base["open_s"]),
        "fingerprint_after_over_before": r(second["fingerprint_s"], base["fingerprint_s"]),
    }


if __name__ == "__main__":
    main()
