"""Epoch audit (``SeqLoader(audit=...)``): passes on every correct run, catches injected faults.

Faults are injected where real bugs would sit: a sampler that repeats a batch (a worker-side or
resume bug), a rank share that loses its last batch (the double-sharding bug of RETURNN #1738), and
two processes that both believe they are rank 0.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import seqloader as sl
from conftest import ORDERINGS, free_port, index_corpus
from seqloader.errors import AuditError, AuditWarning, OptionError, SequenceSkipped
from seqloader.plan.greedy.distribute import GlobalPlan
from seqloader.torch.dataset import PlanSampler
from seqloader.trainer.checks import CheckOptions
from test_plan_indexed_files_mix import mixes


def run_epoch(loader: sl.SeqLoader, epoch: int = 1) -> sl.EpochReport:
    for _ in loader.epoch(epoch):
        pass
    return loader.report()


@settings(max_examples=30, deadline=None)
@given(
    n=st.integers(1, 70),
    ordering=st.sampled_from(ORDERINGS),
    max_seqs=st.integers(1, 6),
    partition=st.integers(1, 3),
    world=st.integers(1, 3),
    uneven=st.sampled_from(["split", "pad", "drop"]),
    epoch=st.integers(1, 4),
    distribution=st.sampled_from(["shard", "random_seed_offset"]),
)
def test_audit_passes_on_every_correct_plan(
    n, ordering, max_seqs, partition, world, uneven, epoch, distribution
):
    src = index_corpus(n, seed=n)
    total_delivered = 0
    for rank in range(world):
        loader = sl.SeqLoader(
            src,
            ordering=ordering,
            max_seqs=max_seqs,
            partition_epoch=partition,
            uneven=uneven,
            distribution=distribution,
            rank=rank,
            world_size=world,
            audit=True,
            checks=CheckOptions(empty="error"),
        )
        report = run_epoch(loader, epoch)
        audit = report.audit
        assert audit is not None and audit.ok, audit.format()
        assert audit.scope == ("single rank" if world == 1 else "rank")
        assert audit.delivered == report.seqs
        total_delivered += audit.delivered
        assert "audit ok" in report.format()
    sub_epoch = len(
        sl.SeqLoader(src, partition_epoch=partition, ordering=ordering).planner.sub_epoch_order(
            epoch
        )
    )
    # the ranks together: the sub-epoch once (shard), or once per rank (random_seed_offset)
    passes = world if distribution == "random_seed_offset" else 1
    assert total_delivered == passes * sub_epoch - report.dropped


def test_audit_off_by_default_and_option_checked():
    loader = sl.SeqLoader(index_corpus(10), max_seqs=3)
    assert run_epoch(loader).audit is None
    with pytest.raises(OptionError, match="audit: got 'yes'"):
        sl.SeqLoader(index_corpus(10), audit="yes")


def test_audit_catches_a_repeated_batch(monkeypatch):
    """A sampler that delivers its first batch twice (and so never the last): the per-batch check
    sees step 0 where step 1 was due, the epoch check sees repeats and missing sequences."""
    original = PlanSampler.__iter__

    def repeat_first(self):
        specs = list(original(self))
        yield from [specs[0], *specs[:-1]]

    monkeypatch.setattr(PlanSampler, "__iter__", repeat_first)
    loader = sl.SeqLoader(index_corpus(30), max_seqs=4, audit=True)
    with pytest.raises(AuditError) as err:
        run_epoch(loader)
    message = str(err.value)
    assert "audit FAILED" in message and "missing" in message and "repeated" in message
    assert "expected epoch 1 step 1, got epoch 1 step 0" in message
    assert "sequence 0 (tag 'utt-0') (2 times)" in message
    audit = loader.report().audit
    assert audit.repeated == 4 and audit.missing == 30 - 4 * 7 and audit.batch_errors == 7


def test_audit_catches_a_lost_batch_and_warns_when_asked(monkeypatch):
    """A rank share that loses its last batch (double sharding) delivers a consistent but short
    epoch: only the comparison with the planner's order catches it."""
    original = GlobalPlan.rank_share

    def lossy(self, rank, start_step=0):
        share = original(self, rank, start_step)
        return share.take(np.arange(max(len(share) - 1, 0)))

    monkeypatch.setattr(GlobalPlan, "rank_share", lossy)  # the greedy algorithm's plan
    loader = sl.SeqLoader(index_corpus(30), max_seqs=4, audit="warn", planning="global")
    with pytest.warns(AuditWarning, match="2 missing"):
        report = run_epoch(loader)
    assert not report.audit.ok and report.audit.missing == 2 and report.audit.batch_errors == 0
    assert "audit FAILED on the single rank: 2 missing" in report.format()
    assert "missing: sequence 28 (tag 'utt-28')" in " ".join(report.audit.examples)


