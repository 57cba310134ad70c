"""Configs modelled on public RETURNN setups (tests/returnn_configs/, each naming the setup it
follows) over stand-in corpora laid out as those setups lay out theirs: ``from_returnn_config``
gives RETURNN's own tags, batches and values per key, for train, dev and a later sub-epoch, with
0 and 2 workers. The reference is RETURNN itself: its config reader, ``load_data`` /
``init_dataset`` and its PyTorch pipeline (``ReturnnDatasetIterDataPipe`` ->
``LenFilterDataPipe`` -> batching), as its engine builds them.
"""

from __future__ import annotations

import functools
import warnings
from pathlib import Path

import numpy as np
import pytest

from seqloader.errors import OptionError
from seqloader.returnn import from_returnn_config
from seqloader.returnn.stubs import stub_imports

returnn_config = pytest.importorskip("returnn.config")
pytest.importorskip("returnn.torch.data.pipeline")
pytest.importorskip("sentencepiece")
from returnn_reference import epoch_batches, returnn_dataset  # noqa: E402

CONFIGS = Path(__file__).parent / "returnn_configs"
KEYS = {"orth": "text"}  # RETURNN's key -> ours ("raw", a string, is not a tensor)


@pytest.fixture(scope="module")
def data(tmp_path_factory) -> Path:
    from returnn_configs.corpora import corpora_env

    with corpora_env(tmp_path_factory.mktemp("returnn_public")) as folder:
        yield folder


def _load(path: Path):
    cfg = returnn_config.Config()
    with stub_imports():  # librispeech960_hdf imports its (absent) experiments package
        cfg.load_file(str(path))
    return cfg


@functools.cache
def reference(path: str, name: str, epochs: tuple[int, ...]):
    """RETURNN's batches (tags) per epoch and its values per tag (epoch ``epochs[0]``)."""
    cfg = _load(Path(path))
    batches, values = {}, {}
    with returnn_dataset(cfg, name) as dataset:
        for epoch in epochs:
            chunk_of: dict[str, int] = {}
            out = []
            for batch in epoch_batches(cfg, dataset, name, epoch):
                out.append([str(d["seq_tag"]) for d in batch])
                if epoch == epochs[0]:
                    for d in batch:
                        tag = str(d["seq_tag"])
                        chunk_of[tag] = chunk_of.get(tag, -1) + 1
                        values[f"{tag}#{chunk_of[tag]}"] = {
                            KEYS.get(k, k): np.asarray(v)
                            for k, v in d.items()
                            if k in dataset.get_data_keys() and k != "raw"
                        }
            batches[epoch] = out
    return batches, values


