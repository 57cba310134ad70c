"""Real multi-process runs: ``torchrun --standalone`` (or ranks forked by
``torch.multiprocessing``) with gloo on CPU, DataLoader workers on each rank, a tiny DDP model. Every launch has a hard timeout, so a hang (unequal steps) fails the test
instead of blocking it.

- one epoch on two nodes of 1 rank each (two torchrun launchers; 2 and 3 ranks on one node in
  ``make chaos``): no hang, equal steps, every sequence exactly once, global ranks;
- ranks given different data / seeds: every rank fails at once, naming the ranks and what differs;
- a rank SIGKILLed at a random step after per-step checkpoints; a new run (same, more or fewer
  ranks, other worker counts) resumes: before + after = the epoch exactly once.
"""

from __future__ import annotations

import collections
import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "dist"))
from ddp_common import (
    LOADER_OPTIONS,
    MIX_RATES,
    MIX_SPLIT,
    N_SEQS,
    build_corpus,
    hdf_api,
    kill_tree,
    mix_corpus,
    read_log,
    result_path,
)

import seqloader as sl
from conftest import free_port
from fork_launches import run_forked

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).parent / "dist" / "train_ddp.py"
TIMEOUT_S = 180
ALL_TAGS = sorted(build_corpus().tags)


def launch(launcher: str, nproc: int, out: Path, phase: str, *args: str) -> tuple[int, str]:
    """Run ``train_ddp.py`` on ``nproc`` local ranks with real ``torchrun`` (``launcher="torchrun"``)
    or ``launch_fork.py`` (``"fork"``: ranks forked after one torch import, gradients synced by a
    plain all_reduce — the many short crash runs would otherwise spend most of their time importing
    torch and torch._dynamo; each launch forked from the session's ``fork_launches`` server); kill
    the whole process tree after ``TIMEOUT_S``."""
    script = ["--out", str(out), "--phase", phase, *args]
    if launcher == "torchrun":
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        cmd += [f"--nproc_per_node={nproc}", "--monitor-interval=0.1", str(SCRIPT), *script]
        return run_bounded(cmd, out / f"{phase}.console.txt", TIMEOUT_S)
    # a plain all_reduce per step instead of DDP: the same hang on unequal steps
    console = out / f"{phase}.console.txt"
    rc = run_forked([str(nproc), *script, "--grad-sync", "allreduce"], console, TIMEOUT_S)
    return rc, tail(console)


