"""Epoch selections (``seqloader.plan.selections``: RETURNN's ``epoch_wise_filter`` ``subdirs``) under
``planning="indexed"``: in the epochs of its range a sub-epoch holds exactly its unselected
sub-epoch's selected sequences (the same draws: only what the selection leaves out is gone), the
rest counted per epoch; outside the range nothing changes; every contract of
``check_plan_contracts`` holds (exactly once, equal steps, shares alone, determinism, workers,
resume chains W -> W' -> W''), also with ``epoch_wise_filter`` on top and under
``random_seed_offset`` (one selected set per sub-epoch on every rank); the fixed and drawn orders
(chunked too) filter each sub-epoch's listed order: global planning's plans for the fixed ones."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plan_contracts import check_plan_contracts
from seqloader.errors import OptionError
from seqloader.plan import PlanOptions, make_planner
from seqloader.plan.greedy.planner import Planner as GlobalPlanner
from seqloader.plan.inputs import PlanInputs
from seqloader.plan.planners import resolve_planning
from seqloader.plan.selections import EpochSelection

FILTERS = [None, {(1, 1): {"max_mean_len": 40}}, {(2, None): {"max_mean_len": 25}}]


@st.composite
def cases(draw: st.DrawFn) -> dict:
    n = draw(st.integers(1, 250))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    lengths = rng.integers(1, 80, size=n).astype(np.int64)
    parts = draw(st.integers(1, 3))
    keep = rng.random(n) < draw(st.sampled_from([0.0, 0.3, 0.8, 1.0]))
    last = draw(st.sampled_from([None, 1, parts]))
    options = PlanOptions(
        ordering=draw(st.sampled_from(["laplace", "laplace:.9", "buckets:1", "buckets:4"])),
        max_seqs=draw(st.one_of(st.none(), st.integers(1, 12))),
        max_frames=draw(st.sampled_from([None, 400])),
        partition_epoch=parts,
        distribution=draw(st.sampled_from(["shard", "random_seed_offset"])),
        uneven=draw(st.sampled_from(["split", "pad", "drop"])),
        epoch_wise_filter=draw(st.sampled_from(FILTERS)),
        max_seq_length=draw(st.sampled_from([None, 70])),
        seed=draw(st.integers(0, 5)),
        planning="indexed",
    )
    return {
        "lengths": {"data": lengths},
        "options": options,
        "selections": [EpochSelection(1, last, keep, "subdirs=['train-clean-100']")],
        "worlds": draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)),
        "cut": draw(st.floats(0, 1)),
    }


def planner_of(case: dict, selections: bool = True):
    chosen = case["selections"] if selections else ()
    return make_planner(case["lengths"], case["options"], selections=chosen)


# every contract without selections: test_plan_indexed_options.py over the same admission options
# 28 examples (was 40) draw every ordering, distribution, uneven, filter and partition_epoch the
# 40 drew
@settings(max_examples=28, deadline=None)
@given(cases())
def test_contracts_hold_with_epoch_selections(case: dict) -> None:
    """``check_plan_contracts`` over a full epoch and the next one (the selection's range ends
    inside them or not), resume chains included; a full epoch lacks of the admitted set exactly
    what its sub-epochs' filters counted."""
    worlds, parts = case["worlds"], case["options"].partition_epoch
    check_plan_contracts(
        lambda: planner_of(case), worlds, [case["cut"]] * (len(worlds) - 1), range(1, 2 * parts + 1)
    )


