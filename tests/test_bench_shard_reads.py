"""``benchmarks/shards.py --reads`` on a tiny corpus: every peer's reader (Lhotse Shar, WebDataset,
the NeMo tarred re-implementation) and ``ShardSource`` read the same utterances, samples and sample
sums at 0 and 2 workers, and a ratio is reported for each (no timing assertions)."""

from __future__ import annotations

import argparse
import tempfile

import pytest

pytest.importorskip("lhotse")
pytest.importorskip("webdataset")


def test_reads_same_audio_every_peer(tmp_path, monkeypatch):
    from benchmarks import shards

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    args = argparse.Namespace(utterances=60, repeats=1, epochs=1)
    result = shards.reads_main(args)  # raises unless every pass read seqloader's audio
    for who in ("lhotse", "webdataset", "nemo"):
        for workers in (0, 2):
            assert result["ratios"][f"seqloader_over_{who}_{workers}w"] > 0
            assert result["ratios"][f"cpu_seqloader_over_{who}_{workers}w"] > 0  # CPU counted
            count, samples, total = result["per_epoch_utterances_samples_sum"][
                f"seqloader_on_{who}_{workers}w"
            ]
            assert count == 60 and samples > 60 * 16000 and total != 0
    assert result["decoders"]["seqloader"].startswith("miniaudio")  # the dev extra has it
