"""RETURNN's ``MetaDataset`` with ``seq_list_file`` (one file, one per sub-dataset, a pickled
dict), its legacy ``data_dims``, ``context_window`` and its own ``partition_epoch``: RETURNN's
tags, batches and values per key, through its own pipeline, for train sub-epochs 1, 2 and 5, with
0 and 2 workers. Stand-in data: RETURNN's ``SimpleHDFWriter``, the sub-datasets tagging their
sequences differently (speech ``corpus/rec/i``, text ``line-j``) as in RETURNN's docstring."""

from __future__ import annotations

import json
import pickle
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from seqloader.errors import OptionError
from seqloader.returnn import from_returnn_config

pytest.importorskip("returnn.torch.data.pipeline")
pytest.importorskip("sentencepiece")
from returnn_configs.corpora import write_hdf
from test_returnn_public_configs import ours, reference

EPOCHS = (1, 2, 5)
N = 24


@pytest.fixture(scope="module")
def lists(tmp_path_factory) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("returnn_meta")
    rng = np.random.default_rng(33)
    speech = [f"corpus/rec{i // 5}/{i}" for i in range(N)]
    lines = [f"line-{j}" for j in range(N + 4)]  # 4 more lines than listed
    write_hdf(folder / "speech.hdf", speech, rng, dim=8, data_len=(20, 90),
              target_len=lambda n: max(1, n // 6), target_dim=20)  # fmt: skip
    write_hdf(folder / "text.hdf", lines, rng, dim=None, data_len=(2, 15),
              target_len=lambda n: n + 1, target_dim=30)  # fmt: skip
    pairs = list(range(N))
    rng.shuffle(pairs)  # speech i is text line pairs[i]
    (folder / "speech.txt").write_text("\n".join(speech) + "\n")
    (folder / "text.txt").write_text("\n".join(f"line-{pairs[i]}" for i in range(N)) + "\n")
    subset = [int(i) for i in rng.permutation(N)[: N - 5]]  # a shuffled subset: the corpus
    with open(folder / "subset.pkl", "wb") as f:
        pickle.dump({"speech": [speech[i] for i in subset],
                     "text": [f"line-{pairs[i]}" for i in subset]}, f)  # fmt: skip
    (folder / "same.txt").write_text("\n".join(speech[i] for i in subset) + "\n")
    lens = {t: {"data": int(rng.integers(1, 500)), "classes": 3} for t in speech}
    (folder / "lens.json").write_text(json.dumps(lens))  # not the real lengths: RETURNN sorts by it
    yield folder


DATASETS = """
datasets = {{
    "speech": {{"class": "HDFDataset", "files": ["{d}/speech.hdf"]{speech}}},
    "text": {{"class": "HDFDataset", "files": ["{d}/text.hdf"]}},
}}
"""

CONFIGS = {
    # the control dataset orders; the MetaDataset's own partition_epoch is ignored by RETURNN
    "per_dataset_files": (
        ', "seq_ordering": "laplace:4", "partition_epoch": 2',
        """train = {{"class": "MetaDataset", "datasets": datasets,
    "data_map": {{"data": ("speech", "data"), "classes": ("text", "classes"),
                 "source": ("text", "data")}},
    "seq_order_control_dataset": "speech", "partition_epoch": 5,
    "seq_list_file": {{"speech": "{d}/speech.txt", "text": "{d}/text.txt"}},
    "data_dims": {{"data": (8, 2), "classes": (30, 1), "source": (50, 1)}},
    "context_window": {{"data": 3}}}}
""",
    ),
    # no control: the MetaDataset orders the default dataset's list (a shuffled subset)
    "pickled_dict": (
        "",
        """train = {{"class": "MetaDataset", "datasets": datasets,
    "data_map": {{"data": ("speech", "data"), "classes": ("text", "classes")}},
    "seq_list_file": "{d}/subset.pkl", "seq_ordering": "laplace:3", "partition_epoch": 2}}
""",
    ),
    # one text list for both sub-datasets (the same tags): speech data + its own targets
    "one_list": (
        "",
        """train = {{"class": "MetaDataset",
    "datasets": {{"a": datasets["speech"], "b": dict(datasets["speech"])}},
    "data_map": {{"data": ("a", "data"), "classes": ("b", "classes")}},
    "seq_list_file": "{d}/same.txt", "seq_ordering": "random", "partition_epoch": 3}}
""",
    ),
    # no control: RETURNN sorts by the seq_lens_file's 'data' lengths, not the data's
    "lens_file": (
        "",
        """train = {{"class": "MetaDataset",
    "datasets": {{"a": datasets["speech"], "b": dict(datasets["speech"])}},
    "data_map": {{"data": ("a", "data"), "classes": ("b", "classes")}},
    "seq_lens_file": "{d}/lens.json", "seq_ordering": "laplace:3", "partition_epoch": 2}}
""",
    ),
}


def _config(folder: Path, case: str) -> Path:
    speech, train = CONFIGS[case]
    text = "#!rnn.py\n" + DATASETS.format(d=folder, speech=speech) + train.format(d=folder)
    text += "batch_size = 400\nmax_seqs = 5\n"
    path = folder / f"{case}.config"
    path.write_text(text)
    return path


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("case", sorted(CONFIGS))
def test_meta_dataset_seq_lists_as_returnn(
    lists: Path, tmp_path: Path, case: str, num_workers: int
) -> None:
    config = _config(lists, case)
    expected_batches, expected_values = reference(str(config), "train", EPOCHS)
    got_batches, got_values = ours(config, num_workers, "train", EPOCHS, tmp_path)
    assert got_batches == expected_batches
    assert set(got_values) == set(expected_values) and expected_values
    for tag, ref in expected_values.items():
        assert set(got_values[tag]) == set(ref), tag
        for key, value in ref.items():
            np.testing.assert_array_equal(got_values[tag][key], value, err_msg=f"{tag} {key}")
    if case == "lens_file":  # the file's lengths decided the order, not the data's
        plain = _config(lists, "lens_file").read_text().replace('"seq_lens_file"', '"_unused"')
        without = lists / "lens_file_without.config"
        without.write_text(plain.replace('"_unused": "', '"name": "'))
        assert reference(str(without), "train", EPOCHS)[0] != expected_batches
    if case == "pickled_dict":  # the list is the corpus: 5 speech sequences are not in it
        assert sum(len(b) for e in (1, 2) for b in got_batches[e]) == N - 5


def test_meta_dataset_seq_list_errors_name_the_fix(lists: Path, tmp_path: Path) -> None:
    values = {
        "datasets": {
            "speech": {"class": "HDFDataset", "files": [str(lists / "speech.hdf")]},
            "text": {"class": "HDFDataset", "files": [str(lists / "text.hdf")]},
        },
        "data_map": {"data": ("speech", "data"), "classes": ("text", "classes")},
        "seq_order_control_dataset": "speech",
    }

    def convert(**change) -> None:
        from_returnn_config({"train": {"class": "MetaDataset", **values, **change},
                             "batch_size": 400})  # fmt: skip

    where = r"train dataset \(MetaDataset\): "
    with pytest.raises(OptionError, match=where + r"seq_list_file names no file for .*\['text'\]"):
        convert(seq_list_file={"speech": str(lists / "speech.txt")})
    short = tmp_path / "short.txt"
    short.write_text("line-1\nline-2\n")
    with pytest.raises(OptionError, match=where + r"the seq lists differ in length"):
        convert(seq_list_file={"speech": str(lists / "speech.txt"), "text": str(short)})
    wrong = tmp_path / "wrong.txt"
    wrong.write_text("\n".join(["line-999"] * N) + "\n")
    with pytest.raises(
        OptionError, match=where + r"the seq list of sub-dataset 'text' names 24 tag.*'line-999'"
    ):
        convert(seq_list_file={"speech": str(lists / "speech.txt"), "text": str(wrong)})
    with pytest.raises(
        OptionError, match=where + r"the seq list of the control dataset 'speech' is"
    ):
        convert(seq_list_file={"speech": str(lists / "text.txt"), "text": str(lists / "text.txt")})
    with pytest.raises(
        OptionError, match=where + r"data_dims lacks the data_map key\(s\) \['classes'\]"
    ):
        convert(data_dims={"data": (8, 2)})
    with pytest.raises(OptionError, match=where + r"window 3; RETURNN's MetaDataset asserts 1"):
        convert(window=3)
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps({"corpus/rec0/0": {"data": 5}}))
    with pytest.raises(OptionError, match=where + r"seq_lens_file .* has no 'data' length for 23"):
        convert(
            seq_order_control_dataset=None,
            seq_lens_file=str(partial),
            seq_list_file={"speech": str(lists / "speech.txt"), "text": str(lists / "text.txt")},
        )
    lists_ = {"speech": str(lists / "speech.txt"), "text": str(lists / "text.txt")}
    convert(seq_lens_file=str(partial), seq_list_file=lists_)  # control: RETURNN reads no length