@settings(max_examples=60, deadline=None)
@given(cases(), st.integers(1, 4))
def test_a_selected_sub_epoch_is_the_unselected_one_less_what_it_leaves_out(
    case: dict, world: int
) -> None:
    """Without ``epoch_wise_filter``: in the selection's epochs the sub-epoch's set is the plain
    planner's sub-epoch set restricted to the selection, and the sequences left out are counted
    under the selection's name; outside them, the plain planner's plan itself. (Not under
    ``random_seed_offset`` with sub-epochs, whose sub-epoch sets are shared by the ranks once
    something filters them: ``test_random_seed_offset_ranks_share_each_selected_set``.)"""
    o = case["options"]
    shared = o.distribution == "random_seed_offset" and o.partition_epoch > 1
    if o.epoch_wise_filter is not None or shared:
        return
    sel = case["selections"][0]
    planner, plain = planner_of(case), planner_of(case, selections=False)
    for epoch in range(1, 2 * o.partition_epoch + 1):
        got, whole = (
            planner.sub_epoch_order(epoch, 0, world),
            plain.sub_epoch_order(epoch, 0, world),
        )
        reason = f"epoch_wise_filter {sel.name} (epoch {epoch})"
        if sel.applies(epoch):
            np.testing.assert_array_equal(np.sort(got), np.sort(whole[sel.keep[whole]]))
            assert planner.filtered(epoch).get(reason, 0) == int((~sel.keep[whole]).sum())
        else:
            np.testing.assert_array_equal(got, whole)
            assert reason not in planner.filtered(epoch)
            a, b = planner.global_plan(epoch, world), plain.global_plan(epoch, world)
            np.testing.assert_array_equal(a.batches.seqs, b.batches.seqs)
            np.testing.assert_array_equal(a.batches.bounds, b.batches.bounds)


@settings(max_examples=30, deadline=None)
@given(cases(), st.integers(2, 4))
def test_random_seed_offset_ranks_share_each_selected_set(case: dict, world: int) -> None:
    """``random_seed_offset`` with sub-epochs and a selection: every rank's sub-epoch holds the
    same sequences (so the same batch count: equal steps, nothing dropped), each rank in its own
    order; in the selection's epochs only selected ones, the rest counted; a full epoch of each
    rank holds no sequence twice."""
    o = PlanOptions(
        **{
            **{k: getattr(case["options"], k) for k in ("ordering", "max_seqs", "max_frames")},
            "partition_epoch": 2,
            "distribution": "random_seed_offset",
            "planning": "indexed",
        }
    )
    sel = case["selections"][0]
    planner = make_planner(case["lengths"], o, selections=case["selections"])
    full = [[] for _ in range(world)]
    for epoch in (1, 2):
        plan = planner.global_plan(epoch, world)
        assert plan.dropped == 0 and plan.repeats == 0
        orders = [planner.rank_order(epoch, r, world) for r in range(world)]
        for r, order in enumerate(orders):
            np.testing.assert_array_equal(np.sort(order), np.sort(orders[0]))
            full[r].extend(order.tolist())
        if sel.applies(epoch):
            assert sel.keep[orders[0]].all()
    for seqs in full:
        assert len(set(seqs)) == len(seqs)
    if len(orders[0]) > 40 and o.max_seqs and o.max_seqs > 1:  # own orders: not all alike
        assert any(not np.array_equal(orders[r], orders[0]) for r in range(1, world))


def test_one_sub_epoch_holds_global_plannings_selected_set() -> None:
    """``partition_epoch=1``: the selected epoch holds the sequences global planning's does, and
    both count alike what the selection leaves out."""
    lengths = {"data": np.random.default_rng(4).integers(1, 300, 2000)}
    keep = np.random.default_rng(5).random(2000) < 0.4
    sel = [EpochSelection(1, 1, keep, "subdirs=['a']")]
    common = {"max_frames": 2000, "max_seq_length": 280}
    indexed = make_planner(
        lengths, PlanOptions(ordering="buckets:5", **common, planning="indexed"), selections=sel
    )
    greedy = GlobalPlanner(lengths, PlanOptions(ordering="random", **common), selections=sel)
    for epoch in (1, 2):
        assert sorted(indexed.sub_epoch_order(epoch).tolist()) == sorted(
            greedy.sub_epoch_order(epoch).tolist()
        )
        assert indexed.filtered(epoch) == greedy.filtered(epoch)
    assert indexed.fingerprint("x") != make_planner(lengths, indexed.options).fingerprint("x")


@pytest.mark.parametrize(
    ("changes", "files", "match"),
    [
        ({"distribution": "files"}, np.array([0, 5, 10]), "distribution='files'"),
        ({"mix": {"a": 1.0}}, None, "mix"),
        ({"chunking": 4}, None, "chunking with ordering='laplace'"),
    ],
)
def test_selections_are_refused_where_indexed_plans_draw_no_sub_epoch_list(
    changes: dict, files, match: str
) -> None:
    lengths = {"data": np.arange(1, 11)}
    sel = [EpochSelection(1, 2, np.ones(10, dtype=bool), "subdirs=['a']")]
    options = PlanOptions(**{"ordering": "laplace", "planning": "indexed", **changes})
    corpora = None
    if "mix" in changes:
        from seqloader.plan.mix import Corpora

        corpora = Corpora(("a",), np.array([0, 10]))
    with pytest.raises(OptionError, match=rf"epoch selections .*{match}"):
        make_planner(lengths, options, files=files, corpora=corpora, selections=sel)


