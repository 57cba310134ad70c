"""The ``seqloader`` command line, run as real subprocesses on small real files.

Every command: exit codes, ``--json`` fields checked against the data itself (h5py, the planner),
one-line errors without tracebacks, the PNG decodes, ``convert`` round-trips and never leaves a half
file, the demo proves exactly-once.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import h5py
import numpy as np
import pytest

import seqloader as sl
from seqloader.sources.hdf_write import write_hdf
from seqloader.synthetic import SyntheticSpec, synthetic_corpus

SCRIPT = Path(sys.executable).with_name("seqloader")
MODULE = [sys.executable, "-m", "seqloader"]
SPEC = SyntheticSpec(num_seqs=120, median_frames=60, max_frames=300, seed=3)


def cli(*args: object, script: bool = False, timeout: float = 120) -> subprocess.CompletedProcess:
    cmd = [str(SCRIPT)] if script else MODULE
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    return subprocess.run(
        [*cmd, *map(str, args)], capture_output=True, text=True, timeout=timeout, env=env
    )


def cli_json(*args: object, expect: int = 0) -> dict:
    r = cli(*args, "--json")
    assert r.returncode == expect, r.stderr
    assert "Traceback" not in r.stderr
    return json.loads(r.stdout)


def assert_one_line_error(r: subprocess.CompletedProcess, *needles: str) -> None:
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    lines = [line for line in r.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, r.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> sl.MemorySource:
    return synthetic_corpus(SPEC)


@pytest.fixture(scope="module")
def hdf(tmp_path_factory, corpus) -> Path:
    path = tmp_path_factory.mktemp("data") / "train.hdf"
    write_hdf(path, corpus)
    return path


def frame_lengths(path: Path) -> np.ndarray:
    """Lengths of ``data`` straight from the file (column 0 of seqLengths)."""
    with h5py.File(path, "r") as f:
        return np.asarray(f["seqLengths"][:, 0], dtype=np.int64)


# ---- entry points and help ----


def test_help_via_the_script_and_the_module():
    r = cli("--help", script=True)
    assert r.returncode == 0, r.stderr
    for command in ("demo", "bench", "check", "stats", "convert"):
        assert command in r.stdout


def test_missing_file_gets_one_line_as_a_process(tmp_path):
    r = cli("check", tmp_path / "none.hdf", "--world-size", 2, script=True)
    assert_one_line_error(r, "none.hdf", "no such file")


# ---- check ----


def test_check_passes_and_numbers_match_the_data(hdf):
    out = cli_json(
        "check", hdf, "--world-size", 3, "--num-workers", 2, "--partition-epoch", 2,
        "--max-frames", 900, "--ordering", "laplace:.20", "--seed", 5,
    )  # fmt: skip
    lengths = frame_lengths(hdf)
    assert out["ok"] is True
    assert [e["epoch"] for e in out["epochs"]] == [1, 2]  # default: one full epoch
    assert {f["contract"]: f["ok"] for f in out["findings"]} == {
        "C1 exactly-once": True,
        "C2 equal steps": True,
        "C3/C4 worker independence": True,
    }
    total_seqs = total_frames = 0
    for e in out["epochs"]:
        steps = {r["load"]["batches"] for r in e["ranks"]}
        assert steps == {e["steps"]}
        for r in e["ranks"]:
            workers = r["workers"]
            assert len(workers) == 2
            # worker w executes items w, w+2, ...: loads add up to the rank's
            assert sum(w["batches"] for w in workers) == r["load"]["batches"]
            assert workers[0]["batches"] - workers[1]["batches"] in (0, 1)
            assert sum(w["frames"] for w in workers) == r["load"]["frames"]
            assert r["load"]["padded_frames"] >= r["load"]["frames"]
            total_seqs += r["load"]["seqs"]
            total_frames += r["load"]["frames"]
    assert total_seqs == len(lengths)
    assert total_frames == int(lengths.sum())


# ---- stats ----


def test_stats_json_and_png(hdf, tmp_path, corpus):
    png = tmp_path / "stats.png"
    out = cli_json("stats", hdf, "--max-frames", 900, "--plot", png, "--frame-rate", 50)
    lengths = frame_lengths(hdf)
    assert out["sequences"] == len(lengths)
    assert out["total_frames"] == int(lengths.sum())
    assert out["hours"] == pytest.approx(lengths.sum() / 50 / 3600, abs=1e-4)
    p = out["keys"]["data"]["percentiles"]
    assert p["p50"] == pytest.approx(float(np.median(lengths)))
    assert p["p0"] == lengths.min() and p["p100"] == lengths.max()
    assert out["keys"]["data"]["feature_shape"] == [SPEC.feature_dim]
    assert out["keys"]["classes"]["sparse"] is True
    assert out["keys"]["labels"]["total_length"] == int(corpus.lengths("labels").sum())
    pad = out["padding_by_ordering"]
    assert set(pad) >= {"default", "sorted", "laplace:.100"}
    # sorting by length cannot pad more than the corpus order does
    assert pad["sorted"]["padding_ratio"] <= pad["default"]["padding_ratio"]
    # steps and step-cost imbalance over 8 ranks (the default), buckets:N included
    assert {"buckets:10", "buckets:30"} <= set(pad) and out["batching"]["ranks"] == 8
    for p in pad.values():
        assert p["steps"] * 8 == p["batches"] and p["step_imbalance"] >= 1.0
    assert pad["buckets:10"]["padding_ratio"] < pad["random"]["padding_ratio"]
    from PIL import Image

    with Image.open(png) as im:
        im.load()
        assert im.format == "PNG" and im.size[0] > 300 and im.size[1] > 200


# ---- bench ----


def test_bench_json_whole_epoch_in_process(hdf):
    out = cli_json("bench", hdf, "--num-workers", 0, "--step-ms", 0, "--max-seqs", 16)
    assert out["seqs"] == SPEC.num_seqs
    assert out["frames"] == int(frame_lengths(hdf).sum())
    assert out["batches"] == out["planned_batches"] == -(-SPEC.num_seqs // 16)
    assert out["seqs_per_s"] > 0 and out["frames_per_s"] > 0
    assert 0 <= out["computation_pct"] <= 100
    assert out["peak_rss_main_bytes"] > 10 * 2**20
    assert "loader's own speed" in out["hint"]


def test_bench_with_workers_and_batch_limit(hdf):
    out = cli_json(
        "bench", hdf, "--num-workers", 2, "--step-ms", 2, "--batches", 5, "--max-frames", 600
    )
    assert out["batches"] == 5 < out["planned_batches"]
    assert 0 < out["seqs"] < SPEC.num_seqs
    assert out["wall_s"] > 0 and 0 <= out["computation_pct"] <= 100
    assert out["first_batch_s"] > 0
    assert out["peak_rss_worker_bytes"] > 0
    assert out["hint"]
    dist = out["data_wait_ms_after_first_batch"]  # 4 batches after the first
    assert 0 <= dist["p50"] <= dist["p90"] <= dist["p99"] <= dist["max"]


def test_bench_hint_tells_rare_stalls_from_a_steady_cost():
    """Same mean wait, different shapes: a steady cost asks for workers, rare stalls do not."""
    from seqloader.cli.bench import hint
    from seqloader.loading.counts import KeyCounts
    from seqloader.trainer.report import EpochMeter, EpochReport

    def report_of(waits):
        report = EpochReport(1, 0, 1)
        now = [0.0]  # the meter's clock: it advances by the known waits only
        meter = EpochMeter(report, "data", clock=lambda: now[0])
        for w in [0.2, *waits]:
            meter.before_next()
            now[0] += w
            meter.count_handed(KeyCounts(1, 0, 1, 1))
        report.wall_s = 0.2 + len(waits) * 0.011  # 10 ms steps
        return report

    steady = report_of([0.004] * 100)
    stalls = report_of([0.0002] * 97 + [0.13] * 3)
    for report, expect_stalls in ((steady, False), (stalls, True)):
        pct = 100 * (report.wall_s - report.data_wait_s) / report.wall_s
        text = hint(report, pct, 1, 10.0, [])
        assert text.startswith("data does not keep up: computation 5"), text  # 53-54%
        assert ("rare stalls" in text) == expect_stalls, text
        assert ("--num-workers 2" in text) == (not expect_stalls), text


# ---- convert ----


def test_convert_chunked_to_contiguous_round_trips(corpus, tmp_path):
    chunked = tmp_path / "chunked.hdf"
    write_hdf(chunked, corpus, chunked=True)
    out = tmp_path / "contiguous.hdf"
    info = cli_json("convert", chunked, out)
    assert info["sequences"] == SPEC.num_seqs
    with h5py.File(out, "r") as f:
        assert f["inputs"].chunks is None  # contiguous now
    a, b = sl.HDFSource([chunked]), sl.HDFSource([out])
    assert list(a.tags) == list(b.tags)
    for i in (0, 57, SPEC.num_seqs - 1):
        for key, value in a.read(i).items():
            np.testing.assert_array_equal(b.read(i)[key], value)


def test_convert_interrupted_leaves_no_file(corpus, tmp_path):
    """Interrupt the write after its first dataset write: OUT must not exist, no temp file left."""
    chunked = tmp_path / "in.hdf"
    write_hdf(chunked, corpus, chunked=True)
    out = tmp_path / "out.hdf"
    code = (
        "import h5py, sys\n"
        "orig = h5py.Dataset.__setitem__\n"
        "def boom(self, *a):\n"
        "    orig(self, *a)\n"
        "    raise KeyboardInterrupt\n"
        "h5py.Dataset.__setitem__ = boom\n"
        "from seqloader.cli.main import main\n"
        f"sys.exit(main(['convert', {str(chunked)!r}, {str(out)!r}]))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 130, r.stderr
    assert "interrupted" in r.stderr
    assert not out.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.hdf"]


def test_convert_audio_manifest_precomputes_features(tmp_path):
    from seqloader.synthetic.audio import write_audio_corpus

    audio = write_audio_corpus(tmp_path, 6, seconds=(0.3, 0.8), seed=2)
    out = tmp_path / "feats.hdf"
    info = cli_json("convert", audio.oggzip, out)
    assert info["sequences"] == 6
    assert info["keys"]["data"] == "float32[T, 80]"
    converted = sl.HDFSource([out])
    original = sl.AudioSource(audio.jsonl, features=sl.LogMel())
    assert list(converted.tags) == list(original.tags)
    np.testing.assert_array_equal(converted.lengths("data"), original.lengths("data"))
    np.testing.assert_allclose(converted.read(3)["data"], original.read(3)["data"], rtol=1e-5)


# ---- demo ----


def test_demo_trains_two_epochs_exactly_once_and_reuses_the_cache(tmp_path, capsys):
    import torch

    from seqloader.cli.main import main

    cache = tmp_path / "cache"
    args = ("demo", "--cache", cache, "--num-seqs", 80, "--max-frames", 2000)
    out = cli_json(*args)
    assert out["ok"] is True and "wrote" in out["corpus"]
    assert [e["epoch"] for e in out["epochs"]] == [1, 2]
    for e in out["epochs"]:
        proof = e["exactly_once"]
        assert proof["ok"] and proof["delivered"] == proof["distinct"] == proof["corpus"] == 80
        assert proof["missing"] == proof["repeated"] == proof["unknown"] == 0
        assert e["report"]["seqs"] == 80 and e["steps"] > 0
        assert 0 <= e["computation_pct"] <= 100
    assert out["epochs"][1]["loss"] < out["epochs"][0]["loss"]  # it learns
    hdfs = list(cache.glob("*.hdf"))
    assert len(hdfs) == 1 and len(sl.HDFSource(hdfs)) == 80
    # text output, cached corpus: in-process (the process's own exit and output are the run above);
    # the demo sets torch's thread count for its process, this one's is put back
    threads = torch.get_num_threads()
    try:
        assert main([str(a) for a in args]) == 0
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    assert "reused" in out
    assert out.count("exactly-once: 80 sequences delivered") == 2
    assert "demo passed" in out
