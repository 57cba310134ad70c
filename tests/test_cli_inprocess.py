"""The command line's argument handling, errors and DATA forms, run in-process through ``main()``
(the same code the console script runs; ``test_cli.py`` covers the real processes)."""

from __future__ import annotations

import json
import os
from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest

import seqloader as sl
from seqloader.cli.main import main
from seqloader.cli.options import PLAN_FLAGS, WORKER_FLAGS
from seqloader.plan.options import PlanOptions
from seqloader.trainer.loader_options import WorkerOptions
from test_cli import SPEC, corpus, frame_lengths, hdf  # noqa: F401 (fixtures)

COMMANDS = ("demo", "bench", "check", "stats", "convert", "prepare", "cache")


def run(capsys, *args: object) -> tuple[int, str, str]:
    try:
        code = main([str(a) for a in args])
    except SystemExit as e:  # argparse: --help and usage errors
        code = int(e.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys, *args: object, expect: int = 0) -> dict:
    code, out, err = run(capsys, *args, "--json")
    assert code == expect, err
    return json.loads(out)


def one_line_error(capsys, *args: object) -> str:
    """Run, expect exit 2 and exactly one stderr line (no traceback); return it."""
    code, _, err = run(capsys, *args)
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert len(lines) == 1 and "Traceback" not in err, err
    assert "error:" in lines[0]
    return lines[0]


# ---- help and flags ----


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(capsys, command):
    code, out, _ = run(capsys, command, "--help")
    assert code == 0
    assert out.startswith(f"usage: seqloader {command}")
    assert "--json" in out and "--no-progress" in out


def test_no_command_prints_help_and_exits_2(capsys):
    code, _, err = run(capsys)
    assert code == 2
    assert "COMMAND" in err


def test_every_plan_option_has_a_flag():
    """A new PlanOptions field must get a flag (or the CLI silently can't set it)."""
    plan_fields = {f.name for f in fields(PlanOptions) if f.init}
    assert plan_fields == {dest for _, dest, _ in PLAN_FLAGS}
    worker_fields = {f.name for f in fields(WorkerOptions) if f.init}
    covered = {dest for _, dest, _ in WORKER_FLAGS} | {"num_workers"}
    # persistent workers and the worker timeout are not loader *shape* options: config only
    assert worker_fields - covered <= {"persistent_workers", "timeout"}
    assert covered <= worker_fields


# ---- errors: one line, exit 2 ----


def test_bad_values_and_files_get_one_line(capsys, hdf, tmp_path):  # noqa: F811
    assert "--world-size" in one_line_error(capsys, "check", hdf, "--world-size", "0")
    assert "lapalce" in one_line_error(capsys, "check", hdf, "--ordering", "lapalce:3")
    assert "spread" in one_line_error(capsys, "check", hdf, "--uneven", "spread")
    assert "unrecognized" in one_line_error(capsys, "bench", hdf, "--bogus")
    # an HDF source defers no features: the device option is refused naming the fix
    assert "defer" in one_line_error(capsys, "bench", hdf, "--features-on", "cpu")
    assert "x=" in one_line_error(capsys, "check", hdf, "--max-seq-length", "x=")
    assert "'.md'" in one_line_error(capsys, "stats", Path(__file__).parents[1] / "README.md")
    fake = tmp_path / "fake.hdf"
    fake.write_text("this is not HDF5")
    assert "fake.hdf" in one_line_error(capsys, "stats", fake)
    manifest = tmp_path / "m.jsonl"
    manifest.write_text("")
    assert "several DATA" in one_line_error(capsys, "check", hdf, manifest)


def test_sequence_longer_than_max_frames_names_the_option(capsys, hdf):  # noqa: F811
    longest = int(frame_lengths(hdf).max())
    line = one_line_error(capsys, "check", hdf, "--max-frames", longest - 1)
    assert "max_frames" in line and "max_seq_length" in line


def test_stats_rejects_bad_ordering_and_plot_name(capsys, hdf, tmp_path):  # noqa: F811
    assert "bogus" in one_line_error(capsys, "stats", hdf, "--orderings", "sorted,bogus")
    line = one_line_error(capsys, "stats", hdf, "--plot", tmp_path / "x.jpg")
    assert "--plot" in line and ".png" in line
    assert not (tmp_path / "x.jpg").exists()


