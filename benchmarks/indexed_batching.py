"""Batch quality of ``planning="indexed"`` against the greedy algorithm (``planning="global"``):
padding and steps at the same options, on three length distributions, in one run.

    python -m benchmarks.indexed_batching [--n 1e6] [--epochs 3] [--cases sequences|chunked|packed]
        [--out FILE]

Distributions (``n`` sequences each): ``uniform`` (50..2000, ``benchmarks.scale``'s), ``log-normal``
(speech-like: ``benchmarks.corpus.CorpusSpec``'s reference corpus, median 600, sigma 0.4, clipped
50..2000) and ``long-tailed`` (log-normal, median 300, sigma 1.0, clipped 20..20000: one sequence
in 250 is longer than 4,000 frames). ``max_seqs=200, max_frames=20_000``. Cases: ``shard`` with
``laplace`` and ``buckets:30``, and ``files`` with ``laplace`` (10^4 equal files).

Per case and epoch, the whole epoch's plan over ``W`` ranks (8 and 1,024): padding = padded
frames of every batch (``n_seqs * longest``, repeats included) / frames of the distinct sequences
used; steps = the plan's steps; batches = its batch count on one rank (``W = 1``, shard). Medians
over the epochs; the figures are ratios indexed / greedy. Run it with another ``seqloader`` on
``PYTHONPATH`` to measure another version of the code (the indexed plans are what changes).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics

import numpy as np

from benchmarks.corpus import CorpusSpec
from benchmarks.machine import describe_machine
from seqloader.plan import PlanOptions
from seqloader.plan.batching import padded_frames
from seqloader.plan.planners import make_planner

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results", "indexed_batching.json")
LIMITS: dict = {"max_seqs": 200, "max_frames": 20_000}
CASES: dict[str, dict] = {
    "shard laplace": {"ordering": "laplace", "distribution": "shard"},
    "shard buckets:30": {"ordering": "buckets:30", "distribution": "shard"},
    "files laplace": {"ordering": "laplace", "distribution": "files"},
}
#: chunked plans (``--cases chunked``): chunks are the planned units of both plannings
CHUNKED: dict[str, dict] = {
    f"shard {o} 500:250": {"ordering": o, "distribution": "shard", "chunking": "500:250"}
    for o in ("laplace", "buckets:30")
}
#: packed limits (``--cases packed``): ``max_frames`` bounds a batch's sum of lengths
#: (``batch_cost="packed"``)
PACKED: dict[str, dict] = {
    "shard laplace packed": {
        "ordering": "laplace",
        "distribution": "shard",
        "batch_cost": "packed",
    },
    "files laplace packed": {
        "ordering": "laplace",
        "distribution": "files",
        "batch_cost": "packed",
    },
}
FILES = 10_000
WORLDS = (8, 1024)


def distributions(n: int) -> dict[str, np.ndarray]:
    """The three length distributions (int32, as a mapped lengths column holds them)."""
    rng = np.random.default_rng(0)
    uniform = rng.integers(50, 2001, n)
    speech = CorpusSpec(num_seqs=n).lengths()[0]
    tail = np.clip(np.rint(rng.lognormal(np.log(300), 1.0, n)), 20, 20_000)
    return {
        name: lengths.astype(np.int32)
        for name, lengths in (("uniform", uniform), ("log-normal", speech), ("long-tailed", tail))
    }


def figures(lengths: np.ndarray, case: dict, planning: str, epoch: int) -> dict[str, float]:
    """Padding and steps of one epoch's plan (see the module doc)."""
    options = PlanOptions(**case, **LIMITS, seed=3, planning=planning)
    files = np.linspace(0, len(lengths), FILES + 1).astype(np.int64)
    planner = make_planner({"data": lengths}, options, files=files)
    out: dict[str, float] = {}
    if case["distribution"] == "shard":
        out["batches"] = len(planner.global_plan(epoch, 1).batches)
    for world in WORLDS:
        plan = planner.global_plan(epoch, world)
        b = plan.batches
        if planner.chunks is not None:  # a slot is a chunk: its window (frames cost: length)
            windows = planner.slot_costs(b)
            real = int(windows[b.real].sum())  # each chunk once: the real slots
            out[f"padding W{world}"] = int(padded_frames(windows, b.bounds).sum()) / real
            out[f"steps W{world}"] = plan.steps
            continue
        frames = np.asarray(lengths, dtype=np.int64)
        used = np.unique(b.seqs)
        real = int(frames[used].sum())
        out[f"padding W{world}"] = int(padded_frames(frames[b.seqs], b.bounds).sum()) / real
        out[f"steps W{world}"] = plan.steps
    return out


def measure(n: int, epochs: int, cases: dict[str, dict] = CASES) -> dict:
    out: dict = {}
    for dist, lengths in distributions(n).items():
        for name, case in cases.items():
            row: dict = {}
            for planning in ("global", "indexed"):
                per = [figures(lengths, case, planning, e) for e in range(1, epochs + 1)]
                row[planning] = {k: statistics.median(f[k] for f in per) for k in per[0]}
            row["ratio"] = {k: row["indexed"][k] / row["global"][k] for k in row["global"]}
            out[f"{dist} / {name}"] = row
            print(f"{dist:12s} {name:17s} " + json.dumps(row["ratio"]), flush=True)
    return out


def table(result: dict) -> str:
    """The markdown table of ``docs/planning.md``: ratios indexed / greedy."""
    head = (
        "| distribution | case | padding W8 | padding W1024 | batches (W1) | steps W8 |"
        " steps W1024 |\n| --- | --- | --- | --- | --- | --- | --- |"
    )
    rows = []
    for key, row in result["rows"].items():
        dist, case = key.split(" / ")
        r, g = row["ratio"], row["global"]
        batches = f"{r['batches']:.4f}" if "batches" in r else ""
        rows.append(
            f"| {dist} | `{case}` | {r['padding W8']:.4f} | {r['padding W1024']:.4f} | {batches} | "
            f"{r['steps W8']:.4f} ({g['steps W8']:g}) | {r['steps W1024']:.4f} "
            f"({g['steps W1024']:g}) |"
        )
    return "\n".join([head, *rows])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", default="1e6", help="sequences per distribution")
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--out", default=RESULTS)
    parser.add_argument(
        "--cases",
        choices=["sequences", "chunked", "packed"],
        default="sequences",
        help="chunked: the chunked cases (chunking='500:250'); packed: the packed limits; "
        "written to --out",
    )
    args = parser.parse_args(argv)
    n = int(float(args.n))
    import seqloader

    result = {
        "settings": {"seqs": n, "epochs": args.epochs, **LIMITS, "files": FILES},
        "code": os.path.dirname(seqloader.__file__),
        "machine": describe_machine(),
        "rows": measure(
            n, args.epochs, {"chunked": CHUNKED, "packed": PACKED}.get(args.cases, CASES)
        ),
    }
    print(table(result))
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
