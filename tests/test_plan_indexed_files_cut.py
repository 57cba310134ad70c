"""``planning="indexed"`` with ``distribution="files"`` and a fixed or random ordering
(``seqloader.plan.indexed.files_cut``; hypothesis, pure numpy).

The plan is global planning's, batch for batch with the same seed (the sub-epoch's files dealt to
ranks by frames, each rank's files' sequences in the ordering, cut greedily, steps equalised by
``uneven``; an elastic resume re-plans the remainders the same way), while a rank draws only its
own sequences and counts the others' batches. Every contract holds (``check_plan_contracts``:
exactly once, equal steps, a rank's share computed alone, determinism, resume chains
``W -> W' -> W''``).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plan_contracts import check_plan_contracts
from seqloader.errors import OptionError
from seqloader.plan import PlanOptions, Position, continue_plan
from seqloader.plan.greedy.planner import Planner
from seqloader.plan.indexed.files_cut import CUT_KINDS, CutFiles
from seqloader.plan.indexed.planner import IndexedPlanner, index_key
from test_plan_indexed import indexed_digest

ORDERINGS = [*CUT_KINDS, "random:2"]


@st.composite
def cases(draw: st.DrawFn, chunked: bool = False) -> dict:
    n = draw(st.integers(0, 36))
    lengths = np.array(draw(st.lists(st.integers(1, 20), min_size=n, max_size=n)), np.int64)
    cuts = draw(st.lists(st.integers(0, n), max_size=14))
    files = np.unique(np.concatenate([[0, n], cuts])).astype(np.int64)
    if len(files) < 2:  # no sequence: one empty file
        files = np.zeros(2, dtype=np.int64)
    options = {
        "ordering": draw(st.sampled_from(ORDERINGS)),
        "max_seqs": draw(st.sampled_from([None, 2, 4])),
        "max_frames": draw(st.sampled_from([None, 30, 60])),
        "min_seq_length": draw(st.sampled_from([0, 0, 3])),
        "partition_epoch": draw(st.integers(1, 2)),
        "uneven": draw(st.sampled_from(["split", "pad", "drop"])),
        "seed": draw(st.integers(0, 3)),
        "distribution": "files",
    }
    if chunked:  # windows of up to 7 frames: several chunks per sequence, short last ones
        options["chunking"] = draw(st.sampled_from(["4:2", "5:5", "7:3"]))
        options["min_chunk_size"] = draw(st.sampled_from([0, 0, 2]))
    worlds = draw(st.lists(st.integers(1, 4), min_size=2, max_size=3))
    return {"lengths": lengths, "files": files, "options": options, "worlds": worlds}


def planner(case: dict, planning: str = "indexed") -> IndexedPlanner | Planner:
    options = PlanOptions(**case["options"], planning=planning)
    kind = IndexedPlanner if planning == "indexed" else Planner
    return kind({"data": case["lengths"]}, options, files=case["files"])


def same(a, b) -> None:
    assert a.steps == b.steps and a.dropped == b.dropped
    for rank in range(a.world_size):
        x, y = a.rank_share(rank), b.rank_share(rank)
        np.testing.assert_array_equal(x.seqs, y.seqs)
        np.testing.assert_array_equal(x.bounds, y.bounds)
        np.testing.assert_array_equal(x.real, y.real)
        assert (x.chunks is None) == (y.chunks is None)
        if x.chunks is not None:
            np.testing.assert_array_equal(x.chunks, y.chunks)


@settings(max_examples=14, deadline=None)
@given(cases(), st.integers(0, 6))
def test_plans_are_global_plannings_and_every_contract_holds(case: dict, stop: int) -> None:
    """Every rank's batches are global planning's, fresh and after an elastic resume ``W ->
    W'`` (the same history gives the same segment and the same position); the contracts hold on
    the chain ``worlds``."""
    check_against_global(case, stop)


@settings(max_examples=8, deadline=None)
@given(cases(chunked=True), st.integers(0, 6))
def test_chunked_plans_are_global_plannings_and_every_contract_holds(case: dict, stop: int) -> None:
    """Chunked: each rank's ordered sequences' chunks, cut greedily by their windows, are
    global planning's slot for slot (sequence and chunk), fresh and after an elastic resume
    (which continues each sequence from its first undelivered chunk); every contract holds
    on the chain, each chunk of every admitted sequence once."""
    check_against_global(case, stop)


def check_against_global(case: dict, stop: int) -> None:
    indexed, greedy = planner(case), planner(case, "global")
    assert isinstance(indexed, IndexedPlanner)
    assert isinstance(indexed.distribution, CutFiles)
    w0, w1 = case["worlds"][:2]
    try:
        greedy.check_world(w0)
    except OptionError:
        with pytest.raises(OptionError, match="files"):
            indexed.global_plan(1, w0)
        return
    for epoch in range(1, indexed.options.partition_epoch + 1):
        fresh, want_fresh = indexed.global_plan(epoch, w0), greedy.global_plan(epoch, w0)
        same(fresh, want_fresh)
        # the report's step imbalance: global planning's figure (chunked: by the windows)
        got_imbalance = indexed.step_imbalance(fresh, 0).compute()
        assert got_imbalance == pytest.approx(greedy.step_imbalance(want_fresh, 0).compute())
        at = Position(epoch, 0, w0, min(stop, fresh.steps))
        try:
            want, want_at = continue_plan(greedy, at, w1)
        except OptionError:  # a fresh start on too many ranks for the files: refused alike
            with pytest.raises(OptionError, match="files"):
                continue_plan(indexed, at, w1)
            continue
        got, got_at = continue_plan(indexed, at, w1)
        same(got, want)
        assert got_at == want_at
    cut = [0.5, 1][: len(case["worlds"]) - 1]
    check_plan_contracts(lambda: planner(case), case["worlds"], cut, workers=(2,))


def test_a_rank_draws_only_its_own_files_and_the_index_keeps_no_order() -> None:
    """A rank's share holds sequences of its own files only (the others' are counted, not
    kept); the node's index is one bucket of the admitted sequences with the per-file table,
    shared by every fixed ordering and ``random`` over files (nothing of an epoch's order)."""
    rng = np.random.default_rng(4)
    lengths = {"data": rng.integers(1, 80, 400)}
    files = np.arange(0, 401, 10)
    base = {"max_frames": 300, "distribution": "files", "planning": "indexed"}
    plan = IndexedPlanner(lengths, PlanOptions(**base, ordering="sorted"), files=files)
    shares = plan.global_plan(1, 4)
    owned = [set((shares.rank_share(r).seqs // 10).tolist()) for r in range(4)]
    assert all(owned) and sum(len(o) for o in owned) == len(set().union(*owned)) == 40
    index = plan.index
    assert len(index.edges) == 0 and index.cuts is None and index.file_counts is not None
    keys = {index_key(PlanOptions(**base, ordering=o)) for o in ORDERINGS}
    assert len(keys) == 1
    assert (
        index_key(PlanOptions(**{**base, "distribution": "shard"}, ordering="sorted")) not in keys
    )


def test_fixed_random_seed_keeps_one_plan_every_epoch() -> None:
    """With ``fixed_random_seed`` the file shuffle and every rank's random order are drawn from
    that seed: every epoch the same plan (global planning's files plans do not read it)."""
    lengths = {"data": np.random.default_rng(2).integers(1, 50, 200)}
    options = PlanOptions(
        ordering="random", max_frames=150, distribution="files", fixed_random_seed=7
    )
    indexed = IndexedPlanner(lengths, options, files=np.arange(0, 201, 8))
    assert options.resolved_planning == "indexed"
    one, two = indexed.global_plan(1, 3), indexed.global_plan(2, 3)
    same(one, two)
    moved = IndexedPlanner(lengths, PlanOptions(**{**options.to_dict(), "fixed_random_seed": 8}),
                           files=np.arange(0, 201, 8))  # fmt: skip
    assert not np.array_equal(moved.global_plan(1, 3).batches.seqs, one.batches.seqs)


FILES_CUT_CASES: dict[str, dict] = {
    "files default W3 split": {
        "options": {"ordering": "default", "max_seqs": 6, "max_frames": 1500,
                    "distribution": "files"},
        "files": list(range(0, 301, 12)),
        "world": 3,
        "elastic": (4, 5),
    },
    "files sorted_reverse partition 2 W2 drop": {
        "options": {"ordering": "sorted_reverse", "max_frames": 2000, "partition_epoch": 2,
                    "uneven": "drop", "distribution": "files"},
        "files": list(range(0, 301, 10)),
        "world": 2,
        "elastic": (3, 3),
        "elastic_again": (2, 1),
    },
    "files random:2 W4 pad, filters": {
        "options": {"ordering": "random:2", "max_frames": 1800, "max_seq_length": 350,
                    "min_seq_length": 5, "uneven": "pad", "distribution": "files"},
        "files": list(range(0, 301, 15)),
        "world": 4,
        "elastic": (2, 3),
    },
    "chunked 90:60 files random W3 split": {
        "options": {"ordering": "random", "max_seqs": 5, "max_frames": 900, "chunking": "90:60",
                    "min_chunk_size": 20, "partition_epoch": 2, "distribution": "files"},
        "files": list(range(0, 301, 12)),
        "world": 3,
        "elastic": (4, 2),
        "elastic_again": (3, 4),
    },
    "chunked 120:120 files sorted W2 pad": {
        "options": {"ordering": "sorted", "max_frames": 1000, "chunking": "120:120",
                    "uneven": "pad", "distribution": "files"},
        "files": list(range(0, 301, 10)),
        "world": 2,
        "elastic": (5, 3),
    },
}  # fmt: skip
FILES_CUT_GOLDEN = {
    "files default W3 split": "fb5fcdbcb107b7fb1bf0c893adadbad6432e5fd622937e28cadc9edd91e73032",
    "files sorted_reverse partition 2 W2 drop": (
        "73738f85b8428b0d1e57d0ea045d942f6af6bfde50b0c42777e4da758a6ee841"
    ),
    "files random:2 W4 pad, filters": (
        "ee521580581f9a2101bad729f93557094e2eb089a2500e4ca633666947823f61"
    ),
    # chunked (added with chunking over files under indexed planning)
    "chunked 90:60 files random W3 split": (
        "05e95e9babe7466a7a1595aa2b03d5cb5cf62b19b9e333af972d70cc36be41fa"
    ),
    "chunked 120:120 files sorted W2 pad": (
        "3a2069fb94e8f49226765b217bea41ad7411dda11a5844f7270fd0276ac3225e"
    ),
}


def test_files_cut_golden_plans_are_pinned() -> None:
    """Added with fixed and random orders over files (refused before under indexed planning:
    no plan of the current ``INDEXED_ALGORITHM`` moved); bump it and record anew if one
    changes."""
    got = {name: indexed_digest(case) for name, case in FILES_CUT_CASES.items()}
    assert got == FILES_CUT_GOLDEN, f"record: {got}"


@settings(max_examples=10, deadline=None)
@given(st.booleans().flatmap(lambda chunked: cases(chunked=chunked)), st.integers(0, 3))
def test_a_planner_replays_a_history_again_as_a_fresh_planner_does(case: dict, stop: int) -> None:
    """One planner asked for elastic segments again and again (the loader's resume, then the
    audit's ``files_plan`` of the same history, then a longer history after another resume)
    gives each time the plan and the consumed units a fresh planner gives: the segments it keeps
    for a history are replayed on what they left then, not on what later replays consumed."""
    w0, w1, *rest = case["worlds"]
    w2 = rest[0] if rest else w0
    kept = planner(case)
    assert isinstance(kept, IndexedPlanner)
    try:
        kept.check_world(w0)
    except OptionError:
        return
    history: list[tuple[int, int]] = []
    for w, nxt in ((w0, w1), (w1, w2), (w2, w0)):
        plan, _ = kept.files_segment(1, w, history)
        history.append((w, min(stop, plan.steps)))
        for _ in range(2):  # asked again: the same answers
            fresh = planner(case)
            assert isinstance(fresh, IndexedPlanner)
            got, want = kept.files_segment(1, nxt, history), fresh.files_segment(1, nxt, history)
            same(got[0], want[0])
            assert got[1] == want[1]
            np.testing.assert_array_equal(
                kept.files_plan(1, nxt, history)[1], fresh.files_plan(1, nxt, history)[1]
            )
