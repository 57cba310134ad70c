"""Option sets of the default (indexed) planning on real ranks, one process group for them all:

    python -m torch.distributed.run --standalone --nproc_per_node N tests/dist/indexed_sets.py ...

or ``launch_fork.py N --script indexed_sets ...`` (the same ``main`` in forked ranks).

Each rank runs every set of ``SETS`` in turn (a new ``SeqLoader`` with DataLoader workers, the
options over ``LOADER_OPTIONS``, no ``planning`` given), every sub-epoch of one full pass, one
blocking ``all_reduce`` per step (a rank with fewer steps hangs the others), the gathered audit
on. Each batch (its tags in order, fillers included, and which slots are real) goes to a per-rank
log before the step; the result names the planning each set resolved to.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from ddp_common import (
    LOADER_OPTIONS,
    MIX_RATES,
    build_corpus,
    files_corpus,
    finish_rank,
    log_path,
    mix_corpus,
)

import seqloader as sl

#: name -> options over LOADER_OPTIONS; ``partition_epoch``: the sub-epochs of the one pass run
SETS: dict[str, dict] = {
    "default": {"ordering": "default"},
    "reverse": {"ordering": "reverse"},
    "sorted": {"ordering": "sorted"},
    "sorted_reverse": {"ordering": "sorted_reverse"},
    "random": {"ordering": "random"},
    "fixed_random_seed": {"ordering": "random", "fixed_random_seed": 5},
    "sort_bin_shuffle": {"ordering": "sort_bin_shuffle:.8"},
    "seq_length": {"max_seq_length": 35, "min_seq_length": 3},
    "epoch_wise_filter": {
        "epoch_wise_filter": {(1, 1): {"max_mean_len": 15}},
        "partition_epoch": 2,
    },
    "fixed_random_subset": {"fixed_random_subset": 50},
    "packed": {"batch_cost": "packed"},
    "max_packed_frames": {"max_packed_frames": 70},
    "quadratic": {"batch_cost": "quadratic:20", "max_frames": 200},
    "random_seed_offset": {"distribution": "random_seed_offset"},
    # refused by both plannings before; now planned by indexed alone
    "buckets_packed": {"ordering": "buckets:3", "batch_cost": "packed"},
    "buckets_max_packed_frames": {"ordering": "buckets:3", "max_packed_frames": 70},
    "fixed_random_subset_files": {"fixed_random_subset": 50, "distribution": "files"},
    "fixed_random_subset_mix": {"fixed_random_subset": 50, "mix": MIX_RATES},
    "mix_random_seed_offset": {"mix": MIX_RATES, "distribution": "random_seed_offset"},
}


def set_corpus(name: str) -> sl.Source:
    """The corpus set ``name`` runs over: ``build_corpus()``, cut into 8 files for
    ``distribution="files"`` or into the mix's corpora (the same sequences and tags)."""
    options = SETS[name]
    if "mix" in options:
        return mix_corpus()
    return files_corpus() if options.get("distribution") == "files" else build_corpus()


def set_options(name: str) -> dict:
    """The loader options of set ``name`` (what the ranks run and the tests plan with)."""
    return {**LOADER_OPTIONS, **SETS[name]}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--phase", default="sets")
    p.add_argument("--sets", default=",".join(SETS), help="comma-separated names of SETS")
    p.add_argument("--workers", type=int, default=1)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    result: dict = {"rank": rank, "world_size": world, "sets": {}}
    tick = torch.ones(1)
    with open(log_path(args.out, args.phase, rank), "w") as log:
        for name in args.sets.split(","):
            options = set_options(name)
            loader = sl.SeqLoader(set_corpus(name), num_workers=args.workers, audit=True, **options)
            done: dict = {"planning": loader.planner.options.planning, "epochs": {}}
            try:
                for epoch in range(1, options.get("partition_epoch", 1) + 1):
                    steps = 0
                    for batch in loader.epoch(epoch):
                        entry = {"set": name, "epoch": epoch, "step": batch.step}
                        entry |= {"tags": list(batch.seq_tags), "real": batch.mask.tolist()}
                        log.write(json.dumps(entry) + "\n")
                        log.flush()
                        dist.all_reduce(tick)  # blocks until every rank takes this step
                        steps += 1
                    report = loader.report()
                    assert report.audit is not None
                    done["epochs"][str(epoch)] = {
                        "steps": steps,
                        "planned_steps": report.planned_steps,
                        "complete": report.complete,
                        "audit": report.audit.to_dict(),
                        "filtered": dict(report.filtered),
                    }
            finally:
                loader.close()
            result["sets"][name] = done
    return finish_rank(args.out, args.phase, rank, result)


if __name__ == "__main__":
    sys.exit(main())