def test_audit_after_resume_checks_only_the_rest():
    src = index_corpus(50)
    first = sl.SeqLoader(src, ordering="random", max_seqs=4, seed=5, audit=True)
    gen = first.epoch(2)
    for _ in range(5):
        next(gen)
    state = first.state_dict()
    gen.close()
    resumed = sl.SeqLoader(src, ordering="random", max_seqs=4, seed=5, audit=True)
    resumed.load_state_dict(state)
    audit = run_epoch(resumed, 2).audit
    assert audit.ok, audit.format()
    assert audit.unchecked == state["seqs_consumed"] == 20
    assert audit.delivered == audit.expected == 30
    assert "20 before the resume position not checked" in audit.format()


class SkippingSource(sl.MemorySource):
    """A source told to skip some sequences (as AudioSource does with on_error='skip')."""

    skip = frozenset({3, 17})

    def read(self, index: int) -> dict[str, np.ndarray]:
        if index in self.skip:
            raise SequenceSkipped(f"sequence {index}: cannot decode (skipped)")
        return super().read(index)


def test_audit_accepts_reported_skips_only():
    base = index_corpus(25)
    src = SkippingSource({"data": [base.read(i)["data"] for i in range(25)]})
    with sl.SeqLoader(src, max_seqs=4, audit=True, num_workers=1) as loader:  # via a worker
        report = run_epoch(loader)
    assert report.audit.ok and report.audit.skipped == 2 == report.skipped
    assert report.audit.delivered == 23
    assert "2 skipped by the source" in report.format()


_DIST_SCRIPT = textwrap.dedent(
    """
    import json, os, sys
    import numpy as np
    import torch.distributed as dist
    sys.path.insert(0, os.environ["TESTS_DIR"])
    from conftest import index_corpus
    import seqloader as sl
    from seqloader.errors import AuditError

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    out = {}
    loader = sl.SeqLoader(index_corpus(38), max_seqs=3, uneven="drop", audit=True)
    for _ in loader.epoch(1):
        pass
    out["good"] = loader.report().audit.to_dict()
    rso = sl.SeqLoader(index_corpus(38), max_seqs=3, distribution="random_seed_offset", audit=True)
    for _ in rso.epoch(1):
        pass
    out["rso"] = rso.report().audit.to_dict()
    # both processes believe they are rank 0 of 2: each delivers rank 0's share
    twin = sl.SeqLoader(index_corpus(38), max_seqs=3, rank=0, world_size=2, audit=True)
    try:
        for _ in twin.epoch(1):
            pass
        out["twin"] = "no error"
    except AuditError as e:
        out["twin"] = str(e)
    print("RESULT " + json.dumps(out), flush=True)
    dist.destroy_process_group()
    """
)


def test_audit_across_ranks_with_a_process_group():
    """Two real processes (gloo): one all_gather_object at the epoch end checks the union; two
    processes that both act as rank 0 fail the audit on both ranks (no hang)."""
    env = {
        **os.environ,
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(free_port()),
        "WORLD_SIZE": "2",
        "TESTS_DIR": os.path.dirname(__file__),
        "OMP_NUM_THREADS": "1",
    }
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", _DIST_SCRIPT],
            env={**env, "RANK": str(r)},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for r in range(2)
    ]
    results = []
    for p in procs:
        out, _ = p.communicate(timeout=180)
        assert p.returncode == 0, out[-3000:]
        line = next(x for x in out.splitlines() if x.startswith("RESULT "))
        results.append(json.loads(line[len("RESULT ") :]))
    for res in results:
        good = res["good"]
        assert good["ok"] and good["scope"] == "all ranks" and good["rank_ids"] == [0, 1]
        assert good["missing"] == 0 and good["repeated"] == 0
        # 38 sequences in 13 batches of 3 (the last of 2): uneven="drop" leaves the last out
        assert good["dropped"] == 2 and good["delivered"] == 36 == good["expected"] - 2
        rso = res["rso"]  # each rank its own permutation of all 38, cut to the shorter rank
        assert rso["ok"] and rso["expected"] == 76 and rso["delivered"] == 76 - rso["dropped"]
        assert "audit FAILED across 2 ranks" in res["twin"] and "repeated" in res["twin"]
        assert "ranks [0, 0]" in res["twin"]


