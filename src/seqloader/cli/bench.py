"""``seqloader bench``: load DATA through ``SeqLoader`` with a simulated accelerator step and
measure what the trainer would see: throughput, time to first batch, main-process CPU per batch,
peak memory and computation time %; say when data is the bottleneck."""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time

from seqloader.cli.options import (
    add_command,
    add_loader_options,
    add_output_options,
    non_negative_float,
    open_data,
    positive_int,
)
from seqloader.cli.output import human, mib, print_header, print_json, progress
from seqloader.sources.base import Source
from seqloader.sources.hdf import HDFSource
from seqloader.trainer.report import EpochReport

HELP = "throughput, time to first batch, CPU and memory, computation time %% with a simulated step"
# at or above this computation time % (after the first batch) data keeps up with the model
KEEPS_UP_PCT = 95.0
# below this one the trainer waits longer than it computes: data, not the model, is the bottleneck
BOTTLENECK_PCT = 50.0


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = add_command(sub, "bench", HELP, data=True)
    p.add_argument(
        "--step-ms",
        type=non_negative_float,
        default=10.0,
        metavar="X",
        help="simulated accelerator step per batch in ms (a sleep, so it costs no CPU; default "
        "10; 0 measures the loader alone)",
    )
    p.add_argument(
        "--batches",
        type=positive_int,
        default=None,
        metavar="K",
        help="stop after K batches (default: the whole epoch)",
    )
    p.add_argument("--epoch", type=positive_int, default=1, metavar="E", help="epoch to load")
    add_loader_options(p, num_workers_default=None)
    add_output_options(p)
    return p


def run(args: argparse.Namespace) -> int:
    import torch

    from seqloader.torch.loader import SeqLoader

    opened = open_data(args)
    torch.set_num_threads(1)  # the simulated step is a sleep; leave the cores to the workers
    loader = SeqLoader(
        opened.source, plan=opened.plan, workers=opened.workers, rank=0, world_size=1
    )
    planned = loader.steps(args.epoch)
    limit = planned if args.batches is None else min(args.batches, planned)
    step_s = args.step_ms / 1000.0
    batches = loader.epoch(args.epoch)
    cpu0 = time.process_time()
    wall0 = time.perf_counter()
    for n, _ in enumerate(progress(batches, not args.no_progress, "bench", limit, "batch"), 1):
        if step_s:
            time.sleep(step_s)
        if n == limit < planned:
            break  # --batches K: stop early
    wall = time.perf_counter() - wall0
    cpu = time.process_time() - cpu0
    batches.close()  # an early stop finishes the epoch's meter too
    report = loader.report()
    assert report is not None  # the epoch ran
    loader.close()
    main_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    worker_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    steady = round(steady_computation_pct(report), 2)
    unmapped = unmapped_files(opened.source)
    out = {
        **opened.header(),
        "num_workers": opened.workers.num_workers,
        "step_ms": args.step_ms,
        "epoch": args.epoch,
        "batches": report.steps,
        "planned_batches": planned,
        "seqs": report.seqs,
        "frames": report.frames,
        "wall_s": round(wall, 4),
        "seqs_per_s": round(report.seqs / wall, 2) if wall else 0.0,
        "frames_per_s": round(report.frames / wall, 1) if wall else 0.0,
        "first_batch_s": round(report.first_batch_s, 4),
        "data_wait_ms_per_batch": round(1000 * report.data_wait_s / max(report.steps, 1), 3),
        "data_wait_ms_after_first_batch": report.wait_summary_ms(),
        "main_cpu_ms_per_batch": round(1000 * cpu / max(report.steps, 1), 3),
        "computation_pct": round(report.computation_pct, 2),
        "computation_pct_after_first_batch": steady,
        "padding_ratio": round(report.padding_ratio, 5),
        "peak_rss_main_bytes": main_rss,
        "peak_rss_worker_bytes": worker_rss if opened.workers.num_workers else 0,
        "files_not_memory_mapped": unmapped,
        "hint": hint(report, steady, opened.workers.num_workers, args.step_ms, unmapped),
    }
    if args.json:
        print_json(out)
    else:
        print_text(out)
    return 0


def steady_computation_pct(report: EpochReport) -> float:
    """Computation time % once the first batch is in (worker start-up and file opening are a
    one-off cost per run; a long training sees this figure)."""
    rest_wall = report.wall_s - report.first_batch_s
    if report.steps <= 1 or rest_wall <= 0:
        return report.computation_pct
    return 100.0 * max(rest_wall - (report.data_wait_s - report.first_batch_s), 0.0) / rest_wall


