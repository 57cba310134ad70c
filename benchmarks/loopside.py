"""What the training thread still does per batch, in µs: ``python -m benchmarks.loopside --data F``.

The loop asks for a batch, sleeps a simulated accelerator step, asks again (as
``benchmarks.looptime``). Each piece of the loader's per-batch work in the training thread is
wrapped in a timer (``time.perf_counter_ns`` around the call, ~0.1-0.3 µs of its own):

- ``take``: the iterator's ``next()`` (the dispatch thread's ready queue: one get, counters) and
  ``wait_ready``: how often the batch was not there yet (the worker behind the step);
- ``watch``: the worker-failure wrapper around it (``EpochWatch.next``, ``take`` included), in
  code that still has it; now ``run_epoch`` calls ``next()`` inside ``try`` and asks the watch
  (``EpochWatch.failure``) only when it raised, so the ``try`` and its checks are in ``rest``;
- ``checks``, ``count``, ``handed``, ``before_next``: the NaN/Inf policy and the report's
  bookkeeping (``BatchChecks.check``, ``EpochMeter``); ``count_handed`` is ``count`` and
  ``handed`` in one call, where the code has it;
- ``release``: handing the batches the loop is done with to the release thread (every
  ``EVERY``-th request, where the code batches them; else every request);
- ``rest``: the loop's own wait for ``next()`` minus the pieces (the generator's resume and the
  lines of ``run_epoch`` between them);
- ``epoch_start``: a later epoch's start as the loop waits for it (``loader.epoch()`` and the
  first ``next()``), median over the measured epochs;
- ``sleep_overrun``: how much longer than asked each step's ``time.sleep`` took with the loader's
  threads running (the training thread re-takes the GIL after the sleep, which a background
  thread running Python may hold for up to ``sys.getswitchinterval()``), beside
  ``sleep_overrun_alone``, the same sleeps after ``close()``; the loop's clock counts this as
  step time, so it is measured here;
- off the training thread, for comparison: ``unpickle`` (the receiving thread builds the
  ``Batch`` from a worker's message; ``ForkingPickler.loads``).

Unpickling and pinning are not in the training thread (the receiving thread, or torch's
pin-memory thread with ``pin_memory=True``). Each configuration runs in a fresh process; medians
over batches, then the median over ``--reps`` interleaved repetitions.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections import defaultdict

from benchmarks.fresh import parse_or_run_child, run_child
from benchmarks.side_by_side import rotated


def _timed(store: list[int], fn):
    clock = time.perf_counter_ns

    def wrapper(*args, **kwargs):
        t = clock()
        try:
            return fn(*args, **kwargs)
        finally:
            store.append(clock() - t)

    return wrapper


def _spread(ns: list[int]) -> dict[str, float]:
    """Median, mean and 99th percentile of ``ns``, in µs."""
    ordered = sorted(ns)
    return {
        "median": statistics.median(ordered) / 1e3,
        "mean": statistics.mean(ordered) / 1e3,
        "p99": ordered[int(0.99 * (len(ordered) - 1))] / 1e3,
    }


def child(cfg: dict) -> dict:
    import multiprocessing.reduction as mpr

    import torch  # noqa: F401  (imported before any clock)

    import seqloader as sl
    from seqloader.torch import receiving, run
    from seqloader.torch.worker_errors import EpochWatch
    from seqloader.trainer.checks import BatchChecks
    from seqloader.trainer.report import EpochMeter

    times: dict[str, list[int]] = defaultdict(list)
    not_ready: list[int] = []
    # the epoch's batches: ``_Run`` (one per epoch, prepared ahead), before that ``_Dispatch``
    owner = getattr(receiving, "_Run", None) or receiving._Dispatch
    take = owner.take

    def take_counted(self, it):
        not_ready.append(int(self.ready.empty()))
        return take(self, it)

    owner.take = _timed(times["take"], take_counted)  # type: ignore[attr-defined]
    if hasattr(EpochWatch, "next"):  # the code before: a wrapper call per batch around the take
        EpochWatch.next = _timed(times["watch"], EpochWatch.next)  # type: ignore[attr-defined]
    BatchChecks.check = _timed(times["checks"], BatchChecks.check)  # type: ignore[method-assign]
    # ``count_handed``: ``count`` and ``handed`` in one call (the code before calls both)
    names = ("count_handed", "before_next") if hasattr(EpochMeter, "count_handed") else ()
    for name in names or ("count", "handed", "before_next"):
        setattr(EpochMeter, name, _timed(times[name], getattr(EpochMeter, name)))
    run.release = _timed(times["release"], run.release)  # type: ignore[attr-defined]
    mpr.ForkingPickler.loads = _timed(times["unpickle"], mpr.ForkingPickler.loads)  # type: ignore[method-assign]

    loader = sl.SeqLoader(
        sl.HDFSource(cfg["data"]),
        ordering="random",
        max_seqs=cfg["max_seqs"],
        num_workers=cfg["workers"],
        seed=1,
    )
    step = cfg["step_ms"] / 1e3
    waits: list[int] = []
    overrun: list[int] = []  # how much longer than asked each step's sleep took
    step_ns = round(step * 1e9)
    starts: list[int] = []  # a later epoch's start: loader.epoch() and the first next()
    clock = time.perf_counter_ns
    try:
        for epoch in (1, 2, 3):
            measured = epoch > 1  # epoch 1 starts the workers: not the steady state
            if measured:
                for v in times.values():
                    v.clear()
                not_ready.clear()
            t = clock()
            it = loader.epoch(epoch)
            batch = next(it, None)
            if measured:
                starts.append(clock() - t)
            while batch is not None:
                s = clock()
                time.sleep(step)
                t = clock()
                if measured:  # the GIL hand-back: the sleep's overrun, the loader's threads on
                    overrun.append(t - s - step_ns)
                batch = next(it, None)
                if measured and batch is not None:
                    waits.append(clock() - t)
    finally:
        loader.close()
    alone: list[int] = []  # the same sleeps with no loader thread left in the process
    for _ in range(len(overrun)):
        s = clock()
        time.sleep(step)
        alone.append(clock() - s - step_ns)
    n = len(times["handed"] or times["count_handed"])
    med = {k: statistics.median(v) / 1e3 for k, v in times.items() if v}
    # without the wrapper (``run_epoch`` calls ``next()`` inside ``try``) the take is a piece itself
    first = "watch" if "watch" in med else "take"
    pieces = (first, "checks", "count", "handed", "count_handed", "before_next", "release")
    rest = statistics.median(waits) / 1e3 - sum(med.get(k, 0.0) for k in pieces)
    return {
        "config": cfg,
        "batches": n,
        "median_us": med,
        "loop_wait_median_us": statistics.median(waits) / 1e3,
        "loop_wait_mean_us": statistics.mean(waits) / 1e3,
        "epoch_start_us": [x / 1e3 for x in starts],
        "sleep_overrun_us": _spread(overrun),
        "sleep_overrun_alone_us": _spread(alone),
        "rest_us": rest,
        "not_ready_share": sum(not_ready) / max(1, len(not_ready)),
        "module": sl.__file__,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.loopside", description=__doc__)
    p.add_argument("--data", help="an HDF file")
    p.add_argument("--max-seqs", type=int, default=32)
    p.add_argument("--workers", default="1,2")
    p.add_argument("--step-ms", type=float, default=10.0)
    a = parse_or_run_child(p, argv, child)
    if a is None:
        return 0
    configs = []
    for w in (int(x) for x in a.workers.split(",")):
        common = {"data": a.data, "max_seqs": a.max_seqs, "workers": w, "step_ms": a.step_ms}
        configs.append({**common, "label": f"seqloader/w{w}"})
        if a.base_src:
            configs.append({**common, "code": "base", "label": f"seqloader@base/w{w}"})
    runs: list[dict] = []
    load = [os.getloadavg()]
    for rep in range(a.reps):
        for cfg in rotated(configs, rep):
            runs.append(run_child("benchmarks.loopside", cfg, a.base_src, timeout=900))
            r = runs[-1]
            print(
                f"rep {rep + 1} {cfg['label']:18s} wait {r['loop_wait_median_us']:.1f} us  "
                + " ".join(f"{k} {v:.1f}" for k, v in r["median_us"].items())
                + f" rest {r['rest_us']:.1f}  not ready {100 * r['not_ready_share']:.0f}%"
                + f"  epoch starts {', '.join(f'{x:.0f}' for x in r['epoch_start_us'])} us",
                flush=True,
            )
    load.append(os.getloadavg())
    print(f"medians over {a.reps} repetitions, µs per batch at a {a.step_ms:g} ms step:")
    summary = {}
    for cfg in configs:
        rs = [r for r in runs if r["config"]["label"] == cfg["label"]]
        keys = rs[0]["median_us"].keys()
        row = {k: statistics.median(r["median_us"][k] for r in rs) for k in keys}
        row["rest"] = statistics.median(r["rest_us"] for r in rs)
        row["loop_wait"] = statistics.median(r["loop_wait_median_us"] for r in rs)
        row["not_ready_share"] = statistics.median(r["not_ready_share"] for r in rs)
        row["loop_wait_mean"] = statistics.median(r["loop_wait_mean_us"] for r in rs)
        row["epoch_start"] = statistics.median(x for r in rs for x in r["epoch_start_us"])
        for k in ("sleep_overrun", "sleep_overrun_alone"):
            row[k] = statistics.median(r[f"{k}_us"]["median"] for r in rs)
            row[f"{k}_mean"] = statistics.median(r[f"{k}_us"]["mean"] for r in rs)
        summary[cfg["label"]] = row
        print(f"  {cfg['label']:18s} " + " ".join(f"{k} {v:.1f}" for k, v in row.items()))
    print(f"load average before/after: {load}")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"runs": runs, "summary": summary, "load": load}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
