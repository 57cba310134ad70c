"""A ``mix`` with ``distribution="random_seed_offset"`` under indexed planning (hypothesis; pure
numpy). As without a mix, each rank plans its own copy of the sub-epoch in its own order: here
the mix's selection, the same ``(sequence, corpus epoch)`` slots on every rank, so every corpus
epoch is used once per rank (the mix's own check on each rank's order over full epochs); a
rank's batches are a prefix of its order, nothing twice, the surplus beyond the common steps
counted as dropped; and every contract holds (``check_plan_contracts``). Each rank batches its
own draw of the slots (``laplace`` since ``seqloader-plan-indexed/11``, ``buckets:N`` since
``/12``, ``random`` and ``sort_bin_shuffle`` since ``/13``). Global planning still refuses the
set by name. Through loaders (torch): ``test_indexed_options_loader.py``."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plan_contracts import check_plan_contracts
from seqloader.errors import OptionError
from seqloader.plan import PlanOptions
from seqloader.plan.mix import Corpora
from seqloader.plan.planners import make_planner

ORDERINGS = ["default", "sorted", "random:2", "laplace:.3", "buckets:3", "sort_bin_shuffle:.3"]


@st.composite
def cases(draw: st.DrawFn) -> dict:
    n = draw(st.integers(8, 90))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    half = draw(st.integers(3, n - 3))
    options = {
        "ordering": draw(st.sampled_from(ORDERINGS)),
        "distribution": "random_seed_offset",
        "mix": {"a": draw(st.sampled_from([1, 1.5, 2])), "b": draw(st.sampled_from([0.5, 1]))},
        "chunking": draw(st.sampled_from([None, "8:4"])),
        "partition_epoch": draw(st.integers(1, 2)),
        "max_frames": 80,
        "max_seqs": draw(st.sampled_from([None, 5])),
        "seed": draw(st.integers(0, 3)),
    }
    return {"data": rng.integers(1, 30, size=n), "options": options,
            "corpora": Corpora(("a", "b"), np.array([0, half, n])),
            "world": draw(st.integers(1, 4))}  # fmt: skip


def planner_of(case: dict):
    options = PlanOptions(**case["options"])
    return make_planner({"data": case["data"]}, options, corpora=case["corpora"])


def one_selection(planner, epoch: int, plan) -> None:
    """Every rank's real slots: its own, none twice, all of the one selection of the mix."""
    selection, uses = planner.sub_epoch_slots(epoch, 0)
    chosen = set(zip(selection.tolist(), uses.tolist(), strict=True))
    for r in range(plan.world_size):
        share = plan.rank_share(r)
        real = share.real
        order = planner.rank_order(epoch, r, plan.world_size)
        if planner.chunks is None:  # each rank orders the whole selection
            assert sorted(order.tolist()) == sorted(selection.tolist())
        assert set(zip(share.seqs[real].tolist(), share.uses[real].tolist())) <= chosen


# 15 examples (was 30) draw every ordering, chunking, rate, partition_epoch and world the 30 drew
@settings(max_examples=15, deadline=None)
@given(cases())
def test_each_rank_uses_every_corpus_epoch_once(case: dict) -> None:
    planner = planner_of(case)
    assert planner.options.planning == "indexed"
    parts = case["options"]["partition_epoch"]
    epochs = range(1, 2 * parts + 1)  # two full epochs
    seqs, uses = zip(*(planner.sub_epoch_slots(e, 0) for e in epochs), strict=True)
    check = planner.mix.check([0, 1], np.concatenate(seqs), np.concatenate(uses))
    assert check.ok, check.problems
    factory = partial(planner_of, case)
    worlds = [case["world"], case["world"], case["world"] % 4 + 1]  # exact, then refused
    check_plan_contracts(factory, worlds, [0.5, 0.3], epochs, each_plan=one_selection)


def test_global_planning_still_refuses_it_by_name() -> None:
    options = {"distribution": "random_seed_offset", "mix": {"a": 1.0}}
    with pytest.raises(OptionError, match="use planning='indexed'"):
        PlanOptions(**options, planning="global")
    assert PlanOptions(**options).resolved_planning == "indexed"


DRAWN = ["random:2", "laplace:.3", "buckets:3", "sort_bin_shuffle:.3", "sort_bin_shuffle_x2:.3"]


def drawn(orderings: list[str], chunkings: list, sizes: tuple[int, int]) -> tuple:
    """Strategies of (ordering, chunking, sub-epochs, n, seed) for a two-corpus mix."""
    return (st.sampled_from(orderings), st.sampled_from(chunkings), st.integers(1, 2),
            st.integers(*sizes), st.integers(0, 2**32 - 1))  # fmt: skip


