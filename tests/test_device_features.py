"""``DeviceFeatures`` (features after collation, on the batch's device) equals the CPU path the
workers run: ``KaldiFbank.many`` and ``LogMel`` per utterance, within ``TOLERANCE``, on the CPU
device, for random batches of lengths (shorter than a window too) and options; frames past an
utterance's end are zero."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import seqloader as sl
from seqloader.audio.device_features import TOLERANCE, DeviceFeatures
from seqloader.errors import OptionError

OPTIONS = [
    sl.KaldiFbank(),
    sl.KaldiFbank(n_mels=40, snip_edges=True),
    sl.KaldiFbank(n_mels=23, preemph_coeff=0.0, remove_dc_offset=False, high_freq=0.0),
    sl.KaldiFbank(sample_rate=8000, frame_length_s=0.032, round_to_power_of_two=False),
    sl.LogMel(),
    sl.LogMel(n_mels=40, n_fft=512),
]


def _padded(waves: list[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor]:
    audio = np.zeros((len(waves), max([len(w) for w in waves] + [1])), np.float32)
    for i, w in enumerate(waves):
        audio[i, : len(w)] = w
    return torch.from_numpy(audio), torch.tensor([len(w) for w in waves])


@settings(max_examples=40, deadline=None)
@given(
    options=st.sampled_from(OPTIONS),
    lengths=st.lists(st.integers(0, 12000), min_size=1, max_size=5),
    seed=st.integers(0, 2**31 - 1),
)
def test_equal_to_the_cpu_path(options, lengths: list[int], seed: int) -> None:
    rng = np.random.default_rng(seed)
    waves = [(rng.standard_normal(n) * 0.1).astype(np.float32) for n in lengths]
    if isinstance(options, sl.KaldiFbank):
        expected = options.many(waves)
    else:
        expected = [options(w) for w in waves]
    feats, frames = DeviceFeatures(options)(*_padded(waves))
    assert frames.tolist() == [len(e) for e in expected]
    assert feats.dtype == torch.float32
    for i, e in enumerate(expected):
        got = feats[i, : len(e)].numpy()
        assert got.shape == e.shape
        np.testing.assert_allclose(got, e, rtol=0, atol=TOLERANCE)
        assert not feats[i, len(e) :].any()  # zero past the utterance's frames


def test_batch_read_from_a_source_then_featured(tmp_path) -> None:
    from seqloader.synthetic.audio import write_audio_corpus

    corpus = write_audio_corpus(tmp_path, 6, seconds=(0.3, 1.2), seed=3)
    fbank = sl.KaldiFbank()
    on_cpu = sl.AudioSource(corpus.jsonl, keys=["data"], features=fbank)
    raw = sl.AudioSource(corpus.jsonl, keys=["audio"])
    with sl.SeqLoader(raw, max_seqs=3, ordering="sorted") as loader:
        for batch in loader.epoch(1):
            feats, frames = DeviceFeatures(fbank)(batch["audio"], batch.lengths["audio"])
            for row, i in enumerate(batch.seq_indices.tolist()):
                e = on_cpu.read(i)["data"]
                assert int(frames[row]) == len(e)
                np.testing.assert_allclose(feats[row, : len(e)].numpy(), e, atol=TOLERANCE)


def test_bad_input_is_refused() -> None:
    with pytest.raises(OptionError, match=r"expected seqloader\.KaldiFbank"):
        DeviceFeatures("fbank")  # type: ignore[arg-type]
    with pytest.raises(OptionError, match=r"expected \[B, T\] and \[B\]"):
        DeviceFeatures(sl.KaldiFbank())(torch.zeros(3), torch.tensor([3]))
