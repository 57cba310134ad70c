"""``distribution="files"`` with real processes over real HDF files: ranks forked after one torch
import (``tests/dist/launch_fork.py``: gloo, one all_reduce per step, a DataLoader worker per rank;
torchrun's own environment is ``test_distributed_torchrun.py``'s) read a corpus written to 12 HDF
files. Per sub-epoch every rank reads only its own files (disjoint across ranks), all ranks take
the same number of steps (the all_reduce would hang otherwise), the full epoch holds every
sequence exactly once, and the gathered audit agrees. A run killed mid-epoch resumes on another
number of ranks (elastic): before + after = the epoch exactly once."""

from __future__ import annotations

import collections
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "dist"))
from ddp_common import LOADER_OPTIONS, build_corpus, read_log

import seqloader as sl
from test_distributed_torchrun import ALL_TAGS, consumed_before, launch, results

pytestmark = pytest.mark.slow

N_FILES = 12


def write_files(out: Path) -> tuple[list[Path], dict[str, int]]:
    """The DDP corpus cut into ``N_FILES`` HDF files of 8-9 sequences -> (paths, tag -> file)."""
    corpus = build_corpus()
    n = len(corpus)
    paths, file_of = [], {}
    for f in range(N_FILES):
        part = range(f * n // N_FILES, (f + 1) * n // N_FILES)
        src = sl.MemorySource(
            {"data": [corpus.read(i)["data"] for i in part]}, [corpus.tag(i) for i in part]
        )
        path = out / f"part-{f:02d}.hdf"
        sl.write_hdf(path, src)
        paths.append(path)
        file_of.update({corpus.tag(i): f for i in part})
    return paths, file_of


def planned_steps(paths: list[Path], world: int, epoch: int, planning: str = "auto") -> int:
    loader = sl.SeqLoader(
        sl.HDFSource(paths),
        rank=0,
        world_size=world,
        distribution="files",
        partition_epoch=2,
        planning=planning,
        **LOADER_OPTIONS,
    )
    return loader.steps(epoch)


@pytest.mark.parametrize("world", [2, 3])
def test_ranks_read_only_their_files(tmp_path: Path, world: int) -> None:
    paths, file_of = write_files(tmp_path)
    args = ["--workers", "1", "--distribution", "files", "--partition-epoch", "2"]
    args += ["--epochs", "2", "--audit", "--hdf", *map(str, paths)]
    rc, console = launch("fork", world, tmp_path, "files", *args)
    assert rc == 0, console
    seen = collections.Counter()
    for epoch in (1, 2):
        steps = planned_steps(paths, world, epoch)
        files = []
        for r in range(world):
            log = [e for e in read_log(tmp_path, "files", r) if e["epoch"] == epoch]
            assert [e["step"] for e in log] == list(range(steps)), f"rank {r} epoch {epoch}"
            tags = [t for e in log for t in e["tags"]]
            seen.update(tags)
            files.append({file_of[t] for t in tags})
        assert all(files), f"epoch {epoch}: a rank read no file"
        for a in range(world):
            for b in range(a + 1, world):
                assert not files[a] & files[b], f"epoch {epoch}: ranks {a}, {b} share a file"
        assert len(set().union(*files)) in range(N_FILES // 2 - 1, N_FILES // 2 + 2)  # ~1/P
        for res in results(tmp_path, "files", world):
            audit = res["epochs"][str(epoch)]["audit"]
            assert audit["ok"] and audit["scope"] == "all ranks", audit
            assert audit["rank_ids"] == list(range(world))
    assert sorted(seen.elements()) == ALL_TAGS  # the full epoch: every sequence exactly once


@pytest.mark.parametrize(
    ("before", "after", "planning"),
    [
        (2, 3, "global"),
        # global files plans shrinking: the same contract as growing, in make chaos; indexed
        # files grow 2 -> 3 in test_indexed_sets_torchrun's elastic set
        pytest.param(3, 2, "global", marks=pytest.mark.extended),
        (3, 2, "indexed"),
    ],
)
def test_killed_files_run_resumes_elastically(
    tmp_path: Path, before: int, after: int, planning: str
) -> None:
    paths, _ = write_files(tmp_path)
    steps = planned_steps(paths, before, 1, planning)
    kill = max(1, steps // 2)
    ckpt = tmp_path / "ckpt.json"
    common = ["--distribution", "files", "--partition-epoch", "2", "--epochs", "2", "--workers"]
    common += ["0", "--checkpoint", str(ckpt), "--resume", "--hdf", *map(str, paths)]
    common += ["--planning", planning]
    rc, console = launch("fork", before, tmp_path, "a", *common, "--kill-at", f"1:{kill}")
    assert rc != 0, f"the run was not killed\n{console}"
    state = json.loads(ckpt.read_text())["loader"]
    assert state["epoch"] == 1 and state["steps"] == kill and not state["epoch_complete"]
    rc, console = launch("fork", after, tmp_path, "b", *common)
    assert rc == 0, f"resumed from {state}\n{console}"
    seen = collections.Counter()
    for r in range(before):
        seen.update(
            t for e in consumed_before(read_log(tmp_path, "a", r), state) for t in e["tags"]
        )
    steps_b = []
    for r in range(after):
        log = read_log(tmp_path, "b", r)
        steps_b.append([(e["epoch"], e["step"]) for e in log])
        seen.update(t for e in log for t in e["tags"])
    assert all(s == steps_b[0] for s in steps_b), "unequal steps after the elastic resume"
    assert steps_b[0][0] == (1, kill)  # step numbers go on
    assert sorted(seen.elements()) == ALL_TAGS  # epochs 1 + 2 = one full epoch, exactly once


def test_indexed_files_drop_over_real_ranks(tmp_path: Path) -> None:
    """``files`` with ``uneven="drop"`` under indexed planning on 3 forked ranks: every rank takes
    the planned steps (fewer than the longest rank's batches: 2 and 3 sequences dropped in the two
    sub-epochs), no sequence twice, what is missing of the full epoch is exactly what the plans
    count as dropped, and the gathered audit agrees (the dropped ones are not reported missing)."""
    paths, _ = write_files(tmp_path)
    args = ["--workers", "1", "--distribution", "files", "--partition-epoch", "2", "--epochs"]
    args += ["2", "--audit", "--planning", "indexed", "--uneven", "drop", "--hdf", *map(str, paths)]
    rc, console = launch("fork", 3, tmp_path, "drop", *args)
    assert rc == 0, console
    probe = sl.SeqLoader(
        sl.HDFSource(paths), rank=0, world_size=3, distribution="files", partition_epoch=2,
        planning="indexed", uneven="drop", **LOADER_OPTIONS,
    )  # fmt: skip
    seen: collections.Counter = collections.Counter()
    dropped = 0
    for epoch in (1, 2):
        steps, plan = probe.steps(epoch), probe.planner.global_plan(epoch, 3)
        dropped += plan.dropped
        for r in range(3):
            log = [e for e in read_log(tmp_path, "drop", r) if e["epoch"] == epoch]
            assert [e["step"] for e in log] == list(range(steps)), f"rank {r} epoch {epoch}"
            seen.update(t for e in log for t in e["tags"])
        for res in results(tmp_path, "drop", 3):
            audit = res["epochs"][str(epoch)]["audit"]
            assert audit["ok"] and audit["scope"] == "all ranks", audit
    assert dropped > 0 and max(seen.values()) == 1
    assert set(seen) <= set(ALL_TAGS) and len(ALL_TAGS) - len(seen) == dropped
