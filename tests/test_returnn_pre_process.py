"""A length-changing ``pre_process`` (the speed perturbation of the published LibriSpeech setups)
is refused when the config is converted, naming the function, why and the native equivalent;
before, the config converted and the first lengthened sequence failed mid-epoch."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from seqloader.errors import OptionError
from seqloader.returnn import from_returnn_config

pytest.importorskip("returnn.config")
pytest.importorskip("sentencepiece")
librosa = pytest.importorskip("librosa")

CONFIGS = Path(__file__).parent / "returnn_configs"

# rwth-i6/i6_experiments users/*: 'speed_perturbation' as the torch setups pass it in
# audio={"pre_process": ...}; res_type "kaiser_fast" needs resampy, so the stand-in takes
# librosa's default resampler (the lengths are the same)
SPEED_PERT = """
def speed_perturbation(audio, sample_rate, random_state):
  import librosa
  new_sample_rate = int(sample_rate * (1 + random_state.randint(-1, 2) * 0.1))
  if new_sample_rate != sample_rate:
    audio = librosa.core.resample(audio, orig_sr=sample_rate, target_sr=new_sample_rate{res})
  return audio
train["audio"] = dict(train["audio"], pre_process=speed_perturbation)
"""


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Iterator[Path]:
    from returnn_configs.corpora import corpora_env

    with corpora_env(tmp_path_factory.mktemp("returnn_pre")) as folder:
        yield folder


def _config(tmp_path: Path, extra: str) -> Path:
    config = tmp_path / "speed.config"
    config.write_text((CONFIGS / "librispeech_data_prepare.config").read_text() + extra)
    return config


@pytest.mark.parametrize(
    "base", ["librispeech_data_prepare.config", "librispeech_corpus_2018.config"]
)
def test_speed_perturbation_is_refused_at_conversion(data: Path, tmp_path: Path, base: str) -> None:
    config = tmp_path / "speed.config"
    config.write_text((CONFIGS / base).read_text() + SPEED_PERT.format(res=""))
    kind = "OggZipDataset" if "prepare" in base else "LibriSpeechCorpus"
    with pytest.raises(
        OptionError,
        match=rf"train dataset \({kind}\): audio option pre_process speed_perturbation is a "
        r"speed perturbation \(factors 0\.9091, 1, 1\.111\).*batches after it.*Convert with "
        r"from_returnn_config\(\.\.\., native_speed_perturb=True\).*AudioSource\(\.\.\., "
        r"speed=seqloader\.transforms\.SpeedPerturb\(factors\)\)",
    ):
        from_returnn_config(config)


@pytest.mark.parametrize(
    "base", ["librispeech_data_prepare.config", "librispeech_corpus_2018.config"]
)
def test_speed_perturbation_converts_natively_when_asked(
    data: Path, tmp_path: Path, base: str
) -> None:
    """The opt-in: RETURNN's factors (its new_sample_rate of 0.9, 1.0, 1.1 times the rate is a
    speed of 1/1.1, 1, 1/0.9), drawn and planned by seqloader; the whole epoch's lengths are the
    planned ones (each read is checked against the plan in the worker)."""
    from fractions import Fraction

    from seqloader.plan.variants import variant_of
    from seqloader.sources.base import length_variants

    config = tmp_path / "speed.config"
    config.write_text((CONFIGS / base).read_text() + SPEED_PERT.format(res=""))
    loaders = from_returnn_config(config, native_speed_perturb=True)
    train = loaders["train"]
    try:
        labels, table = length_variants(train.source)
        speeds = [Fraction(label.split()[1]).limit_denominator(100) for label in labels]
        assert speeds == [Fraction(10, 11), Fraction(1), Fraction(10, 9)]
        seed = train.plan_options.seed
        seen = 0
        for batch in train.epoch(1):
            seqs = batch.seq_indices.numpy()
            v = variant_of(seed, 0, seqs, len(labels))
            assert (batch.lengths["data"].numpy() == table["data"][v, seqs]).all()
            seen += len(seqs)
        assert seen == train.global_plan(1).real_total()
    finally:
        for loader in loaders.values():
            loader.close()


def test_a_length_changing_pre_process_that_is_no_speed_perturbation_stays_refused(
    data: Path, tmp_path: Path
) -> None:
    config = _config(
        tmp_path,
        "\ndef _trim(audio, sample_rate, random_state):\n"
        "  return audio[: len(audio) - random_state.randint(0, 400)]\n"
        "train['audio'] = dict(train['audio'], pre_process=_trim)\n",
    )
    with pytest.raises(OptionError, match=r"pre_process _trim returns .*changes the waveform's"):
        from_returnn_config(config, native_speed_perturb=True)


def test_a_pre_process_that_fails_is_refused_at_conversion(data: Path, tmp_path: Path) -> None:
    """The published function verbatim asks for resampy (res_type 'kaiser_fast'): where that is
    not installed, RETURNN's training would fail at the first sequence too; the conversion says
    so up front."""
    try:
        import resampy  # noqa: F401

        pytest.skip("resampy is installed: the published function runs here")
    except ImportError:
        pass
    config = _config(tmp_path, SPEED_PERT.format(res=', res_type="kaiser_fast"'))
    with pytest.raises(
        OptionError,
        match=r"train dataset \(OggZipDataset\): audio option pre_process speed_perturbation "
        r"raised .*resampy.*it would fail the same way while training",
    ):
        from_returnn_config(config)


def test_a_length_keeping_pre_process_still_converts(data: Path, tmp_path: Path) -> None:
    config = _config(
        tmp_path,
        "\ndef _gain(audio, sample_rate, random_state):\n"
        "  return audio * random_state.uniform(0.5, 1.5)\n"
        "train['audio'] = dict(train['audio'], pre_process=_gain)\n",
    )
    loaders = from_returnn_config(config)
    assert loaders["train"].steps(1) > 0
    for loader in loaders.values():
        loader.close()


def test_a_speed_perturbation_over_a_range_of_factors_is_refused(
    data: Path, tmp_path: Path
) -> None:
    """A factor drawn from a range (``uniform``) is no set of factors to plan: converting it
    planned the factors the conversion's own calls happened to draw (30 distinct of 32 calls),
    not the function's distribution. Refused, naming why and the native equivalent. (A resampler
    matching ours to the sample shows it; librosa's, rounding the rate, is refused as
    length-changing already.)"""
    config = _config(
        tmp_path,
        "\ndef speed_range(audio, sample_rate, random_state):\n"
        "  from seqloader.audio.transforms import perturb\n"
        "  return perturb(audio.astype('float32'), random_state.uniform(0.88, 1.12))\n"
        "train['audio'] = dict(train['audio'], pre_process=speed_range)\n",
    )
    with pytest.raises(
        OptionError,
        match=r"pre_process speed_range draws its speed from a range .*distinct factors in 32 "
        r"calls.*SpeedPerturb\(factors\)",
    ):
        from_returnn_config(config, native_speed_perturb=True)
