"""``distribution="files"`` through ``SeqLoader``: real DataLoader workers (fork and spawn) give
the same batches as the main process (C3), each rank reads only its own files, the audit checks
the epoch (also after an elastic resume, across ranks), and ``seqloader check`` simulates it."""

from __future__ import annotations

import re
from collections import Counter

import numpy as np
import pytest

import seqloader as sl
from conftest import batch_record, index_corpus
from seqloader.cli.main import main
from seqloader.errors import OptionError
from seqloader.plan.position import Position
from seqloader.plan.topology import Topology
from seqloader.trainer.audit import EpochAuditor

pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

N, FILE_SIZE = 90, 6  # 15 files of 6 sequences
PLAN = {
    "distribution": "files",
    "ordering": "laplace:.6",
    "max_seqs": 4,
    "max_frames": 60,
    "partition_epoch": 2,
    "seed": 3,
}


def files_source() -> sl.MemorySource:
    whole = index_corpus(N, seed=1, max_len=20, dim=1)
    data = [whole.read(i)["data"] for i in range(N)]
    return sl.MemorySource(
        {"data": data}, list(whole.tags), file_bounds=np.arange(0, N + 1, FILE_SIZE)
    )


def run(rank: int, world: int, epochs=(1, 2, 3), **options) -> dict[int, list[tuple]]:
    with sl.SeqLoader(files_source(), rank=rank, world_size=world, **PLAN, **options) as loader:
        return {e: [batch_record(b) for b in loader.epoch(e)] for e in epochs}


def real_seqs(records: list[tuple]) -> list[int]:
    return [i for r in records for i, m in zip(r.seqs, r.mask) if m]


#: chunking with files: a chunk is the unit, and stays with its file's rank
CHUNKED = {"chunking": "7:4", "min_chunk_size": 2}


