"""Measure one configuration in a fresh process: ``python -m benchmarks.child SPEC.json OUT.json``.

A fresh process per configuration and repetition, so peak memory, worker start-up and caches of one
pipeline never leak into another's numbers. Passes, each in its own epoch (a new shuffle):

1. epoch 1: time to first batch, from constructing the pipeline (opening files, planning, starting
   workers; its libraries are imported before) to holding the first batch; then a few warm-up
   batches;
2. epoch 2: throughput over ``measure_seqs`` sequences as fast as the consumer can take them
   (sequences/s, frames/s, main-process CPU time per batch);
3. one epoch per simulated accelerator step (``time.sleep``): computation time % = time outside
   ``next()`` over wall time, RETURNN's definition, from the first batch of the pass on;
4. memory, summed over the trainer and all its child processes (workers):
   - **private memory**: ``Pss_Anon + Pss_Shmem`` of ``/proc/<pid>/smaps_rollup``, i.e. anonymous
     pages (heaps, numpy/torch arrays, copy-on-write copies) plus shared memory (batch slots,
     torch's shared tensors), each page split evenly among the processes that map it, so the sum
     counts every physical page once. Pages of memory-mapped files (the HDF data, libraries) are
     page cache, not private memory, and are left out (``Pss_File``, reported beside it). Sampled
     after every pass; the maximum is kept (``private_bytes``);
   - **RSS** (``VmRSS``, at the same samples) and **peak RSS** (``VmHWM``, each process's
     high-water mark), which count shared and file pages once per process that touches them: an
     upper bound that makes memory-mapped reading look larger than it is.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict, dataclass

from benchmarks.pipelines import RunSpec, import_modules, open_pipeline


@dataclass(frozen=True)
class PassPlan:
    warmup_batches: int = 3
    measure_seqs: int = 3000
    step_ms: tuple[float, ...] = (5.0, 10.0, 20.0)
    step_batches: int = 80


def peak_rss_bytes() -> tuple[int, int]:
    """(sum of VmHWM over this process and its live descendants, number of processes)."""
    procs = _processes()
    total = 0
    for pid in procs:
        try:
            with open(f"/proc/{pid}/status") as fh:
                for line in fh:
                    if line.startswith("VmHWM:"):
                        total += int(line.split()[1]) * 1024
        except OSError:  # exited meanwhile
            continue
    return total, len(procs)


def _processes() -> list[int]:
    import psutil

    me = psutil.Process()
    return [me.pid] + [c.pid for c in me.children(recursive=True)]


def memory_now() -> dict[str, int]:
    """Private memory (Pss_Anon + Pss_Shmem), file pages (Pss_File) and RSS, summed over this
    process and its live descendants (bytes); see the module docstring."""
    fields = {"Pss_Anon:": "anon", "Pss_Shmem:": "shmem", "Pss_File:": "file", "Rss:": "rss"}
    total = dict.fromkeys(fields.values(), 0)
    for pid in _processes():
        try:
            with open(f"/proc/{pid}/smaps_rollup") as fh:
                for line in fh:
                    name = fields.get(line.split(" ", 1)[0])
                    if name is not None:
                        total[name] += int(line.split()[1]) * 1024
        except OSError:  # exited meanwhile
            continue
    return {
        "private_bytes": total["anon"] + total["shmem"],
        "anon_bytes": total["anon"],
        "shmem_bytes": total["shmem"],
        "file_bytes": total["file"],
        "rss_bytes": total["rss"],
    }


class MemoryPeak:
    """The largest private-memory sample (with the other figures of that sample)."""

    def __init__(self) -> None:
        self.peak: dict[str, int] = {}

    def sample(self) -> None:
        now = memory_now()
        if now["private_bytes"] >= self.peak.get("private_bytes", -1):
            self.peak = now


def measure(spec: RunSpec, plan: PassPlan) -> dict:
    out: dict = {"spec": asdict(spec), "plan": asdict(plan)}
    import_modules(spec.pipeline)
    memory = MemoryPeak()
    t0 = time.perf_counter()
    pipe = open_pipeline(spec)
    try:
        it = iter(pipe.epoch(1))
        next(it)
        out["ttfb_s"] = time.perf_counter() - t0
        for _ in range(plan.warmup_batches):
            if next(it, None) is None:
                break
        _close_iter(it)

        # throughput
        batches = seqs = frames = 0
        c0, t0 = time.process_time(), time.perf_counter()
        it = iter(pipe.epoch(2))
        for batch in it:
            n, f = pipe.count(batch)
            batches, seqs, frames = batches + 1, seqs + n, frames + f
            if seqs >= plan.measure_seqs:
                break
        wall = time.perf_counter() - t0
        cpu = time.process_time() - c0
        memory.sample()  # workers and their batches still alive
        _close_iter(it)
        out.update(
            batches=batches,
            seqs=seqs,
            frames=frames,
            wall_s=wall,
            seqs_per_s=seqs / wall,
            frames_per_s=frames / wall,
            main_cpu_ms_per_batch=1e3 * cpu / max(batches, 1),
        )

        # simulated accelerator steps
        out["computation_pct"], out["wait_ms"] = {}, {}
        for j, step_ms in enumerate(plan.step_ms):
            pct, waits = _computation(pipe, 3 + j, step_ms, plan, memory)
            out["computation_pct"][str(step_ms)] = pct
            out["wait_ms"][str(step_ms)] = waits
        out["peak_rss_bytes"], out["processes"] = peak_rss_bytes()
        out["memory"] = memory.peak
        out["private_bytes"] = memory.peak["private_bytes"]
    finally:
        pipe.close()
    return out


def _computation(
    pipe, epoch: int, step_ms: float, plan: PassPlan, memory: MemoryPeak
) -> tuple[float, dict]:
    """Computation time % of one pass, and the per-batch waits (ms): median, p90, max. The
    distribution tells a steady per-batch cost from rare stalls, which the % alone hides."""
    it = iter(pipe.epoch(epoch))
    batch = next(it)  # the pass starts with a batch in hand
    waits: list[float] = []
    t_start = time.perf_counter()
    for _ in range(plan.step_batches):
        time.sleep(step_ms / 1e3)  # the "accelerator step" on the batch in hand
        t = time.perf_counter()  # like a training loop, the last batch is still referenced
        batch = next(it, None)
        waits.append(time.perf_counter() - t)
        if batch is None:
            break
    wall = time.perf_counter() - t_start
    memory.sample()
    _close_iter(it)
    ms = sorted(1e3 * w for w in waits)
    dist = {
        "median": ms[len(ms) // 2],
        "p90": ms[min(len(ms) - 1, int(0.9 * len(ms)))],
        "max": ms[-1],
    }
    return 100.0 * (wall - sum(waits)) / wall, dist


def _close_iter(it) -> None:
    close = getattr(it, "close", None)  # generators: run their cleanup now
    if close is not None:
        close()


def main(argv: list[str]) -> int:
    spec_path, out_path = argv
    with open(spec_path) as fh:
        raw = json.load(fh)
    spec = RunSpec(**raw["spec"])
    plan = PassPlan(**{**raw["plan"], "step_ms": tuple(raw["plan"]["step_ms"])})
    result = measure(spec, plan)
    with open(out_path, "w") as fh:
        json.dump(result, fh)
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # RETURNN's manager/watchdog threads can hang a normal interpreter exit
