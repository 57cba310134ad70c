"""Forms RETURNN tolerates in a config, converted to RETURNN's own batches: ``max_seq_length``
naming a key the data lacks (ignored, as RETURNN's ``LenFilterDataPipe`` does), paths given as
objects (RETURNN's ``CachedFile``, sisyphus-style ``get_path()`` objects, ``os.PathLike``) and
``batch_size`` as a dict over several keys (each key bounded, as RETURNN's ``NumbersDict``). The
reference is RETURNN's own pipeline over the stand-in corpora of ``tests/returnn_configs``."""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from seqloader.errors import OptionError
from seqloader.returnn import from_returnn_config

pytest.importorskip("returnn.torch.data.pipeline")
pytest.importorskip("sentencepiece")
from test_returnn_public_configs import CONFIGS, ours, reference


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Iterator[Path]:
    from returnn_configs.corpora import corpora_env

    with corpora_env(tmp_path_factory.mktemp("returnn_forms")) as folder:
        yield folder


WMT = (CONFIGS / "wmt_translation.config").read_text()
EPOCHS = (1, 2, 5)


def _same_as_returnn(tmp_path: Path, text: str, num_workers: int = 0, name: str = "train"):
    config = tmp_path / f"form{zlib.crc32(text.encode())}.config"  # reference() caches by path
    config.write_text(text)
    expected_batches, expected_values = reference(str(config), name, EPOCHS)
    got_batches, got_values = ours(config, num_workers, name, EPOCHS, tmp_path / config.stem)
    assert got_batches == expected_batches
    assert set(got_values) == set(expected_values)
    for tag, ref in expected_values.items():
        for key, value in ref.items():
            assert (got_values[tag][key] == value).all(), (tag, key)
    return got_batches, config


def _close(loaders) -> None:
    for loader in loaders.values():
        loader.close()


@pytest.mark.parametrize("num_workers", [0, 2])
def test_max_seq_length_naming_a_missing_key_is_ignored_as_returnn(
    data: Path, tmp_path: Path, num_workers: int
) -> None:
    text = WMT + "\nmax_seq_length = {'classes': 40, 'orth': 10}\n"
    got, config = _same_as_returnn(tmp_path, text, num_workers)
    with pytest.warns(UserWarning, match=r"max_seq_length names \['orth'\].*ignored, as RETURNN"):
        _close(from_returnn_config(config))
    whole, _ = reference(str(CONFIGS / "wmt_translation.config"), "train", EPOCHS)
    assert sum(map(len, got[1])) < sum(map(len, whole[1]))  # 'classes' 40 still filters


def test_max_seq_length_of_missing_keys_only_filters_nothing(data: Path, tmp_path: Path) -> None:
    text = WMT.replace("max_seq_length = 60", "max_seq_length = {'orth': 1}")
    _, config = _same_as_returnn(tmp_path, text)
    with pytest.warns(UserWarning, match=r"\['orth'\]"):
        loaders = from_returnn_config(config)
    assert loaders["train"].plan_options.max_seq_length is None
    _close(loaders)


CACHED = """
from returnn.util.file_cache import CachedFile
class _SisPath:  # a sisyphus tk.Path's interface: get_path() and str()
    def __init__(self, path):
        self.path = path
    def get_path(self):
        return self.path
    def __str__(self):
        return self.path
    def __fspath__(self):
        return self.path
file_cache_opts = {"cache_directory": os.path.join(_data, "file_cache")}
train["files"] = [CachedFile(os.path.abspath(train["files"][0]))]
dev["files"] = [_SisPath(os.path.abspath(dev["files"][0]))]
"""


@pytest.mark.parametrize("name", ["train", "dev"])
def test_paths_as_objects_are_their_paths(data: Path, tmp_path: Path, name: str) -> None:
    """RETURNN copies a CachedFile to its cache first (the same data) and reads a path object as
    its path; seqloader reads the original file (before: TypeError, 'CachedFile' object is not
    iterable)."""
    _same_as_returnn(tmp_path, WMT + CACHED, name=name)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_batch_size_over_two_keys_bounds_each_as_returnn(
    data: Path, tmp_path: Path, num_workers: int
) -> None:
    """Hybrid setups write batch_size as {'classes': C, 'data': D}: RETURNN bounds each key's
    padded length, so a batch ends when either would overflow."""
    text = WMT.replace("batch_size = 300", "batch_size = {'classes': 250, 'data': 120}")
    got, config = _same_as_returnn(tmp_path, text, num_workers)
    loader = from_returnn_config(config)["train"]
    assert loader.plan_options.max_frames == {"classes": 250, "data": 120}
    loader.close()
    one_key, _ = _same_as_returnn(
        tmp_path, WMT.replace("batch_size = 300", "batch_size = {'classes': 250}")
    )
    assert got != one_key  # the 'data' bound cut batches too


def test_batch_size_naming_a_missing_key_is_refused(data: Path) -> None:
    hdf = str(data / "wmt" / "train.hdf")
    with pytest.raises(
        OptionError, match=r"train dataset \(HDFDataset\): batch_size keys \['orth'\] are not"
    ):
        from_returnn_config(
            {"train": {"class": "HDFDataset", "files": [hdf]}, "batch_size": {"orth": 5, "data": 9}}
        )


def test_a_planning_error_without_a_returnn_option_reads_plainly(data: Path) -> None:
    """Formerly "RETURNN's its options: ..."; now the planner's words after the dataset."""
    hdf = str(data / "wmt" / "train.hdf")
    with pytest.raises(OptionError) as e:
        from_returnn_config(
            {
                "train": {"class": "HDFDataset", "files": [hdf], "seq_ordering": "nonsense"},
                "batch_size": 300,
            }
        )
    message = str(e.value)
    assert message.startswith("train dataset (HDFDataset): ") and "its options" not in message


@pytest.mark.parametrize("suffix", [".pkl", ".pkl.gz", ".txt.gz"])
def test_seq_list_filter_file_as_returnn_reads_it(data: Path, tmp_path: Path, suffix: str) -> None:
    """A seq_list_filter_file pickled (as RETURNN's _load_seq_list_file reads .pkl) or gzipped:
    RETURNN's batches (before: a pickled list was refused)."""
    import gzip
    import pickle

    tags = [f"wmt-train/{i}" for i in range(0, 40, 3)]
    path = tmp_path / f"keep{suffix}"
    opener = gzip.open if suffix.endswith(".gz") else open
    with opener(path, "wb") as f:
        f.write(pickle.dumps(tags) if ".pkl" in suffix else "\n".join(tags).encode())
    text = WMT + f"\ntrain['seq_list_filter_file'] = {str(path)!r}\n"
    got, _ = _same_as_returnn(tmp_path, text)
    assert {t for b in got[1] + got[2] for t in b} <= set(tags)
