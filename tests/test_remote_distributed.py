"""Ranks under torchrun (gloo) reading s3:// HDF files from moto's S3 server through the plan-driven
cache (``tests/dist/train_remote.py``): every sequence exactly once, equal steps, each rank's cache
within its budget and holding only files its plan reads, one fetch per file for ranks sharing a
cache directory, and a kill + resume that fetches only what was missing."""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path

import pytest

import seqloader as sl
from remote_s3 import S3, s3_endpoint_fixture, s3_fixture, upload_corpus  # noqa: F401 (fixtures)
from seqloader.sources.remote import FileCache
from seqloader.torch.prefetch import files_in_order
from test_distributed_torchrun import run_bounded

sys.path.insert(0, str(Path(__file__).parent / "dist"))
from ddp_common import read_log, result_path

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).parent / "dist" / "train_remote.py"
TIMEOUT_S = 240
N_FILES, PER_FILE = 8, 10
LOADER = {"ordering": "default", "partition_epoch": 4, "max_seqs": 3, "num_workers": 1, "seed": 5}


def launch(world: int, out: Path, phase: str, *args: str) -> tuple[int, str]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
    cmd += [f"--nproc_per_node={world}", "--monitor-interval=0.1", str(SCRIPT)]
    cmd += ["--spec", str(out / "spec.json"), "--out", str(out), "--phase", phase, *args]
    return run_bounded(cmd, out / f"{phase}.console.txt", TIMEOUT_S)


def write_spec(out: Path, s3: S3, urls: list[str], cache_dir: str, budget: int | None) -> None:
    spec = {
        "urls": urls,
        "storage_options": s3.options,
        "cache_dir": cache_dir,
        "cache_bytes": budget,
        "loader": LOADER,
    }
    (out / "spec.json").write_text(json.dumps(spec))


def fetched(cache_dir: Path) -> collections.Counter:
    return collections.Counter(url for _, _, url in FileCache(cache_dir).fetch_log())


def planned(source: sl.HDFSource, world: int, epochs: range) -> list[set[str]]:
    """Per rank, the URLs its plan reads in ``epochs`` and the one after (fetched ahead)."""
    remote = source.remote_files()
    out = []
    for r in range(world):
        loader = sl.SeqLoader(source, rank=r, world_size=world, **LOADER)
        files: set[int] = set()
        for e in [*epochs, epochs[-1] + 1]:
            files |= set(files_in_order(remote, loader.global_plan(e).rank_share(r)).tolist())
        out.append({remote.files[f].url for f in files})
    return out


def seen_tags(out: Path, phase: str, world: int, epoch: int) -> list[str]:
    return [t for r in range(world) for e in read_log(out, phase, r) if e["epoch"] == epoch
            for t in e["tags"]]  # fmt: skip


@pytest.mark.parametrize("world", [2, 3])
def test_ranks_read_once_within_budget(s3: S3, tmp_path: Path, world: int) -> None:
    urls = upload_corpus(s3, tmp_path, n_files=N_FILES, per_file=PER_FILE)
    probe = sl.HDFSource(urls, cache_dir=tmp_path / "probe", storage_options=s3.options)
    sizes = [f.size for f in probe.remote_files().files]
    budget = max(sum(sizes[i : i + 4]) for i in range(len(sizes) - 3))
    write_spec(tmp_path, s3, urls, str(tmp_path / "cache{rank}"), budget)
    epochs = range(1, 5)  # one full pass in 4 sub-epochs
    rc, console = launch(world, tmp_path, "run", "--epochs", *map(str, epochs))
    assert rc == 0, console
    for epoch in epochs:
        assert sorted(seen_tags(tmp_path, "run", world, epoch)) == sorted(
            f"utt-{i}" for i in range(N_FILES * PER_FILE)
            if (epoch - 1) * 2 <= i // PER_FILE < epoch * 2
        )  # fmt: skip
    steps = {r: json.loads(result_path(tmp_path, "run", r).read_text()) for r in range(world)}
    for epoch in epochs:
        counts = {steps[r]["epochs"][str(epoch)]["steps"] for r in range(world)}
        assert len(counts) == 1  # equal steps
    needs = planned(probe, world, epochs)
    for r in range(world):
        got = fetched(tmp_path / f"cache{r}")
        assert set(got) <= needs[r]  # only files this rank's plan reads
        assert FileCache(tmp_path / f"cache{r}").dir_high_water() <= budget
        for epoch in epochs:
            assert steps[r]["epochs"][str(epoch)]["cache_high_water_bytes"] <= budget


def test_ranks_sharing_a_cache_directory_fetch_each_file_once(s3: S3, tmp_path: Path) -> None:
    urls = upload_corpus(s3, tmp_path, n_files=N_FILES, per_file=PER_FILE)
    write_spec(tmp_path, s3, urls, str(tmp_path / "shared"), None)
    rc, console = launch(2, tmp_path, "run", "--epochs", "1", "2")
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
