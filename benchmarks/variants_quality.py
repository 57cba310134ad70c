"""Batch quality of length variants under indexed planning against global planning: steps,
padding and fill of the combinations ``planning="auto"`` resolves to indexed planning since
round 14 (``epoch_wise_filter``, per-key ``max_frames``, per-key ``max_packed_frames``, epoch
selections), each ordering, in one run.

    python -m benchmarks.variants_quality [--sizes 1e5,1e6] [--seeds 1,2,3]
        [--orderings laplace,buckets:8,random,sorted,default] [--combos filter,keyed,packed,select]
        [--out FILE]

Corpus (per seed): speech-like log-normal ``features`` lengths (median 600, sigma 0.4, clipped
50..2000: ``benchmarks.indexed_batching``'s), three speed variants 0.9 / 1.0 / 1.1 (each
``ceil(L / factor)``; the source's lengths the slowest's), and ``labels`` ~1/6 of the audio at
1.0 (not varying). ``max_seqs=200``, ``max_frames=20_000`` (features); each combination adds:
``filter`` ``epoch_wise_filter={(1, 1): {"max_mean_len": 600}}``; ``keyed``
``max_frames={"features": 20_000, "labels": 3_300}``; ``packed``
``max_packed_frames={"features": 15_000, "labels": 2_500}``; ``packed1``
``max_packed_frames=15_000`` (the features alone); ``select`` an epoch selection of
epoch 1 keeping 3 sequences in 4. Per (combination, ordering, size, seed): epoch 1's whole plan
on one rank (steps = batches) under ``planning="indexed"`` and ``"global"``; padding = padded
feature frames (``n_seqs * longest`` at the drawn variants) / feature frames; fill = the mean
over batches of the tightest limit's use (the largest of ``n / max_seqs``, ``n * longest / F``
per limited key, ``sum / P`` per packed key). Medians over the seeds; ratios indexed / global.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics

import numpy as np

from seqloader.errors import OptionError

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results", "variants_quality.json")
FACTORS = (0.9, 1.0, 1.1)
MAX_SEQS, MAX_FRAMES = 200, 20_000
COMBOS: dict[str, dict] = {
    "filter": {"epoch_wise_filter": {(1, 1): {"max_mean_len": 600}}},
    "keyed": {"max_frames": {"features": MAX_FRAMES, "labels": 3_300}},
    "packed": {
        "max_frames": MAX_FRAMES,
        "max_packed_frames": {"features": 15_000, "labels": 2_500},
    },
    "packed1": {"max_packed_frames": 15_000},
    "select": {},
}


def corpus(n: int, seed: int):
    """Feature lengths per variant ``[F, n]`` and labels ``[n]``."""
    rng = np.random.default_rng(seed)
    base = np.clip(np.round(rng.lognormal(np.log(600), 0.4, n)), 50, 2000).astype(np.int64)
    table = np.stack([np.ceil(base / f).astype(np.int64) for f in FACTORS])
    labels = np.maximum(1, np.round(base / 6 * rng.uniform(0.8, 1.2, n))).astype(np.int64)
    return table, labels


def quality(lens: dict[str, np.ndarray], bounds: np.ndarray, options: dict) -> dict[str, float]:
    """Steps, padding (features) and fill of one plan's batches (lengths per slot)."""
    sizes = np.diff(bounds)
    starts = bounds[:-1]
    feats = lens["features"]
    longest = {k: np.maximum.reduceat(v, starts) for k, v in lens.items()}
    sums = {k: np.add.reduceat(v, starts) for k, v in lens.items()}
    use = [sizes / MAX_SEQS]
    frames = options.get("max_frames", MAX_FRAMES)
    frames = frames if isinstance(frames, dict) else {"features": frames}
    use += [sizes * longest[k] / f for k, f in frames.items()]
    packed = options.get("max_packed_frames") or {}
    packed = packed if isinstance(packed, dict) else {"features": packed}
    use += [sums[k] / p for k, p in packed.items()]
    fill = np.max(np.stack(use), axis=0)
    return {
        "steps": len(sizes),
        "padding": float((sizes * longest["features"]).sum() / feats.sum()),
        "fill": float(fill.mean()),
        "over": float(fill.max()),
    }


