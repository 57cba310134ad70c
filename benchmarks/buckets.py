"""Batching quality from the plan alone: padding, steps, step-cost imbalance over 8 ranks and what
became of every sequence (used once, dropped, duplicated), for seqloader's orderings and Lhotse's
``DynamicBucketingSampler`` at the same budget. Nothing is read: lengths only.

``python -m benchmarks.buckets [--reps 5] [--out benchmarks/results]`` writes ``buckets.json``,
``buckets.md`` (the table) and ``buckets.png``.

Same budget: ``max_frames`` padded frames per batch (``n_seqs * Lmax``) for seqloader; for Lhotse
the same frames as seconds (100 frames/s), ``max_duration = max_frames / 100``, whose batch rule is
the same ``num_cuts * longest_seen``. With a quadratic cost, ``batch_cost="quadratic:Q"`` against
``quadratic_duration = Q / 100``.

Lhotse on 8 ranks: every rank's ``DynamicBucketingSampler(world_size=8, rank=r)`` draws the same
8 batches per step (``sync_buckets=True``, its default, picks the bucket from one shared RNG) and
keeps batch ``r``; the end of the epoch re-splits the last partial step and duplicates cuts when
fewer than 8 are left (``CutSampler.__next__``). One sampler drawing the 8 batches of each step
through ``_next_batch`` — the call ``__next__`` makes — with that end-of-epoch code copied from
Lhotse, gives all ranks' batches in one pass.

SpeechBrain's ``DynamicBatchSampler`` is not measured: importing speechbrain imports torchaudio,
and the newest torchaudio wheel (2.11.1) does not load against this project's pinned torch 2.13.0
(its ``_torchaudio.so`` fails), while installing a matching torch is ruled out here.

Padding ratio = padded frames of all batches / frames of the distinct sequences used - 1 (repeats
and duplicates are padding: compute spent on nothing new). Imbalance = mean over steps of max/mean
batch cost across the 8 ranks (``seqloader.plan.cost.step_imbalance``). Medians over ``--reps``
epochs (different shuffles); used once / dropped / duplicated: the worst epoch.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import warnings
from pathlib import Path

import numpy as np

from benchmarks.corpus import CorpusSpec
from seqloader.plan import BatchList, Planner, PlanOptions
from seqloader.plan.batching import padded_frames
from seqloader.plan.cost import BatchCost, step_imbalance

WORLD = 8
MAX_FRAMES = 20_000
FPS = 100  # frames per second, to give Lhotse durations
ORDERINGS = ("random", "laplace:.100", "laplace:.1000")
BUCKETS = (5, 10, 20, 30, 60)


def corpora(n: int) -> dict[str, np.ndarray]:
    """The reference corpus' lengths, and a bimodal mix (short commands and long utterances)."""
    reference, _ = CorpusSpec(num_seqs=n).lengths()
    rng = np.random.default_rng(5)
    short = rng.lognormal(np.log(150), 0.3, int(n * 0.6))
    long = rng.lognormal(np.log(1200), 0.25, n - len(short))
    bimodal = np.clip(np.rint(rng.permutation(np.concatenate([short, long]))), 20, 2000)
    return {"reference": reference, "bimodal": bimodal.astype(np.int64)}


def figures(
    lengths: np.ndarray, steps: list[list[np.ndarray]], cost: BatchCost, n: int
) -> dict[str, float]:
    """Figures of a run given as steps of ``WORLD`` batches (arrays of sequence indices, repeats
    included as indices)."""
    flat = [b for step in steps for b in step]
    seqs = np.concatenate(flat) if flat else np.zeros(0, np.int64)
    bounds = np.concatenate([[0], np.cumsum([len(b) for b in flat])]).astype(np.int64)
    uses = np.bincount(seqs, minlength=n)
    real = int(lengths[uses > 0].sum())
    padded = int(padded_frames(lengths[seqs], bounds).sum())
    return {
        "padding": padded / real - 1,
        "steps": len(steps),
        "imbalance": step_imbalance(seqs, bounds, WORLD, cost.units(lengths)),
        "once": int(np.count_nonzero(uses == 1)),
        "dropped": int(np.count_nonzero(uses == 0)),
        "duplicated": int(np.count_nonzero(uses > 1)),
    }


def seqloader_steps(lengths: np.ndarray, ordering: str, epoch: int, cost: str) -> list:
    options = PlanOptions(ordering=ordering, max_frames=MAX_FRAMES, seed=1, batch_cost=cost)
    plan = Planner({"data": lengths}, options).global_plan(epoch, WORLD)
    b: BatchList = plan.batches
    batches = [b.seqs[b.bounds[k] : b.bounds[k + 1]] for k in range(len(b))]
    return [batches[s * WORLD : (s + 1) * WORLD] for s in range(plan.steps)]


