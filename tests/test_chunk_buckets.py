"""Chunking with ``ordering="buckets:N"``: the sub-epoch's chunks are bucketed by their windows
and arranged in runs of synced same-bucket batches. As properties over random corpora,
chunkings, limits, bucket counts, world sizes and ``uneven``, for ``shard`` and ``files``: each
chunk of a sub-epoch exactly once (``drop``: at most once, the rest counted), equal steps, every
batch within its limits, each step's batches from one run, determinism; and elastic resume
chains (positions count chunks of the arrangement) consuming every chunk once."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st

import seqloader as sl
from chunk_units import chunk_ids, sub_epoch_chunks
from seqloader.plan import Planner, PlanOptions, Position, continue_plan

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


@settings(max_examples=80, deadline=None)
@given(bucket_cases())
def test_bucketed_chunks_keep_every_contract(case: tuple[Planner, int]) -> None:
    planner, world = case
    o = planner.options
    assert planner.chunks is not None
    for epoch in range(1, o.partition_epoch + 1):
        plan = planner.global_plan(epoch, world)
        b = plan.batches
        assert b.chunks is not None
        assert len(b) == plan.steps * world  # equal steps (C2)
        want = sub_epoch_chunks(planner, epoch)
        real = chunk_ids(planner, b.seqs[b.real], b.chunks[b.real])
        assert len(np.unique(real)) == len(real)
        if o.uneven == "drop":
            assert plan.dropped == len(want) - len(real)
            assert np.isin(real, want).all()
        else:
            np.testing.assert_array_equal(np.sort(real), np.sort(want))
        if o.distribution == "shard":  # the plan is the arrangement's order, in order
            order = planner.sub_epoch_order(epoch, 0, world)
            np.testing.assert_array_equal(b.seqs[b.real], order[: len(real)])
        for k in range(len(b)):  # within the limits, each chunk its window's cost
            seqs, _ = b.batch(k)
            lens = planner.chunks.window("data", planner.lengths[seqs], b.chunks_of(k))
            if o.max_seqs is not None:
                assert len(seqs) <= o.max_seqs
            if o.max_frames is not None and len(seqs) > 1:
                cost = planner.batcher.limits.units("data", lens)
                assert len(seqs) * cost.max() <= planner.budget
        again = planner.global_plan(epoch, world)  # determinism (C4)
        np.testing.assert_array_equal(again.batches.seqs, b.seqs)
        np.testing.assert_array_equal(again.batches.chunks, b.chunks)


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


@settings(max_examples=60, deadline=None)
@given(
    bucket_cases(),
    st.lists(st.integers(1, 5), min_size=1, max_size=2),
    st.lists(st.floats(0, 1), min_size=3, max_size=3),
)
def test_bucketed_chunks_resume_chains_consume_every_chunk_once(case, worlds, cuts) -> None:
    planner, world = case
    worlds = [world, *worlds]
    if planner.files is not None:
        adm = planner.admission.admitted
        used = int(np.count_nonzero(np.diff(np.searchsorted(adm, planner.files))))
        assume(used == 0 or used >= planner.options.partition_epoch * max(worlds))
    epoch = 1
    position = Position(epoch, 0, worlds[0], 0)
    consumed = []
    plan = None
    for i, w in enumerate(worlds):
        plan, position = continue_plan(planner, position, w)
        assert {len(plan.rank_share(r, position.steps)) for r in range(plan.world_size)} == {
            plan.steps - position.steps
        }
        stop = plan.steps
        if i < len(worlds) - 1:
            stop = position.steps + int(cuts[i] * (plan.steps - position.steps))
        b = plan.batches
        lo, hi = b.bounds[position.steps * plan.world_size], b.bounds[stop * plan.world_size]
        real = b.real[lo:hi]
        assert b.chunks is not None
        consumed.append(chunk_ids(planner, b.seqs[lo:hi][real], b.chunks[lo:hi][real]))
        position = position.advanced(stop - position.steps)
        position = Position.from_fields(json.loads(json.dumps(position.to_fields())))
    got = np.concatenate(consumed)
    want = sub_epoch_chunks(planner, epoch)
    assert len(np.unique(got)) == len(got), "a chunk was consumed twice"
    if planner.options.uneven == "drop":
        assert plan is not None and set(got.tolist()) <= set(want.tolist())
        assert len(want) - len(got) == plan.dropped
    else:
        np.testing.assert_array_equal(np.sort(got), np.sort(want))


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
