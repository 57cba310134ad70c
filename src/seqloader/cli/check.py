"""``seqloader check``: simulate every rank and worker from the plan and verify the contracts.

No processes are started: planning is pure, so the whole job is computed here
(``seqloader.plan.simulate``). Exit 1 with a report when a contract fails.
"""

from __future__ import annotations

import argparse

from seqloader.cli.options import (
    add_command,
    add_loader_options,
    add_output_options,
    open_data,
    positive_int,
)
from seqloader.cli.output import human, planning_text, print_header, print_json, progress_bar
from seqloader.loading.planner_for import planner_for
from seqloader.plan.simulate import Simulation, simulate

HELP = "verify exactly-once, equal steps and worker independence for W ranks x N workers"
DETAILS = (
    "Simulates all ranks and workers from the plan (nothing is read or started) and prints "
    "per-rank steps, sequences, frames, padding and filtered. Exit code 1 when a contract fails."
)


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = add_command(sub, "check", HELP, DETAILS, data=True)
    p.add_argument("--world-size", type=positive_int, default=1, metavar="W", help="ranks")
    p.add_argument(
        "--epochs",
        type=positive_int,
        default=None,
        metavar="E",
        help="epochs to check, from --first-epoch (default: one full epoch = partition_epoch)",
    )
    p.add_argument(
        "--first-epoch", type=positive_int, default=1, metavar="E", help="first epoch (from 1)"
    )
    add_loader_options(p, workers=False)
    add_output_options(p)
    return p


def run(args: argparse.Namespace) -> int:
    opened = open_data(args)
    src = opened.source
    planner = planner_for(src, opened.plan)
    planner.check_world(args.world_size)
    n_epochs = args.epochs or opened.plan.partition_epoch
    epochs = range(args.first_epoch, args.first_epoch + n_epochs)
    bar = progress_bar(not args.no_progress and not args.json, "simulating", n_epochs, "epoch")
    try:
        result = simulate(
            planner,
            args.world_size,
            opened.workers.num_workers,
            list(epochs),
            lambda e: bar.update(),
            packed=opened.workers.layout == "packed",
        )
    finally:
        bar.close()
    if args.json:
        out = {**result.to_dict(), **opened.header(options=False)}
        out["options"] = planner.options.to_dict()  # planning: what planned (auto resolved)
        out["planning"] = planning_text(opened.plan.planning, planner.options.planning)
        out["plan_algorithm"] = planner.algorithm
        print_json(out)
    else:
        print_header(opened.header(options=False))
        planning = planning_text(opened.plan.planning, planner.options.planning)
        print(f"planning: {planning}, algorithm {planner.algorithm}")
        print_report(result, planner.options.to_json())
    return 0 if result.ok else 1


def print_report(result: Simulation, options: str) -> None:
    filtered = sum(result.filtered.values())
    print(f"options: {options}")
    print(
        f"{result.num_seqs} sequences, {result.admitted} admitted, {filtered} filtered"
        + (f" {result.filtered}" if filtered else "")
        + f"; {result.world_size} rank(s) x {result.num_workers} worker(s)"
    )
    for e in result.epochs:
        print(
            f"epoch {e.epoch} (full epoch {e.full_epoch + 1}, part {e.part + 1}): {e.steps} steps "
            f"per rank" + (f", dropped {e.dropped}" if e.dropped else "")
        )
        for r in e.ranks:
            ld = r.load
            workers = "  ".join(
                f"w{w}: {x.batches} b/{human(x.frames)} fr" for w, x in enumerate(r.workers)
            )
            print(
                f"  rank {r.rank}: {ld.batches} steps, {ld.seqs} seqs, {human(ld.frames)} frames, "
                f"padding {100 * ld.padding_ratio:.1f}%"
                + (f", {ld.repeats} filler repeats (masked)" if ld.repeats else "")
                + (f", {r.files} files" if r.files is not None else "")
                + f" | {workers}"
            )
    for f in result.findings:
        print(f"{f.contract}: {'ok' if f.ok else 'FAILED'} - {f.message}")
    print("check passed" if result.ok else "check FAILED")