def check_files_mix_audit(planner, world: int, start: int) -> None:
    """The audit of every rank's deliveries from step ``start`` of ``planner``'s epoch 1 on
    ``world`` ranks (a mix over files): the stream holds every slot of the sub-epoch (a
    sequence used twice, twice: a multiset, not a set), and the deliveries pass with the plan's
    drops counted as dropped, nothing missing, repeated or unplanned."""
    from seqloader.plan.audit_order import AuditRun
    from seqloader.trainer.audit import Stream, verify

    plan = planner.global_plan(1, world)
    (order,) = planner.audit_order(plan, AuditRun(1, start, 0, world), list(range(world)))
    assert order.rank is None and order.dropped == plan.dropped
    if planner.chunks is None:  # every slot of the sub-epoch, as many times as it is planned
        assert sorted(order.order.tolist()) == sorted(planner.sub_epoch_slots(1)[0].tolist())
    shares = [plan.rank_share(r, start) for r in range(world)]
    delivered = np.concatenate([s.seqs[s.real] for s in shares])
    empty = np.zeros(0, dtype=np.int64)
    stream = Stream(order.order, order.start, order.dropped, delivered, empty)
    got = verify([stream], len(planner.lengths), str)
    assert (got["missing"], got["repeated"], got["unplanned"]) == (0, 0, 0), got["examples"]
    assert got["dropped"] == plan.dropped


@pytest.mark.parametrize(("seed", "world"), [(0, 2), (1, 2), (2, 2), (3, 2), (1, 3)])
def test_files_mix_audit_with_drop_and_rates_above_one_expects_every_slot(seed, world) -> None:
    """Rates 2 and 1.5 over 12 files, ``uneven="drop"``: a sequence used twice whose one use is
    dropped is still expected once (the stream was a set difference: one slot short), from
    every step of the sub-epoch on."""
    from seqloader.plan import PlanOptions
    from seqloader.plan.indexed.planner import IndexedPlanner
    from seqloader.plan.mix import Corpora

    lengths = np.random.default_rng(seed).integers(1, 61, 60).astype(np.int64)
    o = PlanOptions(
        ordering="laplace",
        max_seqs=4,
        max_frames=120,
        uneven="drop",
        seed=seed,
        mix={"a": 2.0, "b": 1.5},
        distribution="files",
        planning="indexed",
    )
    corpora = Corpora(("a", "b"), np.array([0, 30, 60]))
    planner = IndexedPlanner({"data": lengths}, o, corpora=corpora, files=np.arange(0, 61, 5))
    plan = planner.global_plan(1, world)
    assert plan.dropped > 0
    for start in range(plan.steps + 1):
        check_files_mix_audit(planner, world, start)


@settings(max_examples=60, deadline=None)
@given(
    m=mixes(uneven=("drop",)),
    world=st.integers(1, 4),
    cut=st.floats(0, 1),
)
def test_files_mix_audit_after_a_resume_with_drop_expects_every_slot(m, world, cut) -> None:
    """Any mix over files with ``uneven="drop"`` (filters, chunking, sub-epochs), resumed at a
    step of the sub-epoch: ``check_files_mix_audit``."""
    try:
        planner = m["make"]()
        planner.check_world(world)
    except OptionError:  # a corpus left empty by the limit, too few files: refused by name
        return
    check_files_mix_audit(planner, world, int(cut * planner.global_plan(1, world).steps))
