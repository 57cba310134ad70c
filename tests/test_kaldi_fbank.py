"""``KaldiFbank`` against Lhotse's own ``Fbank`` (its torch implementation of Kaldi's
filterbank, which ports ``torchaudio.compliance.kaldi.fbank``): the same frame count for every
length, frames within 1e-4 (bins with log energy below -10, where float32 rounding in either
implementation decides the digits, within 5e-4), for Lhotse's defaults and torchaudio's."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import seqloader as sl
from seqloader.errors import OptionError
from seqloader.synthetic.audio import speech_like

lhotse = pytest.importorskip("lhotse")

CONFIGS = {
    "lhotse defaults": {},
    "torchaudio defaults": {"snip_edges": True, "high_freq": 0.0, "n_mels": 23},
    "40 mels, 8 kHz": {"n_mels": 40, "sample_rate": 8000},
}


def reference(x: np.ndarray, options: sl.KaldiFbank) -> np.ndarray:
    config = lhotse.FbankConfig(
        sampling_rate=options.sample_rate,
        num_filters=options.n_mels,
        high_freq=options.high_freq,
        low_freq=options.low_freq,
        snip_edges=options.snip_edges,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # Lhotse warns about snip_edges=True
        return lhotse.Fbank(config).extract(x, options.sample_rate)


@settings(max_examples=20, deadline=None)
@given(
    seconds=st.floats(0.03, 2.0),
    config=st.sampled_from(sorted(CONFIGS)),
    seed=st.integers(0, 1000),
)
def test_matches_lhotse_fbank(seconds, config, seed) -> None:
    options = sl.KaldiFbank(**CONFIGS[config])
    x = speech_like(seconds, options.sample_rate, np.random.default_rng(seed))
    want = reference(x, options)
    got = options(x)
    assert got.shape == want.shape == (options.num_frames(len(x)), options.n_mels)
    assert got.dtype == np.float32
    diff = np.abs(got - want)
    assert diff[want > -10].max(initial=0) < 1e-4
    assert diff.max(initial=0) < 5e-4


def test_frame_counts_are_a_formula_of_the_length() -> None:
    for options in (sl.KaldiFbank(), sl.KaldiFbank(snip_edges=True)):
        lengths = np.arange(0, 2000, 37)
        assert [options(np.zeros(n, np.float32)).shape[0] for n in lengths] == list(
            options.num_frames(lengths)
        )


def test_bad_options() -> None:
    with pytest.raises(OptionError, match=r"low_freq=20\.0, high_freq=-8000"):
        sl.KaldiFbank(high_freq=-8000)
    with pytest.raises(OptionError, match="n_mels"):
        sl.KaldiFbank(n_mels=2)
    with pytest.raises(OptionError, match="expected 1-D"):
        sl.KaldiFbank()(np.zeros((2, 400), np.float32))


@pytest.mark.parametrize("snip_edges", [False, True])
def test_strided_frames_follow_kaldis_reflection_rule(snip_edges) -> None:
    """The fast path (one reflected copy, a strided view) gives the frames of Kaldi's per-sample
    reflection rule, for every length, also below one window."""
    from seqloader.audio.kaldi_fbank import _frames

    options = sl.KaldiFbank(snip_edges=snip_edges)
    rng = np.random.default_rng(0)
    for n in [*range(1, 700, 7), 16000, 16079, 35001]:
        if options.num_frames(n) == 0:
            continue
        x = rng.standard_normal(n).astype(np.float32)
        np.testing.assert_array_equal(_frames(x, options), x[options.frame_indices(n)])
