"""RETURNN's ``LibriSpeechCorpus`` from a config (``librispeech_corpus_2018.config``) over
LibriSpeech as distributed: its epoch-wise curriculum as RETURNN's, and refusals naming the key,
the dataset and the fix. Tags, batches and values (features within 1e-4, BPE ids) against
RETURNN's own pipeline, zipped and extracted, 0 and 2 workers, are in
``test_returnn_public_configs.py``."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from seqloader.errors import OptionError
from seqloader.returnn import from_returnn_config
from test_returnn_public_configs import CONFIGS, data, ours, reference  # noqa: F401 (fixture)

pytest.importorskip("librosa")
pytestmark = pytest.mark.usefixtures("data")  # the stand-in corpora the config reads
CONFIG = CONFIGS / "librispeech_corpus_2018.config"


def _changed(tmp_path: Path, *lines: str) -> Path:
    config = tmp_path / "changed.config"
    config.write_text(CONFIG.read_text() + "\n" + "\n".join(lines) + "\n")
    return config


def _filtered_as_returnn(
    config: Path, num_workers: int, tmp_path: Path, epochs: tuple[int, ...], filtered: int
) -> dict:
    """Our batches of ``epochs``, checked to be RETURNN's; the filter dropped some in epoch
    ``filtered`` and none in the last epoch (after its ranges)."""
    expected, _ = reference(str(config), "train", epochs)
    got, _ = ours(config, num_workers, "train", epochs, tmp_path / "ours")
    assert got == expected
    whole, _ = reference(str(CONFIG), "train", epochs)
    assert sum(map(len, got[filtered])) < sum(map(len, whole[filtered]))
    assert got[epochs[-1]] == whole[epochs[-1]]
    return got


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("level", [1, 2])
def test_epoch_wise_filter_as_returnn(tmp_path: Path, num_workers: int, level: int) -> None:
    """The published curriculum (use_new_filter, max_mean_len over the transcription length in
    characters, per epoch range; level 2 adds its subdirs, train-clean-100/360 only), bounds
    scaled to the stand-in: RETURNN's batches in the filtered epochs and after them."""
    config = _changed(tmp_path)
    config.write_text(
        config.read_text().replace('os.environ.get("LIBRISPEECH_FILTER", "0")', str(level))
    )
    got = _filtered_as_returnn(config, num_workers, tmp_path, (1, 2, 3, 5), 1)
    if level == 2:  # the subdirs: train-clean-100 only in epochs 1-4
        assert all(t.startswith("train-clean-100") for b in got[1] + got[3] for t in b)
        assert any(t.startswith("train-other-500") for b in got[5] for t in b)
        loader = from_returnn_config(config)["train"]
        reasons = list(loader.planner.filtered(1))
        assert any("subdirs=['train-clean-100', 'train-clean-360'] (epoch 1)" in r for r in reasons)
        loader.close()


# the 2018 LibriSpeech setups' curriculum: the old filter (no use_new_filter), which re-sorts
# each filtered sub-epoch by transcription length; with subdirs, overlapping ranges, a later
# range with the new filter, partition_epoch
OLD_FILTERS = {
    "old": "{(1, 2): {'max_mean_len': 15}, (3, 4): {'max_mean_len': 25}}",
    "old_subdirs": "{(1, 4): {'max_mean_len': 20, 'subdirs': ['train-clean-100']}}",
    "overlapping": "{(1, 3): {'subdirs': ['train-clean-100', 'train-other-500']}, "
    "(2, 4): {'max_mean_len': 18}, (1, 2): {'use_new_filter': True, 'max_mean_len': 30}}",
}


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("case", sorted(OLD_FILTERS))
def test_old_epoch_wise_filter_as_returnn(tmp_path: Path, num_workers: int, case: str) -> None:
    """LibriSpeechCorpus' old filter (without use_new_filter): RETURNN's batches in the filtered
    sub-epochs (re-sorted by transcription length) and after them; what it leaves out counted
    per epoch in the report."""
    config = _changed(tmp_path, f"train['epoch_wise_filter'] = {OLD_FILTERS[case]}")
    got = _filtered_as_returnn(config, num_workers, tmp_path, (1, 2, 3, 4, 5), 2)
    loader = from_returnn_config(config)["train"]
    delivered = sum(len(b) for b in got[2])
    left_out = sum(c for r, c in loader.planner.filtered(2).items() if "epoch 2" in r)
    order = loader.planner.sub_epoch_order(2)
    assert left_out > 0 and len(order) == delivered
    loader.close()


