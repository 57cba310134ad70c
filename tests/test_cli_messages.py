"""What a new user is told, on material nobody here wrote: a RETURNN HDF of raw 16 kHz samples
written by RETURNN's own ``SimpleHDFWriter``, an HDF of feature frames, an audio manifest, a Python
RETURNN config without its header. ``stats`` shows hours only at a known frame rate; ``check`` and
``bench`` invent none; ``bench``'s verdict agrees with its figures and threshold; torch's
worker-count warning shows once; no unclosed-file ``ResourceWarning`` at exit. A command runs as a
process where its process is checked (exit, warnings, stderr), its ``--json`` figures in-process
through ``main()``, the console script's code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import seqloader as sl
from seqloader.cli.main import main
from seqloader.errors import OptionError

MODULE = [sys.executable, "-m", "seqloader"]
RATE = 16000


def run(*args: object, warnings: str | None = None, cwd: Path | None = None):
    """The command line as a user runs it (warnings shown unless ``warnings`` says otherwise)."""
    env = dict(os.environ)
    env.pop("PYTHONWARNINGS", None)
    cmd = [sys.executable, *(["-W", warnings] if warnings else []), "-m", "seqloader"]
    return subprocess.run(
        [*cmd, *map(str, args)], capture_output=True, text=True, timeout=180, env=env, cwd=cwd
    )


def run_json(capsys, *args: object) -> dict:
    """``--json`` of a command run in-process through ``main()`` (the console script's code): the
    figures, where the process itself (its exit, its warnings) is not what a test checks."""
    code = main([*map(str, args), "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


@pytest.fixture(scope="module")
def raw_hdf(tmp_path_factory) -> tuple[Path, float]:
    """RETURNN's SimpleHDFWriter, raw 16 kHz waveforms as 1-dim frames; with the true hours."""
    hdf = pytest.importorskip("returnn.datasets.hdf")
    path = tmp_path_factory.mktemp("raw") / "raw.hdf"
    rng = np.random.default_rng(0)
    writer = hdf.SimpleHDFWriter(str(path), dim=1, ndim=2)
    total = 0
    for i in range(12):
        n = int(rng.integers(RATE // 2, 3 * RATE // 2))
        total += n
        x = (0.1 * rng.standard_normal((1, n, 1))).astype(np.float32)
        writer.insert_batch(x, [n], [f"utt{i}"])
    writer.close()
    return path, total / RATE / 3600


@pytest.fixture(scope="module")
def features_hdf(tmp_path_factory) -> Path:
    hdf = pytest.importorskip("returnn.datasets.hdf")
    path = tmp_path_factory.mktemp("feat") / "feat.hdf"
    rng = np.random.default_rng(1)
    writer = hdf.SimpleHDFWriter(str(path), dim=5, ndim=2)
    for i in range(10):
        n = int(rng.integers(50, 300))
        writer.insert_batch(rng.standard_normal((1, n, 5)).astype(np.float32), [n], [f"f{i}"])
    writer.close()
    return path


# ---- hours only at a known rate ----


def test_stats_on_raw_audio_gives_the_audio_hours(raw_hdf, capsys):
    path, hours = raw_hdf
    r = run("stats", path, warnings="error::ResourceWarning")
    assert r.returncode == 0, r.stderr
    assert "ResourceWarning" not in r.stderr, r.stderr
    line = r.stdout.splitlines()[2]
    assert f"= {round(hours, 4):.3f} h at 16000 samples/s" in line, line
    assert "raw audio" in line and "--frame-rate" in line, line
    out = run_json(capsys, "stats", path)
    assert out["hours"] == pytest.approx(hours, abs=1e-4)
    assert (out["frame_rate"], out["frame_rate_from"]) == (16000, "layout")
    # the user knows better: 8 kHz samples
    out = run_json(capsys, "stats", path, "--frame-rate", 8000)
    assert out["hours"] == pytest.approx(2 * hours, abs=1e-4)
    assert out["frame_rate_from"] == "--frame-rate"


def test_stats_without_a_known_rate_shows_no_hours_and_says_how(features_hdf, capsys):
    assert main(["stats", str(features_hdf)]) == 0
    line = capsys.readouterr().out.splitlines()[2]
    assert " h " not in line and "frame rate is unknown" in line and "--frame-rate HZ" in line
    out = run_json(capsys, "stats", features_hdf)
    assert (out["hours"], out["frame_rate"], out["frame_rate_from"]) == (None, None, "unknown")
    out = run_json(capsys, "stats", features_hdf, "--frame-rate", 100)
    assert out["hours"] == pytest.approx(out["total_frames"] / 100 / 3600, abs=1e-4)


def test_stats_takes_the_rate_an_audio_manifest_declares(tmp_path, capsys):
    from seqloader.synthetic.audio import write_audio_corpus

    corpus = write_audio_corpus(tmp_path, 5, seconds=(0.5, 1.0), seed=2)
    lines = Path(corpus.jsonl).read_text().splitlines()
    seconds = sum(json.loads(line)["duration"] for line in lines)
    out = run_json(capsys, "stats", corpus.jsonl)
    assert out["frame_rate_from"] == "source" and out["frame_rate"] == 100  # 10 ms hop
    # log-mel frames of each file: the audio's hours up to a frame per utterance
    assert out["hours"] == pytest.approx(seconds / 3600, abs=5 * 0.03 / 3600 + 1e-4)


def test_check_and_bench_invent_no_durations(raw_hdf):
    path, _ = raw_hdf
    for args in (("check", path), ("bench", path, "--max-frames", 100_000)):
        r = run(*args, warnings="error::ResourceWarning")
        assert r.returncode == 0, r.stderr
        assert " h " not in r.stdout and "hours" not in r.stdout, r.stdout
        assert "ResourceWarning" not in r.stderr, r.stderr


# ---- bench's verdict, warnings, resources ----


def report_at(computation_pct: float):
    """A report of 100 batches after the first whose computation time % is ``computation_pct``."""
    from seqloader.loading.counts import KeyCounts
    from seqloader.trainer.report import EpochMeter, EpochReport

    report = EpochReport(1, 0, 1)
    now = [0.0]
    meter = EpochMeter(report, "data", clock=lambda: now[0])
    step = 0.010
    wait = step * (100 - computation_pct) / computation_pct  # wait / (wait + step) = 1 - pct
    for w in [0.0, *[wait] * 100]:
        meter.before_next()
        now[0] += w
        meter.count_handed(KeyCounts(1, 0, 1, 1))
    report.wall_s = 100 * (step + wait)
    return report


@pytest.mark.parametrize(
    ("pct", "verdict"),
    [(97.0, "data keeps up"), (92.9, "data does not keep up"), (30.0, "data is the bottleneck")],
)
def test_bench_verdict_agrees_with_the_figures(pct: float, verdict: str) -> None:
    from seqloader.cli.bench import KEEPS_UP_PCT, hint

    report = report_at(pct)
    steady = 100 * (report.wall_s - report.data_wait_s) / report.wall_s
    assert steady == pytest.approx(pct, abs=0.01)
    text = hint(report, steady, 2, 10.0, [])
    assert text.startswith(verdict), text
    assert f"{pct:.1f}%" in text, text
    if verdict == "data does not keep up":
        assert "bottleneck" not in text and f"{KEEPS_UP_PCT:g}%" in text, text


def test_worker_count_warning_once(raw_hdf):
    path, _ = raw_hdf
    too_many = len(os.sched_getaffinity(0)) + 1  # over torch's suggested maximum
    r = run("bench", path, "--max-frames", 100_000, "--num-workers", too_many)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count(f"will create {too_many} worker processes in total") == 1, r.stderr


def test_no_unclosed_file_at_exit(raw_hdf, tmp_path):
    """The quick start as a user writes it (no close, no ``with``), with and without workers: with
    ResourceWarnings as errors nothing is reported at exit (the command line: the tests above),
    and no finaliser's error either (a module-level loader is collected after the interpreter
    has emptied the modules' globals)."""
    path, _ = raw_hdf
    script = tmp_path / "train.py"
    script.write_text(
        textwrap.dedent(
            f"""\
            import seqloader as sl

            src = sl.HDFSource([{str(path)!r}])
            for workers in (0, 2):
                loader = sl.SeqLoader(src, max_frames=100_000, num_workers=workers)
                for batch in loader.epoch(1):
                    batch["data"].sum()
            print("done")
            """
        )
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    r = subprocess.run(
        [sys.executable, "-W", "error::ResourceWarning", str(script)],
        capture_output=True,
        text=True,
        timeout=180,
        env=env,
    )
    assert r.returncode == 0 and r.stdout.strip() == "done", r.stderr
    assert "ResourceWarning" not in r.stderr and "unclosed" not in r.stderr, r.stderr
    assert "Exception ignored" not in r.stderr, r.stderr


# ---- RETURNN configs ----


def test_python_config_without_header_names_the_header(features_hdf, tmp_path):
    pytest.importorskip("returnn.config")
    body = textwrap.dedent(
        f"""\
        train = {{"class": "HDFDataset", "files": [{str(features_hdf)!r}],
                 "seq_ordering": "laplace:.100"}}
        batch_size = 2000
        """
    )
    config = tmp_path / "my.config"
    config.write_text(body)
    with pytest.raises(OptionError) as e:
        sl.from_returnn_config(config)
    assert "'#!rnn.py' the first line" in str(e.value) and "dict" in str(e.value), e.value
    assert str(config) in str(e.value)
    config.write_text("#!rnn.py\n" + body)  # the fix the message gives works
    train = sl.from_returnn_config(config)["train"]
    assert len(train.plan(1)) > 0