def offset_mix(data: np.ndarray, ordering: str, chunking: str | None, parts: int, seed: int,
               **limits: int):  # fmt: skip
    """The planner of a two-corpus mix of ``data`` under ``random_seed_offset``."""
    options = {"ordering": ordering, "distribution": "random_seed_offset", "chunking": chunking,
               "mix": {"a": 1.5, "b": 1}, "partition_epoch": parts, "seed": seed % 7,
               **limits}  # fmt: skip
    n = len(data)
    return planner_of({"data": data, "options": options,
                       "corpora": Corpora(("a", "b"), np.array([0, n // 2, n]))})  # fmt: skip


@settings(max_examples=25, deadline=None)
@given(*drawn(DRAWN, [None, "8:4"], (90, 180)))
def test_ranks_order_the_selection_each_their_own_way(
    ordering: str, chunking: str | None, parts: int, n: int, seed: int
) -> None:
    """Every drawn ordering (``laplace`` too since ``seqloader-plan-indexed/11``): with more
    than a few slots in a sub-epoch, two ranks never order it identically (each its own keyed
    draws)."""
    data = np.random.default_rng(seed).integers(1, 30, size=n)
    planner = offset_mix(data, ordering, chunking, parts, seed, max_frames=80)
    for epoch in range(1, parts + 1):
        orders = [planner.rank_order(epoch, r, 2) for r in range(2)]
        assert len(orders[0]) >= 30  # more than a few slots
        assert not np.array_equal(orders[0], orders[1]), (ordering, epoch)


def batch_sets(share) -> set[frozenset]:
    """A rank's batches, each as the set of its real (sequence, corpus epoch, chunk) slots."""
    chunks = share.chunks if share.chunks is not None else np.zeros(len(share.seqs), np.int64)
    slots = list(zip(share.seqs.tolist(), share.uses.tolist(), chunks.tolist(), strict=True))
    real = share.real.tolist()
    return {
        frozenset(s for s, r in zip(slots[a:b], real[a:b], strict=True) if r)
        for a, b in zip(share.bounds[:-1].tolist(), share.bounds[1:].tolist(), strict=True)
    }


@settings(max_examples=20, deadline=None)
@given(*drawn(["laplace:.3", "buckets:3", "buckets:1"], [None, "1500:750"], (1500, 3000)))
def test_ranks_batch_their_own_draws_of_the_selection(
    ordering: str, chunking: str | None, parts: int, n: int, seed: int
) -> None:
    """The orderings batched from counts (``laplace``; ``buckets:N`` since
    ``seqloader-plan-indexed/12``) batch each rank's own keyed draw of the shared slots: in a
    sub-epoch two ranks never hold the same batches (as sets), not only the same ones in
    another order. Lengths are distinct (no ties to tell ranks apart), batches hold at most 2
    and a sub-epoch some hundreds of slots per bucket (``laplace``: 64 buckets), so a bucket
    spans more than one window of sorted batches (``SortedWindows``: a bucket within one window
    is sorted whole, its batches then the same on every rank). ``random`` and
    ``sort_bin_shuffle``: the next test."""
    data = np.random.default_rng(seed).permutation(n) + 1
    planner = offset_mix(data, ordering, chunking, parts, seed, max_frames=6000, max_seqs=2)
    for epoch in range(1, parts + 1):
        plan = planner.global_plan(epoch, 2)
        shares = [plan.rank_share(r) for r in range(2)]
        assert min(int(s.real.sum()) for s in shares) >= 30  # more than a few slots
        assert batch_sets(shares[0]) != batch_sets(shares[1]), (ordering, epoch)


@settings(max_examples=12, deadline=None)
@given(*drawn(["random", "sort_bin_shuffle:.3", "sort_bin_shuffle_x2:.3"], [None, "8:4"],
              (200, 400)))  # fmt: skip
def test_random_and_sort_bin_mixes_batch_each_ranks_own_slots(
    ordering: str, chunking: str | None, parts: int, n: int, seed: int
) -> None:
    """``random`` and ``sort_bin_shuffle[_x2]`` (since ``seqloader-plan-indexed/13``): a rank's
    order is the shared cut's, every slot replaced by the rank's own draw among the slots alike
    for the cut (``indexed.mix_rank_slots``). Where lengths tie (here 1-19 over hundreds of
    slots, at most 2 a batch) two ranks hold other batches (as sets), with the same batch shapes
    (every rank the same batches' length lists, chunked with their chunks), the same steps,
    nothing dropped and every slot of the selection once."""
    data = np.random.default_rng(seed).integers(1, 20, size=n)
    planner = offset_mix(data, ordering, chunking, parts, seed, max_frames=80, max_seqs=2)
    for epoch in range(1, parts + 1):
        plan = planner.global_plan(epoch, 2)
        shares = [plan.rank_share(r) for r in range(2)]
        assert plan.dropped == 0 and all(len(s) == plan.steps for s in shares)
        assert batch_sets(shares[0]) != batch_sets(shares[1]), (ordering, epoch)
        shapes, slots = [], []
        for share in shares:
            chunks = share.chunks if share.chunks is not None else 0 * share.seqs
            units = list(zip(data[share.seqs].tolist(), chunks.tolist(), strict=True))
            bounds = zip(share.bounds[:-1].tolist(), share.bounds[1:].tolist(), strict=True)
            shapes.append(sorted(tuple(sorted(units[a:b])) for a, b in bounds))
            slots.append(sorted(zip(share.seqs.tolist(), share.uses.tolist(), chunks.tolist())))
        assert shapes[0] == shapes[1] and slots[0] == slots[1]
