"""Per-sequence transforms: what each one does to the data, worker independence (bytes equal for
0/1/2 workers), change between epochs, and planning bounds for speed perturbation."""

from __future__ import annotations

import math
import pickle
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import seqloader as sl
from conftest import BatchRecord, batch_record
from seqloader.audio.resample import speed_length
from seqloader.synthetic.audio import write_audio_corpus
from seqloader.transforms import AddNoise, Features, SpecAugment, SpeedPerturb, compose

pytest.importorskip("soundfile")

LM = sl.LogMel(sample_rate=16000, n_mels=40)
SPEED = SpeedPerturb((0.8, 0.9, 1.0, 1.1))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return write_audio_corpus(
        tmp_path_factory.mktemp("audio"),
        20,
        formats=("flac", "wav"),
        sample_rates=(16000, 8000),
        seconds=(0.2, 1.2),
        seed=3,
    )


def augmenting_source(corpus) -> sl.AudioSource:
    return sl.AudioSource(corpus.oggzip, features=LM, defer_features=True, min_speed=0.8)


PIPELINE = compose(SPEED, AddNoise((5.0, 20.0), p=0.7), Features(LM), SpecAugment(max_time_width=8))


def run_epochs(source, epochs, **options) -> list[list[BatchRecord]]:
    with sl.SeqLoader(source, transform=PIPELINE, **options) as loader:
        return [[batch_record(b) for b in loader.epoch(e)] for e in epochs]


def test_batches_are_identical_for_0_1_2_workers(corpus):
    src = augmenting_source(corpus)
    options = {"ordering": "random", "max_frames": 400, "seed": 11}
    reference = run_epochs(src, (1, 2), num_workers=0, **options)
    assert sum(len(r.seqs) for r in reference[0]) == len(src)
    assert run_epochs(src, (1, 2), num_workers=1, **options) == reference
    assert run_epochs(src, (1, 2), num_workers=2, prefetch_factor=1, **options) == reference


def test_each_sequence_is_augmented_anew_each_epoch_and_the_same_on_a_rerun(corpus):
    src = augmenting_source(corpus)
    options = {"ordering": "default", "max_seqs": 1, "seed": 11, "num_workers": 0}
    epoch1, epoch2 = run_epochs(src, (1, 2), **options)
    assert [r.seqs for r in epoch1] == [r.seqs for r in epoch2]  # same sequence per step
    assert all(
        a.tensor_bytes("data") != b.tensor_bytes("data")
        for a, b in zip(epoch1, epoch2, strict=True)
    )
    assert run_epochs(src, (2,), **options) == [epoch2]


@settings(max_examples=8, deadline=None)
@given(max_frames=st.integers(160, 900), seed=st.integers(0, 10_000))
def test_speed_perturbed_batches_never_exceed_max_frames(corpus, max_frames, seed):
    src = augmenting_source(corpus)
    planned = src.lengths("data")
    with sl.SeqLoader(
        src, transform=PIPELINE, ordering="random", max_frames=max_frames, seed=seed
    ) as loader:
        for batch in loader.epoch(1):
            real = batch.lengths["data"].numpy()
            assert batch["data"].shape[0] * batch["data"].shape[1] <= max_frames
            assert (real <= planned[batch.seq_indices.numpy()]).all()


def test_without_the_bound_speed_perturbation_would_overflow(corpus):
    """The bound is needed: at factor 0.8 real lengths exceed the unperturbed plan."""
    plain = sl.AudioSource(corpus.oggzip, features=LM, defer_features=True)
    bounded = augmenting_source(corpus)
    slow = compose(SpeedPerturb((0.8,)), Features(LM))
    rng = np.random.default_rng(0)
    for i in range(len(plain)):
        frames = len(slow(plain.read(i), rng)["data"])
        assert frames <= bounded.lengths("data")[i]
        if plain.lengths("data")[i] > 20:
            assert frames > plain.lengths("data")[i]


