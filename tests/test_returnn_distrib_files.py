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
    expected = {  # rank 0: the config's own run, which the module's tests share
        0: reference(str(CONFIG), "train", (1, 2, 3, 4, 8))[0],
        1: reference(str(as_rank1), "train", epochs)[0],
    }
    assert any(expected[0][e] != expected[1][e] for e in epochs)
    for rank in (0, 1):
        loader = _loader(distributed, rank=rank, world_size=2)
        for epoch in epochs:
            got = [list(b.seq_tags) for b in loader.epoch(epoch)]
            steps = min(len(expected[0][epoch]), len(expected[1][epoch]))
            assert got == expected[rank][epoch][:steps]
        loader.close()


SHARD = "\ntrain['distrib_shard_files'] = True\ntrain['sharding_fix'] = True\n"
SHARDED_EPOCHS = (1, 2, 4)  # sub-epoch 4: rank 1 has a batch more on 2 ranks


@pytest.fixture(scope="module")
def configs(tmp_path_factory) -> Path:
    """A folder of the module's RETURNN configs: ``reference`` caches by path, so a config written
    here once is run by RETURNN once for all of the module's tests that compare against it."""
    return tmp_path_factory.mktemp("distrib_files_configs")


def _rank_references(configs: Path, world_size: int, epochs: tuple[int, ...]) -> dict:
    """RETURNN's batches per rank: its DistributeFilesDataset reads rank and size from
    ``_get_distributed_rank_and_size``, here set by RETURNN's own debug option."""
    out = {}
    for r in range(world_size):
        config = configs / f"returnn_rank{r}of{world_size}.config"
        config.write_text(
            CONFIG.read_text()
            + SHARD
            + f"__debug_dummy_distributed_rank_and_size = ({r}, {world_size})\n"
        )
        out[r] = reference(str(config), "train", epochs)[0]
    return out


@pytest.mark.parametrize("world_size", [2, 3])
def test_sharded_files_each_rank_as_returnn_shortest_rank_ends(
    tmp_path: Path, configs: Path, world_size: int
) -> None:
    """distrib_shard_files over 2 and 3 ranks: rank r reads RETURNN's bins of files for rank r
    (one file order for all ranks) in RETURNN's order and batches; every rank stops after the
    shortest rank's batch count (RETURNN's torch engine ends the sub-epoch when one rank runs
    out); the rest is counted as dropped."""
    epochs = SHARDED_EPOCHS
    expected = _rank_references(configs, world_size, epochs)
    ours = tmp_path / "sharded.config"
    ours.write_text(CONFIG.read_text() + SHARD)
    for epoch in epochs:
        tags = [set(t for b in expected[r][epoch] for t in b) for r in range(world_size)]
        assert all(not (tags[a] & tags[b]) for a in range(world_size) for b in range(a))
    loaders = [_loader(ours, rank=r, world_size=world_size) for r in range(world_size)]
    dropped = 0
    for epoch in epochs:
        steps = min(len(expected[r][epoch]) for r in range(world_size))
        total = sum(len(t) for r in range(world_size) for t in expected[r][epoch])
        kept = sum(len(t) for r in range(world_size) for t in expected[r][epoch][:steps])
        for r, loader in enumerate(loaders):
            got = [list(b.seq_tags) for b in loader.epoch(epoch)]
            assert got == expected[r][epoch][:steps], (epoch, r)
            plan = loader.planner.global_plan(epoch, world_size)
            assert plan.steps == steps and plan.dropped == total - kept
        dropped += total - kept
    assert dropped > 0  # the stand-in corpus has uneven ranks in sub-epoch 4
    for loader in loaders:
        loader.close()


def test_sharded_files_resume_same_world_size_refuse_other(tmp_path: Path) -> None:
    """Mid-sub-epoch resume on the same world size continues the rank's batches exactly; on
    another world size the ranks' files differ, so load_state_dict refuses it by name."""
    from seqloader.errors import ResumeError

    config = tmp_path / "sharded.config"
    config.write_text(CONFIG.read_text() + SHARD)
    whole = _loader(config, rank=1, world_size=2)
    expected = [list(b.seq_tags) for b in whole.epoch(2)]
    it = iter(whole.epoch(2))
    done = [list(next(it).seq_tags)]
    state = json.loads(json.dumps(whole.state_dict()))
    resumed = _loader(config, rank=1, world_size=2)
    resumed.load_state_dict(state)
    assert done + [list(b.seq_tags) for b in resumed.epoch(2)] == expected
    other = _loader(config, rank=0, world_size=3)
    with pytest.raises(ResumeError, match=r"world_size=3 .*world_size=2.*sharded over the ranks"):
        other.load_state_dict(state)
    for loader in (whole, resumed, other):
        loader.close()


