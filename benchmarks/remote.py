"""Remote files through the plan-driven cache: ``python -m benchmarks.remote``.

A corpus of HDF files is served as ``file://`` URLs (``--store file``, the default: the cache's
code path is the remote one, only the transport is local) or by a local S3 API (``--store s3``:
moto's server, which is itself slow). The network is slowed by a delay in the fetcher's block
hook to ``bandwidth = X * read rate``, where the read rate is the file bytes a rank reads per
second at the simulated step (each batch's files' share, sub-epoch by sub-epoch). A training loop
sleeps ``--step-ms`` per batch and times its own requests (``benchmarks.looptime``), so
computation time % is the loop's; the loader's report gives fetch wait (in the readers) apart
from the loop's data wait, and the bytes fetched.

Loader: ``distribution="files"`` (each sub-epoch gives the rank whole files), random order,
``--partition-epoch`` sub-epochs, ``--workers`` workers, and ``cache_bytes`` the smallest budget the
rule allows (the rank's largest two-sub-epoch window, from the plan).

Rows: ``local`` (the same files and loader over local paths: the baseline); per bandwidth ratio,
epoch 1 (cold: the first sub-epoch's files are fetched before the first batch) and later epochs
(steady state: each sub-epoch's files were fetched during the previous one); network bytes per
full pass over the data for rank 0 of ``--ranks`` (run alone: planning needs no other rank), as a
fraction of the corpus, with ``files`` and with ``shard`` (whose window is every file, so its
budget is the corpus). Each configuration runs ``--reps`` times, interleaved; medians.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.looptime import timed_epochs

REPO = Path(__file__).resolve().parents[1]


class Throttle:
    """``FileCache.on_block`` hook: each download proceeds at ``bytes_per_s`` at most."""

    def __init__(self, bytes_per_s: float) -> None:
        self.bytes_per_s = float(bytes_per_s)
        self._started: dict[tuple[int, str], float] = {}

    def __call__(self, f, done: int) -> None:
        key = (os.getpid(), f.url)
        now = time.perf_counter()
        t0 = self._started.setdefault(key, now - 1e-9)
        ahead = done / self.bytes_per_s - (now - t0)
        if ahead > 0:
            time.sleep(ahead)
        if done >= f.size:
            self._started.pop(key, None)


def write_corpus(directory: Path, files: int, per_file: int, dim: int, seed: int = 0) -> list[Path]:
    import seqloader as sl

    rng = np.random.default_rng(seed)
    out = []
    for f in range(files):
        lengths = np.clip(rng.lognormal(np.log(300), 0.4, size=per_file), 20, 1200).astype(int)
        part = sl.MemorySource(
            {"data": [rng.standard_normal((int(t), dim)).astype(np.float32) for t in lengths]},
            tags=[f"f{f}-s{j}" for j in range(per_file)],
        )
        path = directory / f"part{f:03d}.hdf"
        sl.write_hdf(path, part)
        out.append(path)
    return out


def read_rate(loader, sizes: np.ndarray, epochs: int, step_s: float, remote) -> float:
    """File bytes per second this rank needs: per sub-epoch, its files' bytes over its steps."""
    from seqloader.trainer.prefetch import files_in_order

    rates = []
    for e in range(1, epochs + 1):
        share = loader.global_plan(e).rank_share(loader.topology.rank)
        files = files_in_order(remote, share)
        rates.append(sizes[files].sum() / max(len(share), 1) / step_s)
    return float(np.median(rates))


def rule_budget(loader, sizes: np.ndarray, epochs: int, remote) -> int:
    from seqloader.trainer.prefetch import files_in_order

    rank = loader.topology.rank
    files = [
        set(files_in_order(remote, loader.global_plan(e).rank_share(rank)).tolist())
        for e in range(1, epochs + 2)
    ]
    return max(int(sizes[sorted(a | b)].sum()) for a, b in itertools.pairwise(files))


