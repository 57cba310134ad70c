"""Chunking with ``distribution="files"``: a chunk is the planned unit and stays with its file's
rank. As properties over random corpora, file layouts, chunkings, limits and world sizes: each
chunk of a sub-epoch exactly once across ranks (``drop``: at most once, the rest counted), equal
steps, whole files per rank, determinism, the sub-epochs tiling the full epoch; and resume chains
W -> W' -> W'' (exact and elastic: a sequence's chunks can be consumed in one segment and
planned in the next) consuming every chunk once."""

from __future__ import annotations

import numpy as np
from hypothesis import assume, given, note, settings
from hypothesis import strategies as st

from plan_contracts import check_plan_contracts
from seqloader.plan import EpochPlan, Planner, PlanOptions
from test_files_plan import file_layouts
from test_plan_chunks import check_chunk_limits

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


def whole_files_per_rank(planner: Planner, epoch: int, plan: EpochPlan) -> None:
    """A file's chunks all on one rank (unless a sub-epoch has fewer files than ranks, when the
    largest are halved by sequences); every batch within its limits, per chunk."""
    assert planner.files is not None
    world = plan.world_size
    files_of = [
        set(np.searchsorted(planner.files, s.seqs[s.real], side="right").tolist())
        for s in (plan.rank_share(r) for r in range(world))
    ]
    if len(planner.sub_epoch_files(epoch)[1]) >= world:
        for a in range(world):
            for c in range(a + 1, world):
                assert not files_of[a] & files_of[c]
    check_chunk_limits(planner, epoch, plan)


@settings(max_examples=80, deadline=None)
@given(
    chunked_files_cases(),
    st.lists(st.integers(1, 5), min_size=1, max_size=3),
    st.lists(st.floats(0, 1), min_size=3, max_size=3),
)
def test_chunked_files_plans_keep_every_contract(case, worlds, cuts) -> None:
    """The contracts for chunks under ``files`` over a full epoch (each chunk once, the
    sub-epochs tiling the full epoch's chunks, equal steps, determinism; one slot per chunk in
    the order), whole files per rank and limits; and resume chains W -> W' -> W'' (exact and
    elastic: a sequence's chunks can be consumed in one segment and planned in the next)."""
    planner, world = case
    worlds = [world, *worlds]
    P = planner.options.partition_epoch
    assert planner.chunks is not None and planner.files is not None
    note(f"{planner.options} {planner.files.tolist()} {planner.lengths.tolist()}")
    used = len(np.flatnonzero(np.diff(np.searchsorted(planner.admission.admitted, planner.files))))
    assume(used >= P * max(worlds) or used == 0)
    check_plan_contracts(
        lambda: Planner({"data": planner.lengths}, planner.options, files=planner.files),
        worlds,
        cuts[: len(worlds) - 1],
        each_plan=whole_files_per_rank,
    )
