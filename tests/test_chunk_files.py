"""Chunking with ``distribution="files"``: a chunk is the planned unit and stays with its file's
rank. As properties over random corpora, file layouts, chunkings, limits and world sizes: each
chunk of a sub-epoch exactly once across ranks (``drop``: at most once, the rest counted), equal
steps, whole files per rank, determinism, the sub-epochs tiling the full epoch; and resume chains
W -> W' -> W'' (exact and elastic: a sequence's chunks can be consumed in one segment and
planned in the next) consuming every chunk once."""

from __future__ import annotations

import json

import numpy as np
from hypothesis import assume, given, note, settings
from hypothesis import strategies as st

from chunk_units import chunk_ids, sub_epoch_chunks
from seqloader.plan import Planner, PlanOptions, Position, continue_plan
from seqloader.plan.position import segment_plan
from test_files_plan import file_layouts
from test_resume_plan import assert_equal_steps

UNEVEN = ["split", "pad", "drop"]


@st.composite
def chunked_files_cases(draw: st.DrawFn) -> tuple[Planner, int]:
    n = draw(st.integers(1, 300))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    lengths = rng.integers(0, draw(st.sampled_from([10, 100, 600])) + 1, size=n).astype(np.int64)
    size, step = draw(st.integers(1, 40)), draw(st.integers(1, 40))
    max_frames = draw(st.one_of(st.none(), st.integers(size, 40 * size)))
    options = PlanOptions(
        ordering=draw(st.sampled_from(["random", "sorted", "laplace:.7", "default"])),
        max_seqs=draw(st.one_of(st.none(), st.integers(1, 30))),
        max_frames=max_frames,
        batch_cost=draw(st.sampled_from(["frames", "packed"])),
        chunking=draw(st.sampled_from([f"{size}:{step}", (size, step), size])),
        min_chunk_size=draw(st.sampled_from([0, 0, 2])),
        partition_epoch=draw(st.integers(1, 3)),
        distribution="files",
        uneven=draw(st.sampled_from(UNEVEN)),
        seed=draw(st.integers(0, 100)),
    )
    bounds = draw(file_layouts(n))
    planner = Planner({"data": lengths}, options, files=bounds)
    world = draw(st.integers(1, 5))
    assert planner.files is not None
    used = int(np.count_nonzero(np.diff(np.searchsorted(planner.admission.admitted, bounds))))
    assume(used == 0 or used >= options.partition_epoch * world)  # else refused (tested apart)
    return planner, world


@settings(max_examples=80, deadline=None)
@given(chunked_files_cases())
def test_chunked_files_plans_keep_every_contract(case: tuple[Planner, int]) -> None:
    planner, world = case
    o = planner.options
    assert planner.chunks is not None and planner.files is not None
    note(f"{o} {planner.files.tolist()} {planner.lengths.tolist()}")
    every = []
    for epoch in range(1, o.partition_epoch + 1):
        plan = planner.global_plan(epoch, world)
        b = plan.batches
        assert b.chunks is not None
        assert_equal_steps(plan, 0)
        want = sub_epoch_chunks(planner, epoch)
        assert len(planner.sub_epoch_order(epoch)) == len(want)  # one slot per chunk
        real = chunk_ids(planner, b.seqs[b.real], b.chunks[b.real])
        assert len(np.unique(real)) == len(real)  # no chunk twice (C1)
        assert np.isin(chunk_ids(planner, b.seqs, b.chunks), want).all()  # fillers: its own
        if o.uneven == "drop":
            assert plan.dropped == len(want) - len(real)
        else:
            np.testing.assert_array_equal(np.sort(real), np.sort(want))
        # whole files per rank: a file's chunks all on one rank (unless a sub-epoch has fewer
        # files than ranks, when the largest are halved by sequences)
        files_of = [
            set(np.searchsorted(planner.files, s.seqs[s.real], side="right").tolist())
            for s in (plan.rank_share(r) for r in range(world))
        ]
        if len(planner.sub_epoch_files(epoch)[1]) >= world:
            for a in range(world):
                for c in range(a + 1, world):
                    assert not files_of[a] & files_of[c]
        for k in range(len(b)):  # within the limits, per chunk
            seqs, _ = b.batch(k)
            lens = planner.chunks.window("data", planner.lengths[seqs], b.chunks_of(k))
            if o.max_seqs is not None:
                assert len(seqs) <= o.max_seqs
            if o.max_frames is not None and len(seqs) > 1:
                cost = lens.sum() if o.cost.packed else len(seqs) * lens.max()
                assert cost <= o.max_frames
        again = planner.global_plan(epoch, world)  # determinism (C4)
        np.testing.assert_array_equal(again.batches.seqs, b.seqs)
        np.testing.assert_array_equal(again.batches.chunks, b.chunks)
        every.append(want)
    joined = np.sort(np.concatenate(every))  # the sub-epochs tile the full epoch's chunks
    np.testing.assert_array_equal(joined, np.arange(planner.chunks.num_units))


@settings(max_examples=80, deadline=None)
@given(
    chunked_files_cases(),
    st.lists(st.integers(1, 5), min_size=1, max_size=3),
    st.lists(st.floats(0, 1), min_size=3, max_size=3),
)
def test_chunked_files_resume_chains_consume_every_chunk_once(case, worlds, cuts) -> None:
    """W -> W' -> W'': stop at a fraction of the rest, save (JSON), resume; the chunks consumed
    over the chain are the sub-epoch's once (``drop``: less what the last segment leaves out)."""
    planner, world = case
    worlds = [world, *worlds]
    P = planner.options.partition_epoch
    used = len(np.flatnonzero(np.diff(np.searchsorted(planner.admission.admitted, planner.files))))
    assume(used >= P * max(worlds) or used == 0)
    epoch = P
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
        assert position.seq_offset(plan) == sum(len(c) for c in consumed)  # positions: chunks
        position = Position.from_fields(json.loads(json.dumps(position.to_fields())))
        again = segment_plan(planner, position)  # a saved state re-plans the same segment
        np.testing.assert_array_equal(again.batches.seqs, plan.batches.seqs)
        np.testing.assert_array_equal(again.batches.chunks, plan.batches.chunks)
    got = np.concatenate(consumed)
    want = sub_epoch_chunks(planner, epoch)
    assert len(np.unique(got)) == len(got), "a chunk was consumed twice"
    if planner.options.uneven == "drop":
        assert plan is not None and set(got.tolist()) <= set(want.tolist())
        assert len(want) - len(got) == plan.dropped
    else:
        np.testing.assert_array_equal(np.sort(got), np.sort(want))
