"""Ranks (gloo) reading s3:// HDF files from moto's S3 server through the plan-driven
cache (``tests/dist/train_remote.py``): every sequence exactly once, equal steps, each rank's cache
within its budget and holding only files its plan reads (with ``distribution="files"`` the ranks'
files of a sub-epoch are disjoint, so each fetches only its share), one fetch per file for ranks
sharing a cache directory, and a kill + resume that fetches only what was missing. The ranks are
forked after one import of torch (``launch_fork.py``), as torchrun would start them;
torchrun's own environment is tested by ``test_distributed_torchrun.py``."""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path

import pytest

import seqloader as sl
from fork_launches import run_forked
from remote_s3 import S3, s3_endpoint_fixture, s3_fixture, upload_corpus  # noqa: F401 (fixtures)
from seqloader.sources.remote import FileCache
from seqloader.trainer.prefetch import files_in_order
from test_distributed_torchrun import tail

sys.path.insert(0, str(Path(__file__).parent / "dist"))
from ddp_common import read_log, result_path

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).parent / "dist" / "train_remote.py"
TIMEOUT_S = 240
N_FILES, PER_FILE = 8, 10
LOADER = {"ordering": "default", "partition_epoch": 4, "max_seqs": 3, "num_workers": 1, "seed": 5}
#: whole files per rank: 12 files, 2 sub-epochs, so each rank reads 2-3 files per sub-epoch
FILES = {
    "ordering": "random",
    "distribution": "files",
    "partition_epoch": 2,
    "max_seqs": 3,
    "num_workers": 1,
    "seed": 5,
}


def launch(world: int, out: Path, phase: str, *args: str) -> tuple[int, str]:
    spec = ["--spec", str(out / "spec.json"), "--out", str(out), "--phase", phase, *args]
    console = out / f"{phase}.console.txt"
    rc = run_forked([str(world), "--script", SCRIPT.stem, *spec], console, TIMEOUT_S)
    return rc, tail(console)


def write_spec(
    out: Path, s3: S3, urls: list[str], cache_dir: str, budget: int | None, loader: dict = LOADER
) -> None:
    spec = {
        "urls": urls,
        "storage_options": s3.options,
        "cache_dir": cache_dir,
        "cache_bytes": budget,
        "loader": loader,
    }
    (out / "spec.json").write_text(json.dumps(spec))


def fetched(cache_dir: Path) -> collections.Counter:
    return collections.Counter(url for _, _, url in FileCache(cache_dir).fetch_log())


def rank_files(source: sl.HDFSource, world: int, epoch: int, loader: dict) -> list[set[int]]:
    """Per rank, the files its plan reads in ``epoch``."""
    plan = sl.SeqLoader(source, rank=0, world_size=world, **loader).global_plan(epoch)
    remote = source.remote_files()
    return [set(files_in_order(remote, plan.rank_share(r)).tolist()) for r in range(world)]


def planned_tags(source: sl.HDFSource, world: int, epoch: int, loader: dict) -> list[str]:
    plan = sl.SeqLoader(source, rank=0, world_size=world, **loader).global_plan(epoch)
    real = plan.batches.seqs[plan.batches.real]
    return sorted(source.tag(int(i)) for i in real)


def seen_tags(out: Path, phase: str, world: int, epoch: int) -> list[str]:
    return [t for r in range(world) for e in read_log(out, phase, r) if e["epoch"] == epoch
            for t in e["tags"]]  # fmt: skip