def run_one(urls: list[str], cfg: dict, work: Path, storage_options: dict) -> dict:
    import seqloader as sl
    from seqloader.sources.remote import FileCache

    cache_dir = work / f"cache-{cfg['name']}"
    shutil.rmtree(cache_dir, ignore_errors=True)
    budget = cfg.get("budget")
    probe_cache = FileCache(work / "probe", storage_options=storage_options)
    probe = sl.HDFSource(urls, cache=probe_cache)
    remote = probe.remote_files()
    sizes = np.array([f.size for f in remote.files])
    opts = dict(
        ordering=cfg["ordering"],
        partition_epoch=cfg["partition_epoch"],
        max_seqs=cfg["max_seqs"],
        num_workers=cfg["workers"],
        rank=cfg.get("rank", 0),
        distribution=cfg.get("distribution", "shard"),
        world_size=cfg.get("world_size", 1),
        seed=1,
    )
    step_s = cfg["step_ms"] / 1e3
    planner = sl.SeqLoader(probe, **opts)
    rate = read_rate(planner, sizes, cfg["epochs"], step_s, remote)
    if budget == "rule":  # the smallest budget the rule allows: the largest two-sub-epoch window
        budget = rule_budget(planner, sizes, cfg["epochs"], remote)
    bandwidth = cfg["bandwidth_x"] * rate
    if cfg.get("local"):  # the baseline: the same files read from local paths, no cache
        source = sl.HDFSource([probe_cache.ensure(f) for f in remote.files])
    else:
        cache = FileCache(
            cache_dir, budget, storage_options, on_block=Throttle(bandwidth), block_bytes=1 << 20
        )
        source = sl.HDFSource(urls, cache=cache)
    with sl.SeqLoader(source, **opts) as loader:
        reports = []

        def report():
            r = loader.report()
            reports.append(r)
            return r

        rows = timed_epochs(
            loader.epoch, [(e, step_s) for e in range(1, cfg["epochs"] + 1)], report=report
        )
    for row, r in zip(rows, reports):
        row["fetch_wait_s"] = r.fetch_wait_s
        row["data_wait_s"] = r.data_wait_s
        row["fetched_bytes"] = r.fetched_bytes
        row["high_water"] = r.cache_high_water_bytes
    steady = rows[1:]
    wall = sum(r["wall_s"] for r in steady)
    return {
        **cfg,
        "read_rate_Bps": rate,
        "bandwidth_Bps": bandwidth,
        "corpus_bytes": int(sizes.sum()),
        "budget_of_corpus": None if budget is None else budget / sizes.sum(),
        "epoch1_loop_pct": rows[0]["loop_pct"],
        "steady_loop_pct": sum(r["loop_pct"] * r["wall_s"] for r in steady) / wall,
        "steady_report_pct": sum(r["report_pct"] * r["wall_s"] for r in steady) / wall,
        "steady_fetch_wait_s": sum(r["fetch_wait_s"] for r in steady),
        "steady_data_wait_s": sum(r["data_wait_s"] for r in steady),
        # all bytes fetched (ahead and on demand), per full pass over the data, over the corpus:
        # the run fetched the files of its sub-epochs and of the one after the last
        "fetched_per_pass_of_corpus": float(
            sum(r["fetched_bytes"] for r in rows)
            / ((len(rows) + 1) / cfg["partition_epoch"])
            / sizes.sum()
        ),
        "high_water_of_budget": (
            None if budget is None else max(r["high_water"] for r in rows) / budget
        ),
        "epochs": rows,
    }


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m benchmarks.remote", description=__doc__)
    p.add_argument("--files", type=int, default=16)
    p.add_argument("--seqs-per-file", type=int, default=150)
    p.add_argument("--dim", type=int, default=20)
    p.add_argument("--max-seqs", type=int, default=8)
    p.add_argument("--partition-epoch", type=int, default=4)
    p.add_argument("--epochs", type=int, default=9, help="sub-epochs per run (the first is cold)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--step-ms", type=float, default=10.0)
    p.add_argument("--bandwidth-x", default="4,2,1.25,0.5", help="bandwidth / read rate")
    p.add_argument("--ranks", default="1,4", help="world sizes for the bytes-per-rank rows")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--store", choices=["file", "s3"], default="file")
    p.add_argument("--out", type=Path, default=REPO / "benchmarks" / "results" / "remote.json")
    args = p.parse_args(argv)

    work = Path(tempfile.mkdtemp(prefix="seqloader-remote-"))
    server = None
    try:
        paths = write_corpus(work, args.files, args.seqs_per_file, args.dim)
        storage_options: dict = {}
        if args.store == "s3":
            server, urls, storage_options = _s3_upload(paths)
        else:
            urls = [p.resolve().as_uri() for p in paths]
        base = dict(
            ordering="random",
            distribution="files",
            partition_epoch=args.partition_epoch,
            max_seqs=args.max_seqs,
            workers=args.workers,
            step_ms=args.step_ms,
            epochs=args.epochs,
            budget="rule",
        )
        configs = [
            {**base, "name": "local", "bandwidth_x": float("inf"), "local": True, "budget": None}
        ]
        configs += [
            {**base, "name": f"bw{x}", "bandwidth_x": float(x)} for x in args.bandwidth_x.split(",")
        ]
        for w in args.ranks.split(","):  # network bytes of rank 0 of w: shard vs whole files
            ranks = {**base, "bandwidth_x": 4.0, "world_size": int(w)}
            configs.append({**ranks, "name": f"w{w}-shard", "distribution": "shard"})
            configs.append({**ranks, "name": f"w{w}-files"})
        runs: dict[str, list[dict]] = {c["name"]: [] for c in configs}
        for rep in range(args.reps):
            order = configs[rep % len(configs) :] + configs[: rep % len(configs)]
            for cfg in order:
                res = run_one(urls, cfg, work, storage_options)
                runs[cfg["name"]].append(res)
                print(
                    f"rep {rep} {cfg['name']}: loop {res['steady_loop_pct']:.1f}% (epoch 1 "
                    f"{res['epoch1_loop_pct']:.1f}%), fetch wait {res['steady_fetch_wait_s']:.2f}s"
                    f", data wait {res['steady_data_wait_s']:.2f}s, fetched/pass "
                    f"{res['fetched_per_pass_of_corpus']:.2f} of the corpus",
                    file=sys.stderr,
                )
        summary = {name: _median(rs) for name, rs in runs.items()}
        out = {
            "settings": vars(args) | {"out": str(args.out)},
            "summary": summary,
            "runs": runs,
            "load_avg": os.getloadavg(),
        }
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=1, default=float))
        print(_table(summary))
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(work, ignore_errors=True)


