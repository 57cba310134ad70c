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
        match=rf"train dataset \({kind}\): audio option pre_process speed_perturbation returns "
        r"1[4-7]\d\d\d samples for 16000 .*changes the waveform's length.*RETURNN batches after "
        r"pre_process.*AudioSource\(\.\.\., min_speed=.*SpeedPerturb",
    ):
        from_returnn_config(config)


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