def test_convert_rejects_bad_output(capsys, hdf, tmp_path):  # noqa: F811
    assert ".hdf" in one_line_error(capsys, "convert", hdf, tmp_path / "out.txt")
    assert "does not exist" in one_line_error(capsys, "convert", hdf, tmp_path / "no" / "o.hdf")
    existing = tmp_path / "there.hdf"
    existing.write_bytes(b"")
    assert "--force" in one_line_error(capsys, "convert", hdf, existing)
    assert existing.read_bytes() == b""  # untouched
    code, _, err = run(capsys, "convert", hdf, existing, "--force")
    assert code == 0, err
    assert len(sl.HDFSource([existing])) == SPEC.num_seqs  # replaced by the conversion


# ---- check: text output and failures ----


def test_check_text_output_and_filtered_count(capsys, hdf):  # noqa: F811
    lengths = frame_lengths(hdf)
    limit = int(np.percentile(lengths, 80))
    code, out, _ = run(capsys, "check", hdf, "--world-size", 2, "--max-seqs", 8,
                       "--max-seq-length", limit)  # fmt: skip
    assert code == 0
    filtered = int((lengths > limit).sum())
    assert (
        f"{len(lengths)} sequences, {len(lengths) - filtered} admitted, {filtered} filtered" in out
    )
    assert "rank 1:" in out
    assert out.strip().endswith("check passed")


@pytest.mark.parametrize("planning", ["global", "indexed"])
@pytest.mark.parametrize("chunking", [(), ("--chunking", "data=7:5,classes=7:5")])
def test_check_random_seed_offset_passes_per_rank(capsys, hdf, planning, chunking):  # noqa: F811
    # every rank passes over all the data in its own order: exactly once per rank
    code, out, _ = run(capsys, "check", hdf, "--world-size", 2, "--max-seqs", 10,
                       "--distribution", "random_seed_offset", "--planning", planning,
                       *chunking)  # fmt: skip
    assert code == 0, out
    assert "C1 exactly-once: ok - each of the 2 ranks passes over all the data" in out
    noun = "chunk" if chunking else "sequence"
    assert f"each rank uses every admitted {noun}" in out
    assert "C2 equal steps: ok" in out
    assert out.strip().endswith("check passed")


def test_check_uneven_drop_fails_naming_the_fix(capsys, hdf):  # noqa: F811
    # 120 sequences in batches of 7 -> 18 batches; 4 ranks keep 16 of them
    out = run_json(capsys, "check", hdf, "--world-size", 4, "--max-seqs", 7, "--uneven", "drop",
                   expect=1)  # fmt: skip
    c1 = next(f for f in out["findings"] if f["contract"] == "C1 exactly-once")
    assert not c1["ok"]
    assert "uneven='split'" in c1["message"]
    assert out["epochs"][0]["dropped"] == SPEC.num_seqs - 16 * 7


def test_check_uneven_pad_counts_masked_repeats_and_passes(capsys, hdf):  # noqa: F811
    out = run_json(capsys, "check", hdf, "--world-size", 4, "--max-seqs", 7, "--uneven", "pad")
    assert out["ok"]
    ranks = out["epochs"][0]["ranks"]
    assert sum(r["load"]["seqs"] for r in ranks) == SPEC.num_seqs
    assert sum(r["load"]["repeats"] for r in ranks) > 0  # the padded round, masked


def test_check_default_batch_limit_is_announced(capsys, hdf):  # noqa: F811
    out = run_json(capsys, "check", hdf)
    assert out["options"]["max_seqs"] == 32
    assert any("--max-seqs 32" in n for n in out["notes"])


# ---- DATA forms: configs and lists ----


def test_toml_config_relative_paths_and_flag_override(capsys, hdf, tmp_path):  # noqa: F811
    (tmp_path / "sub").mkdir()
    rel = os.path.relpath(hdf, tmp_path / "sub")
    cfg = tmp_path / "sub" / "data.toml"
    cfg.write_text(
        f'[source]\nhdf = ["{rel}"]\n\n[loader]\nmax_seqs = 5\nordering = "sorted"\n'
        "num_workers = 3\n"
    )
    out = run_json(capsys, "check", cfg, "--world-size", 2)
    assert out["options"]["max_seqs"] == 5
    assert out["options"]["ordering"] == "sorted"
    assert out["num_workers"] == 3  # from the config
    assert len(out["epochs"][0]["ranks"][0]["workers"]) == 3
    assert out["notes"] == []
    out = run_json(capsys, "check", cfg, "--world-size", 2, "--max-seqs", 12, "--num-workers", 0)
    assert out["options"]["max_seqs"] == 12  # the flag wins
    assert out["num_workers"] == 0