@st.composite
def cut_order_cases(draw: st.DrawFn) -> dict:
    """The fixed and drawn orders (each sub-epoch listed and cut greedily), chunked or not, with
    ``epoch_wise_filter`` or not, two selections (one open-ended), 1-2 sub-epochs."""
    n = draw(st.integers(1, 40))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    parts = draw(st.integers(1, 2))
    options = PlanOptions(
        ordering=draw(st.sampled_from(["default", "reverse", "sorted", "sorted_reverse",
                                       "random:2", "sort_bin_shuffle:.3"])),
        max_frames=draw(st.sampled_from([40, 90])),
        partition_epoch=parts,
        distribution=draw(st.sampled_from(["shard", "random_seed_offset"])),
        uneven=draw(st.sampled_from(["split", "pad", "drop"])),
        epoch_wise_filter=draw(st.sampled_from([None, {(1, 2): {"max_mean_len": 9}}])),
        chunking=draw(st.sampled_from([None, "6:4"])),
        seed=draw(st.integers(0, 3)),
        planning="indexed",
    )  # fmt: skip
    keep = [rng.random(n) < draw(st.sampled_from([0.3, 0.8])) for _ in range(2)]
    return {
        "lengths": {"data": rng.integers(1, 30, n)},
        "options": options,
        "selections": [EpochSelection(1, parts, keep[0], "subdirs=['a']"),
                       EpochSelection(2, None, keep[1], "subdirs=['b']")],
        "worlds": draw(st.lists(st.integers(1, 3), min_size=1, max_size=3)),
        "cut": draw(st.floats(0, 1)),
    }  # fmt: skip


@settings(max_examples=12, deadline=None)
@given(cut_order_cases())
def test_fixed_and_drawn_orders_filter_their_listed_sub_epochs(case: dict) -> None:
    """The fixed and drawn orders apply the selections to each sub-epoch's listed order, then
    ``epoch_wise_filter`` (``_filtered_part``), as global planning applies them to its order:
    ``auto`` resolves to indexed; the fixed orders give global planning's plans and report
    counts (on one rank, and ``pad``); every contract of ``check_plan_contracts``."""
    o, worlds = case["options"], case["worlds"]
    given_ = PlanInputs(case["lengths"], replace(o, planning="auto"), selections=case["selections"])
    assert resolve_planning(given_).options.planning == "indexed"
    epochs = range(1, 2 * o.partition_epoch + 1)
    if o.parsed_ordering.kind in ("default", "reverse", "sorted", "sorted_reverse"):
        planner = planner_of(case)
        greedy = GlobalPlanner(replace(given_, options=replace(o, planning="global")))
        for epoch in epochs:
            for world in (1, 2) if o.uneven == "pad" else (1,):
                got, want = planner.global_plan(epoch, world), greedy.global_plan(epoch, world)
                np.testing.assert_array_equal(got.batches.seqs, want.batches.seqs)
                np.testing.assert_array_equal(got.batches.bounds, want.batches.bounds)
            assert planner.filtered(epoch) == greedy.filtered(epoch)
    cuts = [case["cut"]] * (len(worlds) - 1)
    check_plan_contracts(lambda: planner_of(case), worlds, cuts, epochs, workers=())


def test_file_pools_stay_with_global_planning() -> None:
    """File pools are RETURNN's order (``seeding="returnn"``): refused under indexed planning,
    naming why and the fix."""
    from seqloader.plan.pools import FilePools

    pools = FilePools(np.array([0, 3, 6]), np.array([1, 1]))
    options = PlanOptions(ordering="laplace", planning="indexed")
    with pytest.raises(OptionError, match=r"file pools .*seeding='returnn'.*planning='global'"):
        make_planner({"data": np.arange(1, 7)}, options, pools=pools)
