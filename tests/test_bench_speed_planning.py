"""``benchmarks/speed_planning.py`` on a small corpus: every method uses every utterance once per
epoch (checked inside), and both seqloader plans keep every batch within its budget after
perturbation (no figures asserted)."""

from __future__ import annotations

import os
import sys

import pytest

pytest.importorskip("lhotse")  # in the dev and bench extras
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import speed_planning


def test_methods_measure_every_utterance_and_seqloader_stays_within_budget(tmp_path) -> None:
    result = speed_planning.measure(reps=1, n=300)
    rows = result["rows"]
    assert len(rows) == 3
    for name, row in rows.items():
        assert row["batches"] >= 1 and row["padding"] >= 0
        if name.startswith("seqloader"):
            assert row["max_batch_over_budget"] <= 1.0
            assert row["batches_over_budget"] == 0
    assert "| method |" in speed_planning.table(result)


def test_planned_lengths_are_the_ones_the_source_reads() -> None:
    """The benchmark's frames per factor are AudioSource's own planning formula."""
    import numpy as np

    from seqloader.audio.keys import AudioOptions, variant_lengths
    from seqloader.transforms import SpeedPerturb

    samples = speed_planning.utterance_samples(50)
    options = AudioOptions(
        features=speed_planning.FEATURES, speed=SpeedPerturb(speed_planning.FACTORS)
    )
    assert np.array_equal(
        speed_planning.factor_frames(samples), variant_lengths("data", samples, options)
    )