def test_speed_perturbation_scales_time_and_pitch():
    sr, f = 16000, 500.0
    tone = np.sin(2 * np.pi * f * np.arange(sr) / sr).astype(np.float32)
    for factor in (0.9, 1.1):
        out = SpeedPerturb((factor,))({"audio": tone}, np.random.default_rng(0))["audio"]
        assert len(out) == speed_length(sr, factor) == math.ceil(sr / Fraction(str(factor)))
        peak_hz = np.argmax(np.abs(np.fft.rfft(out))) * sr / len(out)
        assert abs(peak_hz - f * factor) < 3


def test_spec_augment_masks_within_bounds_and_leaves_the_input_alone():
    x = np.arange(100 * 40, dtype=np.float32).reshape(100, 40) + 1.0  # no zeros: masks show
    before = x.copy()
    aug = SpecAugment(time_masks=2, max_time_width=10, freq_masks=2, max_freq_width=5, fill=0.0)
    masked_any = 0
    for seed in range(30):
        y = aug({"data": x}, np.random.default_rng(seed))["data"]
        masked = y == 0
        rows, cols = masked.all(axis=1), masked.all(axis=0)
        # the masked area is exactly some whole frames and some whole channels ...
        np.testing.assert_array_equal(masked, rows[:, None] | cols[None, :])
        # ... at most 2 spans of <= 10 frames and 2 bands of <= 5 channels
        assert rows.sum() <= 20 and cols.sum() <= 10
        np.testing.assert_array_equal(y[~masked], x[~masked])
        masked_any += int(masked.any())
    assert masked_any > 20
    np.testing.assert_array_equal(x, before)


def test_add_noise_hits_the_drawn_snr():
    x = np.sin(np.arange(32000) * 0.05).astype(np.float32)
    for seed in range(10):
        y = AddNoise((10.0, 20.0))({"audio": x}, np.random.default_rng(seed))["audio"]
        noise = y.astype(np.float64) - x
        snr = 10 * np.log10(np.mean(x.astype(np.float64) ** 2) / np.mean(noise**2))
        assert 9.5 < snr < 20.5


def test_compose_gives_each_step_its_own_stream():
    """Reconfiguring one step does not change what another step draws."""
    data = {"data": np.ones((50, 20), np.float32), "audio": np.ones(1000, np.float32)}
    few = compose(SpecAugment(time_masks=1), AddNoise())(data, np.random.default_rng(1))
    many = compose(SpecAugment(time_masks=5), AddNoise())(data, np.random.default_rng(1))
    np.testing.assert_array_equal(few["audio"], many["audio"])
    assert not np.array_equal(few["audio"], data["audio"])


def test_transforms_pickle_and_validate():
    assert pickle.loads(pickle.dumps(PIPELINE)) == PIPELINE
    assert SPEED.min_factor == 0.8
    with pytest.raises(sl.OptionError, match="speed factor"):
        SpeedPerturb((0.0,))
    with pytest.raises(sl.OptionError, match="snr_db"):
        AddNoise((30.0, 10.0))
    with pytest.raises(sl.OptionError, match="no key 'audio'"):
        SPEED({"data": np.zeros((3, 2), np.float32)}, np.random.default_rng(0))


def test_deferred_features_without_a_transform_is_refused_at_construction(corpus):
    with pytest.raises(
        sl.OptionError, match=r"defer_features=True.*no transform is given.*Features"
    ):
        sl.SeqLoader(augmenting_source(corpus), max_seqs=4)


@pytest.mark.parametrize("num_workers", [0, 1])
def test_transform_dropping_a_planned_key_names_the_sequence(corpus, num_workers):
    """A transform that never computes 'data' (here: speed perturbation only) fails on the first
    batch with an error naming the sequence and the fix, raised in the trainer."""
    with (
        sl.SeqLoader(
            augmenting_source(corpus), transform=SPEED, max_seqs=4, num_workers=num_workers
        ) as loader,
        pytest.raises(
            sl.DataError,
            match=r"sequence \d+ \(tag '.+'\) has no key\(s\) \['data'\] after the transform.*Features",
        ),
    ):
        next(iter(loader.epoch(1)))