def lhotse_steps(lengths: np.ndarray, num_buckets: int, epoch: int, quadratic: int | None) -> list:
    from lhotse import CutSet, MonoCut, combine
    from lhotse.dataset import DynamicBucketingSampler
    from lhotse.dataset.sampling.base import mark_as_duplicate

    cuts = CutSet.from_cuts(
        MonoCut(id=str(i), start=0.0, duration=int(t) / FPS, channel=0)
        for i, t in enumerate(lengths)
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an eager CutSet: fine for lengths only
        sampler = DynamicBucketingSampler(
            cuts,
            max_duration=MAX_FRAMES / FPS,
            num_buckets=num_buckets,
            shuffle=True,
            drop_last=False,
            buffer_size=max(20_000, len(lengths)),
            quadratic_duration=None if quadratic is None else quadratic / FPS,
            world_size=WORLD,
            rank=0,
            seed=0,
        )
        sampler.set_epoch(epoch)
        iter(sampler)
        steps = []
        while True:
            batches = []
            for _ in range(WORLD):  # CutSampler.__next__: WORLD draws per step
                with contextlib.suppress(StopIteration):  # Lhotse: no drop_last, keep going
                    batches.append(sampler._next_batch())
            if not batches:
                break
            if len(batches) != WORLD:  # Lhotse's end of epoch, as in CutSampler.__next__
                combined = combine(batches)
                chunk = 0
                while (diff := WORLD - len(combined)) > 0:
                    combined = combined + combined.subset(first=diff).modify_ids(
                        mark_as_duplicate(chunk)
                    )
                    chunk += 1
                batches = combined.split(WORLD)
            steps.append([np.array([int(c.id.split("_dup")[0]) for c in b]) for b in batches])
    return steps


def run(lengths: np.ndarray, kind: str, arg: object, epoch: int, cost: BatchCost) -> list:
    """One epoch's steps of one method."""
    if kind == "lhotse":
        return lhotse_steps(lengths, int(arg), epoch, cost.quadratic)  # type: ignore[call-overload]
    return seqloader_steps(lengths, str(arg), epoch, str(cost))


def measure(reps: int, n: int, quadratic: int | None = None, only: str | None = None) -> dict:
    cost = BatchCost(quadratic)
    out: dict = {}
    for corpus, lengths in corpora(n).items():
        if only is not None and corpus != only:
            continue
        methods = [(f"seqloader {o}", "seqloader", o) for o in ORDERINGS]
        methods += [(f"seqloader buckets:{k}", "seqloader", f"buckets:{k}") for k in BUCKETS]
        methods += [(f"lhotse {k} buckets", "lhotse", k) for k in BUCKETS]
        rows = {}
        for name, kind, arg in methods:
            per_epoch = [
                figures(lengths, run(lengths, kind, arg, epoch, cost), cost, len(lengths))
                for epoch in range(1, reps + 1)
            ]
            rows[name] = {m: statistics.median(f[m] for f in per_epoch) for m in per_epoch[0]}
            # what became of sequences: the worst epoch, not the median (a rare duplicate counts)
            rows[name]["once"] = min(f["once"] for f in per_epoch)
            for m in ("dropped", "duplicated"):
                rows[name][m] = max(f[m] for f in per_epoch)
            print(f"{corpus:9s} {name:24s} {rows[name]}", flush=True)
        out[corpus] = {"sequences": len(lengths), "total_frames": int(lengths.sum()), "rows": rows}
    return out


def table(result: dict, cost: str) -> str:
    lines = []
    for corpus, info in result.items():
        lines += [
            f"**{corpus}** ({info['sequences']} sequences, {info['total_frames']} frames; "
            f"max_frames={MAX_FRAMES}, batch_cost={cost}, {WORLD} ranks; padding = padded / real "
            "frames - 1; medians over epochs, sequence counts of the worst epoch)",
            "",
            "| method | padding | steps | imbalance (8 ranks) | used once | dropped | duplicated |",
            "| --- | --- | --- | --- | --- | --- | --- |",
        ]
        for name, r in info["rows"].items():
            lines.append(
                f"| {name} | {100 * r['padding']:.1f}% | {r['steps']:g} | {r['imbalance']:.3f} | "
                f"{r['once']:g} | {r['dropped']:g} | {r['duplicated']:g} |"
            )
        lines.append("")
    return "\n".join(lines)


def plot(path: Path, results: dict[str, dict]) -> None:
    """Padding vs imbalance, one panel per (cost, corpus): seqloader's orderings and buckets,
    Lhotse's bucket counts."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [(c, corpus, info) for c, res in results.items() for corpus, info in res.items()]
    fig, axes = plt.subplots(1, len(panels), figsize=(5.2 * len(panels), 4.4), squeeze=False)
    for ax, (cost, corpus, info) in zip(axes[0], panels):
        for family, marker, color in (
            ("seqloader buckets", "o", "tab:blue"),
            ("lhotse", "s", "tab:red"),
            ("seqloader laplace", "^", "tab:gray"),
        ):
            pts = [(k, r) for k, r in info["rows"].items() if k.startswith(family)]
            xs = [100 * r["padding"] for _, r in pts]
            ys = [r["imbalance"] for _, r in pts]
            ax.plot(xs, ys, marker=marker, color=color, linestyle="-", label=family)
            for (k, _), x, y in zip(pts, xs, ys):
                ax.annotate(k.split()[-1] if "laplace" in k else k.split()[1].split(":")[-1],
                            (x, y), fontsize=7, xytext=(3, 3), textcoords="offset points")  # fmt: skip
        ax.set_xscale("log")
        ax.set(
            xlabel="padding (% of real frames, log)",
            ylabel="step imbalance over 8 ranks (max/mean)",
            title=f"{corpus}, batch_cost={cost}",
        )
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.buckets", description=__doc__)
    p.add_argument("--reps", type=int, default=5, help="epochs (shuffles) per method; medians")
    p.add_argument("--num-seqs", type=int, default=10_000, help="sequences per corpus")
    p.add_argument(
        "--quadratic", type=int, default=1500, help="Q of the quadratic-cost runs (0: none)"
    )
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = p.parse_args(argv)
    results = {"frames": measure(args.reps, args.num_seqs)}
    if args.quadratic:
        q = f"quadratic:{args.quadratic}"
        results[q] = measure(args.reps, args.num_seqs, args.quadratic, only="reference")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "buckets.json").write_text(json.dumps(results, indent=1) + "\n")
    md = "\n".join(table(res, cost) for cost, res in results.items())
    (args.out / "buckets.md").write_text(md)
    plot(args.out / "buckets.png", results)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