def run_bounded(cmd: list[str], console: Path, timeout_s: float) -> tuple[int, str]:
    """Run ``cmd`` (output to ``console``), killing its process tree after ``timeout_s``:
    (exit code, the console's tail)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    with open(console, "w") as f:  # a file, not a pipe: orphaned workers must not hold us up
        proc = subprocess.Popen(cmd, stdout=f, stderr=subprocess.STDOUT, env=env)
        try:
            rc = proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            kill_tree(proc.pid)
            proc.wait()
            pytest.fail(f"{console.name}: no exit after {timeout_s}s (a hang?)\n{tail(console)}")
    return rc, tail(console)


def tail(path: Path, chars: int = 4000) -> str:
    return path.read_text(errors="replace")[-chars:]


def results(out: Path, phase: str, world: int) -> list[dict]:
    return [json.loads(result_path(out, phase, r).read_text()) for r in range(world)]


def expected_steps(world: int, epoch: int, partition_epoch: int = 1) -> int:
    probe = sl.SeqLoader(
        build_corpus(), rank=0, world_size=world, partition_epoch=partition_epoch, **LOADER_OPTIONS
    )
    return probe.steps(epoch)


def hdf_corpus(folder: Path) -> tuple[list[str], str]:
    """``--hdf`` args of a real RETURNN HDF file of the corpus (opened by every rank and worker)
    and the source kind the ranks report; the memory corpus where this checkout has no HDF."""
    hdf = hdf_api()
    if hdf is None:
        return [], "memory"
    _, write_hdf = hdf
    write_hdf(folder / "corpus.hdf", build_corpus())
    return ["--hdf", str(folder / "corpus.hdf")], "hdf"


def check_epoch(out: Path, phase: str, world: int, kind: str) -> None:
    """Every rank ran the planned steps of epoch 1, complete, read from ``kind``; over the ranks
    every sequence of the corpus exactly once."""
    steps = expected_steps(world, 1)
    for res in results(out, phase, world):
        assert res["source"] == kind
        assert res["epochs"]["1"] == {"steps": steps, "planned_steps": steps, "complete": True}
    seen = []
    for r in range(world):
        log = read_log(out, phase, r)
        assert [e["step"] for e in log] == list(range(steps)), f"rank {r}"
        seen += [t for e in log for t in e["tags"]]
    assert sorted(seen) == ALL_TAGS  # the corpus, each sequence exactly once


# torchrun with 2 and 3 ranks on one node: make chaos. make test keeps torchrun's epoch run as the
# two-node run below (two launchers of 1 rank each, the same script, 1 worker per rank, the same
# HDF file and checks) and the 2- and 3-rank forked runs
@pytest.mark.extended
@pytest.mark.parametrize("world", [2, 3])
def test_ddp_epoch_exactly_once_equal_steps(tmp_path: Path, world: int) -> None:
    args, kind = hdf_corpus(tmp_path)
    rc, console = launch("torchrun", world, tmp_path, "run", "--workers", "1", *args)
    assert rc == 0, console
    check_epoch(tmp_path, "run", world, kind)


def test_two_nodes_use_global_ranks(tmp_path: Path) -> None:
    """Multi-node as torchrun runs it: two launchers (node ranks 0 and 1) meet at one rendezvous
    address. LOCAL_RANK (0 on both nodes) and LOCAL_WORLD_SIZE (1) are not the global rank and
    world size; the loader must use the global ones, or node 1 would replay node 0's share. One
    process per node: a second one per node, each importing torch, would check the same thing
    again. Also torchrun's epoch run: one DataLoader worker per rank reading the HDF file, equal
    steps, every sequence once."""
    hdf_args, kind = hdf_corpus(tmp_path)
    port = free_port()
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = []
    for node in (0, 1):
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nnodes=2", f"--node-rank={node}"]
        cmd += ["--nproc-per-node=1", "--master-addr=127.0.0.1", f"--master-port={port}"]
        cmd += ["--monitor-interval=0.1", str(SCRIPT), "--out", str(tmp_path), "--phase", "nodes"]
        cmd += ["--workers", "1", *hdf_args]
        console = open(tmp_path / f"node{node}.console.txt", "w")  # noqa: SIM115
        procs.append(
            (subprocess.Popen(cmd, stdout=console, stderr=subprocess.STDOUT, env=env), console)
        )
    try:
        for proc, _ in procs:
            proc.wait(timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        for proc, _ in procs:
            kill_tree(proc.pid)
        pytest.fail("two-node run: no exit (a hang?)")
    finally:
        for proc, console in procs:
            proc.wait()
            console.close()
    consoles = "\n".join(tail(tmp_path / f"node{n}.console.txt") for n in (0, 1))
    assert [proc.returncode for proc, _ in procs] == [0, 0], consoles
    res = results(tmp_path, "nodes", 2)
    assert sorted((r["node_rank"], r["local_rank"], r["rank"]) for r in res) == [
        (0, 0, 0),
        (1, 0, 1),
    ]
    check_epoch(tmp_path, "nodes", 2, kind)


def test_ranks_with_different_data_fail_fast_naming_them(tmp_path: Path) -> None:
    rc, console = launch("fork", 3, tmp_path, "mismatch", "--workers", "0", "--mismatch")
    assert rc != 0, console
    for res in results(tmp_path, "mismatch", 3):  # every rank raised, with the same diagnosis
        message = res["error"]
        assert "rank(s) [1, 2] differ from rank 0" in message, message
        assert "options.seed: ranks [0, 1]" in message and "ranks [2]" in message, message
        assert f"MemorySource({N_SEQS - 1} seqs" in message, message
        assert f"(this is rank {res['rank']})" in message
    for r in range(3):
        assert read_log(tmp_path, "mismatch", r) == []  # failed before the first batch


def consumed_before(log: list[dict], state: dict) -> list[dict]:
    """The records a checkpoint's loader state counts as consumed."""
    epoch, steps = state["epoch"], state["steps"]
    return [e for e in log if e["epoch"] < epoch or (e["epoch"] == epoch and e["step"] < steps)]


