"""``seqloader check`` and ``stats`` on named corpora and mixes (a ``corpora`` config of HDF files,
``--mix``), in-process through ``main()``."""

from __future__ import annotations

import numpy as np
import pytest

import seqloader as sl
from test_cli_inprocess import one_line_error, run, run_json

RNG = np.random.default_rng(3)


@pytest.fixture
def corpora_config(tmp_path):
    """Two HDF corpora (libri: 40 sequences, ted: 12) and a config naming them."""
    for name, n in (("libri", 40), ("ted", 12)):
        lens = RNG.integers(5, 60, n)
        src = sl.MemorySource(
            {"data": [RNG.standard_normal((int(k), 4)).astype(np.float32) for k in lens]},
            [f"{name}/{i}" for i in range(n)],
        )
        sl.write_hdf(str(tmp_path / f"{name}.hdf"), src)
    cfg = tmp_path / "mix.toml"
    cfg.write_text(
        '[source.corpora.libri]\nhdf = ["libri.hdf"]\n[source.corpora.ted]\nhdf = "ted.hdf"\n'
        "[loader]\nmax_seqs = 4\nmix = { libri = 0.5, ted = 2.0 }\n"
    )
    return cfg


def test_check_verifies_per_corpus_exactly_once(capsys, corpora_config):
    out = run_json(capsys, "check", corpora_config, "--world-size", 3, "--epochs", 4)
    assert out["ok"]
    c1 = next(f for f in out["findings"] if f["contract"] == "C1 exactly-once")
    assert "libri: 80 uses = stream 0..80 of 40 seqs (corpus epochs 1..2 complete" in c1["message"]
    assert "ted: 96 uses = stream 0..96 of 12 seqs (corpus epochs 1..8 complete" in c1["message"]
    assert out["options"]["mix"] == {"libri": 0.5, "ted": 2.0}
    for epoch in out["epochs"]:  # 20 + 24 slots per epoch, equal steps on 3 ranks
        assert sum(r["load"]["seqs"] for r in epoch["ranks"]) == 44
        assert len({r["load"]["batches"] for r in epoch["ranks"]}) == 1
    code, text, _ = run(capsys, "check", corpora_config, "--epochs", 2, "--partition-epoch", 2)
    assert code == 0 and "C1 exactly-once: ok - per corpus" in text


def test_stats_shows_each_corpus_and_what_an_epoch_takes(capsys, corpora_config):
    out = run_json(capsys, "stats", corpora_config)
    libri, ted = out["corpora"]["libri"], out["corpora"]["ted"]
    assert (libri["sequences"], ted["sequences"]) == (40, 12)
    assert libri["slots_per_epoch"] == [20, 20, 20, 20] and ted["slots_per_epoch"] == [24] * 4
    assert libri["share_of_epoch_1"] == round(20 / 44, 4)
    assert libri["rate"] == 0.5 and ted["rate"] == 2.0
    assert out["sequences"] == 52
    code, text, _ = run(capsys, "stats", corpora_config, "--mix", "libri=1,ted=1")
    assert code == 0
    assert "corpus ted: 12 sequences" in text and "slots in epochs 1...4: [12, 12, 12, 12]" in text


def test_mix_flag_and_its_errors(capsys, corpora_config):
    out = run_json(capsys, "check", corpora_config, "--mix", "ted=3")  # libri: 1.0 by default
    assert out["ok"] and out["options"]["mix"] == {"ted": 3.0}
    assert sum(r["load"]["seqs"] for r in out["epochs"][0]["ranks"]) == 40 + 36
    line = one_line_error(capsys, "check", corpora_config, "--mix", "swb=2")
    assert "unknown corpus name(s) ['swb']" in line and "['libri', 'ted']" in line
    line = one_line_error(capsys, "check", corpora_config, "--mix", "ted=0")
    assert "--mix" in line and "rates > 0" in line


def test_check_and_stats_of_an_indexed_mix(capsys, corpora_config):
    """``--planning indexed`` (here with buckets:3, which takes a mix only there): the check
    verifies per-corpus exactly-once per (corpus, bucket) stream, and after whole corpus epochs the
    uses are the global mix's; stats lists what each epoch takes."""
    flags = ("--planning", "indexed", "--ordering", "buckets:3")
    out = run_json(capsys, "check", corpora_config, *flags, "--world-size", 3, "--epochs", 4)
    assert out["ok"]
    c1 = next(f for f in out["findings"] if f["contract"] == "C1 exactly-once")
    assert "libri: 80 uses = stream 0..80 of 40 seqs (corpus epochs 1..2 complete" in c1["message"]
    assert "ted: 96 uses = stream 0..96 of 12 seqs (corpus epochs 1..8 complete" in c1["message"]
    stats = run_json(capsys, "stats", corpora_config, *flags)
    libri = stats["corpora"]["libri"]
    assert sum(libri["slots_per_epoch"][:2]) == 40 and stats["corpora"]["ted"]["rate"] == 2.0


def test_check_of_a_mix_under_random_seed_offset_is_per_rank(capsys, corpora_config):
    """Every rank passes over the mix in its own order: per rank, every sequence once per corpus
    epoch (one rank's uses, not all ranks' together)."""
    flags = ("--planning", "indexed", "--distribution", "random_seed_offset")
    out = run_json(capsys, "check", corpora_config, *flags, "--world-size", 2, "--epochs", 2)
    assert out["ok"], out["findings"]
    c1 = next(f for f in out["findings"] if f["contract"] == "C1 exactly-once")
    assert "each of the 2 ranks passes over all the data in its own order" in c1["message"]
    assert "ted: 48 uses = stream 0..48 of 12 seqs" in c1["message"]