def _median(runs: list[dict]) -> dict:
    keys = [
        "bandwidth_x",
        "world_size",
        "steady_loop_pct",
        "steady_report_pct",
        "epoch1_loop_pct",
        "steady_fetch_wait_s",
        "steady_data_wait_s",
        "fetched_per_pass_of_corpus",
        "high_water_of_budget",
        "budget_of_corpus",
    ]
    out = {}
    for k in keys:
        values = [r.get(k) for r in runs if r.get(k) is not None]
        out[k] = statistics.median(values) if values else None
    return out


def _table(summary: dict) -> str:
    lines = [
        "config     bw/read  ranks  loop%  report%  epoch1%  fetch wait s  data wait s  "
        "fetched/pass   budget/corpus  high water/budget"
    ]
    for name, s in summary.items():
        hw = "-" if s["high_water_of_budget"] is None else f"{s['high_water_of_budget']:.2f}"
        bc = "-" if s["budget_of_corpus"] is None else f"{s['budget_of_corpus']:.2f}"
        lines.append(
            f"{name:10s} {s['bandwidth_x']:7.2f}  {s['world_size'] or 1:5d}  "
            f"{s['steady_loop_pct']:5.1f}  {s['steady_report_pct']:7.1f}  "
            f"{s['epoch1_loop_pct']:7.1f}  {s['steady_fetch_wait_s']:12.2f}  "
            f"{s['steady_data_wait_s']:11.2f}  {s['fetched_per_pass_of_corpus']:13.2f}  {bc:>13s}  {hw:>17s}"
        )
    return "\n".join(lines)


def _s3_upload(paths: list[Path]):
    import logging
    import socket

    import boto3
    import s3fs
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    options = {
        "key": "bench",
        "secret": "bench",
        "client_kwargs": {"endpoint_url": endpoint, "region_name": "us-east-1"},
    }
    boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id="bench",
        aws_secret_access_key="bench",
        region_name="us-east-1",
    ).create_bucket(Bucket="bench")
    fs = s3fs.S3FileSystem(skip_instance_cache=True, **options)
    urls = []
    for p in paths:
        url = f"s3://bench/{p.name}"
        fs.put_file(str(p), url)
        urls.append(url)
    return server, urls, options


if __name__ == "__main__":
    main()
