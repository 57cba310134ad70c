"""Option sets of the default (indexed) planning on real ranks, one process group for them all:

    python -m torch.distributed.run --standalone --nproc_per_node N tests/dist/indexed_sets.py ...

or ``launch_fork.py N --script indexed_sets ...`` (the same ``main`` in forked ranks).

Each rank runs every set of ``SETS`` in turn (a new ``SeqLoader`` with DataLoader workers, the
options over ``LOADER_OPTIONS``, no ``planning`` given), every sub-epoch of one full pass, one
blocking ``all_reduce`` per step (a rank with fewer steps hangs the others), the gathered audit
on. Each batch (its tags in order, ``TAG#CHUNK`` under chunking, fillers included, and which
slots are real) goes to a per-rank log before the step; the result names the planning each set
resolved to.

``ELASTIC``: sets run as an elastic resume: a launch on ``W - 1`` ranks with ``--sets NAME
--stop-half DIR`` stops epoch 1 after ``elastic_steps`` of its steps and rank 0 saves the loader
state in ``DIR`` (JSON); the launch of the other sets on ``W`` ranks, given ``--resume-sets NAME
--resume DIR``, loads it after them and runs the rest of the epoch.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
from ddp_common import (
    LOADER_OPTIONS,
    MIX_RATES,
    N_SEQS,
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
    "sorted": {"ordering": "sorted"},
    "random_k": {"ordering": "random:2"},
    "sort_bin_shuffle_x2": {"ordering": "sort_bin_shuffle_x2:.8"},
    "seq_length": {"max_seq_length": 35, "min_seq_length": 3},
    "epoch_wise_filter": {
        "epoch_wise_filter": {(1, 1): {"max_mean_len": 15}},
        "partition_epoch": 2,
    },
    "fixed_random_subset": {"fixed_random_subset": 50},
    "random_seed_offset": {"distribution": "random_seed_offset"},
    # per-key limits over the corpus with a second key ("classes", other lengths)
    "max_frames_per_key": {"max_frames": {"data": 90, "classes": 24}},
    # refused by both plannings before; now planned by indexed alone
    "buckets_packed": {"ordering": "buckets:3", "batch_cost": "packed"},
    "buckets_quadratic_per_key": {
        "ordering": "buckets:3",
        "batch_cost": "quadratic:20",
        "max_frames": {"data": 200, "classes": 50},
    },
    "fixed_random_subset_files": {"fixed_random_subset": 50, "distribution": "files"},
    "epoch_wise_filter_files": {
        "epoch_wise_filter": {(1, 1): {"max_mean_len": 15}},
        "distribution": "files",
        "partition_epoch": 2,
    },
    "fixed_random_subset_mix": {"fixed_random_subset": 50, "mix": MIX_RATES},
    "mix_random_seed_offset": {"mix": MIX_RATES, "distribution": "random_seed_offset"},
    # planned by indexed since this round: chunks of "classes" with "data" (the length key) whole,
    # and epoch_wise_filter over a sharded mix (its sub-epoch's slots filtered as one set)
    "chunking_length_whole": {"chunking": {"classes": (4, 3)}},
    "epoch_wise_filter_mix": {
        "epoch_wise_filter": {(1, 1): {"max_mean_len": 15}},
        "mix": MIX_RATES,
        "partition_epoch": 2,
    },
    # ... and over a mix of files (each corpus in files: its sub-epoch's file pieces' slots
    # filtered as one set)
    "epoch_wise_filter_files_mix": {
        "epoch_wise_filter": {(1, 1): {"max_mean_len": 15}},
        "mix": MIX_RATES,
        "distribution": "files",
        "partition_epoch": 2,
    },
    # ... and over a chunked laplace mix (shard; every chunk of a kept slot planned)
    "epoch_wise_filter_chunked_mix": {
        "epoch_wise_filter": {(1, 1): {"max_mean_len": 15}},
        "mix": MIX_RATES,
        "chunking": {"data": (20, 15)},
        "partition_epoch": 2,
    },
    # an elastic resume: W - 1 ranks, then the saved state resumed on W (``ELASTIC``)
    "elastic_files_buckets": {"ordering": "buckets:3", "distribution": "files"},
}
#: the sets run as an elastic resume (``--stop-half``, then ``--resume``), not in the main launch
ELASTIC = {"elastic_files_buckets"}
#: the sets only the extended launch (``make chaos``) runs: their loader path is another set's
#: (``sorted``: the fixed-order path ``default`` runs)
EXTENDED = {"sorted"}


def elastic_steps(steps: int) -> int:
    """Steps the first (``W - 1`` ranks) segment of an elastic set takes: half, at least one."""
    return max(1, steps // 2)


def keyed_corpus() -> sl.MemorySource:
    """``build_corpus()`` with a second key, ``classes``: lengths 1..15 drawn on their own (so a
    bucket by ``data`` holds all of them), for limits per key."""
    corpus = build_corpus()
    rng = np.random.default_rng(11)
    classes = [np.zeros((int(t), 1), np.float32) for t in rng.integers(1, 16, size=N_SEQS)]
    data = [corpus.read(i)["data"] for i in range(N_SEQS)]
    tags = [corpus.tag(i) for i in range(N_SEQS)]
    return sl.MemorySource({"data": data, "classes": classes}, tags=tags)


def set_corpus(name: str) -> sl.Source:
    """The corpus set ``name`` runs over: ``build_corpus()``, cut into 8 files for
    ``distribution="files"`` or into the mix's corpora, or with a second key for limits per key
    or chunking (the same sequences and tags)."""
    options = SETS[name]
    if "mix" in options:
        return mix_corpus(files=options.get("distribution") == "files")
    if isinstance(options.get("max_frames"), dict) or "chunking" in options:
        return keyed_corpus()
    return files_corpus() if options.get("distribution") == "files" else build_corpus()


def set_options(name: str) -> dict:
    """The loader options of set ``name`` (what the ranks run and the tests plan with)."""
    return {**LOADER_OPTIONS, **SETS[name]}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--phase", default="sets")
    main_sets = ",".join(s for s in SETS if s not in ELASTIC)
    p.add_argument("--sets", default=main_sets, help="comma-separated names of SETS")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--stop-half", type=Path, help="elastic sets' first segment: states to DIR")
    p.add_argument("--resume-sets", default="", help="elastic sets resumed after --sets")
    p.add_argument("--resume", type=Path, help="the DIR of their saved states")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    result: dict = {"rank": rank, "world_size": world, "sets": {}}
    with open(log_path(args.out, args.phase, rank), "w") as log:
        for name in args.sets.split(","):
            result["sets"][name] = run_set(name, args, rank, log, stop_half=args.stop_half)
        for name in filter(None, args.resume_sets.split(",")):
            result["sets"][name] = run_set(name, args, rank, log, resume=args.resume)
    return finish_rank(args.out, args.phase, rank, result)


def run_set(
    name: str,
    args: argparse.Namespace,
    rank: int,
    log,
    stop_half: Path | None = None,
    resume: Path | None = None,
) -> dict:
    """Every sub-epoch of set ``name`` on every rank -> what the result records of it. An
    elastic set (``ELASTIC``): ``stop_half``: epoch 1's first ``elastic_steps`` steps, then
    rank 0 saves the state in that folder; ``resume``: that state loaded, the rest of its epoch."""
    options = set_options(name)
    loader = sl.SeqLoader(set_corpus(name), num_workers=args.workers, audit=True, **options)
    done: dict = {"planning": loader.planner.options.planning, "epochs": {}}
    epochs = range(1, options.get("partition_epoch", 1) + 1)
    stop = -1
    if stop_half is not None:
        epochs, stop = range(1, 2), elastic_steps(loader.steps(1))
    if resume is not None:
        state = json.loads((resume / f"{name}.json").read_text())
        loader.load_state_dict(state)
        epochs = range(state["epoch"], state["epoch"] + 1)
    try:
        for epoch in epochs:
            record, state = run_epoch(loader, name, epoch, log, stop)
            done["epochs"][str(epoch)] = record
            if state is not None and rank == 0:  # rank 0 saves it for all (the same state)
                (args.stop_half / f"{name}.json").write_text(json.dumps(state))
    finally:
        loader.close()
    return done


def run_epoch(
    loader: sl.SeqLoader, name: str, epoch: int, log, stop: int
) -> tuple[dict, dict | None]:
    """Epoch ``epoch`` of ``loader``, each batch logged before an all_reduce per step; ``stop``
    >= 0: that many steps, then the loader's state -> (the epoch's record, the state or None)."""
    tick = torch.ones(1)
    steps, state = 0, None
    for batch in loader.epoch(epoch):
        entry = {"set": name, "epoch": epoch, "step": batch.step}
        tags = list(batch.seq_tags)
        if batch.chunks is not None:  # a chunk is a unit: TAG#CHUNK
            tags = [f"{t}#{c}" for t, c in zip(tags, batch.chunks.tolist())]
        entry |= {"tags": tags, "real": batch.mask.tolist()}
        log.write(json.dumps(entry) + "\n")
        log.flush()
        dist.all_reduce(tick)  # blocks until every rank takes this step
        steps += 1
        if steps == stop:
            state = loader.state_dict()  # the consumed batches: this one included
            break
    report = loader.report()
    assert report is not None and (report.audit is not None or state is not None)
    record = {
        "steps": steps,
        "planned_steps": report.planned_steps,
        "complete": report.complete,
        "audit": None if report.audit is None else report.audit.to_dict(),
        "filtered": dict(report.filtered),
    }
    return record, state


if __name__ == "__main__":
    sys.exit(main())
