"""RETURNN's ``DistributeFilesDataset`` from a config (``librispeech960_distrib_files.config``):
resume, ranks under RETURNN's default ``random_seed_offset`` distribution, and refusals naming the
key, the dataset and the fix. Its batches and values against RETURNN's own pipeline, 0 and 2
workers, are in ``test_returnn_public_configs.py``; the pools' contracts in ``test_plan_pools.py``."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from seqloader.errors import OptionError
from seqloader.returnn import from_returnn_config
from test_returnn_public_configs import CONFIGS, data, reference  # noqa: F401 (fixture)

pytest.importorskip("returnn.datasets.distrib_files")
pytestmark = pytest.mark.usefixtures("data")  # the stand-in corpora the config reads
CONFIG = CONFIGS / "librispeech960_distrib_files.config"


def _loader(config: Path, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return from_returnn_config(config, **kwargs)["train"]


def test_mid_epoch_resume_continues_returnns_order() -> None:
    expected, _ = reference(str(CONFIG), "train", (1, 2, 3, 4, 8))
    first = _loader(CONFIG)
    it = iter(first.epoch(4))
    done = [list(next(it).seq_tags) for _ in range(2)]
    state = json.loads(json.dumps(first.state_dict()))
    resumed = _loader(CONFIG)
    resumed.load_state_dict(state)
    rest = [list(b.seq_tags) for b in resumed.epoch(4)]
    assert done + rest == expected[4]
    for loader in (first, resumed):
        loader.close()


def test_each_rank_takes_returnns_files_of_that_rank(tmp_path: Path) -> None:
    """torch_distributed with RETURNN's default distribution: rank r's DistributeFilesDataset
    uses random_seed_offset 16127 r (file shuffle and sub-dataset order); the reference is RETURNN
    with that offset set. Steps are equal: each rank stops with the shortest (counted)."""
    distributed = tmp_path / "distributed.config"
    distributed.write_text(CONFIG.read_text() + "\ntorch_distributed = {}\n")
    as_rank1 = tmp_path / "rank1.config"
    as_rank1.write_text(CONFIG.read_text() + "\ntrain['random_seed_offset'] = 16127\n")
    epochs = (1, 4)
    expected = {r: reference(str(c), "train", epochs)[0] for r, c in ((0, CONFIG), (1, as_rank1))}
    assert expected[0] != expected[1]
    for rank in (0, 1):
        loader = _loader(distributed, rank=rank, world_size=2)
        for epoch in epochs:
            got = [list(b.seq_tags) for b in loader.epoch(epoch)]
            steps = min(len(expected[0][epoch]), len(expected[1][epoch]))
            assert got == expected[rank][epoch][:steps]
        loader.close()


SUB = "lambda files: {'class': 'HDFDataset', 'files': files, 'seq_ordering': 'random'%s}"


@pytest.mark.parametrize(
    "change,message",
    [
        (
            "train['distrib_shard_files'] = True",
            r"sharded over 2 ranks .*distrib_shard_files.*Fix: leave distrib_shard_files out",
        ),
        (
            "train['seq_ordering'] = 'laplace:.4'",
            r"train dataset \(DistributeFilesDataset\): seq_ordering 'laplace:.4'.*'default' or "
            r"'random'",
        ),
        (
            "train['get_sub_epoch_dataset'] = lambda files: {'class': 'MetaDataset'}",
            r"train dataset \(DistributeFilesDataset\): get_sub_epoch_dataset returned a "
            r"'MetaDataset'; .*'HDFDataset'.*distribution='files'",
        ),
        (
            "train['get_sub_epoch_dataset'] = " + SUB % ", 'partition_epoch': 2",
            r"train dataset \(DistributeFilesDataset\): .* partition_epoch 2; RETURNN refuses it "
            r"too.*set partition_epoch on the DistributeFilesDataset",
        ),
        (
            "train['get_sub_epoch_dataset'] = " + SUB % ", 'random_seed_offset': 3",
            r"train dataset \(DistributeFilesDataset\): get_sub_epoch_dataset sets "
            r"random_seed_offset 3.*set it on the DistributeFilesDataset only",
        ),
        ("train['get_sub_epoch_dataset'] = " + SUB % "", None),  # accepted
        (
            "train['files'] = [(f, f) for f in _train_files]",
            r"train dataset \(DistributeFilesDataset\): 'files' entry .* file tree.*one HDF file "
            r"per entry",
        ),
        (
            "train['files'] = _train_files[:2]",
            r"train dataset \(DistributeFilesDataset\): .*2 files for partition_epoch 3.*Fix: "
            r"lower partition_epoch",
        ),
        (
            "train['buffer_size'] = 100; train['use_worker_proc'] = False; train['cache'] = 1",
            r"train dataset \(DistributeFilesDataset\): option\(s\) \['cache'\] not supported",
        ),
    ],
)
def test_options_refused_name_the_key_the_dataset_and_the_fix(
    tmp_path: Path,
    change: str,
    message: str | None,
) -> None:
    config = tmp_path / "changed.config"
    config.write_text(CONFIG.read_text() + "\n" + change + "\n")
    if message is None:
        _loader(config, rank=0, world_size=2).close()
        return
    with pytest.raises(OptionError, match=message):
        _loader(config, rank=0, world_size=2)


def test_cli_check_plans_the_pools(capsys) -> None:
    """seqloader check CONFIG simulates the loader's plan, file pools included: exactly once
    per full epoch and equal steps over 3 ranks x 2 workers."""
    from seqloader.cli.main import main

    args = ["check", str(CONFIG), "--dataset", "train", "--world-size", "3", "--num-workers", "2"]
    code = main([*args, "--epochs", "6", "--json"])
    out = capsys.readouterr().out
    assert code == 0, out
    result = json.loads(out[out.index("{") :])
    assert result["ok"] and result["world_size"] == 3


@pytest.mark.parametrize("num_workers", [0, 2])
def test_chunked_pools_as_returnn(tmp_path: Path, num_workers: int) -> None:
    """RETURNN's chunking on top of the pools (a hybrid setup's framewise targets): each pool's
    sequences cut into RETURNN's chunks, the same batches (chunks included) and values as
    RETURNN's ChunkingIterDataPipe."""
    from test_returnn_public_configs import ours

    config = tmp_path / "chunked.config"
    text = CONFIG.read_text().replace("/hdf/dfd/", "/hdf/dfd-framewise/")
    text = text.replace("range(1, 11)", "range(1, 7)")  # framewise targets: six files
    config.write_text(
        text + "\nchunking = '50:25'\nbatch_size = 300\nmax_seq_length = None\ndev = None\n"
    )
    epochs = (1, 5)
    expected, expected_values = reference(str(config), "train", epochs)
    got, got_values = ours(config, num_workers, "train", epochs, tmp_path / "ours")
    assert got == expected
    assert set(got_values) == set(expected_values) and any("#1" in k for k in got_values)
    for key, ref in expected_values.items():
        for k, value in ref.items():
            assert (abs(got_values[key][k] - value) <= 1e-6).all(), (key, k)
