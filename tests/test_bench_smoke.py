"""``python -m benchmarks --quick`` on a tiny corpus, as a subprocess: it finishes, writes the JSON
and the PNG, and the JSON holds every pipeline's metrics (no timing assertions)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUN_FIELDS = {
    "ttfb_s",
    "seqs_per_s",
    "frames_per_s",
    "main_cpu_ms_per_batch",
    "peak_rss_bytes",
    "private_bytes",
    "memory",
    "computation_pct",
    "batches",
    "seqs",
    "frames",
}


def run_bench(tmp_path_factory, workers: str) -> tuple[dict, str, Path, Path]:
    """``python -m benchmarks --quick`` on a 64-sequence corpus with these worker counts:
    (the JSON, stdout, the output folder, the corpus folder)."""
    out = tmp_path_factory.mktemp("bench-out")
    corpus = tmp_path_factory.mktemp("bench-corpus")
    cmd = [
        sys.executable,
        "-m",
        "benchmarks",
        "--quick",
        "--num-seqs",
        "64",
        "--max-seqs",
        "8",
        "--measure-seqs",
        "24",
        "--workers",
        workers,
        "--out",
        str(out),
        "--corpus-dir",
        str(corpus),
        "--name",
        "smoke",
    ]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=280)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    with open(out / "smoke.json") as fh:
        result = json.load(fh)
    return result, proc.stdout, out, corpus


@pytest.fixture(scope="module")
def bench(tmp_path_factory):
    """Every pipeline with 1 worker (each configuration is a fresh process importing torch; the
    bare h5py loop has no workers, so it runs in the loop's process): the 0-worker runs of the
    other pipelines are ``test_zero_workers_run_every_pipeline`` (make chaos)."""
    return run_bench(tmp_path_factory, "1")


def check_runs(result: dict, workers: int) -> None:
    """Every pipeline ran on both layouts it takes with ``workers`` workers, without error, and
    reported every field."""
    assert result["format"] == "seqloader.bench"
    assert result["settings"]["quick"] is True
    labels = {
        f"{r['spec']['pipeline']}/{r['spec']['layout']}/w{r['spec']['workers']}"
        for r in result["runs"]
    }
    w = f"w{workers}"
    expected = {
        "h5py/chunked/w0",
        "h5py/contiguous/w0",
        f"torch/chunked/{w}",
        f"seqloader/chunked/{w}",
        f"seqloader/contiguous/{w}",
    }
    if "returnn" in result["settings"]["pipelines"]:
        expected |= {f"returnn/chunked/{w}"}
    assert labels == expected
    for run in result["runs"]:
        assert "error" not in run, run.get("error")
        assert set(run) >= RUN_FIELDS, sorted(RUN_FIELDS - set(run))
        assert run["seqs"] >= 24 and run["frames"] > run["seqs"]
        assert run["batches"] <= run["seqs"] <= 8 * run["batches"]
        # main + workers (+ RETURNN's manager process for its epoch counter)
        assert run["peak_rss_bytes"] > 0 and run["processes"] >= 1 + run["spec"]["workers"]
        mem = run["memory"]  # private = anonymous + shared memory; file pages beside it
        assert mem["private_bytes"] == mem["anon_bytes"] + mem["shmem_bytes"] > 0
        assert mem["rss_bytes"] > 0 and mem["file_bytes"] >= 0
        assert set(run["computation_pct"]) == {"10.0"}
        assert all(0 < v <= 100 for v in run["computation_pct"].values())
        waits = run["wait_ms"]["10.0"]  # per-batch waits: stalls show in p90/max
        assert 0 <= waits["median"] <= waits["p90"] <= waits["max"]


def test_json_has_every_pipeline_and_metric(bench):
    check_runs(bench[0], 1)


@pytest.mark.extended
def test_zero_workers_run_every_pipeline(tmp_path_factory):
    """The 0-worker configurations (each pipeline iterated in the loop's process): the same
    child and fields as the 1-worker runs of ``make test``."""
    result = run_bench(tmp_path_factory, "0")[0]
    check_runs(result, 0)
    zero = [t for t in result["targets"] if t["target"].startswith("seqloader 0 workers")]
    assert zero and all(t["value"] > 0 for t in zero)  # measured side by side with 0 workers


def test_summary_ratios_targets_machine_and_plot(bench):
    result, stdout, out, _ = bench
    summary = result["summary"]
    assert summary["torch/chunked/w1"]["ratios"]["torch"] == pytest.approx(1.0)
    assert summary["seqloader/chunked/w1"]["ratios"]["torch"] > 0
    names = [t["target"] for t in result["targets"]]
    assert any("2x RETURNN" in n for n in names) and any("98%" in n for n in names)
    assert result["memory_bandwidth"]["gb_per_s"] > 0
    machine = result["machine"]
    assert machine["cpus"] >= 1 and machine["versions"]["torch"]
    assert (out / "smoke.png").stat().st_size > 10_000
    assert "x torch" in stdout and "memory bandwidth" in stdout and "targets" in stdout


def test_corpus_is_returnn_layout_with_small_chunks(bench):
    """The reference corpus must look like SimpleHDFWriter's output: that is what users have."""
    _, _, _, corpus = bench
    chunked = next(p for p in corpus.iterdir() if p.name.endswith(".chunked.hdf"))
    contiguous = next(p for p in corpus.iterdir() if p.name.endswith(".contiguous.hdf"))
    with h5py.File(chunked) as f, h5py.File(contiguous) as g:
        assert f["inputs"].chunks is not None and f["inputs"].chunks[0] < 1000
        assert f["inputs"].maxshape == (None, None)
        assert g["inputs"].chunks is None
        lens = f["seqLengths"][...]
        assert lens.shape == (64, 2) and int(f.attrs["inputPattSize"]) == 40
        assert list(f["targets/size"].attrs["classes"]) == [1000, 1]
        assert f["inputs"].shape[0] == lens[:, 0].sum()
        np.testing.assert_array_equal(f["inputs"][:100], g["inputs"][:100])
        assert f["seqTags"][0].decode() == "corpus/seq-0000000"


# five variants, each a fresh process importing torch: make chaos
@pytest.mark.extended
def test_handover_ablation_runs_every_variant(tmp_path):
    """``python -m benchmarks.handover`` (the transport alone, with seqloader's parts switched off
    one by one) runs each variant in its own process and reports the same fields for each."""
    out = tmp_path / "handover.json"
    cmd = [sys.executable, "-m", "benchmarks.handover", "--batches", "12", "--reps", "1"]
    proc = subprocess.run(
        [*cmd, "--json", str(out)], cwd=REPO, capture_output=True, text=True, timeout=240
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(out.read_text())["summary"]
    assert set(summary) == {
        "torch-floor",
        "torch-transport",
        "fresh-segments",
        "slots",
        "slots+receiver",
    }
    assert summary["torch-floor"]["batch_bytes"] == 0  # a worker that does nothing
    for name, v in summary.items():
        assert 0 < v["computation_pct"] <= 100
        if name != "torch-floor":
            assert v["batch_bytes"] > 5 * 2**20  # the ~6 MB batches of the reference setup
        assert v["trainer_thread_cpu_ms_per_batch"] <= v["main_cpu_ms_per_batch"] + 1e-6


def test_merge_pools_repetitions_of_runs(bench, tmp_path):
    """``--merge`` reports medians over the repetitions of several runs with equal settings (run
    in-process: it only reads JSON, the fixture's run is the benchmark's own process)."""
    from benchmarks.__main__ import main

    _, _, out, _ = bench
    smoke = str(out / "smoke.json")
    assert main(["--merge", smoke, smoke, "--out", str(tmp_path), "--name", "merged"]) == 0
    merged = json.loads((tmp_path / "merged.json").read_text())
    single = json.loads((out / "smoke.json").read_text())
    assert merged["settings"]["reps"] == 2 * single["settings"]["reps"]
    assert len(merged["runs"]) == 2 * len(single["runs"])
    assert sorted({r["rep"] for r in merged["runs"]}) == [0, 1]
    assert len(merged["merged_from"]) == 2
    for name, entry in merged["summary"].items():
        assert entry["seqs_per_s"] == pytest.approx(single["summary"][name]["seqs_per_s"])


def test_remote_benchmark_runs_every_configuration(tmp_path):
    """``python -m benchmarks.remote`` (throttled fetching through the plan-driven cache) runs the
    local baseline, each bandwidth and each world size, and reports the same fields for each."""
    out = tmp_path / "remote.json"
    cmd = [sys.executable, "-m", "benchmarks.remote", "--files", "8", "--seqs-per-file", "6"]
    cmd += ["--partition-epoch", "2", "--epochs", "3", "--reps", "1", "--bandwidth-x", "2"]
    cmd += ["--ranks", "2", "--workers", "1", "--out", str(out)]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads(out.read_text())["summary"]
    assert set(summary) == {"local", "bw2", "w2-shard", "w2-files"}
    for v in summary.values():
        assert 0 < v["steady_loop_pct"] <= 100 and 0 < v["steady_report_pct"] <= 100
        assert v["steady_fetch_wait_s"] >= 0
    assert summary["local"]["fetched_per_pass_of_corpus"] == 0  # no cache, nothing fetched
    assert summary["bw2"]["fetched_per_pass_of_corpus"] > 0
    assert summary["bw2"]["high_water_of_budget"] <= 1


def test_metadata_benchmark_corpus_and_child(tmp_path):
    """``benchmarks/metadata.py``: its corpus opens as RETURNN HDF (unwritten data), and one
    child measurement runs with 2 forked workers (the full run is the benchmark's)."""
    from benchmarks.metadata import child, write_corpus

    path = str(tmp_path / "c.hdf")
    write_corpus(path, 50)
    config = {"code": "new", "path": path, "start": "fork", "index_dir": str(tmp_path / "i")}
    out = child(config)
    assert out["built"] and out["lengths_dtype"] == "int32" and len(out["worker_bytes"]) == 2
    assert not child(config)["built"]  # the second open maps the store
