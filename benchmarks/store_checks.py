"""What the column stores' content checksums cost: a process mapping a node's metadata store
(what every rank and DataLoader worker does when it opens ``HDFSource`` over a built store), and
its first reads, with the checks against without them.

    python -m benchmarks.store_checks [--sizes 1e7,1e8] [--reps 3] [--out FILE]

The store: the columns of ``HDFSource``'s metadata store for ``n`` sequences in 100 files
(``len.data`` int32, ``start.data`` int64 ``[n + F]``, ``bounds``, ``tags`` as
``corpus/rec<i>/seg<i>``), written chunk by chunk by ``StoreWriter`` (the writer never holds a
column whole, so 10^8 fits in a few hundred MiB), and a bucket index's size (``bucket.members``:
int32 ``[n]``). Each measurement runs in a fresh process (``benchmarks.fresh``), the two
variants alternating (``CHECK_CONTENTS`` True / False: without, the header's CRC and layout are
still checked), the page cache warm for both:

- ``open``: ``ColumnStore(path)`` and ``metadata_of(store)``: the length and bounds columns are
  checked in full, the row offsets and tags per block on first use (so none of them here);
- ``first reads``: then 200 batches of 64 random sequences' tags (``take``) and row offsets
  (``FileStarts``), each block checked the first time it is read;
- ``bucket open``: the bucket index's store mapped and its members column taken (checked in
  full when mapped).

Medians over ``--reps``; the ratio is checked / unchecked of the same run.
``results/store_checks.json`` keeps one entry per run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator

import numpy as np

from benchmarks.fresh import run_child
from benchmarks.machine import describe_machine, load_average
from benchmarks.side_by_side import append_run, rotated

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results", "store_checks.json")
FILES = 100
CHUNK = 1 << 22  # sequences per written chunk


def build(folder: str, n: int) -> tuple[str, str]:
    """The metadata store and the bucket-sized store of ``n`` sequences in ``folder``."""
    from seqloader.sources.columns import StoreWriter

    meta_path, bucket_path = os.path.join(folder, "meta.cols"), os.path.join(folder, "bkt.cols")
    per_file = -(-n // FILES)
    bounds = np.minimum(np.arange(FILES + 1, dtype=np.int64) * per_file, n)
    rng = np.random.default_rng(0)
    schema = {"data": ["<f4", [8], False, None]}
    meta = {"schema": schema, "skipped": {}, "warnings": [], "fingerprint": "x", "sequences": n}
    w = StoreWriter(meta_path, "bench", meta, lazy=("start.", "tags."))
    w.add("bounds", bounds)
    w.add_chunks(
        "len.data",
        np.int32,
        (),
        (rng.integers(50, 2001, min(CHUNK, n - a)).astype(np.int32) for a in range(0, n, CHUNK)),
    )

    def starts() -> Iterator[np.ndarray]:  # each file's row offsets [n_f + 1]
        for f in range(FILES):
            a, b = int(bounds[f]), int(bounds[f + 1])
            for c in range(a, b + 1, CHUNK):
                yield np.arange(c - a, min(b + 1, c + CHUNK) - a, dtype=np.int64) * 1000

    w.add_chunks("start.data", np.int64, (), starts())

    tag_chunk = CHUNK // 4  # bounds the string temporaries (~100 MiB)

    def tag_bytes() -> Iterator[np.ndarray]:
        for a in range(0, n, tag_chunk):
            yield _tags(a, min(n, a + tag_chunk))[0]

    def tag_offsets() -> Iterator[np.ndarray]:  # a second pass: nothing of n is held
        yield np.zeros(1, np.int64)
        total = 0
        for a in range(0, n, tag_chunk):
            off = _tags(a, min(n, a + tag_chunk))[1]
            yield off[1:] + total
            total += int(off[-1])

    w.add_chunks("tags.bytes", np.uint8, (), tag_bytes())
    w.add_chunks("tags.offsets", np.int64, (), tag_offsets())
    w.close()
    b = StoreWriter(bucket_path, "bench-b", {})
    members = (np.arange(a, min(n, a + CHUNK), dtype=np.int32) for a in range(0, n, CHUNK))
    b.add_chunks("bucket.members", np.int32, (), members)
    b.close()
    return meta_path, bucket_path


def _tags(a: int, b: int) -> tuple[np.ndarray, np.ndarray]:
    idx = np.arange(a, b).astype(str)
    tags = np.char.add(np.char.add(np.char.add("corpus/rec", idx), "/seg"), idx)
    lens = np.char.str_len(tags).astype(np.int64)
    off = np.zeros(len(tags) + 1, np.int64)
    np.cumsum(lens, out=off[1:])
    data = np.frombuffer("".join(tags.tolist()).encode(), np.uint8)
    return data, off


def child(config: dict) -> dict:
    from seqloader.sources import columns
    from seqloader.sources.hdf_store import FileStarts, metadata_of

    columns.CHECK_CONTENTS = config["check"]
    t = time.perf_counter()
    store = columns.ColumnStore(config["meta"])
    meta = metadata_of(store)
    opened = time.perf_counter() - t
    rng = np.random.default_rng(config["rep"])
    n = len(meta.lengths["data"])
    starts = FileStarts(meta.starts, meta.bounds)
    bounds = meta.bounds.tolist()
    t = time.perf_counter()
    for _ in range(200):
        idx = np.sort(rng.integers(0, n, 64))
        meta.tags.take(idx)
        for i in idx[:8].tolist():  # a batch's files' row offsets
            f = int(np.searchsorted(bounds, i, side="right")) - 1
            starts[f]
    reads = time.perf_counter() - t
    t = time.perf_counter()
    bucket = columns.ColumnStore(config["bucket"])
    bucket.column("bucket.members")
    bucket_open = time.perf_counter() - t
    return {"open": opened, "first reads": reads, "bucket open": bucket_open}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.store_checks")
    p.add_argument("--sizes", default="1e7")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--out", default=RESULTS)
    p.add_argument("--child", default=None)
    args = p.parse_args(argv)
    if args.child is not None:
        print(json.dumps(child(json.loads(args.child))))
        return
    load_before = load_average()
    rows = []
    for n in (int(float(s)) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory(prefix="store-checks-") as folder:
            t = time.perf_counter()
            meta, bucket = build(folder, n)
            built = time.perf_counter() - t
            times: dict[bool, list[dict]] = {True: [], False: []}
            for rep in range(args.reps):
                for check in rotated([True, False], rep):
                    config = {"meta": meta, "bucket": bucket, "check": check, "rep": rep}
                    times[check].append(run_child("benchmarks.store_checks", config, None, 3600))
            row: dict[str, object] = {
                "sequences": n,
                "store_bytes": os.path.getsize(meta),
                "bucket_bytes": os.path.getsize(bucket),
                "build_s": built,
            }
            for what in ("open", "first reads", "bucket open"):
                on = statistics.median(r[what] for r in times[True])
                off = statistics.median(r[what] for r in times[False])
                row[what] = {"checked_s": on, "unchecked_s": off, "ratio": on / off}
            rows.append(row)
            print(json.dumps(row), file=sys.stderr)
    record = {
        "machine": describe_machine(),
        "load_before_after": [load_before, load_average()],
        "reps": args.reps,
        "rows": rows,
    }
    append_run(record, args.out)
    print(json.dumps(record, indent=1))


if __name__ == "__main__":
    main()
