"""``seqloader prepare``: build the node's one-time stores for DATA and loader options ahead of a
job (``seqloader.trainer.prepare``), so that no rank's first ``SeqLoader`` builds them."""

from __future__ import annotations

import argparse
import time

from seqloader.cli.options import (
    add_command,
    add_loader_options,
    add_output_options,
    open_data,
)
from seqloader.cli.output import print_header, print_json
from seqloader.trainer.prepare import prepare

HELP = (
    "build the node's stores a loader of DATA with these options needs (metadata, duplicate-tag "
    "verdict, bucket index, NaN/Inf screen verdicts), once, before the job"
)
DETAILS = (
    "Run it once per node (or on a shared cache) with the options the job's SeqLoader gets; a "
    "second run finds everything. 'seqloader cache' lists and cleans the stores."
)


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = add_command(sub, "prepare", HELP, DETAILS, data=True)
    add_loader_options(p, workers=False)
    p.add_argument(
        "--no-screen",
        action="store_true",
        help="do not screen the HDF files' float data for NaN/Inf ahead (by default every value "
        "is read once and the node keeps the verdict, so no first epoch screens it)",
    )
    add_output_options(p)
    return p


def run(args: argparse.Namespace) -> int:
    started = time.perf_counter()
    opened = open_data(args, default_limit=False)
    opened_s = time.perf_counter() - started
    report = prepare(opened.source, plan=opened.plan, screen=not args.no_screen)
    if args.json:
        print_json(
            {
                **opened.header(),
                "open_seconds": opened_s,
                "stores": [
                    {
                        "kind": s.kind,
                        "path": s.path,
                        "built": s.built,
                        "bytes": s.nbytes,
                        "seconds": None if s.seconds < 0 else s.seconds,
                        "private_peak_bytes": None if s.private_peak < 0 else s.private_peak,
                        "note": s.note,
                    }
                    for s in report.stores
                ],
            }
        )
        return 0
    print_header(opened.header(options=False), f" (opened in {opened_s:.2f} s)")
    print(f"options: {opened.plan.to_json()}")
    for line in report.lines():
        print(line)
    print(f"built {len(report.built)} store(s)" if report.built else "everything was there")
    return 0
