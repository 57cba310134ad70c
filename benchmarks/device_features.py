"""CPU a DataLoader worker needs per audio hour with features in the worker, and with
``DeviceFeatures`` (features after collation, on the training process's device):
``python -m benchmarks.device_features [--utterances 240] [--reps 3]``.

On the Lhotse Shar corpus of ``benchmarks/shards.py``, in batches of 16 utterances of similar
length, torch on one thread (as in a worker), process CPU time, ``--reps`` interleaved
repetitions (minimum per configuration within a repetition's three passes, ratios within a
repetition, medians):

- ``worker_features``: a worker's batch (``loading.execute``) of ``ShardSource`` with
  ``keys=["data"]``, ``KaldiFbank()``: decode and features in the worker;
- ``worker_audio``: a worker's batch of the same source opened with ``defer_features=True``
  under ``features_on`` (``WorkerSpec(deferred=...)``): decode only, the worker's share with
  ``SeqLoader(features_on=...)``;
- ``device_features_on_cpu``: ``DeviceFeatures(KaldiFbank())`` on each padded batch, run on the
  CPU device (where no accelerator is lent: the trainer's CPU cost if it ran there; on an
  accelerator this work leaves the CPU).

Workers needed per accelerator scale with the worker's CPU per audio second, so
``worker_features / worker_audio`` is how many times fewer CPU workers feed one accelerator
with the option (the accelerator's own time is not measured here).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def main(argv: list[str] | None = None) -> int:
    import torch

    import seqloader as sl
    from benchmarks.shards import corpus
    from benchmarks.side_by_side import rotated
    from seqloader.audio.device_features import DeviceFeatures
    from seqloader.loading.batch_spec import BatchSpec
    from seqloader.loading.execute import WorkerSpec, execute
    from seqloader.shards import ShardSource

    p = argparse.ArgumentParser(prog="python -m benchmarks.device_features", description=__doc__)
    p.add_argument("--utterances", type=int, default=240)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--json", help="write the results here")
    a = p.parse_args(argv)
    torch.set_num_threads(1)
    shar = corpus(a.utterances)
    index_dir = Path(tempfile.mkdtemp(prefix="seqloader-devfeat-"))
    fbank = sl.KaldiFbank()
    with_features = ShardSource.lhotse_shar(
        shar, keys=["data"], features=fbank, index_dir=index_dir
    )
    deferred = ShardSource.lhotse_shar(
        shar, keys=["data"], features=fbank, defer_features=True, index_dir=index_dir
    )
    audio_only = ShardSource.lhotse_shar(shar, keys=["audio"], index_dir=index_dir)
    order = np.argsort(audio_only.lengths("audio"), kind="stable")
    batches = [order[i : i + 16] for i in range(0, len(order), 16)]
    seconds = float(audio_only.lengths("audio").sum()) / fbank.sample_rate
    device = DeviceFeatures(fbank)
    padded = []
    for b in batches:
        waves = [s["audio"] for s in audio_only.read_many(b)]
        x = np.zeros((len(waves), max(len(w) for w in waves)), np.float32)
        for i, w in enumerate(waves):
            x[i, : len(w)] = w
        padded.append((torch.from_numpy(x), torch.tensor([len(w) for w in waves])))

    def cpu(step) -> float:  # CPU seconds per audio second, best of three passes
        best = float("inf")
        for _ in range(3):
            start = time.process_time()
            for k, b in enumerate(batches):
                step(k, b)
            best = min(best, time.process_time() - start)
        return best / seconds

    def spec(b: np.ndarray) -> BatchSpec:
        return BatchSpec(1, 0, b, np.ones(len(b), bool))

    in_worker, on_device = WorkerSpec(seed=0), WorkerSpec(seed=0, deferred=fbank)
    steps = {
        "worker_features": lambda k, b: execute(with_features, spec(b), in_worker),
        "worker_audio": lambda k, b: execute(deferred, spec(b), on_device),
        "device_features_on_cpu": lambda k, b: device(*padded[k]),
    }
    load = [os.getloadavg()]
    runs: list[dict[str, float]] = []
    names = list(steps)
    for rep in range(a.reps):
        runs.append({name: cpu(steps[name]) for name in rotated(names, rep)})
        print(
            f"rep {rep + 1}: " + "  ".join(f"{n} {v * 3600:.1f} s/h" for n, v in runs[-1].items())
        )
    load.append(os.getloadavg())
    per_rep = [r["worker_features"] / r["worker_audio"] for r in runs]
    result = {
        "utterances": a.utterances,
        "audio_hours": seconds / 3600,
        "cpu_s_per_audio_hour": {n: statistics.median(r[n] for r in runs) * 3600 for n in names},
        "fewer_worker_cpu_with_device_features": {
            "median": statistics.median(per_rep),
            "range": [min(per_rep), max(per_rep)],
        },
        "device_kernel_on_cpu_over_worker_features": statistics.median(
            r["device_features_on_cpu"] / (r["worker_features"] - r["worker_audio"]) for r in runs
        ),
        "runs": runs,
        "load": load,
        "accelerator": "none lent to this run: the device's own time is not measured",
    }
    print(json.dumps({k: v for k, v in result.items() if k != "runs"}, indent=1))
    if a.json:
        Path(a.json).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
