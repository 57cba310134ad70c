"""A tiny DDP training on SeqLoader, run by the tests with real torchrun:

    python -m torch.distributed.run --standalone --nproc_per_node N tests/dist/train_ddp.py ...

or by ``launch_fork.py`` (the same ``main`` in forked processes, without re-importing torch).

Rank and world size come from torch.distributed (the loader is given neither). Every batch's real
tags go to a per-rank log before the step; after each optimizer step rank 0 writes a checkpoint
(model weights and loader state, JSON, atomically). ``--resume`` continues from it; ``--kill-at``
makes one rank SIGKILL itself on receiving a given batch, as a crashing node would.
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
from ddp_common import (
    LOADER_OPTIONS,
    MIX_RATES,
    N_SEQS,
    build_corpus,
    hdf_api,
    log_path,
    mix_corpus,
    result_path,
    write_json_atomic,
)
from torch.nn.parallel import DistributedDataParallel

import seqloader as sl


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--phase", default="run")
    p.add_argument("--hdf", type=Path, nargs="+", help="read these RETURNN HDF files, not memory")
    p.add_argument("--shar", type=Path, help="read this Lhotse Shar folder (ShardSource)")
    p.add_argument("--distribution", default="shard")
    p.add_argument("--ordering", help="instead of LOADER_OPTIONS' ordering (e.g. buckets:4)")
    p.add_argument("--planning", default="auto", help="auto (the default), global or indexed")
    p.add_argument("--mix", action="store_true", help="two named corpora mixed at MIX_RATES")
    p.add_argument("--audit", action="store_true", help="audit every epoch (gathered over ranks)")
    p.add_argument("--chunking", help="plan chunks (e.g. 4:3); the log names them TAG#CHUNK")
    p.add_argument(
        "--node-stores",
        action="store_true",
        help="map the node's stores (bucket index, concat index space, duplicate verdict) from "
        "files as corpora of 10^6 sequences do, however small the corpus",
    )
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--partition-epoch", type=int, default=1)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--uneven", default="split")
    p.add_argument("--checkpoint", type=Path)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--kill-at", help="EPOCH:STEP: the --kill-rank SIGKILLs itself on that batch")
    p.add_argument("--kill-rank", type=int, default=0)
    p.add_argument("--mismatch", action="store_true", help="rank 1: other data, rank 2: other seed")
    p.add_argument(
        "--grad-sync",
        choices=["ddp", "allreduce"],
        default="ddp",
        help="DDP, or one plain all_reduce of the gradients per step: the same blocking collective "
        "(a rank with fewer steps hangs the others), without DDP's 2 s import of torch._dynamo",
    )
    return p.parse_args(argv)


def use_node_stores() -> None:
    """Every corpus gets the node's mapped stores (their size thresholds set to 1 sequence)."""
    from seqloader.loading import bucket_store
    from seqloader.sources import concat_store
    from seqloader.trainer import duplicate_store

    for module in (bucket_store, concat_store, duplicate_store):
        module.MIN_SEQUENCES = 1


