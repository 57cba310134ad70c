"""The worker -> trainer hand-over alone: ``python -m benchmarks.handover [--batches N]``.

Batches of about 6 MB from data held in memory (so reading costs nothing), one worker, a 10 ms
simulated step: what is left of the trainer's time is the hand-over. Each variant runs in a fresh
process, variants interleaved, ``--reps`` times; medians are printed.

- ``torch-floor``: a plain DataLoader whose worker does nothing (returns its index): the cost of
  torch's machinery alone (index queue, result queue, iterator), the floor of any design that
  keeps torch's DataLoader;
- ``torch-transport``: a plain DataLoader whose worker only allocates a 6 MB tensor (the
  transport's own cost, as measured in the design brief);
- ``fresh-segments``: seqloader with its slot pool disabled, so every batch gets fresh
  shared-memory segments through torch's transport (seqloader's first design);
- ``slots``: reusable slots, results received in the trainer thread;
- ``slots+receiver``: reusable slots and the background receiving thread (the default).

The ablations switch seqloader internals off from this script only (``handover.MAX_SLOTS`` and the
DataLoader class in ``seqloader.torch.dataloader``); the library has no such switches.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

VARIANTS = ("torch-floor", "torch-transport", "fresh-segments", "slots", "slots+receiver")


def _child(variant: str, batches: int, step_ms: float) -> dict:
    import numpy as np
    import torch
    from torch.utils.data import DataLoader, Dataset

    if variant == "torch-floor":

        class Nothing(Dataset):
            def __len__(self) -> int:
                return 1 << 30

            def __getitem__(self, i: int) -> int:
                return i

        dl = DataLoader(Nothing(), batch_size=None, num_workers=1, persistent_workers=True)
        it, close = iter(dl), lambda: None
    elif variant == "torch-transport":

        class SixMB(Dataset):
            def __len__(self) -> int:
                return 1 << 30

            def __getitem__(self, i: int) -> torch.Tensor:
                return torch.empty(6 * 2**20 // 4)

        dl = DataLoader(SixMB(), batch_size=None, num_workers=1, persistent_workers=True)
        it, close = iter(dl), lambda: None
    else:
        import seqloader as sl
        import seqloader.torch.dataloader as dataloader_module
        from seqloader.torch import handover

        if variant == "fresh-segments":
            handover.MAX_SLOTS = 0
        if variant in ("fresh-segments", "slots"):
            from seqloader.torch._compat import shutdown_workers

            class PlainDataLoader(DataLoader):
                """torch's own iterator (no receiving thread), closed as the library closes."""

                def shutdown(self) -> None:
                    shutdown_workers(self)

            dataloader_module.ReceivingDataLoader = PlainDataLoader  # type: ignore[misc]
        rng = np.random.default_rng(0)
        distinct = [rng.standard_normal((1200, 40)).astype(np.float32) for _ in range(64)]
        seqs = [distinct[i % 64] for i in range(32 * (batches + 8))]  # 32 per batch
        loader = sl.SeqLoader(
            sl.MemorySource({"data": seqs}), max_seqs=32, ordering="default", num_workers=1
        )
        it, close = iter(loader.epoch(1)), loader.close
    batch = next(it)  # workers started, first batch in hand
    for _ in range(5):
        batch = next(it)
    waits = []
    c0, t0, tt0 = time.process_time(), time.perf_counter(), time.thread_time()
    for _ in range(batches):
        time.sleep(step_ms / 1e3)
        t = time.perf_counter()
        batch = next(it)
        waits.append(time.perf_counter() - t)
    wall = time.perf_counter() - t0
    wait = sum(waits)
    out = {
        "variant": variant,
        "computation_pct": 100 * (wall - wait) / wall,
        "wait_ms_per_batch": 1e3 * wait / batches,
        "median_wait_ms": 1e3 * float(np.median(waits)),
        "p90_wait_ms": 1e3 * float(np.percentile(waits, 90)),
        "main_cpu_ms_per_batch": 1e3 * (time.process_time() - c0) / batches,
        "trainer_thread_cpu_ms_per_batch": 1e3 * (time.thread_time() - tt0) / batches,
        "batch_bytes": int(sum(t.numel() * t.element_size() for t in _tensors(batch))),
    }
    del batch
    close()
    return out


def _tensors(batch) -> list:
    import torch

    if isinstance(batch, torch.Tensor):
        return [batch]
    if isinstance(batch, int):
        return []
    return list(batch.data.values())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.handover", description=__doc__)
    p.add_argument("--batches", type=int, default=150)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--step-ms", type=float, default=10.0)
    p.add_argument("--json", type=str, help="also write the results here")
    p.add_argument("--variants", nargs="+", choices=VARIANTS, default=list(VARIANTS))
    p.add_argument("--child", type=str, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print("RESULT " + json.dumps(_child(args.child, args.batches, args.step_ms)), flush=True)
        os._exit(0)
    runs: dict[str, list[dict]] = {v: [] for v in args.variants}
    for _ in range(args.reps):
        for v in args.variants:
            cmd = [sys.executable, "-m", "benchmarks.handover", "--child", v]
            cmd += ["--batches", str(args.batches), "--step-ms", str(args.step_ms)]
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
            line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
            if line is None:
                print(f"{v}: failed: {proc.stderr[-500:]}", file=sys.stderr)
                continue
            runs[v].append(json.loads(line[7:]))
    keys = ("computation_pct", "wait_ms_per_batch", "median_wait_ms", "p90_wait_ms")
    keys += ("main_cpu_ms_per_batch",)
    keys += ("trainer_thread_cpu_ms_per_batch",)
    print(f"1 worker, {args.step_ms:g} ms step, {args.batches} batches, medians of {args.reps}")
    print(
        f"{'variant':18s} {'batch MB':>8s} {'comp %':>7s} {'wait ms mean/median/p90':>24s} "
        f"{'main CPU':>9s} {'trainer thread':>14s}"
    )
    summary = {}
    for v, rs in runs.items():
        if not rs:
            continue
        med = {k: statistics.median(r[k] for r in rs) for k in keys}
        summary[v] = {**med, "batch_bytes": rs[0]["batch_bytes"], "reps": len(rs)}
        print(
            f"{v:18s} {rs[0]['batch_bytes'] / 2**20:8.1f} {med['computation_pct']:7.2f} "
            f"{med['wait_ms_per_batch']:10.3f} /{med['median_wait_ms']:6.3f} /"
            f"{med['p90_wait_ms']:6.3f} {med['main_cpu_ms_per_batch']:7.3f}ms "
            f"{med['trainer_thread_cpu_ms_per_batch']:12.3f}ms"
        )
    print(f"load average: {[round(x, 2) for x in os.getloadavg()]}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"runs": runs, "summary": summary, "load": os.getloadavg()}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
