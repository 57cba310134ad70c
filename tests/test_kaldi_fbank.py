"""``KaldiFbank`` against Lhotse's own ``Fbank`` (its torch implementation of Kaldi's
filterbank, which ports ``torchaudio.compliance.kaldi.fbank``): the same frame count for every
length, frames within 1e-4 (bins with log energy below -10, where float32 rounding in either
implementation decides the digits: their energy within 1e-4 * e^-10, the error 1e-4 allows at
-10), for Lhotse's defaults and torchaudio's."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

import seqloader as sl
from seqloader.audio.kaldi_fbank import numpy_kaldi_fbank, use_kernel
from seqloader.audio.torch_kernels import kaldi_filterbank
from seqloader.errors import OptionError
from seqloader.synthetic.audio import speech_like

KERNELS = {"torch": kaldi_filterbank, "numpy": numpy_kaldi_fbank}


@contextmanager
def computed_by(kernel: str) -> Iterator[None]:
    """Frames computed by ``kernel``."""
    installed = use_kernel(KERNELS[kernel])
    try:
        yield
    finally:
        use_kernel(installed)


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


def assert_close_to_lhotse(got: np.ndarray, want: np.ndarray) -> None:
    """Within 1e-4 in log energy where it is above -10; below, the energies themselves within
    1e-4 * e^-10 (a relative bound there would test float32 rounding of near-silent bins: seen
    5.2e-4 at -15.4)."""
    diff = np.abs(got - want)
    loud = want > -10
    assert diff[loud].max(initial=0) < 1e-4
    quiet = np.abs(np.exp(got[~loud].astype(np.float64)) - np.exp(want[~loud].astype(np.float64)))
    assert quiet.max(initial=0) < 1e-4 * np.exp(-10.0)


@settings(max_examples=20, deadline=None)
@given(
    seconds=st.floats(0.03, 2.0),
    config=st.sampled_from(sorted(CONFIGS)),
    seed=st.integers(0, 1000),
    kernel=st.sampled_from(sorted(KERNELS)),
)
def test_matches_lhotse_fbank(seconds, config, seed, kernel) -> None:
    """Both kernels: torch's (the default where torch is installed) and the audio layer's numpy
    one."""
    options = sl.KaldiFbank(**CONFIGS[config])
    x = speech_like(seconds, options.sample_rate, np.random.default_rng(seed))
    want = reference(x, options)
    with computed_by(kernel):
        got = options(x)
    assert got.shape == want.shape == (options.num_frames(len(x)), options.n_mels)
    assert got.dtype == np.float32
    assert_close_to_lhotse(got, want)


@settings(max_examples=10, deadline=None)
@given(
    samples=st.lists(st.integers(0, 40_000), min_size=0, max_size=12),
    config=st.sampled_from(sorted(CONFIGS)),
    kernel=st.sampled_from(sorted(KERNELS)),
)
@example(samples=[0, 0, 706, 15960] + [0] * 8, config="lhotse defaults", kernel="torch")
def test_a_batch_equals_its_waveforms_one_by_one(samples, config, kernel) -> None:
    """``many`` cuts every waveform's frames into one array and runs the kernel once: the frames
    of each waveform are those it gets alone (lengths from empty to below one window to 2.5 s),
    and equal Lhotse's ``Fbank`` (from one window up)."""
    options = sl.KaldiFbank(**CONFIGS[config])
    rng = np.random.default_rng(len(samples))
    waves = [speech_like(n / options.sample_rate, options.sample_rate, rng)[:n] for n in samples]
    with computed_by(kernel):
        batch = options.many(waves)
        alone = [options(w) for w in waves]
    assert len(batch) == len(waves)
    for w, got, one in zip(waves, batch, alone):
        assert got.shape == one.shape == (options.num_frames(len(w)), options.n_mels)
        np.testing.assert_allclose(got, one, atol=1e-5, rtol=0)
        if len(w) >= options.win:  # Lhotse fails on shorter ones
            assert_close_to_lhotse(got, reference(w, options))


def test_frames_do_not_depend_on_torchs_threads() -> None:
    """``import seqloader`` computes frames with torch; a trainer (several torch threads, reading
    with ``num_workers=0``) and a DataLoader worker (one) get the same bytes (C3), and the
    trainer's thread count is left as it was."""
    from seqloader.audio.kaldi_fbank import default_kernel

    assert default_kernel() is kaldi_filterbank
    options = sl.KaldiFbank()
    rng = np.random.default_rng(0)
    waves = [speech_like(s, 16000, rng) for s in rng.uniform(0.1, 4.0, 12)]
    threads = torch.get_num_threads()
    got = {}
    try:
        for n in (1, 2, 3):
            torch.set_num_threads(n)
            got[n] = np.concatenate(options.many(waves))
            assert torch.get_num_threads() == n
    finally:
        torch.set_num_threads(threads)
    assert len(got[1]) > 1500  # several kernel blocks
    np.testing.assert_array_equal(got[1], got[2])
    np.testing.assert_array_equal(got[1], got[3])


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
    """The fast path (each waveform's reflected span copied once into one buffer, every frame a
    row of one strided view) gives the frames of Kaldi's per-sample reflection rule, for every
    length, also below one window, and several waveforms in one buffer keep their own frames."""
    from seqloader.audio.kaldi_fbank import frame_view, kaldi_signal

    options = sl.KaldiFbank(snip_edges=snip_edges)
    rng = np.random.default_rng(0)
    lengths = [*range(1, 700, 7), 16000, 16079, 35001]
    xs = [rng.standard_normal(n).astype(np.float32) for n in lengths]
    counts = np.asarray(options.num_frames(np.array(lengths)), np.int64)
    signal, rows = kaldi_signal(options, xs, counts)
    frames = frame_view(options, signal)
    assert np.isfinite(frames).all()  # the rows between spans read no stale memory
    for x, r, m in zip(xs, rows.tolist(), counts.tolist()):
        np.testing.assert_array_equal(frames[r : r + m], x[options.frame_indices(len(x))])
