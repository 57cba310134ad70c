"""``benchmarks.ratios`` keeps per-repetition ratios of configurations measured in the same
repetition, and no absolute figures. No timing here."""

from __future__ import annotations

import json

from benchmarks.ratios import main, ratios


def run(pipeline: str, workers: int, rep: int, seqs_per_s: float) -> dict:
    spec = {"pipeline": pipeline, "layout": "chunked", "workers": workers}
    return {"spec": spec, "rep": rep, "seqs_per_s": seqs_per_s}


def test_ratios_pair_configurations_within_each_repetition(tmp_path):
    runs = [
        run("seqloader", 0, 0, 300.0),
        run("returnn", 0, 0, 100.0),
        run("seqloader", 0, 1, 50.0),  # a slow repetition: its ratio is still taken within it
        run("returnn", 0, 1, 10.0),
        run("seqloader", 0, 2, 80.0),  # no partner in repetition 2: left out
        {**run("returnn", 0, 2, 1.0), "error": "aborted"},
    ]
    got = ratios({"runs": runs})
    pair = got["seqloader/chunked/w0 / returnn/chunked/w0 (sequences/s)"]
    assert pair["per_rep"] == [3.0, 5.0]
    assert pair["median"] == 4.0
    assert "seqloader/chunked/w0 / torch/chunked/w0 (sequences/s)" not in got

    result = {"runs": runs, "settings": {"reps": 3}, "machine": {"cpus": 2}, "summary": {}}
    src, out = tmp_path / "r.json", tmp_path / "ratios.json"
    src.write_text(json.dumps(result))
    assert main([str(src), "--out", str(out), "--note", "load 3"]) == 0
    written = json.loads(out.read_text())
    assert written["note"] == "load 3"
    assert written["ratios"] == json.loads(json.dumps(got))
    assert "seqs_per_s" not in json.dumps(written)  # no absolute figures