def unmapped_files(source: Source) -> list[str]:
    """HDF files with keys the source reads through h5py rather than a memory map (chunked
    datasets, as RETURNN writes them); empty for other sources."""
    if not isinstance(source, HDFSource):
        return []
    try:
        return [p for p, keys in source.mapped_keys().items() if set(source.keys) - set(keys)]
    finally:
        source.close()


def hint(
    report: EpochReport, steady: float, num_workers: int, step_ms: float, unmapped: list[str]
) -> str:
    """One actionable sentence on what limits the pace."""
    convert = (
        f" {len(unmapped)} HDF file(s) are chunked (read through h5py, not memory-mapped): "
        "'seqloader convert IN OUT' rewrites them contiguously."
        if unmapped
        else ""
    )
    if step_ms == 0:
        return (
            "no simulated step (--step-ms 0): the figures are the loader's own speed; pass your "
            "model's step time to see the computation time %." + convert
        )
    first = (
        f" (the first batch took {report.first_batch_s:.2f} s: worker start-up and file opening, "
        f"once per run; without it {steady:.1f}%)"
        if report.steps > 1 and steady - report.computation_pct > 1.0
        else ""
    )
    if steady >= KEEPS_UP_PCT:
        return f"data keeps up: computation {report.computation_pct:.1f}% of the time{first}."
    cores = os.cpu_count() or 1
    wait = 1000 * (report.data_wait_s - report.first_batch_s) / max(report.steps - 1, 1)
    if steady < BOTTLENECK_PCT:
        text = (
            f"data is the bottleneck: after the first batch the trainer waits {wait:.1f} ms per "
            f"batch, longer than it computes (computation {steady:.1f}%)."
        )
    else:
        text = (
            f"data does not keep up: computation {steady:.1f}% after the first batch, below the "
            f"{KEEPS_UP_PCT:g}% at which it does; the trainer waits {wait:.1f} ms per batch."
        )
    dist = report.wait_summary_ms()
    if dist is not None and wait > 3 * dist["p50"]:  # the mean far above the median: stalls
        return text + (
            f" Most of it is rare stalls (median wait <={dist['p50']:.2f} ms, max "
            f"{dist['max']:.1f} ms), not a steady cost: more workers rarely help; look for slow "
            "reads (chunked or compressed files, network storage) or an overloaded machine."
            + convert
        )
    if num_workers == 0:
        return text + " Load in background processes: --num-workers 2 (or more)." + convert
    if num_workers < cores:
        return text + f" Try --num-workers {num_workers + 1} ({cores} cores here)." + convert
    return text + (
        f" All {cores} cores already run a worker: make reading cheaper or batches smaller."
        + convert
    )


def print_text(o: dict) -> None:
    print_header(o)
    print(
        f"{o['batches']}/{o['planned_batches']} batches of epoch {o['epoch']}, {o['num_workers']} "
        f"worker(s), simulated step {o['step_ms']:g} ms"
    )
    print(
        f"throughput: {human(o['seqs_per_s'])} seqs/s, {human(o['frames_per_s'])} frames/s "
        f"({o['seqs']} seqs in {o['wall_s']:.2f} s)"
    )
    print(f"time to first batch: {o['first_batch_s']:.3f} s")
    print(
        f"main process: {o['main_cpu_ms_per_batch']:.2f} ms CPU per batch, data wait "
        f"{o['data_wait_ms_per_batch']:.2f} ms per batch"
    )
    dist = o["data_wait_ms_after_first_batch"]
    if dist is not None:
        print(
            f"data wait per batch after the first: median <={dist['p50']:.2f} ms, p90 "
            f"<={dist['p90']:.2f} ms, p99 <={dist['p99']:.2f} ms, max {dist['max']:.2f} ms"
        )
    workers = f", largest worker {mib(o['peak_rss_worker_bytes'])}" if o["num_workers"] else ""
    print(f"peak RSS: main {mib(o['peak_rss_main_bytes'])}{workers}")
    print(
        f"computation time: {o['computation_pct']:.1f}% "
        f"({o['computation_pct_after_first_batch']:.1f}% after the first batch), "
        f"padding {100 * o['padding_ratio']:.1f}%"
    )
    print(f"hint: {o['hint']}")
    sys.stdout.flush()
