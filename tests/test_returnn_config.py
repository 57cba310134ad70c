"""``from_returnn_config``: RETURNN configs (read by RETURNN's own reader) over files written by
RETURNN's own writer give loaders whose (sub-)epochs hold RETURNN's sequences in RETURNN's order,
batched as RETURNN's PyTorch pipeline batches them; with 0 and 2 workers, exactly once per epoch.

The reference is RETURNN itself: ``returnn.__main__.load_data`` (its dataset defaults for train
and dev), ``init_dataset`` for ``eval_datasets``, then ``ReturnnDatasetIterDataPipe`` ->
``LenFilterDataPipe`` -> ``get_batching_iterable_dataset_from_config``, as its engine builds them.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import numpy as np
import pytest

from seqloader.errors import OptionError
from seqloader.returnn import from_returnn_config

returnn_config = pytest.importorskip("returnn.config")
pytest.importorskip("returnn.torch.data.pipeline")
from returnn_reference import epoch_batches, returnn_dataset  # noqa: E402

EXCLUDED = {"seq-3", "seq-10", "seq-11", "seq-40"}


def write_hdf(path: Path, tags: list[str], rng: np.random.Generator) -> None:
    """RETURNN's ``SimpleHDFWriter``: 5-dim features and aligned sparse ``classes``."""
    from returnn.datasets.hdf import SimpleHDFWriter

    writer = SimpleHDFWriter(str(path), dim=5, ndim=2)
    for tag in tags:
        n = int(rng.integers(3, 60))
        x = rng.standard_normal((1, n, 5)).astype(np.float32)
        y = rng.integers(0, 7, size=(1, n)).astype(np.int32)
        writer.insert_batch(x, [n], [tag], extra={"classes": y})
    writer.close()


