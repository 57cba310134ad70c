"""Speed perturbation (factors 0.9, 1.0, 1.1) and batching: padding, batches per epoch and the
largest batch *after* perturbation, for three ways of planning it at the same budget. Nothing is
read: lengths only (each method's perturbed lengths are computed exactly as it computes them).

``python -m benchmarks.speed_planning [--reps 3] [--num-seqs 10000] [--out benchmarks/results]``
writes ``speed_planning.json`` and prints the table.

- **seqloader, planned** (``AudioSource(speed=SpeedPerturb(...))``): the factor of each utterance
  is drawn at planning time (``seqloader.plan.variants``); ordering and batches use the exact
  perturbed frame counts.
- **seqloader, min_speed** (``AudioSource(min_speed=0.9)`` + the ``SpeedPerturb`` transform):
  every utterance planned at the slowest factor's length; the worker then draws the factor from
  the transform's per-sequence stream (``transform_rng``), so batches are never larger than
  planned, but padded to the planned worst case.
- **Lhotse** ``DynamicBucketingSampler`` (30 buckets, its default) on the unperturbed durations,
  then Lhotse's on-the-fly ``PerturbSpeed(factors=[0.9, 1.1], p=2/3)`` on each batch (the usual
  recipe: each factor with probability 1/3): the sampler never saw the perturbed durations, so a
  batch can grow past its budget after it was formed (``max batch / budget`` > 1: the memory
  that was planned for is exceeded).

Same utterances and budget for all: ``max_frames`` log-mel frames per batch (25 ms window, 10 ms
hop at 16 kHz, padded: ``n_seqs * longest``); Lhotse gets ``max_duration = max_frames / 100`` s.
Utterance lengths: the reference corpus' speech-like log-normal lengths (median 6 s, 0.5 to 20 s).
Padding = padded frames / real frames - 1, with both counted on the lengths *after* perturbation.
seqloader orders with ``laplace:.1000`` (bins of ~1000 utterances sorted by length). Medians over
``--reps`` epochs (different shuffles and draws); "max batch / budget" is the worst epoch's.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import warnings
from pathlib import Path

import numpy as np

from benchmarks.corpus import CorpusSpec
from seqloader.audio.features import LogMel
from seqloader.audio.resample import speed_length
from seqloader.loading.execute import transform_rng
from seqloader.plan import PlanOptions, make_planner
from seqloader.plan.batching import padded_frames
from seqloader.plan.variants import LengthVariants
from seqloader.transforms import SpeedPerturb

FACTORS = (0.9, 1.0, 1.1)
RATE = 16_000
MAX_FRAMES = 20_000
SEED = 1
ORDERING = "laplace:.1000"
LHOTSE_BUCKETS = 30
FEATURES = LogMel(sample_rate=RATE, n_mels=80)


def utterance_samples(n: int) -> np.ndarray:
    """Samples at 16 kHz of ``n`` speech-like utterances (the reference corpus' 10 ms frames)."""
    frames, _ = CorpusSpec(num_seqs=n).lengths()
    return frames * (RATE // 100)


def frames_of(samples: np.ndarray) -> np.ndarray:
    return np.asarray(FEATURES.num_frames(samples), dtype=np.int64)


def factor_frames(samples: np.ndarray) -> np.ndarray:
    """Frames at each factor, seqloader's formula (what ``AudioSource(speed=...)`` plans and
    reads) -> int64 ``[F, n]``."""
    return np.stack([frames_of(np.asarray(speed_length(samples, f))) for f in FACTORS])


def figures(actual: np.ndarray, batches: list[np.ndarray]) -> dict[str, float]:
    """``actual``: every utterance's frames after perturbation this epoch; ``batches``: index
    arrays."""
    seqs = np.concatenate(batches)
    bounds = np.concatenate([[0], np.cumsum([len(b) for b in batches])]).astype(np.int64)
    padded = padded_frames(actual[seqs], bounds)  # [batches] n * longest
    assert sorted(seqs.tolist()) == list(range(len(actual)))  # every utterance once
    return {
        "padding": float(padded.sum() / actual.sum() - 1),
        "batches": len(batches),
        "max_batch_over_budget": float(padded.max() / MAX_FRAMES),
        "batches_over_budget": int(np.count_nonzero(padded > MAX_FRAMES)),
    }


def split(seqs: np.ndarray, bounds: np.ndarray) -> list[np.ndarray]:
    return [seqs[bounds[k] : bounds[k + 1]] for k in range(len(bounds) - 1)]


def planned(samples: np.ndarray, epoch: int) -> dict[str, float]:
    table = factor_frames(samples)
    variants = LengthVariants({"data": table}, tuple(str(f) for f in FACTORS))
    options = PlanOptions(ordering=ORDERING, max_frames=MAX_FRAMES, seed=SEED)
    planner = make_planner({"data": table.max(axis=0)}, options, variants=variants)
    b = planner.global_plan(epoch, 1).batches
    if b.variants is not None:  # indexed planning (the default): each slot carries its variant
        actual = np.zeros(table.shape[1], dtype=np.int64)
        actual[b.seqs] = table[b.variants, b.seqs]
    else:  # global planning: the keyed hash of (seed, full epoch, index)
        actual = variants.at(SEED, epoch - 1, {"data": table.max(axis=0)})["data"]
    return figures(actual, split(b.seqs, b.bounds))


def min_speed(samples: np.ndarray, epoch: int) -> dict[str, float]:
    table = factor_frames(samples)
    options = PlanOptions(ordering=ORDERING, max_frames=MAX_FRAMES, seed=SEED)
    bound = frames_of(np.asarray(speed_length(samples, min(FACTORS))))  # min_speed's plan
    b = make_planner({"data": bound}, options).global_plan(epoch, 1).batches
    speed = SpeedPerturb(FACTORS)
    picks = np.array(  # the transform's own draw, from its per-sequence stream
        [
            int(transform_rng(SEED, epoch, i).integers(len(speed.factors)))
            for i in range(len(samples))
        ]
    )
    actual = table[picks, np.arange(len(samples))]
    return figures(actual, split(b.seqs, b.bounds))


def lhotse(samples: np.ndarray, epoch: int) -> dict[str, float]:
    from lhotse import CutSet, MonoCut, Recording
    from lhotse.audio import AudioSource as LhotseAudio
    from lhotse.dataset import DynamicBucketingSampler, PerturbSpeed

    cuts = CutSet.from_cuts(
        MonoCut(
            id=str(i),
            start=0.0,
            duration=int(s) / RATE,
            channel=0,
            recording=Recording(
                id=str(i),
                sources=[LhotseAudio(type="file", channels=[0], source=f"{i}.flac")],
                sampling_rate=RATE,
                num_samples=int(s),
                duration=int(s) / RATE,
            ),
        )
        for i, s in enumerate(samples)
    )
    perturb = PerturbSpeed(factors=[0.9, 1.1], p=2 / 3, randgen=random.Random(epoch))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # an eager CutSet: fine for lengths only
        sampler = DynamicBucketingSampler(
            cuts,
            max_duration=MAX_FRAMES / 100,
            num_buckets=LHOTSE_BUCKETS,
            shuffle=True,
            drop_last=False,
            buffer_size=max(20_000, len(samples)),
            seed=SEED,
        )
        sampler.set_epoch(epoch)
        batches, actual = [], np.zeros(len(samples), dtype=np.int64)
        for batch in sampler:
            ids = []
            for cut in perturb(batch):  # what the dataset's cut transform hands the model
                i = int(cut.recording.id.split("_sp")[0])
                ids.append(i)
                actual[i] = frames_of(np.asarray(cut.recording.num_samples))
            batches.append(np.asarray(ids, dtype=np.int64))
    return figures(actual, batches)


METHODS = {
    "seqloader, factors planned (speed=)": planned,
    "seqloader, slowest factor planned (min_speed=0.9)": min_speed,
    f"Lhotse DynamicBucketingSampler ({LHOTSE_BUCKETS} buckets) + PerturbSpeed": lhotse,
}


def measure(reps: int, n: int) -> dict:
    samples = utterance_samples(n)
    rows = {}
    for name, method in METHODS.items():
        per_epoch = [method(samples, epoch) for epoch in range(1, reps + 1)]
        row = {m: statistics.median(f[m] for f in per_epoch) for m in per_epoch[0]}
        row["max_batch_over_budget"] = max(f["max_batch_over_budget"] for f in per_epoch)
        row["batches_over_budget"] = max(f["batches_over_budget"] for f in per_epoch)
        rows[name] = row
        print(f"{name:60s} {row}", flush=True)
    return {
        "utterances": n,
        "seconds": float(samples.sum() / RATE),
        "max_frames": MAX_FRAMES,
        "factors": FACTORS,
        "reps": reps,
        "rows": rows,
    }


def table(result: dict) -> str:
    lines = [
        f"{result['utterances']} utterances ({result['seconds'] / 3600:.1f} h), factors "
        f"{result['factors']}, max_frames={result['max_frames']}; medians of {result['reps']} "
        "epochs, largest batch of the worst epoch",
        "",
        "| method | padding | batches per epoch | largest batch / budget | batches over budget |",
        "| --- | --- | --- | --- | --- |",
    ]
    for name, r in result["rows"].items():
        lines.append(
            f"| {name} | {100 * r['padding']:.1f}% | {r['batches']:g} | "
            f"{r['max_batch_over_budget']:.3f} | {r['batches_over_budget']:g} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.speed_planning", description=__doc__)
    p.add_argument("--reps", type=int, default=3, help="epochs per method; medians")
    p.add_argument("--num-seqs", type=int, default=10_000, help="utterances")
    p.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = p.parse_args(argv)
    result = measure(args.reps, args.num_seqs)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "speed_planning.json").write_text(json.dumps(result, indent=1) + "\n")
    print(table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
