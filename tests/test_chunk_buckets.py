"""Chunking with ``ordering="buckets:N"``: the sub-epoch's chunks are bucketed by their windows
and arranged in runs of synced same-bucket batches. As properties over random corpora,
chunkings, limits, bucket counts, world sizes and ``uneven``, for ``shard`` and ``files``: each
chunk of a sub-epoch exactly once (``drop``: at most once, the rest counted), equal steps, every
batch within its limits, each step's batches from one run, determinism; and elastic resume
chains (positions count chunks of the arrangement) consuming every chunk once."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

import seqloader as sl
from plan_contracts import check_plan_contracts
from seqloader.plan import EpochPlan, Planner, PlanOptions

UNEVEN = ["split", "pad", "drop"]


@st.composite
def bucket_cases(draw: st.DrawFn) -> tuple[Planner, int]:
    n = draw(st.integers(1, 250))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    data = rng.integers(0, draw(st.sampled_from([20, 300])), size=n).astype(np.int64)
    size = draw(st.integers(1, 60))
    distribution = draw(st.sampled_from(["shard", "shard", "files"]))
    options = PlanOptions(
        ordering=f"buckets:{draw(st.integers(1, 6))}",
        chunking=(size, draw(st.integers(1, 60))),
        min_chunk_size=draw(st.sampled_from([0, 1, 5])),
        max_seqs=draw(st.one_of(st.none(), st.integers(1, 16))),
        max_frames=draw(st.one_of(st.none(), st.integers(100, 400))),  # a chunk costs <= 96
        batch_cost=draw(st.sampled_from(["frames", "quadratic:100"])),
        partition_epoch=draw(st.integers(1, 3)),
        distribution=distribution,
        uneven=draw(st.sampled_from(UNEVEN)),
        seed=draw(st.integers(0, 100)),
    )
    world = draw(st.integers(1, 5))
    files = np.arange(0, n + 1, draw(st.integers(1, 4))) if distribution == "files" else None
    if files is not None and files[-1] != n:
        files = np.append(files, n)
    planner = Planner({"data": data}, options, files=files)
    if files is not None:
        adm = planner.admission.admitted
        used = int(np.count_nonzero(np.diff(np.searchsorted(adm, files))))
        assume(used == 0 or used >= options.partition_epoch * world)  # else refused
    return planner, world


def in_arrangement_within_limits(planner: Planner, epoch: int, plan: EpochPlan) -> None:
    """``shard``: the plan is the arrangement's order, in order; every batch within its limits,
    each chunk its window's cost."""
    o, b = planner.options, plan.batches
    assert planner.chunks is not None and b.chunks is not None
    if o.distribution == "shard":
        order = planner.sub_epoch_order(epoch, 0, plan.world_size)
        np.testing.assert_array_equal(b.seqs[b.real], order[: int(b.real.sum())])
    for k in range(len(b)):
        seqs, _ = b.batch(k)
        lens = planner.chunks.window("data", planner.lengths[seqs], b.chunks_of(k))
        if o.max_frames is not None and len(seqs) > 1:
            cost = planner.batcher.limits.units("data", lens)
            assert len(seqs) * cost.max() <= planner.budget


@settings(max_examples=80, deadline=None)
@given(
    bucket_cases(),
    st.lists(st.integers(1, 5), max_size=2),
    st.lists(st.floats(0, 1), min_size=3, max_size=3),
)
def test_bucketed_chunks_keep_every_contract(case, worlds, cuts) -> None:
    """The contracts over a full epoch (each chunk of a sub-epoch once, ``drop``: the rest
    counted; equal steps; determinism) with limits and the arrangement's order; and elastic
    resume chains (positions count chunks of the arrangement) consuming every chunk once."""
    planner, world = case
    worlds = [world, *worlds]
    if planner.files is not None:
        adm = planner.admission.admitted
        used = int(np.count_nonzero(np.diff(np.searchsorted(adm, planner.files))))
        assume(used == 0 or used >= planner.options.partition_epoch * max(worlds))
    check_plan_contracts(
        lambda: Planner({"data": planner.lengths}, planner.options, files=planner.files),
        worlds,
        cuts[: len(worlds) - 1],
        each_plan=in_arrangement_within_limits,
    )


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([2, 4, 8]))
@example(16156, 8)  # a last run of one batch, cut into 8 pieces by uneven="split"
def test_each_step_is_one_run_of_a_bucket(seed: int, world: int) -> None:
    """Synced steps: a step's batches come from one run (one bucket, or the pool)."""
    data = np.random.default_rng(seed).integers(10, 400, size=400)
    options = PlanOptions(ordering="buckets:5", chunking="60:40", max_frames=480, seed=seed)
    planner = Planner({"data": data}, options)
    arranged = planner.arrangement(1, 0, world)
    plan = planner.global_plan(1, world)
    runs = arranged.batch_runs()
    full = len(runs) // world  # whole rounds of W arranged batches, then a last run shorter than W
    head = runs[: full * world].reshape(full, world)
    assert (head == head[:, :1]).all()
    tail = runs[full * world :]
    assert len(set(tail.tolist())) <= 1  # the pool's last, incomplete run: split into W pieces
    assert plan.steps == full + (1 if len(tail) else 0)


@pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")
def test_bucketed_chunks_through_workers_are_audited_and_the_same() -> None:
    """Through ``SeqLoader``: 0 and 2 (forked) workers deliver the same chunks, each once (audit
    on), with less padding than the sorted bins of ``laplace``."""
    lengths = np.random.default_rng(0).integers(1, 200, 300)
    source = sl.MemorySource(
        {"data": [np.full((n, 1), i, "float32") for i, n in enumerate(lengths)]}
    )
    options = {"chunking": "30:20", "max_frames": 240}
    got, padding = {}, {}
    for ordering, workers in (("buckets:4", 0), ("buckets:4", 2), ("laplace:.20", 0)):
        with sl.SeqLoader(
            source, ordering=ordering, num_workers=workers, audit=True, **options
        ) as loader:
            got[ordering, workers] = [
                (b.seq_indices.tolist(), b.chunks.tolist(), b["data"].numpy().tobytes())
                for b in loader.epoch(1)
            ]
            report = loader.report()
            assert report.audit is not None and report.audit.ok, report.audit.format()
            padding[ordering] = report.padding_ratio
    assert got["buckets:4", 0] == got["buckets:4", 2]
    assert padding["buckets:4"] < padding["laplace:.20"]