def test_json_config_file_list_and_synthetic_source(capsys, hdf, tmp_path):  # noqa: F811
    cfg = tmp_path / "data.json"
    cfg.write_text(json.dumps({"source": {"hdf": str(hdf)}, "loader": {"max_frames": 700}}))
    assert run_json(capsys, "check", cfg)["options"]["max_frames"] == 700
    listing = tmp_path / "files.txt"
    listing.write_text(f"# two copies of one file\n{hdf}\n\n{hdf}\n")
    assert run_json(capsys, "stats", listing, "--max-seqs", 10)["sequences"] == 2 * SPEC.num_seqs
    synth = tmp_path / "synth.toml"
    synth.write_text("[source.synthetic]\nnum_seqs = 33\nseed = 4\n[loader]\nmax_seqs = 4\n")
    out = run_json(capsys, "check", synth, "--world-size", 3)
    assert out["ok"] and out["num_seqs"] == 33


def test_bad_configs_get_one_line(capsys, hdf, tmp_path):  # noqa: F811
    cases = {
        "bad.toml": ("[source\nhdf = 1\n", "invalid TOML"),
        "unknown.toml": (f'[source]\nhdf = "{hdf}"\n[loader]\nmax_frame = 10\n', "max_frame"),
        "missing.toml": ('[source]\nhdf = "nope.hdf"\n', "nope.hdf"),
        "two.toml": (f'[source]\nhdf = "{hdf}"\nmanifest = "{hdf}"\n', "exactly one of"),
        "nosource.toml": ("[loader]\nmax_seqs = 3\n", "missing [source]"),
        "typo.toml": (f'[source]\nhdf = "{hdf}"\n[loadr]\n', "loadr"),
        "bad.json": ('{"source": ', "invalid JSON"),
        "badvalue.toml": (f'[source]\nhdf = "{hdf}"\n[loader]\nmax_seqs = 0\n', "max_seqs"),
    }
    for name, (text, needle) in cases.items():
        path = tmp_path / name
        path.write_text(text)
        line = one_line_error(capsys, "check", path)
        assert name in line or needle in line, line
        assert needle in line, line
    empty_list = tmp_path / "empty.txt"
    empty_list.write_text("# nothing\n")
    assert "names no files" in one_line_error(capsys, "stats", empty_list)


def test_chunking_and_per_key_flags_reach_the_plan(capsys, hdf):  # noqa: F811
    """``check`` plans chunks from the flags (RETURNN's forms), verifies the epoch, and counts."""
    result = run_json(
        capsys, "check", hdf, "--chunking", "data=7:5,classes=7:5", "--max-frames", "*=60",
        "--min-chunk-size", "2", "--world-size", "2",
    )  # fmt: skip
    assert "every admitted chunk" in json.dumps(result)  # C1 counted per chunk, and held
    stats = run_json(
        capsys, "stats", hdf, "--chunking", "data=7:5,classes=7:5", "--max-frames", "60"
    )
    assert stats
    one_line_error(capsys, "check", hdf, "--chunking", "7:x")
    one_line_error(capsys, "check", hdf, "--epoch-wise-filter", "1-x:3")


def test_packed_layout_reports_no_padding(capsys, hdf):  # noqa: F811
    """``--layout packed``: ``stats`` and ``check`` count the frames a packed batch delivers (its
    rows' lengths, no padding), the padded layout its ``n_seqs * max_len``."""
    flags = ("--chunking", "data=7:5,classes=7:5", "--max-frames", "60")
    padded = run_json(capsys, "stats", hdf, *flags)["padding_by_ordering"]
    packed = run_json(capsys, "stats", hdf, *flags, "--layout", "packed")["padding_by_ordering"]
    assert all(p["padding_ratio"] > 0 for p in padded.values())
    assert all(p["padding_ratio"] == 0 for p in packed.values())
    assert all(packed[o]["steps"] == padded[o]["steps"] for o in packed)  # the same plan
    checked = run_json(capsys, "check", hdf, *flags, "--layout", "packed", "--world-size", "2")
    for epoch in checked["epochs"]:
        for rank in epoch["ranks"]:
            assert rank["load"]["padded_frames"] == rank["load"]["frames"]


def test_check_and_stats_with_indexed_planning(capsys, hdf):  # noqa: F811
    """``--planning indexed`` plans with the indexed planner: the check passes (every contract),
    and stats compares only the orderings indexed planning plans."""
    out = run_json(capsys, "check", hdf, "--world-size", 3, "--max-seqs", 7, "--ordering",
                   "buckets:3", "--planning", "indexed", "--partition-epoch", 2)  # fmt: skip
    assert out["ok"], out["findings"]
    assert out["options"]["planning"] == "indexed"
    stats = run_json(capsys, "stats", hdf, "--ordering", "laplace", "--planning", "indexed")
    assert json.dumps(stats).count("padding_ratio") >= 1