def one(n: int, seed: int, combo: str, ordering: str, planning: str) -> dict[str, float]:
    from seqloader.plan import PlanOptions
    from seqloader.plan.inputs import PlanInputs
    from seqloader.plan.planners import make_planner, resolve_planning
    from seqloader.plan.selections import EpochSelection
    from seqloader.plan.variants import LengthVariants

    table, labels = corpus(n, seed)
    variants = LengthVariants({"features": table}, tuple(str(f) for f in FACTORS))
    source = {"features": table.max(axis=0), "labels": labels}
    added = COMBOS[combo]
    limits = {"max_seqs": MAX_SEQS, "max_frames": MAX_FRAMES, **added}
    options = PlanOptions(ordering=ordering, seed=seed, planning=planning, **limits)
    sels = []
    if combo == "select":
        keep = np.random.default_rng(seed + 100).random(n) < 0.75
        sels = [EpochSelection(1, 1, keep, "subdirs=['a']")]
    inputs = PlanInputs(source, options, variants=variants, selections=sels)
    auto = PlanInputs(source, PlanOptions(ordering=ordering, seed=seed, **limits),
                      variants=variants, selections=sels)  # fmt: skip
    planner = make_planner(inputs)
    b = planner.global_plan(1, 1).batches
    if b.variants is not None:
        drawn = {"features": table[b.variants, b.seqs], "labels": labels[b.seqs]}
    else:
        at = variants.at(seed, 0, source)
        drawn = {k: at[k][b.seqs] for k in source}
    out = quality(drawn, np.asarray(b.bounds), limits)
    out["auto"] = resolve_planning(auto).options.planning
    return out


def measure(args: argparse.Namespace) -> dict:
    rows: dict[str, dict] = {}
    seeds = [int(s) for s in args.seeds.split(",")]
    for combo in args.combos.split(","):
        for ordering in args.orderings.split(","):
            for n in (int(float(s)) for s in args.sizes.split(",")):
                got: dict[str, list[dict]] = {"indexed": [], "global": []}
                for seed in seeds:
                    for planning in got:
                        with contextlib.suppress(OptionError):  # global refuses: no comparison
                            got[planning].append(one(n, seed, combo, ordering, planning))
                row: dict = {"auto": got["indexed"][0]["auto"]}
                for planning, runs in got.items():
                    if not runs:
                        row[planning] = None
                        continue
                    row[planning] = {
                        k: statistics.median(r[k] for r in runs)
                        for k in ("steps", "padding", "fill", "over")
                    }
                row["ratio"] = got["global"] and {
                    k: statistics.median(i[k] / g[k] for i, g in zip(got["indexed"], got["global"]))
                    for k in ("steps", "padding", "fill")
                }
                name = f"{combo} {ordering} {n:.0e}"
                rows[name] = row
                print(name, json.dumps(row), flush=True)
    return rows


def table(rows: dict) -> str:
    head = ("| combination | ordering | n | steps (indexed / global) | ratio | padding | ratio "
            "| fill | auto |\n| --- | --- | --- | --- | --- | --- | --- | --- | --- |")  # fmt: skip
    out = [head]
    for name, r in rows.items():
        combo, ordering, n = name.split(" ")
        i, g, q = r["indexed"], r["global"], r["ratio"]
        if not g:
            out.append(
                f"| {combo} | `{ordering}` | {n} | {i['steps']:.0f} / refused | | "
                f"{i['padding']:.3f} / refused | | {i['fill']:.3f} / refused | {r['auto']} |"
            )
            continue
        out.append(
            f"| {combo} | `{ordering}` | {n} | {i['steps']:.0f} / {g['steps']:.0f} | "
            f"{q['steps']:.3f}x | {i['padding']:.3f} / {g['padding']:.3f} | {q['padding']:.3f}x | "
            f"{i['fill']:.3f} / {g['fill']:.3f} | {r['auto']} |"
        )
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1e5,1e6")
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--orderings", default="laplace,buckets:8,random,sorted,default")
    parser.add_argument("--combos", default=",".join(COMBOS))
    parser.add_argument("--out", default=RESULTS)
    args = parser.parse_args(argv)
    rows = measure(args)
    print(table(rows))
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        json.dump({"settings": vars(args), "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