def test_sharded_files_legacy_sharding_refused(tmp_path: Path) -> None:
    """Without sharding_fix (behavior_version < 26) RETURNN shards each sub-epoch's sequences
    again: refused on 2 ranks, naming the fix; one rank is unaffected."""
    config = tmp_path / "legacy.config"
    config.write_text(CONFIG.read_text() + "\ntrain['distrib_shard_files'] = True\n")
    with pytest.raises(OptionError, match=r"sharding_fix=None and behavior_version=0.*Fix: set"):
        _loader(config, rank=0, world_size=2)
    _loader(config, rank=0, world_size=1).close()
    fixed = tmp_path / "v26.config"
    fixed.write_text(config.read_text() + "\nbehavior_version = 26\n")
    _loader(fixed, rank=0, world_size=2).close()


SUB = "lambda files: {'class': 'HDFDataset', 'files': files, 'seq_ordering': 'random'%s}"


@pytest.mark.parametrize(
    "change,message",
    [
        (
            "train['distrib_shard_files'] = True; train['sharding_fix'] = True",
            None,
        ),
        (
            "train['distrib_shard_files'] = True; train['sharding_fix'] = True; "
            "train['files'] = _train_files[:5]",
            r"DistributeFilesDataset: 5 files for partition_epoch 3 x 2 "
            r"ranks \(distrib_shard_files\).*Fix: lower partition_epoch",
        ),
        (
            "train['seq_ordering'] = 'laplace:.4'",
            r"train dataset \(DistributeFilesDataset\): seq_ordering 'laplace:.4'.*'default' or "
            r"'random'",
        ),
        (
            "train['get_sub_epoch_dataset'] = lambda files: {'class': 'MetaDataset'}",
            r"train dataset \(DistributeFilesDataset\): the 'MetaDataset' get_sub_epoch_dataset "
            r"returns does not read the files it is given as a list; .*'path': files, a "
            r"MetaDataset over file trees",
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
            "train['files'] = [(f, 3) for f in _train_files]",
            r"train dataset \(DistributeFilesDataset\): 'files' entry .*: expected a file, or a "
            r"file tree",
        ),
        (
            "train['get_sub_epoch_dataset'] = lambda files: {'class': 'HDFDataset', "
            "'files': files[:3], 'seq_ordering': 'random'}",
            r"returns other options for other files",
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


def test_cli_check_names_returnns_shortest_rank_drop(tmp_path: Path, capsys) -> None:
    """seqloader check over sharded files on 2 ranks: equal steps hold; the sequences past the
    shortest rank are reported with RETURNN's reason, not as a silent loss."""
    from seqloader.cli.main import main

    config = tmp_path / "sharded.config"
    config.write_text(CONFIG.read_text() + SHARD)
    args = ["check", str(config), "--dataset", "train", "--world-size", "2", "--epochs", "6"]
    code = main(args)
    out = capsys.readouterr().out
    assert code == 1
    assert "C2 equal steps: ok" in out
    assert "epoch 4 (full epoch 2, part 1): 1 steps per rank, dropped 3" in out
    assert "6 admitted sequences never used" in out
    assert "sharded over the 2 ranks (RETURNN's DistributeFilesDataset" in out
    assert "6 sequences of the other ranks were dropped" in out


@pytest.mark.parametrize("num_workers", [0, 2])
def test_chunked_pools_as_returnn(tmp_path: Path, configs: Path, num_workers: int) -> None:
    """RETURNN's chunking on top of the pools (a hybrid setup's framewise targets): each pool's
    sequences cut into RETURNN's chunks, the same batches (chunks included) and values as
    RETURNN's ChunkingIterDataPipe."""
    from test_returnn_public_configs import ours

    config = configs / "chunked.config"  # RETURNN runs it once for both worker counts
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


@pytest.mark.slow
def test_sharded_files_over_gloo_as_returnn_with_the_audit(tmp_path: Path, configs: Path) -> None:
    """Two real processes (gloo, one DataLoader worker each as the config says) with
    torch_distributed 'shard' (``tests/dist/returnn_config_rank.py``, forked from the session's
    launch server): each rank's batches are RETURNN's for that rank up to the shortest rank's
    count; the audit over all ranks passes, the rest counted as dropped."""
    from fork_launches import run_forked

    epochs = (1, 4)  # sub-epoch 4: rank 1 has a batch more, dropped as RETURNN does
    expected = _rank_references(configs, 2, SHARDED_EPOCHS)  # RETURNN's run of the test above
    config = tmp_path / "gloo.config"
    config.write_text(
        CONFIG.read_text()
        + "\ntrain['sharding_fix'] = True\ntorch_distributed = {'dataset_distribution': 'shard'}\n"
    )
    console = tmp_path / "console.txt"
    args = ["2", "--script", "returnn_config_rank", str(config), str(tmp_path), *map(str, epochs)]
    rc = run_forked(args, console, 300)
    assert rc == 0, console.read_text(errors="replace")[-3000:]
    for r in (0, 1):
        got = json.loads((tmp_path / f"result.{r}.json").read_text())
        for epoch in epochs:
            steps = min(len(expected[q][epoch]) for q in (0, 1))
            total = sum(len(t) for q in (0, 1) for t in expected[q][epoch])
            kept = sum(len(t) for q in (0, 1) for t in expected[q][epoch][:steps])
            res = got[str(epoch)]
            assert res["tags"] == expected[r][epoch][:steps], (r, epoch)
            assert res["dropped"] == total - kept
            audit = res["audit"]
            assert audit["ok"] and audit["scope"] == "all ranks", audit
            assert audit["dropped"] == total - kept and audit["delivered"] == kept
        assert got["4"]["dropped"] > 0


# the usual i6 shape: the sub-epoch's files cached locally, read by a MultiProcDataset
MULTI_PROC = """
from returnn.util.file_cache import CachedFile
def get_sub_epoch_dataset(files_subepoch):
    return {
        "class": "MultiProcDataset",
        "dataset": {"class": "HDFDataset", "files": [CachedFile(f) for f in files_subepoch],
                    "seq_ordering": "laplace:.4"},
        "num_workers": 2,
        "buffer_size": 5,
    }
train["get_sub_epoch_dataset"] = get_sub_epoch_dataset
"""


@pytest.mark.parametrize("num_workers", [0, 2])
def test_multi_proc_sub_epoch_dataset_as_returnn(
    tmp_path: Path, configs: Path, num_workers: int, monkeypatch
) -> None:
    """get_sub_epoch_dataset returning a MultiProcDataset around the HDFDataset (CachedFile
    entries): RETURNN's tags, batches and values, sub-epochs 1-4 and 8; without
    torch_dataloader_opts the MultiProcDataset's workers are the loader's. RETURNN's
    MultiProcDataset starts its worker processes anew for every sub-epoch: it runs sub-epochs 1
    and 8 (the first, and the last of the second full epoch), whose batches must be those of
    RETURNN's HDFDataset alone; the batches of all five are the HDFDataset's (run once for the
    module)."""
    from test_returnn_public_configs import ours

    # RETURNN's file cache (its sub-epoch datasets run in processes of their own): under tmp_path
    monkeypatch.setenv("RETURNN_FILE_CACHE_OPTS", json.dumps({"cache_directory": str(tmp_path)}))
    config = configs / "multi_proc.config"  # RETURNN runs it once for both worker counts
    config.write_text(CONFIG.read_text() + MULTI_PROC)
    epochs = (1, 2, 3, 4, 8)
    expected_batches = reference(str(CONFIG), "train", epochs)[0]
    multi_proc, expected_values = reference(str(config), "train", (1, 8))
    assert multi_proc == {e: expected_batches[e] for e in (1, 8)}  # the same data
    got_batches, got_values = ours(config, num_workers, "train", epochs, tmp_path / "ours")
    assert got_batches == expected_batches
    assert set(got_values) == set(expected_values)
    for tag, ref in expected_values.items():
        for key, value in ref.items():
            assert (got_values[tag][key] == value).all(), (tag, key)
    plain = tmp_path / "no_loader_opts.config"
    plain.write_text(config.read_text().replace("torch_dataloader_opts", "_unused_opts"))
    loader = _loader(plain)
    assert loader.worker_options.num_workers == 2  # the MultiProcDataset's
    loader.close()


def test_multi_proc_sub_epoch_dataset_on_two_ranks_as_returnn(
    tmp_path: Path, configs: Path, monkeypatch
) -> None:
    """The same, its files sharded over 2 ranks (sharding_fix): rank r gets RETURNN's rank r.
    RETURNN's batches per rank are those of its run of the sharded HDFDataset config above (once
    for the module): the MultiProcDataset around the same HDFDataset gives RETURNN's batches of
    the HDFDataset itself (``test_multi_proc_sub_epoch_dataset_as_returnn`` compares them), so
    RETURNN's MultiProcDataset, starting its worker processes anew for every sub-epoch of every
    rank, need not run again here."""
    monkeypatch.setenv("RETURNN_FILE_CACHE_OPTS", json.dumps({"cache_directory": str(tmp_path)}))
    epochs = SHARDED_EPOCHS
    expected = _rank_references(configs, 2, epochs)
    ours = tmp_path / "multi_proc_sharded.config"
    ours.write_text(CONFIG.read_text() + MULTI_PROC + SHARD)
    for r in range(2):
        loader = _loader(ours, rank=r, world_size=2)
        assert loader.worker_options.num_workers == 1  # torch_dataloader_opts' wins
        for epoch in epochs:
            steps = min(len(expected[0][epoch]), len(expected[1][epoch]))
            assert [list(b.seq_tags) for b in loader.epoch(epoch)] == expected[r][epoch][:steps]
        loader.close()
