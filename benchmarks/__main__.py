"""``python -m benchmarks [--quick] ...`` (also ``make bench``): see benchmarks/__init__.py."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace

from benchmarks.child import PassPlan
from benchmarks.corpus import CorpusSpec
from benchmarks.report import format_targets, plot, summarize, table, targets
from benchmarks.suite import REPO, Settings, quick_settings, run_suite


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="seqloader vs a bare h5py loop, a hand-written DataLoader and RETURNN's "
        "pipeline on a RETURNN-format HDF corpus; ratios of side-by-side runs.",
    )
    p.add_argument("--quick", action="store_true", help="smoke-test sizes (about a minute)")
    p.add_argument("--num-seqs", type=int, help="corpus size (default 10000; quick: 240)")
    p.add_argument("--reps", type=int, help="repetitions per configuration (default 3)")
    p.add_argument("--max-seqs", type=int, help="sequences per batch (default 32)")
    p.add_argument("--workers", type=str, help="comma-separated worker counts (default 0,1,2)")
    p.add_argument(
        "--pipelines", type=str, help="comma-separated subset of h5py,torch,returnn,seqloader"
    )
    p.add_argument("--measure-seqs", type=int, help="sequences in the throughput pass")
    p.add_argument("--step-ms", type=str, help="simulated step lengths (default 5,10,20)")
    p.add_argument("--step-batches", type=int, help="batches per simulated-step pass")
    p.add_argument("--corpus-dir", type=str, help="where the (cached) corpus files go")
    p.add_argument(
        "--out",
        type=str,
        help="directory for the JSON and PNG (default benchmarks/results; with --quick "
        "benchmarks/out, which git ignores)",
    )
    p.add_argument("--name", type=str, help="file stem (default bench-<mode>-<timestamp>)")
    p.add_argument(
        "--merge",
        nargs="+",
        metavar="JSON",
        help="instead of running: pool the repetitions of earlier runs with the same settings "
        "(e.g. taken at different times on a shared machine) and report their medians",
    )
    return p.parse_args(argv)


def settings_from(args: argparse.Namespace) -> Settings:
    s = quick_settings() if args.quick else Settings()
    if args.num_seqs is not None:
        s = replace(s, corpus=replace(s.corpus, num_seqs=args.num_seqs))
    if args.reps is not None:
        s = replace(s, reps=args.reps)
    if args.max_seqs is not None:
        s = replace(s, max_seqs=args.max_seqs)
    if args.workers:
        s = replace(s, workers=tuple(int(w) for w in args.workers.split(",")))
    if args.pipelines:
        s = replace(s, pipelines=tuple(args.pipelines.split(",")))
    if args.corpus_dir:
        s = replace(s, corpus_dir=args.corpus_dir)
    plan: PassPlan = s.plan
    if args.measure_seqs is not None:
        plan = replace(plan, measure_seqs=args.measure_seqs)
    if args.step_ms:
        plan = replace(plan, step_ms=tuple(float(x) for x in args.step_ms.split(",")))
    if args.step_batches is not None:
        plan = replace(plan, step_batches=args.step_batches)
    return replace(s, plan=plan)


def merge_results(paths: list[str]) -> dict:
    """One result whose repetitions are those of ``paths`` (same settings required)."""
    results = []
    for path in paths:
        with open(path) as fh:
            results.append(json.load(fh))
    first = results[0]
    for path, r in zip(paths[1:], results[1:]):
        if r["settings"] != first["settings"]:
            raise SystemExit(f"--merge: {path} was run with other settings than {paths[0]}")
    merged = {k: v for k, v in first.items() if k not in ("summary", "targets", "elapsed_s")}
    merged["runs"], merged["merged_from"] = [], []
    offset = 0
    for path, r in zip(paths, results):
        merged["runs"] += [{**run, "rep": run["rep"] + offset} for run in r["runs"]]
        offset += r["settings"]["reps"]
        merged["merged_from"].append(
            {
                "file": os.path.basename(path),
                "started": r["started"],
                "load_average_before": r["load_average_before"],
                "load_average_after": r["load_average_after"],
                "memory_bandwidth": r["memory_bandwidth"],
            }
        )
    merged["settings"] = {**first["settings"], "reps": offset}
    merged["finished"] = results[-1]["finished"]
    merged["load_average_after"] = results[-1]["load_average_after"]
    return merged


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.merge:
        result = merge_results(args.merge)
        return finish(result, args, bool(result["settings"]["quick"]), 0.0)
    settings = settings_from(args)
    unknown = set(settings.pipelines) - {"h5py", "torch", "returnn", "seqloader"}
    if unknown:
        print(f"unknown pipeline(s) {sorted(unknown)}", file=sys.stderr)
        return 2
    if not isinstance(settings.corpus, CorpusSpec) or settings.corpus.num_seqs < settings.max_seqs:
        print("--num-seqs must be at least --max-seqs", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    result = run_suite(settings, log=lambda m: print(m, flush=True))
    return finish(result, args, settings.quick, time.perf_counter() - t0)


def finish(result: dict, args: argparse.Namespace, quick: bool, elapsed: float) -> int:
    """Summarize, write the JSON and the PNG, print the table and the targets."""
    summary = summarize(result)
    result["summary"] = summary
    result["targets"] = targets(result, summary)
    result["elapsed_s"] = elapsed
    out_dir = args.out or os.path.join(REPO, "benchmarks", "out" if quick else "results")
    os.makedirs(out_dir, exist_ok=True)
    stem = args.name or time.strftime(f"bench-{'quick' if quick else 'full'}-%Y%m%d-%H%M%S")
    json_path = os.path.join(out_dir, stem + ".json")
    png_path = os.path.join(out_dir, stem + ".png")
    with open(json_path, "w") as fh:
        json.dump(result, fh, indent=1)
    plot(result, summary, png_path)
    print()
    print(table(result, summary))
    print("\ntargets (ratios of side-by-side runs, medians over repetitions):")
    print(format_targets(result["targets"]))
    m = result["machine"]
    print(
        f"\nmachine: {m['cpu']}, {m['cpus']} CPUs; load average before/after: "
        f"{result['load_average_before']} / {result['load_average_after']}"
    )
    print(f"wrote {json_path} and {png_path} ({result['elapsed_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