@pytest.mark.parametrize(
    "lines,message",
    [
        (
            [
                "train['epoch_wise_filter'] = {(1, 3): {'subdirs': ['train-clean-100']}, "
                "(3, 4): {'use_new_filter': True, 'max_mean_len': 20}}"
            ],
            r"train dataset \(LibriSpeechCorpus\): epoch_wise_filter ranges .* overlap, with "
            r"subdirs.*give ranges that do not overlap",
        ),
        (
            ["train['epoch_wise_filter'] = {(1, 2): {'subdirs': ['train-clean-360']}}"],
            r"train dataset \(LibriSpeechCorpus\): epoch_wise_filter\[\(1, 2\)\] subdirs "
            r"\['train-clean-360'\] keep no sequence.*name parts of this prefix",
        ),
        (
            ["train['epoch_wise_filter'] = {(1, 2): {'max_mean_len': 20, 'max_len': 5}}"],
            r"train dataset \(LibriSpeechCorpus\): epoch_wise_filter\[\(1, 2\)\] \['max_len'\]: "
            r"not supported with the old filter",
        ),
        (
            ["train['prefix'] = 'valid'"],
            r"train dataset \(LibriSpeechCorpus\): prefix 'valid'; RETURNN accepts 'train",
        ),
        (
            ["train['prefix'] = 'test'"],
            r"train dataset \(LibriSpeechCorpus\): no PREFIX\*\.zip files for prefix 'test'.*"
            r"LibriSpeech's own layout",
        ),
        (
            ["del train['audio']", "del train['bpe']"],
            r"train dataset \(LibriSpeechCorpus\): neither audio nor targets: .*set audio",
        ),
        (
            ["train['targets'] = 'chars'"],
            r"train dataset \(LibriSpeechCorpus\): targets 'chars' needs chars=",
        ),
        (
            ["train['audio'] = dict(train['audio'], random_permute=True)"],
            r"train dataset \(LibriSpeechCorpus\): .*random_permute",
        ),
        (
            ["train['orth_post_process'] = 'no_such_function'"],
            r"train dataset \(LibriSpeechCorpus\): orth_post_process 'no_such_function': "
            r"RETURNN cannot use it",
        ),
        (
            ["train['window'] = 3"],
            r"train dataset \(LibriSpeechCorpus\): option .window. is not supported: .*do it in a "
            r"transform",
        ),
    ],
)
def test_options_refused_name_the_key_the_dataset_and_the_fix(
    tmp_path: Path, lines: list[str], message: str
) -> None:
    with warnings.catch_warnings(), pytest.raises(OptionError, match=message):
        warnings.simplefilter("ignore")
        from_returnn_config(_changed(tmp_path, *lines))


def test_extracted_and_zipped_layouts_give_the_same_corpus(tmp_path: Path) -> None:
    """The train parts read from the extracted folders (flac) and from the zips (ogg): the same
    tags in the same order, transcription lengths (RETURNN's sort key) and ids."""
    tree = _changed(
        tmp_path, "train['path'] = '%s/LibriSpeech' % _data", "train['use_zip'] = False",
        "train['use_ogg'] = False",
    )  # fmt: skip
    zipped = from_returnn_config(CONFIG)["train"]
    extracted = from_returnn_config(tree)["train"]
    assert list(zipped.source.tags) == list(extracted.source.tags)
    assert list(zipped.source.tags)[:2] == [
        "train-clean-100-19-198-0000",
        "train-clean-100-19-198-0006",
    ]
    assert (zipped.source.order_lengths() == extracted.source.order_lengths()).all()
    assert (zipped.source.lengths("classes") == extracted.source.lengths("classes")).all()
    for loader in (zipped, extracted):
        loader.close()


@pytest.mark.parametrize("subset", [5, 0.5])
def test_fixed_random_subset_as_returnn(tmp_path: Path, subset: float) -> None:
    """A dev subset smaller than the corpus (a count, and a fraction): RETURNN's fixed seed-42
    shuffle keeps the same utterances, in RETURNN's batches."""
    config = _changed(tmp_path, f"dev = get_dataset('dev', subset={subset!r})")
    expected, _ = reference(str(config), "dev", (1, 2))
    got, _ = ours(config, 0, "dev", (1, 2), tmp_path / "ours")
    assert got == expected
    assert sum(map(len, got[1])) == (5 if subset == 5 else 4)
