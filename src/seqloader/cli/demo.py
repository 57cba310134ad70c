"""``seqloader demo``: a synthetic speech-like corpus as RETURNN HDF, a tiny model trained for two
epochs with two DataLoader workers, and per epoch the proof that every sequence came exactly once.

The corpus is cached (``--cache``) and reused while its spec and fingerprint match. The model is a
two-layer 1-D convolution with framewise cross-entropy on the aligned ``classes``: small enough to
train in seconds on a laptop CPU, real enough that the loss falls.
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import json
import time
from pathlib import Path
from typing import Any

from seqloader.cli.convert import CountingSource
from seqloader.cli.options import add_command, add_output_options, non_negative_int, positive_int
from seqloader.cli.output import print_json, progress
from seqloader.errors import DataError
from seqloader.sources.base import Source
from seqloader.synthetic import SyntheticSpec, synthetic_corpus

HELP = "synthetic RETURNN-HDF corpus, tiny model, 2 epochs, 2 workers: computation time %% and an exactly-once proof"
DEFAULT_CACHE = Path(".cache/seqloader-demo")


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = add_command(sub, "demo", HELP)
    p.add_argument(
        "--cache",
        type=Path,
        default=DEFAULT_CACHE,
        metavar="DIR",
        help=f"where the corpus is written and reused (default {DEFAULT_CACHE})",
    )
    p.add_argument(
        "--num-seqs",
        type=positive_int,
        default=1000,
        metavar="N",
        help="sequences in the corpus (default 1000, ~165k frames)",
    )
    p.add_argument("--epochs", type=positive_int, default=2, metavar="E", help="default 2")
    p.add_argument(
        "--num-workers",
        type=non_negative_int,
        default=2,
        metavar="N",
        help="DataLoader workers (default 2)",
    )
    p.add_argument(
        "--ordering",
        default="laplace:.100",
        metavar="ORD",
        help="default laplace:.100 (length buckets of ~100 sequences)",
    )
    p.add_argument(
        "--max-frames",
        type=positive_int,
        default=5000,
        metavar="N",
        help="padded frames per batch (default 5000)",
    )
    p.add_argument("--seed", type=non_negative_int, default=1, metavar="S")
    add_output_options(p)
    return p


def corpus_source(spec: SyntheticSpec, cache: Path, show_progress: bool) -> tuple[Source, str]:
    """The corpus as an ``HDFSource`` from the cache, written first if missing or stale.
    Returns (source, what happened) for the log."""
    from seqloader.sources.hdf import HDFSource
    from seqloader.sources.hdf_write import write_hdf

    spec_json = json.dumps(spec.to_dict(), sort_keys=True)
    key = hashlib.sha256(spec_json.encode()).hexdigest()[:12]
    path = cache / f"synthetic-{key}.hdf"
    meta = cache / f"synthetic-{key}.json"
    if path.is_file() and meta.is_file():
        try:
            stored = json.loads(meta.read_text())
            src = HDFSource([path])
            if (
                stored.get("spec") == spec.to_dict()
                and stored.get("fingerprint") == src.fingerprint()
            ):
                return src, f"reused {path}"
        except (DataError, OSError, ValueError):
            pass  # stale or damaged: write it again
    cache.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    counting = CountingSource(synthetic_corpus(spec), show_progress, "writing the demo corpus")
    try:
        write_hdf(path, counting)  # atomic: temp file, then rename
    finally:
        counting.close()
    src = HDFSource([path])
    meta.write_text(json.dumps({"spec": spec.to_dict(), "fingerprint": src.fingerprint()}))
    return src, f"wrote {path} in {time.perf_counter() - t0:.1f} s"


def run(args: argparse.Namespace) -> int:
    import torch

    from seqloader.torch.loader import SeqLoader

    torch.manual_seed(args.seed)
    torch.set_num_threads(1)  # 2 workers + the trainer on a small machine: don't oversubscribe
    spec = SyntheticSpec(num_seqs=args.num_seqs, seed=args.seed)
    show = not args.no_progress and not args.json
    t_start = time.perf_counter()
    src, how = corpus_source(spec, args.cache, show)
    say = (lambda *a: None) if args.json else print
    say(f"corpus: {src!r}; {how}")
    loader = SeqLoader(
        src,
        ordering=args.ordering,
        max_frames=args.max_frames,
        seed=args.seed,
        num_workers=args.num_workers,
        rank=0,
        world_size=1,
    )
    model = tiny_model(spec.feature_dim, spec.num_classes)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    corpus_tags = collections.Counter(src.tags)
    epochs: list[dict[str, Any]] = []
    try:
        for epoch in range(1, args.epochs + 1):
            seen: collections.Counter[str] = collections.Counter()
            loss_sum = err_sum = frames = 0.0
            steps = loader.steps(epoch)
            for batch in progress(loader.epoch(epoch), show, f"epoch {epoch}", steps, "batch"):
                loss, errors, n = train_step(model, opt, batch)
                loss_sum += loss * n
                err_sum += errors
                frames += n
                seen.update(t for t, real in zip(batch.seq_tags, batch.mask.tolist()) if real)
            report = loader.report()
            assert report is not None  # the epoch ran
            proof = exactly_once(seen, corpus_tags)
            e: dict[str, Any] = {
                "epoch": epoch,
                "steps": report.steps,
                "seqs": report.seqs,
                "frames": report.frames,
                "computation_pct": round(report.computation_pct, 2),
                "padding_ratio": round(report.padding_ratio, 4),
                "loss": round(loss_sum / max(frames, 1), 4),
                "frame_error_rate": round(err_sum / max(frames, 1), 4),
                "exactly_once": proof,
                "report": report.to_dict(),
            }
            epochs.append(e)
            say(
                f"epoch {epoch}: {e['steps']} steps, {e['seqs']} seqs, computation time "
                f"{e['computation_pct']:.1f}% (first batch {report.first_batch_s:.2f} s), loss "
                f"{e['loss']:.3f}, frame error {100 * e['frame_error_rate']:.1f}%"
            )
            say(f"  exactly-once: {proof['message']}")
            say(f"  report: {report.format()}")
    finally:
        loader.close()
    ok = all(e["exactly_once"]["ok"] for e in epochs)
    total = time.perf_counter() - t_start
    if args.json:
        print_json(
            {
                "corpus": how,
                "num_seqs": len(src),
                "epochs": epochs,
                "ok": ok,
                "wall_s": round(total, 2),
            }
        )
    else:
        print(f"demo {'passed' if ok else 'FAILED'} in {total:.1f} s")
    return 0 if ok else 1


def exactly_once(seen: collections.Counter, corpus: collections.Counter) -> dict[str, Any]:
    """Compare the tags one epoch delivered with the corpus: none missing, none twice, none alien."""
    missing = sum(1 for t in corpus if t not in seen)
    repeated = sum(1 for t, c in seen.items() if c > corpus.get(t, 0) and t in corpus)
    alien = sum(1 for t in seen if t not in corpus)
    ok = not (missing or repeated or alien)
    n = sum(corpus.values())
    message = (
        f"{sum(seen.values())} sequences delivered = {len(seen)} distinct tags = all {n} corpus "
        "tags, each once"
        if ok
        else f"FAILED: {missing} corpus tags missing, {repeated} delivered more than once, "
        f"{alien} not in the corpus"
    )
    return {
        "ok": ok,
        "delivered": sum(seen.values()),
        "distinct": len(seen),
        "corpus": n,
        "missing": missing,
        "repeated": repeated,
        "unknown": alien,
        "message": message,
    }


def tiny_model(feature_dim: int, num_classes: int, hidden: int = 64):
    """Two 1-D convolutions over time and a framewise classifier (~34k parameters); input and
    output are channels-first ``[B, F, T]`` / ``[B, C, T]``."""
    from torch import nn

    return nn.Sequential(
        nn.Conv1d(feature_dim, hidden, 5, padding=2),
        nn.ReLU(),
        nn.Conv1d(hidden, hidden, 5, padding=2),
        nn.ReLU(),
        nn.Conv1d(hidden, num_classes, 1),
    )


def train_step(model, opt, batch) -> tuple[float, int, int]:
    """One step of masked framewise cross-entropy -> (mean loss, frame errors, frames)."""
    import torch
    import torch.nn.functional as F

    x, y = batch["data"], batch["classes"].long()
    lengths = batch.lengths["data"]
    valid = torch.arange(x.shape[1])[None, :] < lengths[:, None]  # [B, T]
    valid &= batch.mask[:, None]  # filler repeats (if any) don't train
    logits = model(x.transpose(1, 2)).transpose(1, 2)  # [B, T, C]
    loss = F.cross_entropy(logits[valid], y[valid])
    opt.zero_grad()
    loss.backward()
    opt.step()
    with torch.no_grad():
        errors = int((logits[valid].argmax(-1) != y[valid]).sum())
    return float(loss.detach()), errors, int(valid.sum())