@pytest.mark.parametrize(
    ("before", "after", "partition_epoch"),
    [
        ((1, 2), (1, 0), 1),  # (world size, workers): same world, 2 workers -> none
        ((2, 1), (3, 1), 2),  # elastic 2 -> 3, over two sub-epochs (maybe across the boundary)
        ((3, 1), (2, 0), 1),  # elastic 3 -> 2
    ],
)
def test_sigkill_then_resume_exactly_once(
    tmp_path: Path, before: tuple[int, int], after: tuple[int, int], partition_epoch: int
) -> None:
    (world_a, workers_a), (world_b, workers_b) = before, after
    epochs = partition_epoch  # together one full pass over the corpus
    per_epoch = [expected_steps(world_a, e, partition_epoch) for e in range(1, epochs + 1)]
    rng = random.Random()
    g = rng.randrange(sum(per_epoch))
    epoch = 1
    while g >= per_epoch[epoch - 1]:
        g -= per_epoch[epoch - 1]
        epoch += 1
    kill_rank = rng.randrange(world_a)
    where = f"kill rank {kill_rank} of {world_a} at epoch {epoch} step {g}"
    ckpt = tmp_path / "ckpt.json"
    common = ["--epochs", str(epochs), "--partition-epoch", str(partition_epoch)]
    common += ["--checkpoint", str(ckpt), "--resume"]
    rc, console = launch(
        "fork",
        world_a,
        tmp_path,
        "a",
        *common,
        "--workers",
        str(workers_a),
        "--kill-at",
        f"{epoch}:{g}",
        "--kill-rank",
        str(kill_rank),
    )
    assert rc != 0, f"{where}: the run was not killed\n{console}"
    last = read_log(tmp_path, "a", kill_rank)[-1]
    assert (last["epoch"], last["step"]) == (epoch, g), where
    state = json.loads(ckpt.read_text())["loader"] if ckpt.exists() else {"epoch": 0, "steps": 0}

    rc, console = launch("fork", world_b, tmp_path, "b", *common, "--workers", str(workers_b))
    assert rc == 0, f"{where}; resumed from {state}\n{console}"

    seen = collections.Counter()
    for r in range(world_a):
        done = consumed_before(read_log(tmp_path, "a", r), state)
        assert len(done) == sum(per_epoch[: max(state["epoch"] - 1, 0)]) + state["steps"], where
        seen.update(t for e in done for t in e["tags"])
    steps_b = []
    for r in range(world_b):
        log = read_log(tmp_path, "b", r)
        steps_b.append([(e["epoch"], e["step"]) for e in log])
        seen.update(t for e in log for t in e["tags"])
    assert all(s == steps_b[0] for s in steps_b), f"{where}: unequal steps after resume"
    if steps_b[0] and state["epoch"] >= 1 and not state["epoch_complete"]:
        assert steps_b[0][0] == (state["epoch"], state["steps"]), where  # step numbers go on
    assert sorted(seen) == ALL_TAGS, f"{where}; resumed from {state}: not exactly once"
    for res in results(tmp_path, "b", world_b):
        assert all(ep["complete"] for ep in res["epochs"].values()), res


def chunk_tags(probe: sl.SeqLoader) -> list[str]:
    """Epoch 1's chunks as the log names them (TAG#CHUNK), sorted."""
    sub = probe.planner.sub_epoch_units(1)
    return sorted(f"{probe.source.tag(int(i))}#{c}" for i, c in zip(sub.seqs, sub.chunks))


@pytest.mark.parametrize("planning", ["global", "indexed"])
def test_ddp_chunked_epoch_every_chunk_exactly_once(tmp_path: Path, planning: str) -> None:
    """Chunking over gloo (2 ranks forked after one torch import, 2 DataLoader workers each,
    audited), with global and indexed planning: equal steps (no hang), every chunk of the epoch
    exactly once across ranks x workers. (torchrun's own environment:
    test_ddp_epoch_exactly_once_equal_steps.)"""
    # 'global' said: laplace with chunking resolves to indexed under the default 'auto'
    chosen = {"planning": "global"}
    if planning == "indexed":
        chosen = {"planning": "indexed", "ordering": "buckets:3"}
    args = ["--workers", "2", "--chunking", "4:3", "--audit", "--partition-epoch", "2"]
    args += [f"--{k}={v}" for k, v in chosen.items()]
    rc, console = launch("fork", 2, tmp_path, "run", *args)
    assert rc == 0, console
    probe = sl.SeqLoader(
        build_corpus(),
        rank=0,
        world_size=2,
        partition_epoch=2,
        chunking="4:3",
        **{**LOADER_OPTIONS, **chosen},
    )
    assert probe.planner.options.planning == planning  # what ran is what the id says
    steps = probe.steps(1)
    chunks = probe.planner.chunks
    assert chunks is not None
    want = chunk_tags(probe)
    seen = []
    for r in range(2):
        log = read_log(tmp_path, "run", r)
        assert [e["step"] for e in log] == list(range(steps)), f"rank {r}"
        seen += [t for e in log for t in e["tags"]]
    assert sorted(seen) == want
    assert len(want) > len({t.split("#")[0] for t in want})  # sequences gave several chunks