def ours(
    config: Path,
    num_workers: int,
    name: str,
    epochs: tuple[int, ...],
    tmp_path: Path,
    rank: int = 0,
    world_size: int = 1,
):
    tmp_path.mkdir(parents=True, exist_ok=True)
    copy = tmp_path / config.name
    copy.write_text(
        config.read_text() + f"\ntorch_dataloader_opts = {{'num_workers': {num_workers}}}\n"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the stubbed-modules warning (tested on its own)
        loaders = from_returnn_config(copy, stub_modules=True, rank=rank, world_size=world_size)
    loader = loaders[name]
    assert loader.worker_options.num_workers == num_workers
    batches, values = {}, {}
    for epoch in epochs:
        batches[epoch] = []
        for batch in loader.epoch(epoch):
            batches[epoch].append(list(batch.seq_tags))
            if epoch == epochs[0]:
                for b, tag in enumerate(batch.seq_tags):
                    chunk = 0 if batch.chunks is None else int(batch.chunks[b])
                    values[f"{tag}#{chunk}"] = {
                        k: batch[k][b, : int(batch.lengths[k][b])].numpy() for k in batch.lengths
                    }
    for other in loaders.values():
        other.close()
    return batches, values


# config, dataset, epochs (the first: values compared too; the others: a later sub-epoch)
CASES = [
    ("librispeech_data_prepare.config", "train", (1, 2, 5)),
    ("librispeech_data_prepare.config", "dev", (1, 2)),
    ("librispeech_attention_2018.config", "train", (1, 2, 4)),
    ("librispeech_attention_2018.config", "dev", (1,)),
    ("librispeech960_hdf.config", "train", (1, 3, 6)),
    ("librispeech960_hdf.config", "dev", (1, 2)),
    ("librispeech960_hdf.config", "devtrain", (1, 2)),
    ("wmt_translation.config", "train", (1, 2, 3)),
    ("wmt_translation.config", "dev", (1,)),
    ("wmt_translation_text.config", "train", (1, 2, 3)),
    ("wmt_translation_text.config", "dev", (1, 2)),
    ("librispeech_lm_bpe.config", "train", (1, 2, 4)),
    ("librispeech_lm_bpe.config", "dev", (1,)),
    ("switchboard_hybrid.config", "train", (1, 2, 5)),
    ("librispeech_hybrid_raw.config", "train", (1, 2, 3)),
    ("librispeech_aed_torch.config", "train", (1, 2, 7)),
    ("librispeech_aed_torch.config", "dev", (1,)),
    ("librispeech960_distrib_files.config", "train", (1, 2, 3, 4, 8)),
    ("librispeech_corpus_2018.config", "train", (1, 2, 5)),
    ("librispeech_corpus_2018.config", "dev", (1, 2)),
]


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("config,name,epochs", CASES)
def test_public_config_gives_returnns_batches_and_values(
    data: Path, tmp_path: Path, config: str, name: str, epochs: tuple[int, ...], num_workers: int
) -> None:
    if "librispeech_" in config:
        pytest.importorskip("librosa")
    path = CONFIGS / config
    expected_batches, expected_values = reference(str(path), name, epochs)
    got_batches, got_values = ours(path, num_workers, name, epochs, tmp_path)
    assert got_batches == expected_batches
    assert expected_values and all(len(ref) >= 2 for ref in expected_values.values())
    assert set(got_values) == set(expected_values)
    for tag, ref in expected_values.items():
        got = got_values[tag]
        assert set(got) == set(ref), tag
        for key, value in ref.items():
            assert got[key].shape == value.shape, (tag, key)
            if value.dtype.kind == "f":
                err = np.abs(got[key] - value) / np.maximum(1.0, np.abs(value))
                assert err.max(initial=0) <= 1e-4, (tag, key)
            else:
                np.testing.assert_array_equal(got[key], value, err_msg=f"{tag} {key}")


def test_official_layout_reads_the_separate_listing(data: Path) -> None:
    """The zip holds LibriSpeech's folders and no listing; tags are PART-ID as the listing names
    them; dev's fixed_random_subset 3000 is larger than the corpus, so all of it."""
    loaders = from_returnn_config(CONFIGS / "librispeech_data_prepare.config")
    train, dev = loaders["train"], loaders["dev"]
    assert len(train.source) == 24 and train.source.tag(0).startswith("train-clean-100-")
    assert len(dev.source) == 12
    assert train.worker_options.num_workers == 0
    for loader in loaders.values():
        loader.close()


def test_stubbed_modules_are_named_and_needed_explicitly(data: Path) -> None:
    """The sisyphus-style config imports its model code from an experiments package that is not
    installed: without stub_modules the error says how to read it; with it, a warning names the
    stubbed modules."""
    path = CONFIGS / "librispeech960_hdf.config"
    with pytest.raises(OptionError, match=r"imports i6_experiments.*stub_modules=True"):
        from_returnn_config(path)
    with pytest.warns(UserWarning, match=r"stubbed .*: i6_experiments"):
        loaders = from_returnn_config(path, stub_modules=True)
    assert sorted(loaders) == ["dev", "devtrain", "train"]
    for loader in loaders.values():
        loader.close()


def test_a_data_option_from_a_stubbed_module_is_an_error(tmp_path: Path) -> None:
    config = tmp_path / "uses_stub.config"
    config.write_text(
        "#!rnn.py\nfrom my_experiments.data import corpus_files\n"
        "train = {'class': 'HDFDataset', 'files': corpus_files('train')}\nbatch_size = 10\n"
    )
    with (
        pytest.warns(UserWarning, match="my_experiments"),
        pytest.raises(OptionError, match=r"train\['files'\].*my_experiments.*stubbed"),
    ):
        from_returnn_config(config, stub_modules=True)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_epoch_wise_filter_as_returnn(data: Path, tmp_path: Path, num_workers: int) -> None:
    """The published curriculum of the LibriSpeech preparation config (epoch_wise_filter
    max_mean_len over RETURNN's int(duration * 100)), with bounds scaled to the stand-in's shorter
    utterances so that it filters: RETURNN's batches in the filtered and the later epochs."""
    pytest.importorskip("librosa")
    text = (CONFIGS / "librispeech_data_prepare.config").read_text()
    text = text.replace('int(os.environ.get("EPOCH_WISE_FILTER", "0"))', "True")
    text = text.replace('"max_mean_len": 200', '"max_mean_len": 90')
    config = tmp_path / "curriculum.config"
    config.write_text(text)
    epochs = (1, 2, 3, 6)
    expected, _ = reference(str(config), "train", epochs)
    got, _ = ours(config, num_workers, "train", epochs, tmp_path / "ours")
    assert got == expected
    whole, _ = reference(str(CONFIGS / "librispeech_data_prepare.config"), "train", epochs)
    assert sum(map(len, got[1])) < sum(map(len, whole[1]))  # the filter dropped some
    assert got[6] == whole[6]  # after its epochs, no filter


def test_epoch_wise_filter_subdirs_is_refused_with_the_reason(data: Path, monkeypatch) -> None:
    """The 2018 config's filter also selects LibriSpeechCorpus subdirs, which an OggZip corpus
    does not have: refused naming the dataset, the key and the reason."""
    monkeypatch.setenv("EPOCH_WISE_FILTER", "1")
    with pytest.raises(
        OptionError,
        match=r"train dataset \(OggZipDataset\): RETURNN's epoch_wise_filter = .*subdirs",
    ):
        from_returnn_config(CONFIGS / "librispeech_attention_2018.config")


@pytest.mark.parametrize("ordering", ["random", "laplace:4"])
def test_fixed_random_seed_as_returnn(data: Path, tmp_path: Path, ordering: str) -> None:
    """fixed_random_seed: the same drawn order in every epoch, as RETURNN's."""
    config = tmp_path / f"fixed_{ordering.replace(':', '_')}.config"
    config.write_text(
        (CONFIGS / "wmt_translation.config").read_text()
        + f"\ntrain['seq_ordering'] = {ordering!r}\ntrain['fixed_random_seed'] = 5\n"
    )
    epochs = (1, 2, 3, 4)
    expected, _ = reference(str(config), "train", epochs)
    got, _ = ours(config, 0, "train", epochs, tmp_path / "ours")
    assert got == expected


def test_multiproc_workers_become_the_loaders(data: Path) -> None:
    """MultiProcDataset's num_workers is the loader's unless torch_dataloader_opts names one; its
    options other than its own are the inner dataset's (RETURNN passes them on)."""
    values = _load(CONFIGS / "librispeech960_hdf.config").typed_dict
    values = {k: v for k, v in values.items() if k not in ("torch_dataloader_opts", "get_model")}
    values["train"] = {**values["train"], "seq_ordering": "sorted"}  # outer: a default for inner
    loader = from_returnn_config(values)["train"]
    assert loader.worker_options.num_workers == 2
    assert loader.plan_options.ordering == "laplace:.6"  # the inner dataset's own wins
    loader.close()
    with pytest.raises(OptionError, match=r"train dataset \(MultiProcDataset\).*'dedicated'"):
        from_returnn_config(
            {**values, "train": {**values["train"], "sharding_method": "dedicated"}}
        )


@pytest.mark.parametrize(
    "kind,fix",
    [("Task12AXDataset", r"generates its sequences anew every epoch.*tools/hdf_dump.py")],
)
def test_refused_classes_name_the_dataset_and_the_fix(kind: str, fix: str) -> None:
    with pytest.raises(
        OptionError, match=rf"dev dataset: class '{kind}' is not supported: .*{fix}"
    ):
        from_returnn_config({"dev": {"class": kind}, "batch_size": 10})


@pytest.mark.parametrize(
    "key,value,fix",
    [
        ("online_shuffle_batches", 10, r"torch's global RNG.*remove it"),
        ("torch_batching", {"class": "X"}, r"not a batching class.*batch_size, max_seqs"),
        ("packed_batch_cost", {"data": len}, r"use packed_batch_size"),
    ],
)
def test_refused_global_options_name_the_key_and_the_fix(key: str, value, fix: str) -> None:
    with pytest.raises(OptionError, match=rf"'{key}' = .*not supported: .*{fix}"):
        from_returnn_config({"train": {"class": "HDFDataset", "files": ["x.hdf"]}, key: value})


def test_config_language_errors(data: Path, tmp_path: Path) -> None:
    """A sequence longer than batch_size is named in the config's words; an int batch_size over
    keys none of which is the longest of every sequence bounds every key, as RETURNN's."""
    hdf = str(data / "wmt" / "train.hdf")
    base = {"train": {"class": "HDFDataset", "files": [hdf]}, "max_seqs": 4}
    with pytest.raises(
        OptionError,
        match=r"train dataset \(HDFDataset\): batch_size 20 is smaller than sequence "
        r"'wmt-train/\d+' \(length \d+ of 'classes'.*raise batch_size to >= \d+ for 'classes', or set "
        r"max_seq_length = \{'classes': 20\}",
    ):
        from_returnn_config({**base, "batch_size": 20})
    loader = from_returnn_config({**base, "batch_size": 300})["train"]
    assert loader.plan_options.length_key == "classes"  # the targets are the longest key
    loader.close()
    from returnn_configs.corpora import write_hdf

    crossing = data / "crossing.hdf"  # targets longer than the sources in odd sequences only
    write_hdf(crossing, [f"x/{i}" for i in range(10)], np.random.default_rng(1), dim=None,
              data_len=(5, 30), target_len=lambda n: n + 2 if n % 2 else n - 2, target_dim=9)  # fmt: skip
    # no key is the longest everywhere: RETURNN's int batch_size -> seqloader's {"*": 500}
    config = tmp_path / "crossing.config"
    config.write_text(
        f"#!rnn.py\ntrain = {{'class': 'HDFDataset', 'files': [{str(crossing)!r}],"
        " 'seq_ordering': 'laplace:3'}\nbatch_size = 60\nmax_seqs = 5\n"
    )
    loader = from_returnn_config(config)["train"]
    assert loader.plan_options.max_frames == {"*": 60}
    loader.close()
    epochs = (1, 2)
    assert (
        ours(config, 0, "train", epochs, tmp_path / "o")[0]
        == reference(str(config), "train", epochs)[0]
    )
    mixed = {
        "train": {"class": "HDFDataset", "files": [str(data / "hdf" / "train.1.hdf")]},
        "batch_size": 900,
    }
    loader = from_returnn_config(mixed)["train"]  # speech: data frames outnumber the targets
    assert loader.plan_options.length_key in (None, "data")
    loader.close()


@pytest.mark.parametrize("min_len", ["9", "{'classes': 12}"])
def test_min_seq_length_as_returnn(data: Path, tmp_path: Path, min_len: str) -> None:
    """RETURNN's min_seq_length (an int: every key; a dict: the keys named) drops the same
    sequences as RETURNN's LenFilterDataPipe: the same batches."""
    config = tmp_path / "wmt_min.config"
    config.write_text(
        (CONFIGS / "wmt_translation.config").read_text() + f"\nmin_seq_length = {min_len}\n"
    )
    epochs = (1, 2, 3)
    expected, _ = reference(str(config), "train", epochs)
    got, _ = ours(config, 0, "train", epochs, tmp_path / "ours")
    assert got == expected
    whole, _ = reference(str(CONFIGS / "wmt_translation.config"), "train", epochs)
    assert sum(map(len, got[1])) < sum(map(len, whole[1]))  # something was dropped


@pytest.mark.parametrize(
    "extra",
    ["packed_batch_size = 150", "packed_batch_size = {'classes': 120}\nbatch_size = 10000"],
)
def test_packed_batch_size_as_returnn(data: Path, tmp_path: Path, extra: str) -> None:
    """RETURNN's packed_batch_size (a budget on the summed lengths, every key or the keys named;
    applied together with batch_size) gives RETURNN's batches."""
    config = tmp_path / "wmt_packed.config"
    config.write_text((CONFIGS / "wmt_translation.config").read_text() + f"\n{extra}\n")
    epochs = (1, 2, 3)
    expected, _ = reference(str(config), "train", epochs)
    got, _ = ours(config, 0, "train", epochs, tmp_path / "ours")
    assert got == expected


PRE_POST = """
import numpy
def _pre(audio, sample_rate, random_state, **_kwargs):
    return audio * 0.5 + 0.01 * numpy.sin(numpy.arange(len(audio)) * sample_rate / 1e5)
def _post(features, seq_name=None, **_kwargs):
    return features[:, ::-1] * (1.0 + len(seq_name) / 100.0)
train["audio"] = dict(train["audio"], pre_process=_pre, post_process=_post)
"""


@pytest.mark.parametrize("num_workers", [0, 2])
def test_pre_and_post_process_as_returnn(data: Path, tmp_path: Path, num_workers: int) -> None:
    """pre_process / post_process defined in the config run with RETURNN's call signature:
    RETURNN's features within 1e-4 (0 and 2 workers)."""
    pytest.importorskip("librosa")
    config = tmp_path / "pre_post.config"
    config.write_text((CONFIGS / "librispeech_data_prepare.config").read_text() + PRE_POST)
    epochs = (1,)
    expected_batches, expected = reference(str(config), "train", epochs)
    got_batches, got = ours(config, num_workers, "train", epochs, tmp_path / "ours")
    assert got_batches == expected_batches
    plain = reference(str(CONFIGS / "librispeech_data_prepare.config"), "train", epochs)[1]
    for tag, ref in expected.items():
        err = np.abs(got[tag]["data"] - ref["data"]) / np.maximum(1.0, np.abs(ref["data"]))
        assert err.max() <= 1e-4, tag
        assert not np.allclose(ref["data"], plain[tag]["data"])  # the functions ran


def test_pre_process_changing_the_length_is_an_error() -> None:
    from seqloader.audio.returnn_features import ReturnnFeatures
    from seqloader.errors import DataError

    features = ReturnnFeatures(
        features="raw", pre_process=lambda audio, sample_rate, random_state: audio[::2]
    )
    with pytest.raises(DataError, match=r"pre_process returned .* same length .*min_speed"):
        features(np.ones(1600, dtype=np.float32), seq_name="a")
    raw = ReturnnFeatures(features="raw", peak_normalization=False)
    np.testing.assert_array_equal(raw(np.full(5, 0.25, np.float32)), np.full((5, 1), 0.25))


def _cli(capsys, *args: object) -> tuple[int, str]:
    from seqloader.cli.main import main

    code = main([str(a) for a in args])
    out = capsys.readouterr()
    return code, out.out + out.err


def test_cli_takes_returnn_configs(data: Path, capsys) -> None:
    """seqloader check/stats/bench CONFIG --dataset NAME: the dataset as from_returnn_config
    plans it (RETURNN's order and batch options), simulated over W ranks x N workers."""
    import json

    config = CONFIGS / "librispeech960_hdf.config"
    with pytest.warns(UserWarning, match="i6_experiments"):
        code, out = _cli(capsys, "check", config, "--stub-modules", "--dataset", "train",
                         "--world-size", 8, "--num-workers", 4, "--json")  # fmt: skip
    assert code == 0, out
    result = json.loads(out[out.index("{") :])
    assert result["ok"] and result["world_size"] == 8 and result["num_workers"] == 4
    with pytest.warns(UserWarning):
        loader = from_returnn_config(config, stub_modules=True)["train"]
    for key in ("ordering", "partition_epoch", "max_frames", "max_seqs", "max_seq_length"):
        assert result["options"][key] == loader.plan_options.to_dict()[key], key
    loader.close()
    code, out = _cli(capsys, "stats", CONFIGS / "switchboard_hybrid.config")
    assert code == 0 and "RETURNN config" in out, out
    code, out = _cli(capsys, "bench", CONFIGS / "wmt_translation.config", "--dataset", "dev",
                     "--batches", 3)  # fmt: skip
    assert code == 0, out
    code, out = _cli(capsys, "check", CONFIGS / "wmt_translation.config", "--dataset", "nope")
    assert code != 0 and "no dataset 'nope'; it defines ['dev', 'train']" in out
    code, out = _cli(capsys, "check", config)
    assert code != 0 and "--stub-modules" in out
    code, out = _cli(capsys, "check", data / "hdf" / "dev.hdf", "--dataset", "dev")
    assert code != 0 and "--dataset 'dev' is for RETURNN configs" in out


@pytest.mark.parametrize(
    "option,fix",
    [
        ({"targets_post_process": "lower"}, r"apply it when writing the corpus listing"),
        ({"window": 3}, r"do it in a transform"),
        ({"repeat_epoch": 2}, r"use more epochs, or a mix"),
        ({"unique_seq_tags": True}, r"remove them; docs/migrating.md says why"),
    ],
)
def test_refused_dataset_options_name_the_key_the_dataset_and_the_fix(
    data: Path, option: dict, fix: str
) -> None:
    hdf = str(data / "hdf" / "dev.hdf")
    key = next(iter(option))
    with pytest.raises(OptionError, match=rf"dev dataset \(HDFDataset\): option.*'{key}'.*{fix}"):
        from_returnn_config({"dev": {"class": "HDFDataset", "files": [hdf], **option},
                             "batch_size": 5000})  # fmt: skip
    same = {"window": 1, "repeat_epoch": 1}.get(key)
    if same is not None:  # RETURNN's default value changes nothing: accepted
        loader = from_returnn_config(
            {"dev": {"class": "HDFDataset", "files": [hdf], key: same}, "batch_size": 5000}
        )["dev"]
        loader.close()


@pytest.mark.parametrize(
    "kind,option,why",
    [
        ("TranslationDataset", {"seq_list_file": "lines.txt"}, r"a fixed list of line numbers"),
        ("TranslationDataset", {"search_without_reference": True}, r"use source_only=True"),
        ("LmDataset", {"add_random_phone_seqs": 2}, r"random sequences drawn per epoch"),
        ("LmDataset", {"phone_info": {"lexicon_file": "x"}}, r"phoneme sequences drawn"),
        ("LmDataset", {"orth_vocab": {"class": "SamplingBytePairEncoding"}}, r"samples another"),
    ],
)
def test_text_dataset_refusals_name_the_option(
    data: Path, kind: str, option: dict, why: str
) -> None:
    spec = {
        "TranslationDataset": {"path": str(data / "wmt-text"), "file_postfix": "dev"},
        "LmDataset": {"corpus_file": str(data / "lm" / "lm.dev.txt.gz"), "word_based": True,
                      "orth_symbols_map_file": str(data / "lm" / "lm.vocab.txt")},
    }[kind]  # fmt: skip
    key = next(iter(option))
    with pytest.raises(
        OptionError, match=rf"dev dataset \({kind}\): (option '{key}'|{key}).*{why}"
    ):
        from_returnn_config({"dev": {"class": kind, **spec, **option}, "batch_size": 300})


def test_returnns_torch_demo_is_refused_at_conversion_by_name(tmp_path: Path) -> None:
    """RETURNN's demos/demo-torch.config, its data part verbatim (Task12AXDataset): refused when
    converted, naming the class and why, never after training started."""
    config = tmp_path / "demo-torch.config"
    config.write_text(DEMO_TORCH)
    with pytest.raises(
        OptionError, match=r"train dataset: class 'Task12AXDataset' is not supported"
    ):
        from_returnn_config(config)


DEMO_TORCH = """#!returnn.py
# rwth-i6/returnn demos/demo-torch.config: its imports and data options verbatim (the model and
# training options, which seqloader does not read, left out)
import torch
from torch import nn
import os
import returnn.frontend as rf
from returnn.tensor import TensorDict
from returnn.util.basic import get_login_username

demo_name, _ = os.path.splitext(__file__)
print("Hello, experiment: %s" % demo_name)

backend = "torch"

task = "train"
train = {"class": "Task12AXDataset", "num_seqs": 1000}
dev = {"class": "Task12AXDataset", "num_seqs": 100, "fixed_random_seed": 1}

num_inputs = 9
num_outputs = 2
extern_data = {
    "data": {"dim": num_inputs},
    "classes": {"dim": num_outputs, "sparse": True},
}
model_outputs = {
    "output": {"dim": num_outputs},
}

batching = "random"
batch_size = 5000
max_seqs = 10
"""