def make_loader(args: argparse.Namespace, rank: int, world_size: int | None = None) -> sl.SeqLoader:
    """The run's loader; with ``world_size``, a probe outside the process group that plans for
    ``rank`` of ``world_size`` ranks (the chaos driver lists kill points with it)."""
    topology = {} if world_size is None else {"rank": rank, "world_size": world_size}
    if args.node_stores:
        use_node_stores()
    options = dict(LOADER_OPTIONS)
    if args.ordering:
        options["ordering"] = args.ordering
    if args.chunking:
        options["chunking"] = args.chunking
    options["planning"] = args.planning
    n = N_SEQS
    if args.mismatch and rank == 1:
        n -= 1
    if args.mismatch and rank == 2:
        options["seed"] += 1
    if args.hdf is not None:
        hdf_source, _ = hdf_api()
        source = hdf_source(args.hdf)
    elif args.shar is not None:  # every rank opens it at once: the index is built once
        source = sl.ShardSource.lhotse_shar(args.shar, index_dir=args.out / "shard-index")
    elif args.mix:
        source = mix_corpus()
        options["mix"] = MIX_RATES
    else:
        source = build_corpus(n)
    return sl.SeqLoader(
        source,
        partition_epoch=args.partition_epoch,
        uneven=args.uneven,
        num_workers=args.workers,
        distribution=args.distribution,
        audit=args.audit,
        **options,
        **topology,
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    loader = make_loader(args, rank)
    assert (loader.topology.rank, loader.topology.world_size) == (rank, world), loader.topology

    torch.manual_seed(0)
    model = torch.nn.Linear(3, 1)
    if args.grad_sync == "ddp":
        model = DistributedDataParallel(model)
    module = model.module if args.grad_sync == "ddp" else model
    first_epoch = 1
    if args.resume and args.checkpoint is not None and args.checkpoint.exists():
        ckpt = json.loads(args.checkpoint.read_text())
        module.load_state_dict({k: torch.tensor(v) for k, v in ckpt["model"].items()})
        loader.load_state_dict(ckpt["loader"])
        first_epoch = max(ckpt["loader"]["epoch"], 1)
    kill = tuple(map(int, args.kill_at.split(":"))) if args.kill_at else None

    log = open(log_path(args.out, args.phase, rank), "a")  # noqa: SIM115
    result: dict = {"rank": rank, "world_size": world, "epochs": {}, "source": "memory"}
    result["local_rank"] = int(os.environ.get("LOCAL_RANK", -1))  # torchrun: rank on this node
    result["node_rank"] = int(os.environ.get("GROUP_RANK", -1))
    if args.hdf is not None:
        result["source"] = "hdf"
    if args.shar is not None:
        result["source"] = "shar"
    try:
        for epoch in range(first_epoch, args.epochs + 1):
            steps = 0
            for batch in loader.epoch(epoch):
                names = batch.seq_tags
                if batch.chunks is not None:  # a chunk is a unit: TAG#CHUNK
                    names = [f"{t}#{c}" for t, c in zip(names, batch.chunks.tolist())]
                real = [t for t, m in zip(names, batch.mask.tolist()) if m]
                entry = {"epoch": epoch, "step": batch.step, "tags": real}
                log.write(json.dumps(entry) + "\n")
                log.flush()
                if kill == (epoch, batch.step) and rank == args.kill_rank:
                    os.kill(os.getpid(), signal.SIGKILL)
                x, lengths = batch["data"], batch.lengths["data"].clamp(min=1)
                pooled = x.sum(1) / lengths[:, None]  # [B, F] mean over time
                weight = batch.mask.float()  # filler repeats count 0
                loss = (model(pooled).squeeze(1) ** 2 * weight).sum() / weight.sum().clamp(min=1)
                model.zero_grad()
                loss.backward()  # DDP all-reduce: hangs if ranks had unequal steps
                with torch.no_grad():  # plain SGD (torch.optim would import torch._dynamo: 2 s)
                    for p in model.parameters():
                        if args.grad_sync == "allreduce":
                            dist.all_reduce(p.grad)
                            p.grad /= world
                        p -= 0.01 * p.grad
                steps += 1
                if rank == 0 and args.checkpoint is not None:
                    model_state = {k: v.tolist() for k, v in module.state_dict().items()}
                    write_json_atomic(
                        args.checkpoint, {"model": model_state, "loader": loader.state_dict()}
                    )
            report = loader.report()
            result["epochs"][str(epoch)] = {
                "steps": steps,
                "planned_steps": report.planned_steps,
                "complete": report.complete,
            }
            if report.audit is not None:
                result["epochs"][str(epoch)]["audit"] = report.audit.to_dict()
    except sl.DistributedMismatchError as e:
        result["error"] = str(e)
        write_json_atomic(result_path(args.out, args.phase, rank), result)
        dist.barrier()  # every rank raised (same gathered data): let all write before exiting,
        return 3  # since the launcher stops the others as soon as one rank exits non-zero
    finally:
        log.close()
        loader.close()
    write_json_atomic(result_path(args.out, args.phase, rank), result)
    dist.barrier()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
