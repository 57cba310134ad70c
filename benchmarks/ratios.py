"""Ratios only, from a suite result: ``python -m benchmarks.ratios RESULT.json --out R.json``.

Absolute speeds on a shared machine drift by tens of percent between minutes; what a result can
say is how pipelines compare side by side. This keeps, for the pairs the issues ask about, each
repetition's ratio (both configurations measured in the same repetition) and their median, with
the machine and its load, and leaves the absolute figures out.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys

# (numerator, denominator, figure): sequences/s unless named otherwise
PAIRS = [
    ("seqloader/chunked/w0", "returnn/chunked/w0"),
    ("seqloader/chunked/w0", "torch/chunked/w0"),
    ("seqloader/chunked/w0", "h5py/chunked/w0"),
    ("seqloader/contiguous/w0", "h5py/chunked/w0"),
    ("seqloader/contiguous/w0", "h5py/contiguous/w0"),
    ("seqloader/chunked/w1", "returnn/chunked/w1"),
    ("seqloader/chunked/w1", "torch/chunked/w1"),
    ("seqloader/contiguous/w1", "returnn/chunked/w1"),
    ("seqloader/contiguous/w1", "torch/chunked/w1"),
    ("torch/chunked/w0", "returnn/chunked/w0"),
    ("h5py/chunked/w0", "torch/chunked/w0"),
    ("h5py/chunked/w0", "returnn/chunked/w0"),
]


def label(spec: dict) -> str:
    return f"{spec['pipeline']}/{spec['layout']}/w{spec['workers']}"


def ratios(result: dict) -> dict:
    by_rep: dict[int, dict[str, dict]] = {}
    for run in result["runs"]:
        if "error" not in run:
            by_rep.setdefault(run["rep"], {})[label(run["spec"])] = run
    out: dict[str, dict] = {}
    for a, b in PAIRS:
        per_rep = [
            reps[a]["seqs_per_s"] / reps[b]["seqs_per_s"]
            for reps in by_rep.values()
            if a in reps and b in reps
        ]
        if per_rep:
            out[f"{a} / {b} (sequences/s)"] = {
                "median": statistics.median(per_rep),
                "per_rep": per_rep,
            }
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("result")
    p.add_argument("--out", required=True)
    p.add_argument("--note", default="", help="what to know about the run (load, anomalies)")
    a = p.parse_args(argv)
    with open(a.result) as f:
        result = json.load(f)
    summary = result.get("summary", {})
    out = {
        "what": "ratios of side-by-side runs of python -m benchmarks (no absolute figures)",
        "settings": result["settings"],
        "machine": result["machine"],
        "load_average_1_5_15min": {
            "before": result.get("load_average_before"),
            "after": result.get("load_average_after"),
        },
        "note": a.note,
        "ratios": ratios(result),
        "computation_pct_loop_side": {
            k: v.get("computation_pct") for k, v in summary.items() if v.get("computation_pct")
        },
    }
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1)
    for k, v in out["ratios"].items():
        print(f"{k:70s} {v['median']:6.2f}x  ({', '.join(f'{x:.2f}' for x in v['per_rep'])})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