@pytest.mark.parametrize("extra", [{}, CHUNKED], ids=["whole", "chunked"])
def test_workers_change_nothing_and_ranks_read_their_own_files(extra: dict) -> None:
    world, epochs = 3, (1, 2, 3)
    per_rank = {}
    for rank in range(world):
        reference = run(rank, world, epochs, num_workers=0, **extra)
        forked = run(rank, world, epochs, num_workers=2, multiprocessing_context="fork", **extra)
        assert forked == reference
        per_rank[rank] = reference
    for epoch in epochs:
        assert len({len(per_rank[r][epoch]) for r in range(world)}) == 1  # equal steps
        files = [{i // FILE_SIZE for i in real_seqs(per_rank[r][epoch])} for r in range(world)]
        assert all(files) and not (
            files[0] & files[1] or files[0] & files[2] or files[1] & files[2]
        )
        assert len(set().union(*files)) in (7, 8)  # a sub-epoch: about half of the 15 files
    full_epoch = Counter(i for r in range(world) for e in (1, 2) for i in real_seqs(per_rank[r][e]))
    with sl.SeqLoader(files_source(), **PLAN, **extra) as loader:  # units per sequence
        table = loader.planner.chunks
        per_seq = np.ones(N, dtype=np.int64) if table is None else table.counts
    assert full_epoch == Counter({i: int(c) for i, c in enumerate(per_seq) if c})


@pytest.mark.slow
def test_spawned_workers_give_the_same_batches() -> None:
    reference = run(1, 2, (1,), num_workers=0)
    # one spawned worker (each imports torch): the pickling is the point; two workers: fork tests
    assert run(1, 2, (1,), num_workers=1, multiprocessing_context="spawn") == reference


@pytest.mark.parametrize("extra", [{}, CHUNKED], ids=["whole", "chunked"])
def test_audit_passes_per_rank_and_after_an_elastic_resume(extra: dict) -> None:
    states = []
    for rank in range(2):
        loader = sl.SeqLoader(files_source(), rank=rank, world_size=2, audit=True, **PLAN, **extra)
        gen = loader.epoch(1)
        for _ in range(3):
            next(gen)
        states.append(loader.state_dict())
        gen.close()
        rest = sl.SeqLoader(files_source(), rank=rank, world_size=2, audit=True, **PLAN, **extra)
        for _ in rest.epoch(1):
            pass
        audit = rest.report().audit
        assert audit is not None and audit.ok and audit.scope == "rank", audit.format()
    assert states[0] == states[1]
    resumed = sl.SeqLoader(files_source(), audit=True, **PLAN, **extra)  # one rank takes over
    resumed.load_state_dict(states[0])
    for _ in resumed.epoch(1):
        pass
    audit = resumed.report().audit
    assert audit.ok and audit.scope == "single rank", audit.format()
    assert audit.unchecked == states[0]["seqs_consumed"] > 0
    sub_epoch = len(resumed.planner.sub_epoch_order(1))
    assert audit.delivered == audit.expected == sub_epoch - audit.unchecked
    assert resumed.state_dict()["segment_history"] == [[2, 3]]


def auditor_payloads(planner, plan, position: Position, world: int, lose: int | None = None):
    """Every rank's audit payload for a faithful run of ``plan`` from ``position`` (``lose``: a
    sequence the loop never received)."""
    auditors, payloads = [], []
    for rank in range(world):
        share = plan.rank_share(rank, position.steps)
        auditor = EpochAuditor.for_run(
            "error", planner, plan, share, Topology(rank, world), position, files_source(), False
        )
        delivered = share.seqs[share.real]
        if lose is not None:
            delivered = delivered[delivered != lose]
        auditor._delivered.append(delivered)
        auditor._received = len(share)
        auditors.append(auditor)
        payloads.append(auditor.payload())
    return auditors, payloads


@pytest.mark.parametrize(
    "extra",
    [{}, CHUNKED, {"planning": "indexed"}, {"planning": "indexed", **CHUNKED}],
    ids=["whole", "chunked", "indexed", "indexed chunked"],
)
def test_gathered_audit_checks_the_sub_epoch_after_elastic_resumes(extra: dict) -> None:
    """The all-ranks audit of a segment after 2 -> 3 ranks: what is due is the sub-epoch less
    what earlier segments consumed, whatever this segment's plan; a lost sequence is found
    (chunked: each of its chunks this segment plans)."""
    loader = sl.SeqLoader(files_source(), **PLAN, **extra)
    planner = loader.planner
    plan, position = sl.plan.continue_plan(planner, Position(1, 0, 2, 0), 2)
    position = position.advanced(2)
    plan, position = sl.plan.continue_plan(planner, position.advanced(0), 3)
    assert position.history == ((2, 2),)
    auditors, payloads = auditor_payloads(planner, plan, position, 3)
    result = auditors[0].verify(payloads)
    assert result.ok and result.scope == "all ranks", result.format()
    assert result.unchecked == position.segment_start
    assert result.expected == len(planner.sub_epoch_order(1)) - position.segment_start
    lost = int(plan.rank_share(1).seqs[0])
    auditors, payloads = auditor_payloads(planner, plan, position, 3, lose=lost)
    bad = auditors[0].verify(payloads)
    rows = int(np.count_nonzero(plan.batches.seqs[plan.batches.real] == lost))
    assert not bad.ok and bad.missing == rows and f"sequence {lost}" in bad.examples[0]
    assert f"{rows} missing" in bad.format()


def test_check_simulates_files_distribution(capsys, tmp_path) -> None:
    source = files_source()
    paths = []
    for f in range(N // FILE_SIZE):
        part = range(f * FILE_SIZE, (f + 1) * FILE_SIZE)
        path = tmp_path / f"part-{f:02d}.hdf"
        sl.write_hdf(
            path,
            sl.MemorySource(
                {"data": [source.read(i)["data"] for i in part]}, [source.tag(i) for i in part]
            ),
        )
        paths.append(path)
    code = main(["check", *map(str, paths), "--distribution", "files", "--world-size", "3",
                 "--partition-epoch", "2", "--max-seqs", "4", "--epochs", "2", "--no-progress"])  # fmt: skip
    out = capsys.readouterr().out
    assert code == 0, out
    assert "C1 exactly-once: ok" in out and "C2 equal steps: ok" in out
    reads = [int(x) for x in re.findall(r"rank \d: .*?, (\d+) files", out)]
    assert len(reads) == 6 and sum(reads[:3]) + sum(reads[3:]) == 15  # 2 sub-epochs x 3 ranks
    code = main(["check", *map(str, paths[:3]), "--distribution", "files", "--world-size", "2",
                 "--partition-epoch", "2", "--no-progress"])  # fmt: skip
    err = capsys.readouterr().err
    assert code == 2 and "needs at least partition_epoch * world_size = 2 * 2 = 4 files" in err


def test_too_few_files_are_refused_by_the_loader_naming_the_fix() -> None:
    source = sl.MemorySource({"data": [np.zeros((3, 1))] * 4})  # one file by default
    with pytest.raises(OptionError, match=r"has 1\. Fix"):
        sl.SeqLoader(source, distribution="files", rank=0, world_size=2)
