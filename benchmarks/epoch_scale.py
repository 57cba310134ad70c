"""One rank of 1,024 running whole epochs of ``SeqLoader(planning="indexed")`` over memory-mapped
metadata: the loop's time per batch and at the epoch boundary, the report, a mid-epoch
``state_dict`` resumed in a fresh process, and the private memory of the rank and its DataLoader
workers throughout.

    python -m benchmarks.epoch_scale [--sizes 1e7,1e8] [--cases ...] [--workers 0,2]
                                     [--methods fork,spawn] [--audit] [--base-src DIR]
                                     [--base-max 1e7] [--small 1e4] [--out FILE]

The corpus is ``benchmarks.loader_scale``'s: one column store file per node with ``n`` int32
lengths (uniform in 50..2000), ``n`` tags and the bounds of 10^5 equal files, opened as
``StoreSource`` (reads return zeros of the planned length: the figures are the loader's, not a
decoder's). A first child builds the node's stores (bucket index, duplicate-tag verdict); the
measured children are fresh processes that, as rank 517 of 1,024:

1. construct ``SeqLoader(source, rank=517, world_size=1024, planning="indexed", ...)``;
2. iterate epoch 1 to its end, timing each ``next()`` as the training loop sees it (the loop does
   nothing else, so this is all the time the loop spends in the loader);
3. read the epoch's report (``report().to_dict()``: every figure, the step imbalance included);
4. start epoch 2 (the boundary: ``loader.epoch(2)`` and its first batch, as the loop waits for it),
   iterate half of it and save ``state_dict()``;
5. in another fresh process: construct the loader again (the same world size, and for ``shard``
   also 768 ranks), ``load_state_dict`` and iterate the rest of epoch 2, reading its report.

Private memory: a thread samples every 10 ms ``Pss_Anon + Pss_Shmem`` of the process and of every
child process (the DataLoader workers), from ``/proc/PID/smaps_rollup``: anonymous and shared
memory, each page split among the processes mapping it, so the sum counts each page once; the
mapped column store is page cache and not counted. Figures are peaks of the sum over the whole
child (and per phase), less the rank's own value before construction (torch and seqloader
imported, the source opened). ``--small N`` runs every configuration at ``N`` sequences too, so
``peak(n) - peak(small)`` is what grows with the corpus (a spawned worker's interpreter, torch and
its batch slots are there at any size).

``--base-src OLD/src`` runs each configuration with the code under ``OLD`` as well (fresh
processes alternating, at sizes up to ``--base-max``): before/after ratios in one run.
``--audit`` adds ``audit="error"`` runs (``shard laplace``, no workers). Results: one entry per run
in ``results/epoch_scale.json``, with the machine's load average.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from typing import Any

import numpy as np

from benchmarks.fresh import run_child
from benchmarks.loader_scale import CASES, LIMITS, RANK, WORLD, StoreSource, corpus_store
from benchmarks.machine import describe_machine, load_average

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results", "epoch_scale.json")
RESUME_WORLD = 768


def _private(pid: int) -> int:
    """``Pss_Anon + Pss_Shmem`` of process ``pid`` in bytes (0 once it is gone)."""
    total = 0
    try:
        with open(f"/proc/{pid}/smaps_rollup") as fh:
            for line in fh:
                if line.startswith(("Pss_Anon:", "Pss_Shmem:")):
                    total += int(line.split()[1]) * 1024
    except OSError:
        return 0
    return total


def _children(pid: int) -> list[int]:
    """Every descendant of ``pid`` (DataLoader workers, a spawn resource tracker)."""
    out: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/task/{p}/children") as fh:
                kids = [int(c) for c in fh.read().split()]
        except OSError:
            kids = []
        out.extend(kids)
        todo.extend(kids)
    return out


class Sampler:
    """Samples the private memory of this process and its descendants every 10 ms; ``phase``
    names what the loop does now, and every phase keeps its own peaks."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self.base = _private(self.pid)
        self.phase = "start"
        self.peaks: dict[str, dict[str, int]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def sample(self) -> None:
        main = _private(self.pid) - self.base
        workers = sum(_private(c) for c in _children(self.pid))
        peak = self.peaks.setdefault(self.phase, {"total": 0, "main": 0, "workers": 0})
        peak["total"] = max(peak["total"], main + workers)
        peak["main"] = max(peak["main"], main)
        peak["workers"] = max(peak["workers"], workers)

    def _watch(self) -> None:
        while not self._stop.is_set():
            self.sample()
            time.sleep(0.01)

    def mark(self, phase: str) -> None:
        self.sample()
        self.phase = phase
        self.sample()

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def overall(self) -> dict[str, int]:
        return {k: max(p[k] for p in self.peaks.values()) for k in ("total", "main", "workers")}


def _waits(waits: list[float]) -> dict[str, float]:
    """The loop's waits per batch after the first: median, p99, max (ms), sum (s)."""
    rest = np.asarray(waits[1:] or [0.0])
    return {
        "first_ms": 1e3 * waits[0] if waits else 0.0,
        "median_ms": 1e3 * float(np.median(rest)),
        "p99_ms": 1e3 * float(np.quantile(rest, 0.99)),
        "max_ms": 1e3 * float(rest.max()),
        "sum_s": float(np.sum(waits)),
        "batches": len(waits),
    }


def _run(it: Any, limit: int | None = None) -> tuple[list[float], int]:
    """Iterate ``it`` (at most ``limit`` batches): each ``next()``'s duration, and sequences."""
    waits: list[float] = []
    seqs = 0
    while limit is None or len(waits) < limit:
        t0 = time.perf_counter()
        try:
            batch = next(it)
        except StopIteration:
            break
        waits.append(time.perf_counter() - t0)
        seqs += int(batch.mask.sum())
    return waits, seqs


def _report(loader: Any) -> tuple[dict, float]:
    """The report of the last epoch with every figure, and how long reading it took."""
    t0 = time.perf_counter()
    report = loader.report().to_dict()
    return report, time.perf_counter() - t0


def _loader(config: dict, source: Any, world: int) -> Any:
    from seqloader.torch.loader import SeqLoader

    options: dict[str, Any] = {
        "ordering": config["ordering"],
        "distribution": config["distribution"],
        "num_workers": config["workers"],
    }
    if config["workers"]:
        options["multiprocessing_context"] = config["method"]
    if config.get("audit"):
        options["audit"] = "error"
    return SeqLoader(
        source, rank=RANK, world_size=world, seed=3, planning="indexed", **options, **LIMITS
    )


def _brief(report: dict) -> dict:
    keep = ("steps", "seqs", "planned_steps", "planned_seqs", "step_imbalance", "padding_ratio")
    out = {k: report[k] for k in keep}
    audit = report.get("audit")
    bad = ("missing", "repeated", "unplanned", "batch_errors")
    out["audit"] = None if audit is None else {k: audit[k] for k in ("scope", "delivered", *bad)}
    return out


def child_run(config: dict) -> dict:
    import torch  # noqa: F401 - a training script has torch imported before it builds a loader

    import seqloader.torch.loader  # noqa: F401 - and seqloader

    source = StoreSource(config["store"])
    out: dict[str, Any] = {}
    with Sampler() as mem:
        mem.mark("construct")
        t0 = time.perf_counter()
        loader = _loader(config, source, WORLD)
        out["construct_s"] = time.perf_counter() - t0
        mem.mark("epoch 1")
        waits, seqs = _run(iter(loader.epoch(1)))
        out["epoch1"] = {**_waits(waits), "seqs": seqs}
        mem.mark("report")
        report, out["report_read_s"] = _report(loader)
        out["report1"] = _brief(report)
        mem.mark("boundary")
        t0 = time.perf_counter()
        it = iter(loader.epoch(2))
        first, _ = _run(it, 1)
        out["boundary_s"] = time.perf_counter() - t0
        mem.mark("epoch 2")
        half = max(1, report["planned_steps"] // 2)
        waits, _ = _run(it, half - 1)
        t0 = time.perf_counter()
        state = loader.state_dict()
        out["state_dict_s"] = time.perf_counter() - t0
        out["epoch2_half"] = _waits(first + waits)
        mem.mark("close")
        it.close()
        loader.close()
    out["memory"] = {"base": mem.base, "overall": mem.overall(), "phases": mem.peaks}
    out["state"] = state
    out["checks_ok"] = bool(
        out["epoch1"]["batches"] == report["planned_steps"] == report["steps"]
        and seqs == report["seqs"]
    )
    return out


def child_resume(config: dict) -> dict:
    import torch  # noqa: F401

    import seqloader.torch.loader  # noqa: F401

    source = StoreSource(config["store"])
    out: dict[str, Any] = {}
    with Sampler() as mem:
        mem.mark("construct + load")
        t0 = time.perf_counter()
        loader = _loader(config, source, config["world"])
        loader.load_state_dict(config["state"])
        out["load_s"] = time.perf_counter() - t0
        mem.mark("rest of epoch 2")
        t0 = time.perf_counter()
        it = iter(loader.epoch(2))
        first, seqs = _run(it, 1)
        out["first_batch_s"] = time.perf_counter() - t0
        waits, rest = _run(it)
        seqs += rest
        out["rest"] = _waits(first + waits)
        mem.mark("report")
        report, out["report_read_s"] = _report(loader)
        out["report"] = _brief(report)
        it.close()
        loader.close()
    out["memory"] = {"base": mem.base, "overall": mem.overall(), "phases": mem.peaks}
    out["checks_ok"] = bool(
        report["resumed_at_step"] + report["steps"] == report["planned_steps"]
        and seqs == report["seqs"]
    )
    return out


def child(config: dict) -> dict:
    if config["phase"] == "node":  # the node's stores (bucket index, duplicate verdict)
        t0 = time.perf_counter()
        _loader({**config, "workers": 0}, StoreSource(config["store"]), WORLD).close()
        return {"node_s": time.perf_counter() - t0}
    return child_run(config) if config["phase"] == "run" else child_resume(config)


def _configs(args: argparse.Namespace) -> list[dict]:
    out = []
    for case in args.cases.split(","):
        for w in (int(x) for x in args.workers.split(",")):
            for method in args.methods.split(",") if w else ["-"]:
                out.append({**CASES[case], "case": case, "workers": w, "method": method})
    if args.audit:
        out.append({**CASES["shard laplace"], "case": "shard laplace", "workers": 0})
        out[-1] |= {"method": "-", "audit": True}
    return out


def _label(cfg: dict) -> str:
    audit = " audit" if cfg.get("audit") else ""
    return f"{cfg['case']} w{cfg['workers']} {cfg['method']}{audit}"


def measure(n: int, cfg: dict, code: str, folder: str, base_src: str | None) -> dict:
    """One configuration once: the run child, then its resumes (fresh processes)."""
    store = corpus_store(n, folder)
    os.environ["XDG_CACHE_HOME"] = os.path.join(folder, f"cache-{code}")
    common = {**cfg, "store": store, "code": code, "label": f"{n} {_label(cfg)} {code}"}
    run = run_child("benchmarks.epoch_scale", {**common, "phase": "run"}, base_src, 7200)
    worlds = [WORLD] + ([RESUME_WORLD] if cfg["distribution"] == "shard" else [])
    resumes = {}
    for world in worlds:
        conf = {**common, "phase": "resume", "world": world, "state": run["state"]}
        resumes[str(world)] = run_child("benchmarks.epoch_scale", conf, base_src, 7200)
    return {"run": run, "resume": resumes}


def _summary(m: dict) -> dict:
    """The figures of one measurement that the table shows."""
    run = m["run"]
    out = {
        "construct_s": run["construct_s"],
        "epoch1_s": run["epoch1"]["sum_s"],
        "batches": run["epoch1"]["batches"],
        "batch_median_ms": run["epoch1"]["median_ms"],
        "batch_p99_ms": run["epoch1"]["p99_ms"],
        "batch_max_ms": run["epoch1"]["max_ms"],
        "report_read_s": run["report_read_s"],
        "boundary_s": run["boundary_s"],
        "state_dict_s": run["state_dict_s"],
        "private_peak": run["memory"]["overall"]["total"],
        "private_peak_main": run["memory"]["overall"]["main"],
        "private_peak_workers": run["memory"]["overall"]["workers"],
        "step_imbalance": run["report1"]["step_imbalance"],
        "checks_ok": run["checks_ok"] and all(r["checks_ok"] for r in m["resume"].values()),
    }
    for world, r in m["resume"].items():
        out[f"resume{world}_first_batch_s"] = r["load_s"] + r["first_batch_s"]
        out[f"resume{world}_private_peak"] = r["memory"]["overall"]["total"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1e7")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--workers", default="0,2")
    ap.add_argument("--methods", default="fork,spawn")
    ap.add_argument("--audit", action="store_true")
    ap.add_argument("--spawn-max", type=float, default=1e7, help="spawn workers up to this size")
    ap.add_argument("--small", type=float, default=1e4)
    ap.add_argument("--base-src", default=None)
    ap.add_argument("--base-max", type=float, default=1e7)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--folder", default=None, help="where the corpus stores are kept")
    ap.add_argument("--out", default=RESULTS)
    ap.add_argument("--child", default=None)
    args = ap.parse_args()
    if args.child is not None:
        result = child(json.loads(args.child))
        print(json.dumps(result))
        return
    folder = args.folder or tempfile.mkdtemp(prefix="epoch-scale-")
    configs = _configs(args)
    sizes = [int(float(s)) for s in args.sizes.split(",")]
    rows = []
    for n in sizes:
        t0 = time.perf_counter()
        corpus_store(n, folder)
        small = int(args.small) if args.small else 0
        if small:
            corpus_store(small, folder)
        print(f"n={n}: corpus {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        codes = ["new"] + (["base"] if args.base_src and n <= args.base_max else [])
        for cfg in configs:
            if cfg["method"] == "spawn" and n > args.spawn_max:
                continue
            row: dict[str, Any] = {"n": n, "config": _label(cfg), "load_before": load_average()}
            for code in codes:
                for size in [n] + ([small] if small else []):
                    store = corpus_store(size, folder)
                    os.environ["XDG_CACHE_HOME"] = os.path.join(folder, f"cache-{code}")
                    conf = {**cfg, "store": store, "code": code, "phase": "node"}
                    conf["label"] = f"{size} node {code}"
                    row.setdefault("node_s", {})[f"{code} {size}"] = run_child(
                        "benchmarks.epoch_scale", conf, args.base_src, 7200
                    )["node_s"]
            runs: dict[str, list[dict]] = {}
            for _ in range(args.reps):
                for code in codes:
                    runs.setdefault(code, []).append(measure(n, cfg, code, folder, args.base_src))
                    if small:
                        runs.setdefault(code + " small", []).append(
                            measure(small, cfg, code, folder, args.base_src)
                        )
            for key, ms in runs.items():
                summaries = [_summary(m) for m in ms]
                row[key] = {
                    k: (
                        all(s[k] for s in summaries)
                        if isinstance(summaries[0][k], bool)
                        else statistics.median(s[k] for s in summaries)
                    )
                    for k in summaries[0]
                }
                row[key + " raw"] = ms[-1]
                for m in ms:
                    m["run"].pop("state", None)
            for code in codes:
                if small:
                    row[code]["private_growth"] = (
                        row[code]["private_peak"] - row[code + " small"]["private_peak"]
                    )
            if "base" in row:
                for k in ("epoch1_s", "report_read_s", "boundary_s", "private_peak"):
                    row.setdefault("ratio_new_over_base", {})[k] = row["new"][k] / max(
                        row["base"][k], 1e-9
                    )
            row["load_after"] = load_average()
            print(json.dumps({k: v for k, v in row.items() if "raw" not in k}), file=sys.stderr)
            rows.append(row)
            _save(
                args.out,
                {"machine": describe_machine(), "world": WORLD, "rank": RANK, "rows": rows},
            )


def _save(path: str, record: dict) -> None:
    """This run's record as the last entry of the results file (rewritten after every row, so
    an interrupted run keeps what it measured)."""
    old: dict[str, list] = {"runs": []}
    if os.path.exists(path):
        with open(path) as fh:
            old = json.load(fh)
    runs = old["runs"]
    if runs and runs[-1].get("started") == record.get("started", _STARTED):
        runs.pop()
    runs.append({**record, "started": _STARTED})
    with open(path, "w") as fh:
        json.dump(old, fh, indent=1)


_STARTED = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


if __name__ == "__main__":
    main()
