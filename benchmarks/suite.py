"""The benchmark run: corpus, configurations, repetitions (each in a fresh process), medians.

Configurations run interleaved — repetition after repetition of the whole list, rotated — so slow
drift of the machine (other jobs on a shared box) spreads over all pipelines alike, and ratios are
taken within one repetition before their median is reported.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field

import numpy as np

from benchmarks.child import PassPlan
from benchmarks.corpus import Corpus, CorpusSpec, build_corpus, warm_page_cache
from benchmarks.machine import describe_machine, load_average
from benchmarks.pipelines import RunSpec, returnn_available
from benchmarks.side_by_side import rotated

FORMAT, VERSION = "seqloader.bench", 1
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@dataclass(frozen=True)
class Settings:
    corpus: CorpusSpec = field(default_factory=CorpusSpec)
    corpus_dir: str = os.path.join(tempfile.gettempdir(), "seqloader-bench")
    max_seqs: int = 32
    workers: tuple[int, ...] = (0, 1, 2)
    reps: int = 3
    plan: PassPlan = field(default_factory=PassPlan)
    pipelines: tuple[str, ...] = ("h5py", "torch", "returnn", "seqloader")
    child_timeout_s: float = 600.0
    quick: bool = False


def quick_settings(**overrides) -> Settings:
    """Smoke-test sizes: every pipeline and field, seconds instead of minutes."""
    base = {
        "corpus": CorpusSpec(num_seqs=240),
        "workers": (0, 1),
        "reps": 1,
        "plan": PassPlan(warmup_batches=1, measure_seqs=96, step_ms=(10.0,), step_batches=6),
        "quick": True,
        "max_seqs": 16,
    }
    base.update(overrides)
    return Settings(**base)


def run_specs(settings: Settings, corpus: Corpus) -> list[RunSpec]:
    """Which configurations to run: every pipeline on the RETURNN-written (chunked) file with each
    worker count; the bare loop has no workers; seqloader and the bare loop also on the
    contiguous copy (the layout memory mapping needs)."""
    specs = []
    paths = {"chunked": corpus.chunked, "contiguous": corpus.contiguous}
    for name in settings.pipelines:
        layouts = ("chunked", "contiguous") if name in ("h5py", "seqloader") else ("chunked",)
        for layout in layouts:
            for w in (0,) if name == "h5py" else settings.workers:
                specs.append(RunSpec(name, layout, w, paths[layout], settings.max_seqs))
    return specs


def memory_bandwidth(corpus: Corpus, n_seqs: int, reps: int = 5) -> dict:
    """The physical limit: a numpy copy of the bytes ``n_seqs`` average sequences hold."""
    per_seq = (corpus.data_bytes + int(corpus.labels.sum()) * 4) / len(corpus.frames)
    nbytes = max(int(per_seq * n_seqs), 1 << 20)
    src = np.ones(nbytes, dtype=np.uint8)
    dst = np.zeros_like(src)  # written once so no page faults are timed
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        np.copyto(dst, src)
        times.append(time.perf_counter() - t)
    best = statistics.median(times)
    return {
        "bytes": nbytes,
        "seconds": best,
        "gb_per_s": nbytes / best / 1e9,
        "seqs_per_s": n_seqs / best,
    }


def run_child(spec: RunSpec, plan: PassPlan, timeout: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="seqloader-bench-") as tmp:
        spec_path, out_path = os.path.join(tmp, "spec.json"), os.path.join(tmp, "out.json")
        with open(spec_path, "w") as fh:
            json.dump({"spec": asdict(spec), "plan": asdict(plan)}, fh)
        cmd = [sys.executable, "-m", "benchmarks.child", spec_path, out_path]
        env = {**os.environ, "PYTHONPATH": REPO + os.pathsep + os.environ.get("PYTHONPATH", "")}
        try:
            proc = subprocess.run(
                cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout
            )
        except subprocess.TimeoutExpired:
            return {"spec": asdict(spec), "error": f"timed out after {timeout:.0f} s"}
        if proc.returncode != 0 or not os.path.exists(out_path):
            tail = (proc.stderr or proc.stdout)[-2000:]
            return {"spec": asdict(spec), "error": f"exit {proc.returncode}: {tail}"}
        with open(out_path) as fh:
            return json.load(fh)


def _last_line(result: dict) -> str:
    lines = result["error"].strip().splitlines() or ["?"]
    return lines[-1][:200]


def run_suite(settings: Settings, log=print) -> dict:
    started = time.strftime("%Y-%m-%dT%H:%M:%S%z")
    load_before = load_average()
    corpus = build_corpus(settings.corpus_dir, settings.corpus, log=log)
    warm_page_cache([corpus.chunked, corpus.contiguous])
    pipelines = settings.pipelines
    if "returnn" in pipelines and not returnn_available():
        log("returnn is not installed (pip install -e '.[bench]'): skipping its pipeline")
        pipelines = tuple(p for p in pipelines if p != "returnn")
    settings = Settings(**{**settings.__dict__, "pipelines": pipelines})
    specs = run_specs(settings, corpus)
    bandwidth = memory_bandwidth(corpus, settings.plan.measure_seqs)
    log(
        f"memory bandwidth (numpy copy): {bandwidth['gb_per_s']:.1f} GB/s = "
        f"{bandwidth['seqs_per_s']:,.0f} sequences/s — the physical limit"
    )
    runs = []
    for rep in range(settings.reps):
        for spec in rotated(specs, rep):
            t = time.perf_counter()
            result = run_child(spec, settings.plan, settings.child_timeout_s)
            if "error" in result:  # RETURNN's spawned workers abort now and then: one retry
                log(f"  rep {rep + 1} {spec.label} failed, retrying once: {_last_line(result)}")
                first_error = result["error"]
                result = run_child(spec, settings.plan, settings.child_timeout_s)
                result["retried_after"] = first_error
            result["rep"] = rep
            runs.append(result)
            what = (
                f"{result['seqs_per_s']:,.0f} seq/s"
                if "error" not in result
                else "FAILED: " + _last_line(result)
            )
            log(
                f"  rep {rep + 1}/{settings.reps} {spec.label:28s} {what} ({time.perf_counter() - t:.0f} s)"
            )
    return {
        "format": FORMAT,
        "version": VERSION,
        "started": started,
        "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "load_average_before": load_before,
        "load_average_after": load_average(),
        "machine": describe_machine(),
        "settings": {
            "corpus": asdict(settings.corpus),
            "corpus_seqs": len(corpus.frames),
            "corpus_mean_frames": float(corpus.frames.mean()),
            "max_seqs": settings.max_seqs,
            "workers": list(settings.workers),
            "reps": settings.reps,
            "plan": asdict(settings.plan),
            "pipelines": list(settings.pipelines),
            "quick": settings.quick,
        },
        "memory_bandwidth": bandwidth,
        "runs": runs,
    }
