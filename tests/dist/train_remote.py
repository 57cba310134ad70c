"""Ranks reading s3:// HDF files through the plan-driven cache (gloo, CPU), run by torchrun or by
``launch_fork.py`` (the same ``main`` in forked ranks, torch and fsspec imported once):

    python -m torch.distributed.run --standalone --nproc_per_node N tests/dist/train_remote.py \
        --spec spec.json --out DIR --phase run
    python tests/dist/launch_fork.py N --script train_remote --spec spec.json --out DIR --phase run

``spec.json``: the URLs, fsspec storage options, cache directory (``{rank}`` in it gives every
rank its own), ``cache_bytes`` and loader options. Every step all-reduces one number (unequal steps
hang, and the test's timeout fails it); each batch's tags go to a per-rank log; after each step
rank 0 writes the loader state (atomically). ``--kill-at EPOCH:STEP`` makes rank 0 SIGKILL itself
right after saving that step's state; ``--resume`` continues from the saved state;
``--finish-look-ahead`` waits for the prefetcher's files of the epoch after the last before the
job ends (so what was fetched ahead does not depend on how fast the job ran).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from ddp_common import log_path, result_path, write_json_atomic

import seqloader as sl
from seqloader.sources.remote import FileCache


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--spec", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--phase", default="run")
    p.add_argument("--epochs", type=int, nargs="+", default=[1])
    p.add_argument("--kill-at")
    p.add_argument("--resume", action="store_true")
    p.add_argument("--finish-look-ahead", action="store_true")
    args = p.parse_args(argv)
    spec = json.loads(args.spec.read_text())
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    cache = FileCache(
        spec["cache_dir"].format(rank=rank), spec["cache_bytes"], spec["storage_options"]
    )
    source = sl.HDFSource(spec["urls"], cache=cache)
    loader = sl.SeqLoader(source, **spec["loader"])
    state_file = args.out / "state.json"
    if args.resume:
        loader.load_state_dict(json.loads(state_file.read_text()))
    kill = tuple(map(int, args.kill_at.split(":"))) if args.kill_at else None
    result: dict = {"rank": rank, "epochs": {}}
    with open(log_path(args.out, args.phase, rank), "a") as log:
        for epoch in args.epochs:
            for batch in loader.epoch(epoch):
                total = torch.tensor([float(batch.size)])
                dist.all_reduce(total)  # a rank with fewer steps would leave the others hanging
                tags = [t for t, real in zip(batch.seq_tags, batch.mask.tolist()) if real]
                record = {"epoch": epoch, "step": batch.step, "tags": tags}
                log.write(json.dumps(record) + "\n")
                log.flush()
                if rank == 0:
                    write_json_atomic(state_file, loader.state_dict())
                if kill == (epoch, batch.step) and rank == 0:
                    os.kill(os.getpid(), signal.SIGKILL)
            report = loader.report()
            assert report is not None
            result["epochs"][str(epoch)] = {
                "steps": report.steps,
                "planned_steps": report.planned_steps,
                "fetched_bytes": report.fetched_bytes,
                "fetch_wait_s": report.fetch_wait_s,
                "cache_high_water_bytes": report.cache_high_water_bytes,
            }
    if args.finish_look_ahead and loader._prefetch is not None:
        loader._prefetch.wait()  # the last epoch's look-ahead ends before the job does
    loader.close()
    write_json_atomic(result_path(args.out, args.phase, rank), result)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