@pytest.mark.parametrize(
    "chunking", [None, pytest.param("4:3", marks=pytest.mark.extended)]
)  # chunked: its epoch over gloo is test_ddp_chunked_epoch_every_chunk_exactly_once[indexed]
def test_ddp_indexed_planning_exactly_once_and_elastic_resume(
    tmp_path: Path, chunking: str | None
) -> None:
    """``planning="indexed"`` over gloo (3 forked ranks, 2 DataLoader workers each, audited):
    equal steps (no hang), every sequence (chunked: every chunk, TAG#CHUNK) once; then a run
    killed mid-epoch resumes on 2 ranks (no workers): before + after = the epoch exactly once."""
    indexed = ["--planning", "indexed", "--ordering", "buckets:3"]
    options = {**LOADER_OPTIONS, "ordering": "buckets:3", "planning": "indexed"}
    if chunking:
        indexed += ["--chunking", chunking]
        options["chunking"] = chunking
    rc, console = launch("fork", 3, tmp_path, "run", *indexed, "--workers", "2", "--audit")
    assert rc == 0, console
    probe = sl.SeqLoader(build_corpus(), rank=0, world_size=3, **options)
    steps = probe.steps(1)
    want = ALL_TAGS
    if chunking:
        want = chunk_tags(probe)
    seen = []
    for r in range(3):
        log = read_log(tmp_path, "run", r)
        assert [e["step"] for e in log] == list(range(steps)), f"rank {r}"
        seen += [t for e in log for t in e["tags"]]
    assert sorted(seen) == want

    ckpt = tmp_path / "ckpt.json"
    common = [*indexed, "--checkpoint", str(ckpt), "--resume", "--workers", "0"]
    kill = ["--kill-at", f"1:{steps // 2}", "--kill-rank", "1"]
    rc, console = launch("fork", 3, tmp_path, "a", *common, *kill)
    assert rc != 0, console
    state = json.loads(ckpt.read_text())["loader"]
    assert state["planning"] == "indexed"
    rc, console = launch("fork", 2, tmp_path, "b", *common)
    assert rc == 0, console
    done = collections.Counter()
    for r in range(3):
        done.update(
            t for e in consumed_before(read_log(tmp_path, "a", r), state) for t in e["tags"]
        )
    for r in range(2):
        done.update(t for e in read_log(tmp_path, "b", r) for t in e["tags"])
    assert sorted(done.elements()) == want


def test_ddp_indexed_mix_every_corpus_epoch_once_and_elastic_resume(tmp_path: Path) -> None:
    """An indexed mix (corpora a at 0.5, b at 2.0; ``buckets:3``) over gloo (3 forked ranks, 2
    workers each, audited) over 2 epochs: equal steps, every a sequence once (one corpus
    epoch), every b sequence 4 times; then a run killed mid-epoch 2 resumes on 2 ranks: before +
    after = the same uses."""
    indexed = ["--planning", "indexed", "--ordering", "buckets:3", "--mix", "--epochs", "2"]
    rc, console = launch("fork", 3, tmp_path, "run", *indexed, "--workers", "2", "--audit")
    assert rc == 0, console
    options = {**LOADER_OPTIONS, "ordering": "buckets:3", "planning": "indexed", "mix": MIX_RATES}
    planner = sl.SeqLoader(mix_corpus(), rank=0, world_size=3, **options)
    steps = {e: planner.steps(e) for e in (1, 2)}
    want = collections.Counter({t: 1 for t in ALL_TAGS[:MIX_SPLIT]})
    want.update({t: 4 for t in ALL_TAGS[MIX_SPLIT:]})
    seen: collections.Counter = collections.Counter()
    for r in range(3):
        log = read_log(tmp_path, "run", r)
        for e in (1, 2):
            assert [x["step"] for x in log if x["epoch"] == e] == list(range(steps[e])), r
        seen.update(t for x in log for t in x["tags"])
    assert seen == want
    for res in results(tmp_path, "run", 3):  # the gathered audit of each epoch: every use once
        for e in (1, 2):
            audit = res["epochs"][str(e)]["audit"]
            assert audit["ok"] and audit["mixed"], audit

    ckpt = tmp_path / "ckpt.json"
    common = [*indexed, "--checkpoint", str(ckpt), "--resume", "--workers", "0"]
    kill = ["--kill-at", f"2:{steps[2] // 2}", "--kill-rank", "1"]
    rc, console = launch("fork", 3, tmp_path, "a", *common, *kill)
    assert rc != 0, console
    state = json.loads(ckpt.read_text())["loader"]
    assert state["planning"] == "indexed" and state["epoch"] == 2
    rc, console = launch("fork", 2, tmp_path, "b", *common)
    assert rc == 0, console
    done: collections.Counter = collections.Counter()
    for r in range(3):
        done.update(
            t for e in consumed_before(read_log(tmp_path, "a", r), state) for t in e["tags"]
        )
    for r in range(2):
        done.update(t for e in read_log(tmp_path, "b", r) for t in e["tags"])
    assert done == want