@pytest.mark.parametrize(
    ("world", "loader", "n_files", "per_file"),
    [
        pytest.param(2, LOADER, N_FILES, PER_FILE, id="shard-2"),
        pytest.param(2, FILES, 12, 8, id="files-2"),
        # the same contract as files-2 on 3 ranks: in make chaos
        pytest.param(3, FILES, 12, 8, id="files-3", marks=pytest.mark.extended),
    ],
)
def test_ranks_read_once_within_budget(
    s3: S3, tmp_path: Path, world: int, loader: dict, n_files: int, per_file: int
) -> None:
    urls = upload_corpus(s3, tmp_path, n_files=n_files, per_file=per_file)
    probe = sl.HDFSource(urls, cache_dir=tmp_path / "probe", storage_options=s3.options)
    sizes = [f.size for f in probe.remote_files().files]
    epochs = range(1, 2 * loader["partition_epoch"] + 1)  # two full passes
    files = {e: rank_files(probe, world, e, loader) for e in [*epochs, epochs[-1] + 1]}
    # the tightest budget the rule allows: the largest two-sub-epoch window of any rank
    windows = [files[e][r] | files[e + 1][r] for e in epochs for r in range(world)]
    budget = max(sum(sizes[f] for f in w) for w in windows)
    write_spec(tmp_path, s3, urls, str(tmp_path / "cache{rank}"), budget, loader)
    rc, console = launch(world, tmp_path, "run", "--epochs", *map(str, epochs))
    assert rc == 0, console
    results = [json.loads(result_path(tmp_path, "run", r).read_text()) for r in range(world)]
    for epoch in epochs:  # every sequence of the sub-epoch exactly once, equal steps
        want = planned_tags(probe, world, epoch, loader)
        assert sorted(seen_tags(tmp_path, "run", world, epoch)) == want
        assert len({res["epochs"][str(epoch)]["steps"] for res in results}) == 1
        if loader.get("distribution") == "files":  # the ranks' files of a sub-epoch are disjoint
            assert not set.intersection(*files[epoch])
    for r in range(world):
        needs = set().union(*(files[e][r] for e in files))
        got = fetched(tmp_path / f"cache{r}")
        assert set(got) <= {urls[f] for f in needs}  # only files this rank's plan reads
        assert FileCache(tmp_path / f"cache{r}").dir_high_water() <= budget
        for epoch in epochs:
            assert results[r]["epochs"][str(epoch)]["cache_high_water_bytes"] <= budget
    if loader.get("distribution") == "files":
        # network bytes: a file is fetched only by the rank it is given to, so all ranks together
        # fetch at most each sub-epoch's files once (with "shard" every rank fetches them all)
        total = sum(
            sizes[urls.index(u)] * n
            for r in range(world)
            for u, n in fetched(tmp_path / f"cache{r}").items()
        )
        assert total <= sum(sizes[f] for e in files for r in range(world) for f in files[e][r])


def test_ranks_sharing_a_cache_directory_fetch_each_file_once(s3: S3, tmp_path: Path) -> None:
    urls = upload_corpus(s3, tmp_path, n_files=N_FILES, per_file=PER_FILE)
    write_spec(tmp_path, s3, urls, str(tmp_path / "shared"), None)
    # the job waits for its look-ahead (sub-epoch 3's files) before it ends: an event, so the
    # files fetched do not depend on whether the job outran its prefetcher
    rc, console = launch(2, tmp_path, "run", "--epochs", "1", "2", "--finish-look-ahead")
    assert rc == 0, console
    got = fetched(tmp_path / "shared")
    assert set(got.values()) == {1}  # both ranks read these files; one fetched each
    assert set(got) == set(urls[:6])  # sub-epochs 1, 2 and the one fetched ahead


def test_kill_and_resume_fetches_only_missing_files(s3: S3, tmp_path: Path) -> None:
    urls = upload_corpus(s3, tmp_path, n_files=N_FILES, per_file=PER_FILE)
    write_spec(tmp_path, s3, urls, str(tmp_path / "cache{rank}"), None)
    rc, _ = launch(2, tmp_path, "run", "--epochs", "1", "2", "--kill-at", "2:2")
    assert rc != 0  # rank 0 was killed
    state = json.loads((tmp_path / "state.json").read_text())
    assert state["epoch"] == 2 and state["steps"] == 3
    before = {r: fetched(tmp_path / f"cache{r}") for r in range(2)}
    rc, console = launch(2, tmp_path, "resume", "--epochs", "2", "3", "--resume")
    assert rc == 0, console
    done = [e for r in range(2) for e in read_log(tmp_path, "run", r) if e["epoch"] == 2]
    first = [t for e in done if e["step"] < state["steps"] for t in e["tags"]]
    rest = seen_tags(tmp_path, "resume", 2, 2)
    want = sorted(f"utt-{i}" for i in range(2 * PER_FILE, 4 * PER_FILE))
    assert sorted(first + rest) == want  # epoch 2 exactly once across the kill
    for r in range(2):
        after = fetched(tmp_path / f"cache{r}")
        assert set(after.values()) == {1}, after  # nothing fetched twice: only what was missing
        assert set(before[r]) <= set(after)