@pytest.fixture(scope="module")
def hdf_config(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("returnn_hdf")
    rng = np.random.default_rng(7)
    tags = [f"seq-{i}" for i in range(53)]
    write_hdf(folder / "a.hdf", tags[:30], rng)
    write_hdf(folder / "b.hdf", tags[30:], rng)
    (folder / "listed.txt").write_text("\n".join(t for t in tags if t not in EXCLUDED) + "\n")
    config = folder / "returnn.config"
    config.write_text(
        textwrap.dedent(
            """\
            #!rnn.py
            import os
            _dir = os.path.dirname(__file__)
            def _files(*names):
                return [os.path.join(_dir, n) for n in names]
            backend = "torch"
            train = {
                "class": "HDFDataset", "files": _files("a.hdf", "b.hdf"),
                "seq_ordering": "laplace:.8", "partition_epoch": 3,
                "seq_list_filter_file": os.path.join(_dir, "listed.txt"),
            }
            dev = {"class": "HDFDataset", "files": _files("b.hdf")}
            eval_datasets = {
                "other": {"class": "HDFDataset", "files": _files("a.hdf"),
                           "seq_ordering": "random", "random_seed_offset": 11},
            }
            dataset_random_seed_offset = 4
            batch_size = 150
            max_seqs = 5
            max_seq_length = 50
            """
        )
    )
    return config


def returnn_batches(config_path: Path, name: str, epochs: range) -> dict[int, list[list[str]]]:
    """RETURNN's own batches (tags) of dataset ``name`` for each epoch, one process."""
    cfg = returnn_config.Config()
    cfg.load_file(str(config_path))
    with returnn_dataset(cfg, name) as dataset:
        return {
            epoch: [
                [str(d["seq_tag"]) for d in batch]
                for batch in epoch_batches(cfg, dataset, name, epoch)
            ]
            for epoch in epochs
        }


def our_batches(loader, epochs: range) -> dict[int, list[list[str]]]:
    return {e: [list(b.seq_tags) for b in loader.epoch(e)] for e in epochs}


@pytest.mark.parametrize("num_workers", [0, 2])
def test_hdf_config_gives_returnns_batches(hdf_config: Path, tmp_path: Path, num_workers: int):
    """train (laplace, partition_epoch=3, seq_list_filter_file, the config's seed offset),
    dev (RETURNN's dev default: sorted) and an eval_datasets entry (random, its own offset):
    every (sub-)epoch's batches are RETURNN's, and each full epoch holds every admitted
    sequence exactly once."""
    config = tmp_path / "with_workers.config"
    config.write_text(
        hdf_config.read_text().replace("#!rnn.py\n", f"#!rnn.py\n__file__ = {str(hdf_config)!r}\n")
        + f"torch_dataloader_opts = {{'num_workers': {num_workers}}}\n"
    )
    loaders = from_returnn_config(config, rank=0, world_size=1)
    assert sorted(loaders) == ["dev", "other", "train"]
    assert loaders["train"].worker_options.num_workers == num_workers
    epochs = range(1, 7)  # two full epochs of three sub-epochs
    for name, loader in loaders.items():
        expected = returnn_batches(config, name, epochs)
        got = our_batches(loader, epochs)
        assert got == expected, name
        if name == "train":
            filtered = loader.planner.admission.filtered
            assert filtered["not in seq_list_filter_file"] == len(EXCLUDED)
            for full in (range(1, 4), range(4, 7)):
                seen = [t for e in full for b in got[e] for t in b]
                admitted = loader.planner.admission.admitted
                assert sorted(seen) == sorted(loader.source.tag(int(i)) for i in admitted)
                assert not EXCLUDED & set(seen)
            assert got[1] != got[4]  # a new laplace order in the second full epoch
        loader.close()


def test_a_dict_config_and_the_random_seed_offset_distribution(hdf_config: Path) -> None:
    """A dict works like a file; torch_distributed's default distribution (random_seed_offset)
    gives rank r RETURNN's order with offset + 16127 r (rank 0 checked against RETURNN)."""
    values = returnn_config.Config()
    values.load_file(str(hdf_config))
    typed = dict(values.typed_dict)
    typed["torch_distributed"] = {}
    loaders = from_returnn_config(typed, rank=0, world_size=2)
    assert loaders["train"].plan_options.distribution == "random_seed_offset"
    order0 = loaders["train"].planner.sub_epoch_order(1, 0)
    order1 = loaders["train"].planner.sub_epoch_order(1, 1)
    assert not np.array_equal(order0, order1)
    shard = from_returnn_config({**typed, "torch_distributed": {"dataset_distribution": "shard"}})
    assert shard["train"].plan_options.distribution == "shard"


@pytest.mark.parametrize(
    "change,match",
    [
        (
            {"train": {"class": "HDFDataset", "files": ["x.hdf"], "window": 3}},
            r"train dataset \(HDFDataset\).*'window'",
        ),
        (
            {"dev": {"class": "ExternSprintDataset", "sprintTrainerExecPath": "x"}},
            r"dev dataset: class 'ExternSprintDataset'",
        ),
        ({"torch_dataloader_opts": {"num_workers": 1, "collate_fn": None}}, "collate_fn"),
        (
            {"batch_size": {"data": 100, "classes": 20}},
            r"train dataset \(HDFDataset\): batch_size \{'classes': 20\} is smaller than "
            r"sequence 'seq-\d+' \(length \d+ of 'classes'",
        ),
        ({"train": "a.hdf,b.hdf"}, "write the dict"),
        ({"torch_distributed": {"dataset_distribution": "all"}}, "dataset_distribution"),
    ],
)
def test_unsupported_options_name_the_key_and_the_dataset(
    hdf_config: Path, change: dict, match: str
) -> None:
    values = returnn_config.Config()
    values.load_file(str(hdf_config))
    with pytest.raises(OptionError, match=match):
        from_returnn_config({**values.typed_dict, **change})


@pytest.fixture(scope="module")
def oggzip_config(tmp_path_factory) -> Path:
    from seqloader.synthetic.audio import WORDS, write_audio_corpus

    folder = tmp_path_factory.mktemp("returnn_oggzip")
    corpus = write_audio_corpus(
        folder, 14, name="speech", formats=("flac", "wav", "ogg"), seconds=(0.6, 1.6), seed=3
    )
    (folder / "words.txt").write_text("\n".join([*WORDS, "UNK"]) + "\n")
    (folder / "segments.txt").write_text("\n".join(f"u{i}" for i in range(14) if i != 5) + "\n")
    config = folder / "returnn.config"
    config.write_text(
        textwrap.dedent(
            f"""\
            #!rnn.py
            train = {{
                "class": "OggZipDataset", "path": {corpus.oggzip!r},
                "audio": {{"features": "log_mel_filterbank", "num_feature_filters": 40,
                           "with_delta": True, "sample_rate": 16000}},
                "targets": {{"class": "Vocabulary", "vocab_file": {str(folder / "words.txt")!r}}},
                "seq_ordering": "sort_bin_shuffle:.4", "partition_epoch": 2,
                "segment_file": {str(folder / "segments.txt")!r},
            }}
            batch_size = 400
            max_seqs = 4
            """
        )
    )
    return config


def returnn_sequences(config_path: Path, epoch: int) -> dict[str, dict[str, np.ndarray]]:
    """RETURNN's train sequences of ``epoch``: tag -> its data dict."""
    from returnn.__main__ import load_data
    from returnn.datasets.basic import Dataset

    cfg = returnn_config.Config()
    cfg.load_file(str(config_path))
    with returnn_config.global_config_ctx(cfg):
        dataset, _ = load_data(cfg, 0, "train", **Dataset.get_default_kwargs_train(config=cfg))
        dataset.init_seq_order(epoch=epoch)
        out = {}
        for i in range(dataset.num_seqs):
            dataset.load_seqs(i, i + 1)
            out[dataset.get_tag(i)] = {
                k: dataset.get_data(i, k) for k in ("data", "classes", "orth")
            }
    return out


@pytest.mark.parametrize("num_workers", [0, 2])
def test_oggzip_config_gives_returnns_batches_and_frames(
    oggzip_config: Path, tmp_path: Path, num_workers: int
) -> None:
    """OggZip (RETURNN's features with deltas, a word vocabulary, segment_file, sort_bin_shuffle,
    partition_epoch=2): RETURNN's batches for two full epochs, and in epoch 1 every sequence's
    features (within 1e-4), token ids and text bytes are RETURNN's."""
    pytest.importorskip("librosa")
    config = tmp_path / "with_workers.config"
    config.write_text(
        oggzip_config.read_text() + f"torch_dataloader_opts = {{'num_workers': {num_workers}}}\n"
    )
    loader = from_returnn_config(config)["train"]
    assert len(loader.source) == 13  # segment_file left one utterance out
    epochs = range(1, 5)
    reference = returnn_sequences(config, 1)
    frames = {t: len(s["data"]) for t, s in reference.items()}
    # RETURNN's batch_size counts the longest key; here the features are (seqloader counts data)
    assert all(frames[t] > max(len(s["classes"]), len(s["orth"])) for t, s in reference.items())
    assert our_batches(loader, epochs) == returnn_batches(config, "train", epochs)
    seen = set()
    for batch in loader.epoch(1):
        for b, tag in enumerate(batch.seq_tags):
            ref, n = reference[tag], int(batch.lengths["data"][b])
            assert n == len(ref["data"])
            got = batch["data"][b, :n].numpy()
            err = np.abs(got - ref["data"]) / np.maximum(1.0, np.abs(ref["data"]))
            assert err.max() <= 1e-4
            k = int(batch.lengths["classes"][b])
            np.testing.assert_array_equal(batch["classes"][b, :k].numpy(), ref["classes"])
            m = int(batch.lengths["text"][b])
            np.testing.assert_array_equal(batch["text"][b, :m].numpy(), ref["orth"])
            seen.add(tag)
    assert seen == set(reference)
    loader.close()


def test_mid_epoch_resume_continues_returnns_order(hdf_config: Path) -> None:
    """A migrated loader resumes mid-epoch (RETURNN cannot): state after 2 steps of epoch 2, a
    fresh loader from the same config continues with exactly the remaining batches."""
    import json

    whole = from_returnn_config(hdf_config)["train"]
    expected = [list(b.seq_tags) for b in whole.epoch(2)]
    first = from_returnn_config(hdf_config)["train"]
    it = first.epoch(2)
    done = [list(next(it).seq_tags) for _ in range(2)]
    state = json.loads(json.dumps(first.state_dict()))
    resumed = from_returnn_config(hdf_config)["train"]
    resumed.load_state_dict(state)
    rest = [list(b.seq_tags) for b in resumed.epoch(2)]
    assert done + rest == expected
    for loader in (whole, first, resumed):
        loader.close()


def test_view_pickles_and_passes_on_abilities(hdf_config: Path) -> None:
    """Spawned workers get the view by pickle; the view passes the wrapped source's abilities on
    (HDF's read_many and where), with a subset's indices mapped."""
    import pickle

    from seqloader.returnn import ReturnnView

    loader = from_returnn_config(hdf_config)["train"]
    view = loader.source
    assert isinstance(view, ReturnnView)
    view.prepare_workers()  # HDF chunk indexes, before workers fork
    copy = pickle.loads(pickle.dumps(view))
    assert list(copy.tags) == list(view.tags)
    np.testing.assert_array_equal(copy.read(3)["data"], view.read(3)["data"])
    np.testing.assert_array_equal(copy.excluded()["not in seq_list_filter_file"],
                                  view.excluded()["not in seq_list_filter_file"])  # fmt: skip
    subset = ReturnnView(view, indices=np.array([4, 1]))
    assert list(subset.tags) == ["seq-4", "seq-1"]
    np.testing.assert_array_equal(subset.read(1)["data"], view.read(1)["data"])
    many = subset.read_many(np.array([1, 0]))  # the wrapped HDF source's read_many, mapped
    np.testing.assert_array_equal(many[0]["data"], view.read(1)["data"])
    np.testing.assert_array_equal(many[1]["data"], view.read(4)["data"])
    assert "b.hdf" not in subset.where(0) and "a.hdf" in subset.where(0)
    loader.close()


def write_hdf_lengths(path: Path, lengths: dict[str, int], dim: int, seed: int) -> None:
    """``SimpleHDFWriter`` with given lengths per tag (in the dict's order)."""
    from returnn.datasets.hdf import SimpleHDFWriter

    rng = np.random.default_rng(seed)
    writer = SimpleHDFWriter(str(path), dim=dim, ndim=2)
    for tag, n in lengths.items():
        x = rng.standard_normal((1, n, dim)).astype(np.float32)
        y = rng.integers(0, 9, size=(1, n)).astype(np.int32)
        writer.insert_batch(x, [n], [tag], extra={"classes": y})
    writer.close()


@pytest.mark.parametrize("num_workers", [0, 2])
def test_meta_dataset_gives_returnns_batches(tmp_path: Path, num_workers: int) -> None:
    """MetaDataset (features from one RETURNN HDF, alignments from another stored in another
    order, seq_order_control_dataset with its own laplace ordering and partition_epoch=2, the
    seed offset inherited from the MetaDataset) -> ZipSource: RETURNN's batches, and the
    joined sequences hold the right file's data."""
    rng = np.random.default_rng(5)
    lengths = {f"rec/{i}": int(rng.integers(4, 70)) for i in range(41)}
    write_hdf_lengths(tmp_path / "feat.hdf", lengths, 6, seed=1)
    write_hdf_lengths(tmp_path / "align.hdf", dict(reversed(list(lengths.items()))), 2, seed=2)
    config = tmp_path / "meta.config"
    config.write_text(
        textwrap.dedent(
            f"""\
            #!rnn.py
            train = {{
                "class": "MetaDataset",
                "datasets": {{
                    "feat": {{"class": "HDFDataset", "files": [{str(tmp_path / "feat.hdf")!r}]}},
                    "align": {{"class": "HDFDataset", "files": [{str(tmp_path / "align.hdf")!r}],
                               "seq_ordering": "laplace:.6", "partition_epoch": 2}},
                }},
                "data_map": {{"data": ("feat", "data"), "classes": ("align", "classes")}},
                "seq_order_control_dataset": "align",
                "random_seed_offset": 3,
            }}
            batch_size = 200
            max_seqs = 6
            torch_dataloader_opts = {{"num_workers": {num_workers}}}
            """
        )
    )
    loader = from_returnn_config(config)["train"]
    epochs = range(1, 5)
    assert our_batches(loader, epochs) == returnn_batches(config, "train", epochs)
    from seqloader.sources.hdf import HDFSource

    feat, align = HDFSource(str(tmp_path / "feat.hdf")), HDFSource(str(tmp_path / "align.hdf"))
    for batch in loader.epoch(1):
        for b, tag in enumerate(batch.seq_tags):
            n = int(batch.lengths["data"][b])
            i, j = list(feat.tags).index(tag), list(align.tags).index(tag)
            np.testing.assert_array_equal(batch["data"][b, :n].numpy(), feat.read(i)["data"])
            np.testing.assert_array_equal(batch["classes"][b, :n].numpy(), align.read(j)["classes"])
    loader.close()


@pytest.mark.parametrize("num_workers", [0, 2])
def test_concat_dataset_gives_returnns_batches(hdf_config: Path, tmp_path: Path, num_workers):
    """ConcatDataset of two RETURNN HDF datasets in default order (the second with a
    seq_list_filter_file) -> ConcatSource: RETURNN's batches; other orders inside are refused."""
    folder = hdf_config.parent
    config = tmp_path / "concat.config"
    config.write_text(
        textwrap.dedent(
            f"""\
            #!rnn.py
            train = {{"class": "ConcatDataset", "datasets": [
                {{"class": "HDFDataset", "files": [{str(folder / "b.hdf")!r}]}},
                {{"class": "HDFDataset", "files": [{str(folder / "a.hdf")!r}],
                  "seq_list_filter_file": {str(folder / "listed.txt")!r}}},
            ]}}
            batch_size = 120
            max_seqs = 4
            torch_dataloader_opts = {{"num_workers": {num_workers}}}
            """
        )
    )
    loader = from_returnn_config(config)["train"]
    epochs = range(1, 3)
    got = our_batches(loader, epochs)
    assert got == returnn_batches(config, "train", epochs)
    seen = [t for b in got[1] for t in b]
    assert seen[0] == "seq-30" and len(seen) == len(set(seen))
    assert "seq-40" in seen and not {"seq-3", "seq-10", "seq-11"} & set(seen)  # a.hdf's filter
    loader.close()
    values = returnn_config.Config()
    values.load_file(str(config))
    random_inside = dict(values.typed_dict)
    random_inside["train"] = {**random_inside["train"]}
    random_inside["train"]["datasets"] = [
        {**random_inside["train"]["datasets"][0], "seq_ordering": "random"}
    ]
    with pytest.raises(OptionError, match=r"train.datasets\[0\] \(HDFDataset\).*'random'"):
        from_returnn_config(random_inside)
    with pytest.raises(OptionError, match=r"\(CombinedDataset\): expected 'datasets'.*'data_map'"):
        from_returnn_config({**values.typed_dict, "train": {"class": "CombinedDataset"}})


@pytest.mark.parametrize("num_workers", [0, 2])
def test_meta_dataset_with_its_own_order_gives_returnns_batches(
    tmp_path: Path, num_workers: int
) -> None:
    """MetaDataset without seq_order_control_dataset: RETURNN orders by the MetaDataset's own
    seq_ordering / partition_epoch / random_seed_offset / seq_list_filter_file over the tags of
    the dataset giving 'data', sorted by its lengths; the other dataset follows (stored in
    another order)."""
    rng = np.random.default_rng(9)
    lengths = {f"rec/{i}": int(rng.integers(4, 70)) for i in range(37)}
    write_hdf_lengths(tmp_path / "feat.hdf", lengths, 6, seed=1)
    write_hdf_lengths(tmp_path / "align.hdf", dict(reversed(list(lengths.items()))), 2, seed=2)
    (tmp_path / "keep.txt").write_text("\n".join(t for t in lengths if t != "rec/4") + "\n")
    config = tmp_path / "meta_own.config"
    config.write_text(
        textwrap.dedent(
            f"""\
            #!rnn.py
            train = {{
                "class": "MetaDataset",
                "datasets": {{
                    "feat": {{"class": "HDFDataset", "files": [{str(tmp_path / "feat.hdf")!r}]}},
                    "align": {{"class": "HDFDataset", "files": [{str(tmp_path / "align.hdf")!r}]}},
                }},
                "data_map": {{"data": ("feat", "data"), "classes": ("align", "classes")}},
                "seq_ordering": "laplace:.6", "partition_epoch": 2, "random_seed_offset": 3,
                "seq_list_filter_file": {str(tmp_path / "keep.txt")!r},
            }}
            batch_size = 200
            max_seqs = 6
            torch_dataloader_opts = {{"num_workers": {num_workers}}}
            """
        )
    )
    loader = from_returnn_config(config)["train"]
    epochs = range(1, 5)
    got = our_batches(loader, epochs)
    assert got == returnn_batches(config, "train", epochs)
    assert "rec/4" not in {t for b in got[1] + got[2] for t in b}
    loader.close()
    values = returnn_config.Config()
    values.load_file(str(config))
    typed = dict(values.typed_dict)
    typed["train"] = {**typed["train"]}
    typed["train"]["datasets"] = {
        **typed["train"]["datasets"],
        "align": {**typed["train"]["datasets"]["align"], "seq_ordering": "random"},
    }
    with pytest.raises(OptionError, match=r"train.align: \['seq_ordering'\] are ignored by RETURN"):
        from_returnn_config(typed)
