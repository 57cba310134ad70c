"""``planning="indexed"``: the contracts as properties over random corpora (hypothesis; pure numpy).

Exactly once per full epoch (C1), equal steps (C2), batches within their limits, a rank's share
computed alone equal to its part of the global list (what makes num_workers and rank count
irrelevant to the batches: C3), determinism (C4), exact and elastic resume incl. world size
changes (C5; ``files``: same world size only, elastic refused by name), and the building blocks
(the keyed bijection, the batch table's arithmetic).
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plan_contracts import check_plan_contracts, steps_units
from seqloader.errors import OptionError, ResumeError
from seqloader.plan import PlanOptions, Position, continue_plan
from seqloader.plan.indexed import interleave, replay_buckets
from seqloader.plan.indexed.batch_table import bucket_runs, laplace_bins
from seqloader.plan.indexed.bijection import Bijection
from seqloader.plan.indexed.budget import edges_for
from seqloader.plan.indexed.files import Segment, Units
from seqloader.plan.indexed.histogram import BucketIndex, build_bucket_index
from seqloader.plan.indexed.planner import IndexedPlanner
from seqloader.plan.indexed.replay_buckets import buckets_consumed
from seqloader.plan.mix import Corpora
from seqloader.plan.seeding import rng_for
from seqloader.plan.variants import splitmix64

ORDERINGS = ["buckets:1", "buckets:3", "buckets:7", "laplace", "laplace:3", "laplace:.7"]


@given(
    st.lists(st.integers(0, 70), max_size=6),
    st.integers(0, 2**64 - 1),
    st.sampled_from([1, 3, interleave.BLOCK]),
)
@settings(max_examples=40, deadline=None)
def test_interleave_holds_each_unit_its_batches(nb: list, key: int, block: int) -> None:
    """A rank's ``buckets:N`` order under ``files`` (``interleave``) holds unit ``u`` exactly
    ``nb[u]`` times, the same for the same key, whatever its blocks' size; its batches are
    stratified: the first ``k`` blocks hold the closed-form count of them (``below``) and each
    block at most ``ceil(nb[u] / blocks)`` of them."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(interleave, "BLOCK", block)
        nbs = np.array(nb, dtype=np.int64)
        order = interleave.interleave(nbs, key)
        assert np.bincount(order, minlength=len(nb)).tolist() == nb
        assert order.tolist() == interleave.interleave(nbs, key).tolist()
        if not len(order):
            return
        blocks = int(interleave.num_blocks(len(order)))
        units = np.arange(len(nb))
        phase = interleave.phases(np.full(len(nb), key, np.uint64), units, np.full(len(nb), blocks))
        sizes = [int(interleave.below(np.full(len(nb), k + 1), nbs, phase, blocks).sum())
                 - int(interleave.below(np.full(len(nb), k), nbs, phase, blocks).sum())
                 for k in range(blocks)]  # fmt: skip
        start = 0
        for k, n in enumerate(sizes):  # the order's blocks, one after another
            got = np.bincount(order[: start + n], minlength=len(nb))
            want = interleave.below(np.full(len(nb), k + 1), nbs, phase, blocks)
            assert got.tolist() == want.tolist()
            assert (
                np.bincount(order[start : start + n], minlength=len(nb)) <= -(-nbs // blocks)
            ).all()
            start += n


@given(
    st.lists(st.integers(1, 200), min_size=1, max_size=8),
    st.integers(0, 2**64 - 1),
    st.integers(1, 400),
)
@settings(max_examples=30, deadline=None)
def test_block_counts_of_a_unit_are_its_batches_blocks(counts: list, key: int, blocks: int) -> None:
    """A unit's batches in the first ``k`` blocks (``below``, the replay's closed form) are those
    whose block (``block_of``, the order's placement) is below ``k``, and a unit's phase is the
    same drawn alone or beside others: the replay draws the units of many ranks at once."""
    nb = np.array(counts, dtype=np.int64)
    keys = np.full(len(nb), key, dtype=np.uint64)
    phase = interleave.phases(keys, np.arange(len(nb)), np.full(len(nb), blocks))
    alone = [int(interleave.phases(keys[:1], np.array([i]), np.array([blocks]))[0])
             for i in range(len(nb))]  # fmt: skip
    assert phase.tolist() == alone
    for u, n in enumerate(counts):
        where = interleave.block_of(np.arange(n), n, phase[u], blocks)
        assert ((where >= 0) & (where < blocks)).all()
        for k in range(blocks + 1):
            got = int(interleave.below(np.array([k]), nb[u : u + 1], phase[u : u + 1], blocks)[0])
            assert got == int((where < k).sum())


@given(st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=20))
@settings(max_examples=20, deadline=None)
def test_splitmix64_of_an_array_is_that_of_each_word(words: list) -> None:
    """The array path of ``splitmix64`` (one scratch array for its shifts) gives each word what
    the word alone gives: the keyed orders and variants draw from arrays of any length."""
    x = np.array(words, dtype=np.uint64)
    alone = [int(splitmix64(np.array(w, dtype=np.uint64))) for w in words]  # 0-d: word alone
    assert splitmix64(x.copy()).tolist() == alone


def test_interleave_draws_every_arrangement_within_a_block() -> None:
    """Within a block the order is a random one: over 600 keys, a rank of one block (3, 2, 1
    batches) comes up in each of its 60 arrangements, none more than 3x its share."""
    seen: dict[tuple, int] = {}
    for key in range(600):
        got = tuple(interleave.interleave(np.array([3, 2, 1]), key * 7919).tolist())
        seen[got] = seen.get(got, 0) + 1
    assert len(seen) == 60 and max(seen.values()) <= 30


def test_interleave_is_not_degenerate() -> None:
    """Across blocks the order is stratified, not fixed: other keys (seeds, epochs, ranks) give
    other orders, the units interleave (a unit's batches do not come as one run), a unit of one
    batch lands in every block alike, and the first block's order differs from key to key."""
    nb = np.array([40, 25, 1, 1, 1, 12, 64])  # 144 batches: 9 blocks
    orders = {tuple(interleave.interleave(nb, key * 104729).tolist()) for key in range(50)}
    assert len(orders) == 50
    order = interleave.interleave(nb, 12345)
    assert np.count_nonzero(order[1:] != order[:-1]) > 60  # runs of one unit stay short
    blocks = int(interleave.num_blocks(int(nb.sum())))
    where = [int(interleave.block_of(np.array([0]), 1, interleave.phases(
        np.array([key], np.uint64), np.array([2]), np.array([blocks])), blocks)[0])
        for key in range(900)]  # fmt: skip
    hits = np.bincount(where, minlength=blocks)
    assert hits.min() >= 50 and hits.max() <= 150  # ~100 each
    firsts = {tuple(interleave.interleave(nb, key)[:16].tolist()) for key in range(30)}
    assert len(firsts) == 30  # the first block's order differs from key to key


@given(st.integers(0, 3000), st.integers(0, 2**32 - 1))
@settings(max_examples=60, deadline=None)
def test_bijection_is_a_permutation(m: int, seed: int) -> None:
    y = Bijection(m, [seed, 1])(np.arange(m))
    assert sorted(y.tolist()) == list(range(m))
    part = np.arange(0, m, 3)  # any subset, computed alone, gives the same images
    np.testing.assert_array_equal(Bijection(m, [seed, 1])(part), y[part])


@st.composite
def cases(draw: st.DrawFn, distribution: str = "shard") -> dict:
    n = draw(st.integers(0, 400))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    high = draw(st.sampled_from([3, 40, 300]))
    lengths = rng.integers(0 if draw(st.booleans()) else 1, high + 1, size=n).astype(np.int64)
    max_frames = draw(st.one_of(st.none(), st.integers(300, 3000)))
    uneven = draw(st.sampled_from(["split", "pad", "drop"]))
    options = PlanOptions(
        ordering=draw(st.sampled_from(ORDERINGS)),
        max_seqs=draw(st.one_of(st.none(), st.integers(1, 20))),
        max_frames=max_frames,
        batch_cost=draw(st.sampled_from(["frames", "quadratic:100"])),
        max_seq_length=draw(st.sampled_from([None, 250])),
        partition_epoch=draw(st.integers(1, 3)),
        distribution=distribution,
        uneven=uneven,
        seed=draw(st.integers(0, 5)),
        planning="indexed",
    )
    fits = None if max_frames is None else options.cost.longest_fitting(max_frames)
    if fits is not None and fits < high:  # filter what fits no batch (counted), as a user would
        limit = min(fits, options.max_seq_length or fits)
        if limit < 1:
            options = PlanOptions(**{**options_kwargs(options), "max_frames": None})
        else:
            options = PlanOptions(**{**options_kwargs(options), "max_seq_length": limit})
    files = None
    if distribution == "files":
        cuts = rng.integers(0, n + 1, size=draw(st.integers(0, 40)))
        files = np.unique(np.concatenate([[0, n], cuts])).astype(np.int64)
        if len(files) < 2:
            files = np.array([0, 0], dtype=np.int64)
    return {
        "lengths": lengths,
        "options": options,
        "files": files,
        "world": draw(st.integers(1, 9)),
        "worlds": draw(st.lists(st.integers(1, 6), min_size=1, max_size=3)),
        "cut": draw(st.floats(0, 1)),
    }


def options_kwargs(options: PlanOptions) -> dict:
    names = (
        "ordering",
        "max_seqs",
        "max_frames",
        "batch_cost",
        "max_seq_length",
        "partition_epoch",
        "distribution",
        "uneven",
        "seed",
        "planning",
    )
    return {k: getattr(options, k) for k in names}


def planner_of(case: dict) -> IndexedPlanner:
    return IndexedPlanner({"data": case["lengths"]}, case["options"], files=case["files"])


def admitted(case: dict) -> list[int]:
    limit = case["options"].max_seq_length
    keep = np.ones(len(case["lengths"]), bool) if limit is None else case["lengths"] <= limit
    return np.flatnonzero(keep).tolist()


def check_limits(planner: IndexedPlanner, epoch: int, plan) -> None:
    """Every batch within ``max_frames`` at the planner's cost (the contracts are checked by
    ``check_plan_contracts``)."""
    o, b = planner.options, plan.batches
    sizes = np.diff(b.bounds)
    if o.max_frames is not None and len(sizes):
        longest = np.maximum.reduceat(o.cost.units(planner.lengths[b.seqs]), b.bounds[:-1])
        assert (sizes * longest).max() <= planner.budget


# 40 examples (was 80) draw every distribution, ordering, batch_cost and uneven the 80 drew
@settings(max_examples=40, deadline=None)
@given(st.sampled_from(["shard", "files"]).flatmap(cases))
def test_full_epoch_exactly_once_equal_steps_limits(case: dict) -> None:
    """The contracts over the first full epoch on the case's world size (a world size with too
    few files refused by name), each plan within its limits; the admitted sequences are those of
    the length limit."""
    P = case["options"].partition_epoch
    checked = check_plan_contracts(
        lambda: planner_of(case), [case["world"]], [], range(1, P + 1), each_plan=check_limits
    )
    assert planner_of(case).admission.admitted.tolist() == admitted(case)
    if checked.refused:
        with pytest.raises(OptionError, match="files"):
            planner_of(case).global_plan(1, case["world"])


def test_epochs_and_seeds_draw_other_batches() -> None:
    lengths = np.random.default_rng(0).integers(1, 200, 3000)
    opts = {"ordering": "buckets:4", "max_frames": 2000, "planning": "indexed"}
    p = IndexedPlanner({"data": lengths}, PlanOptions(**opts, seed=1))
    q = IndexedPlanner({"data": lengths}, PlanOptions(**opts, seed=2))
    e1, e2 = p.global_plan(1, 4).batches.seqs, p.global_plan(2, 4).batches.seqs
    assert not np.array_equal(e1, e2)
    assert not np.array_equal(e1, q.global_plan(1, 4).batches.seqs)
    assert sorted(e1.tolist()) == sorted(e2.tolist())


# 40 examples (was 80) draw every ordering, batch_cost, partition_epoch and uneven the 80 drew
@settings(max_examples=40, deadline=None)
@given(cases())
def test_resume_chain_with_world_size_changes(case: dict) -> None:
    """Elastic resume (shard): stop anywhere, save as JSON, continue on another world size: every
    sequence of the sub-epoch exactly once (drop: what is missing is what the last plan drops);
    the same world size continues the uninterrupted plan; determinism from fresh planners."""
    worlds = case["worlds"]
    check_plan_contracts(
        lambda: planner_of(case), worlds, [case["cut"]] * (len(worlds) - 1), [1, 2]
    )


def files_fit(planner: IndexedPlanner, world: int) -> bool:
    """Whether a files plan of ``world`` ranks is allowed (enough files holding sequences)."""
    have = int(planner.distribution.file_counts.astype(bool).sum())
    return have == 0 or have >= planner.options.partition_epoch * world


@st.composite
def elastic_files_cases(draw: st.DrawFn) -> dict:
    """``cases("files")`` with enough files for the first world size mostly (and sometimes
    one file fewer, or a sub-epoch without sequences)."""
    case = draw(cases("files"))
    case["worlds"] = draw(st.lists(st.integers(1, 6), min_size=2, max_size=3))
    n, first = len(case["lengths"]), case["worlds"][0]
    want = case["options"].partition_epoch * first + draw(st.integers(-1, 12))
    cuts = np.random.default_rng(draw(st.integers(0, 2**32 - 1))).permutation(np.arange(1, n))
    files = np.unique(np.concatenate([[0, n], cuts[: max(want - 1, 0)]])).astype(np.int64)
    return {**case, "files": files if len(files) >= 2 else np.array([0, 0], np.int64)}


# 75 examples (was 150) draw every ordering, batch_cost, partition_epoch, uneven and epoch the
# 150 drew
@settings(max_examples=75, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    elastic_files_cases(),
    st.integers(1, 3),
    st.lists(st.integers(-1, 12), min_size=2, max_size=2),  # steps to run; -1: to the end
)
def test_files_elastic_resume_chains_exactly_once(case: dict, epoch: int, cuts: list) -> None:
    """``files`` on W -> W' -> W'' ranks, stopped at any step (0 and the last included), the
    position through JSON: every sequence of the sub-epoch exactly once, equal steps in every
    segment, each rank's share computed alone equal to its part of the segment's global list, the
    consumption replayed from counts equal to what the ranks' drawn batches consumed, and the same
    continuation from a fresh planner (C1, C2, C3, C4, C5)."""
    o, worlds = case["options"], case["worlds"]
    epoch = min(epoch, o.partition_epoch)

    def replayed_from_counts(planner, position, plan, done) -> None:
        check_limits(planner, epoch, plan)
        if position.history:
            _, drawn = planner.files_plan(epoch, position.segment_world_size, position.history)
            assert sorted(drawn.tolist()) == sorted(done.seqs[: position.segment_start].tolist())

    check_plan_contracts(
        lambda: planner_of(case), worlds, cuts, [epoch], each_segment=replayed_from_counts
    )


def replayed_segment(case: dict, changes: dict, cut: int, world: int):
    """Epoch 1's segment of ``case`` with the options ``changes``: the first (``cut`` 0) or the
    one after ``cut`` halves of it on ``world`` ranks (None: too few files for the first)."""
    case["options"] = PlanOptions(**{**options_kwargs(case["options"]), **changes})
    planner = planner_of(case)
    first = case["worlds"][0]
    if not files_fit(planner, first):
        return None
    plan = planner.global_plan(1, first)
    history = ((first, min(plan.steps, cut * plan.steps // 2)),) if cut else ()
    return planner.distribution._segment_at(1, world if history else first, history)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    elastic_files_cases(),
    st.sampled_from(["laplace", "laplace:3", "laplace:.7", "laplace:.40"]),
    st.integers(0, 2),
    st.integers(1, 9),
)
def test_laplace_replay_by_blocks_equals_rank_by_rank(case, ordering, cut, world) -> None:
    """The replay of a ``laplace`` segment over blocks, all ranks at once, counts what each
    rank's listed order and split consume, at every step, in a first and a resumed segment."""
    seg = replayed_segment(case, {"ordering": ordering}, cut, world)
    for steps in range(seg.steps + 1 if seg is not None else 0):
        np.testing.assert_array_equal(seg.consumed(steps), seg.consumed_rank_by_rank(steps))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    elastic_files_cases(),
    st.sampled_from(["buckets:1", "buckets:2", "buckets:5"]),
    st.sampled_from(["split", "pad", "drop"]),
    st.integers(0, 2),
    st.integers(1, 9),
    st.sampled_from([1, 3, interleave.BLOCK]),
)
def test_buckets_replay_of_prefixes_equals_rank_by_rank(
    case, ordering, uneven, cut, world, block
) -> None:
    """The replay of a ``buckets:N`` segment, by blocks of ``block`` batches on average (the
    order's own rule), counts what each rank's listed order and split consume, at every step,
    in a first and a resumed segment."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(interleave, "BLOCK", block)
        seg = replayed_segment(case, {"ordering": ordering, "uneven": uneven}, cut, world)
        for steps in range(seg.steps + 1 if seg is not None else 0):
            got = buckets_consumed(seg.live_units(), steps, seg.order_words)
            np.testing.assert_array_equal(got, seg.consumed_rank_by_rank(steps))
            np.testing.assert_array_equal(seg.consumed(steps), got)


def drawn_segment(data, ordering: str, uneven: str) -> Segment:
    """A segment of drawn units: ranks' runs of random counts and batch sizes (levels: the
    run's place), partly consumed before it, on their own ranks or cut over another world
    size, its order keyed by a drawn seed."""
    runs = data.draw(
        st.lists(
            st.lists(st.tuples(st.integers(1, 16), st.integers(1, 6)), max_size=4),
            min_size=1,
            max_size=5,
        )
    )
    rank = np.repeat(np.arange(len(runs)), [len(r) for r in runs]).astype(np.int32)
    count = np.array([c for r in runs for c, _ in r], dtype=np.int64)
    size = np.array([k for r in runs for _, k in r], dtype=np.int32)
    group = np.concatenate([np.arange(len(r)) for r in runs] + [[]]).astype(np.int32)
    units = Units(
        np.zeros(0, np.int64), np.zeros(0, np.int64), rank, group, count, size, group, group,
        len(runs),
    )  # fmt: skip
    start = np.array([data.draw(st.integers(0, int(c))) for c in count], dtype=np.int64)
    index = data.draw(st.integers(0, 1))
    world = len(runs) if index == 0 else data.draw(st.integers(1, 6))
    seed = data.draw(st.integers(0, 9))
    parsed = PlanOptions(ordering=ordering).parsed_ordering
    return Segment(units, start, world, index, parsed, uneven, lambda r: (seed, r))


@settings(max_examples=60, deadline=None)
@given(
    st.data(),
    st.sampled_from(["split", "pad", "drop"]),
    st.sampled_from(["laplace", "laplace:3", "laplace:7", "laplace:.2"]),
)
def test_laplace_replay_on_drawn_units_equals_rank_by_rank(data, uneven: str, ordering) -> None:
    """The closed-form count of whole bins and the walk of the bin where the steps end, on
    drawn units (ranks' runs of random counts, batch sizes and levels, partly consumed before
    the segment, on their own ranks or cut over another world size), at every step."""
    seg = drawn_segment(data, ordering, uneven)
    for steps in range(seg.steps + 1):
        np.testing.assert_array_equal(seg.consumed(steps), seg.consumed_rank_by_rank(steps))


@settings(max_examples=60, deadline=None)
@given(
    st.data(),
    st.sampled_from(["split", "pad", "drop"]),
    st.sampled_from([1, 2, 5, 16]),
    st.sampled_from([replay_buckets.FLOAT_EXACT, 0]),
)
def test_buckets_replay_on_drawn_units_equals_rank_by_rank(
    data, uneven: str, block: int, exact: int
) -> None:
    """The same on drawn units (ranks' runs of random counts and batch sizes, partly consumed
    before the segment, on their own ranks or cut over another world size): every step, with
    blocks of 1 to 16 batches, the search's counts in float64 or (``exact`` 0) in integers."""
    seg = drawn_segment(data, "buckets:3", uneven)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(interleave, "BLOCK", block)
        patch.setattr(replay_buckets, "FLOAT_EXACT", exact)
        for steps in range(seg.steps + 1):
            got = buckets_consumed(seg.live_units(), steps, seg.order_words)
            np.testing.assert_array_equal(got, seg.consumed_rank_by_rank(steps))


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 2**70), min_size=1, max_size=7))
def test_rng_for_is_the_stream_of_the_words_seed_sequence(words: list[int]) -> None:
    """``rng_for`` (words below 2^32 handed over as one array) draws what
    ``SeedSequence(list)`` seeds, for words of any size."""
    listed = np.random.Generator(np.random.PCG64(np.random.SeedSequence(words)))
    got = rng_for(*words)
    assert got.bit_generator.state == listed.bit_generator.state
    assert got.permutation(9).tolist() == listed.permutation(9).tolist()


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(elastic_files_cases(), st.integers(1, 3), st.integers(0, 12))
def test_files_drop_cuts_every_rank_at_the_shortest_ranks_count(
    case: dict, epoch: int, cut: int
) -> None:
    """``files`` with ``uneven="drop"``: every rank's share is the first ``steps`` batches of
    its ``pad`` share (the same units, members and order), ``steps`` the fewest batches of any
    rank, and ``dropped`` counts exactly the real sequences past it, on every rank alike; also in
    a segment after an elastic resume."""
    o = case["options"]
    epoch = min(epoch, o.partition_epoch)
    drop_case = {**case, "options": PlanOptions(**{**options_kwargs(o), "uneven": "drop"})}
    pad_case = {**case, "options": PlanOptions(**{**options_kwargs(o), "uneven": "pad"})}
    first = case["worlds"][0]
    drop, pad = planner_of(drop_case), planner_of(pad_case)
    if not files_fit(drop, first):
        return
    histories = [()]
    full = drop.global_plan(epoch, first)
    if 0 < cut < full.steps:
        histories.append(((first, cut),))
    for history in histories:
        world = case["worlds"][1] if history else first
        whole, _ = pad.files_segment(epoch, world, history)
        listed = [whole.rank_share(r) for r in range(world)]
        own = [int(share.real[share.bounds[:-1]].sum()) for share in listed]  # pad: fillers last
        if history and min(own) == 0 and whole.real_total():  # drop would cut the whole rest
            with pytest.raises(ResumeError, match=r"uneven='drop'.*at most \d+ ranks"):
                drop.files_segment(epoch, world, history)
            continue
        kept, _ = drop.files_segment(epoch, world, history)
        assert kept.steps == min(own)
        lost = 0
        for r, share in enumerate(listed):
            got = kept.rank_share(r)
            assert len(got) == kept.steps and bool(got.real.all())
            np.testing.assert_array_equal(got.seqs, share.first(kept.steps).seqs)
            np.testing.assert_array_equal(got.bounds, share.first(kept.steps).bounds)
            lost += int(share.real.sum()) - int(got.real.sum())
        assert kept.dropped == lost == whole.real_total() - kept.real_total()
        assert kept.repeats == 0


def test_files_drop_refuses_a_resume_that_leaves_a_rank_without_files() -> None:
    """``files`` + ``drop`` resumed mid-epoch on more ranks than have files' remainders left: a
    rank would have no batch, so drop would cut the whole rest of the epoch (it planned 0 steps
    and dropped 54 of 60 sequences); refused by name with the fix, while fewer ranks and the
    fillers of ``pad`` continue."""
    lengths = {"data": np.random.default_rng(0).integers(1, 100, 60)}
    files = np.array([0, 20, 40, 60])
    kw = {"ordering": "buckets:2", "max_seqs": 2, "distribution": "files", "planning": "indexed"}
    drop = IndexedPlanner(lengths, PlanOptions(**kw, uneven="drop"), files=files)
    pad = IndexedPlanner(lengths, PlanOptions(**kw, uneven="pad"), files=files)
    position = Position(1, 0, 3, 1)
    with pytest.raises(ResumeError, match=r"uneven='drop'.*all 54 remaining.*at most 3 ranks"):
        continue_plan(drop, position, 4)
    fewer, _ = continue_plan(drop, position, 2)
    assert fewer.steps > 0 and fewer.real_total() + fewer.dropped == 54
    padded, _ = continue_plan(pad, position, 4)
    assert padded.steps > 0 and padded.real_total() == 54 and padded.dropped == 0


def test_files_elastic_resume_1024_to_768_draws_few_old_ranks() -> None:
    """A resumed rank draws the members of the few old ranks its run of units touches, and the
    continuation keeps every contract on a corpus of many files."""
    lengths = np.random.default_rng(1).integers(50, 2001, 200_000)
    files = np.linspace(0, len(lengths), 4097).astype(np.int64)
    options = PlanOptions(
        ordering="laplace", max_seqs=200, max_frames=20_000, distribution="files",
        planning="indexed",
    )  # fmt: skip
    planner = IndexedPlanner({"data": lengths}, options, files=files)
    plan = planner.global_plan(1, 1024)
    position = Position(1, 0, 1024, plan.steps // 2)
    drawn: list[int] = []
    members = planner.distribution.members_of

    def counted(units):  # the old ranks whose members are drawn
        draw = members(units)
        return lambda r: (drawn.append(r), draw(r))[1]

    planner.distribution.members_of = counted  # type: ignore[method-assign]
    rest, position = continue_plan(planner, position, 768)
    assert len(rest.rank_share(517)) == rest.steps
    assert 1 <= len(set(drawn)) == len(drawn) <= 3
    seen = np.zeros(len(lengths), dtype=np.int64)
    np.add.at(seen, steps_units(plan, 0, position.prior_steps).seqs, 1)
    for r in range(768):
        share = rest.rank_share(r)
        assert len(share) == rest.steps
        np.add.at(seen, share.seqs[share.real], 1)
    assert (seen == 1).all()


def test_positions_inside_a_batch_are_refused() -> None:
    lengths = np.full(100, 10)
    options = PlanOptions(ordering="buckets:2", max_seqs=4, planning="indexed")
    planner = IndexedPlanner({"data": lengths}, options)
    with pytest.raises(OptionError, match="batch boundary"):
        planner.global_plan(1, 2, start=3)
    assert planner.global_plan(1, 2, start=4).real_total() == 96


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"seeding": "returnn"}, "seeding"),
    ],
)
def test_unsupported_options_are_refused_by_name(changes: dict, match: str) -> None:
    kwargs = {"ordering": "laplace", "max_frames": 100, "planning": "indexed", **changes}
    with pytest.raises(OptionError, match=match):
        PlanOptions(**kwargs)


def test_global_planning_leaves_fingerprints_unchanged() -> None:
    """Global plans keep the fingerprints of before the option; the default ``auto`` is recorded
    as what it resolves to (tests/test_planning_auto.py)."""
    assert "planning" not in PlanOptions(ordering="laplace", planning="global").to_dict()
    assert "planning" not in PlanOptions(ordering="sort_bin_shuffle", planning="global").to_dict()
    assert PlanOptions(ordering="laplace", planning="indexed").to_dict()["planning"] == "indexed"
    assert PlanOptions(ordering="laplace").to_dict()["planning"] == "indexed"


def test_a_prebuilt_index_gives_the_same_plan() -> None:
    lengths = np.random.default_rng(2).integers(1, 500, 5000).astype(np.int32)
    files = np.arange(0, 5001, 50)
    options = PlanOptions(
        ordering="buckets:6", max_frames=3000, distribution="files", planning="indexed"
    )
    built = IndexedPlanner({"data": lengths}, options, files=files)
    edges = edges_for(lengths, options, lengths, built.budget)
    index = BucketIndex.from_columns(build_bucket_index(lengths, edges, None, files).columns())
    given_index = IndexedPlanner({"data": lengths}, options, files=files, index=index)
    np.testing.assert_array_equal(
        built.global_plan(1, 7).batches.seqs, given_index.global_plan(1, 7).batches.seqs
    )
    assert built.fingerprint("x") == given_index.fingerprint("x")
    assert index.members.dtype == np.uint32
    wrong = BucketIndex(
        index.members[:-1],
        index.starts,
        index.longest,
        index.edges,
        index.file_counts,
        index.file_frames,
    )
    with pytest.raises(OptionError, match="bucket index"):
        IndexedPlanner({"data": lengths}, options, files=files, index=wrong)


def test_batch_table_arithmetic_matches_the_listed_batches() -> None:
    rng = np.random.default_rng(3)
    counts = rng.integers(0, 300, 7)
    sizes = rng.integers(1, 9, 7)
    for table in (
        bucket_runs(counts, sizes, 3, np.random.default_rng(0)),
        laplace_bins(counts, sizes, 4),
    ):
        g = np.arange(table.num_batches)
        batch_sizes = table.batch_sizes(g)
        assert batch_sizes.sum() == counts.sum() == table.num_seqs
        before = np.concatenate([[0], np.cumsum(batch_sizes)])
        for k in range(0, table.num_batches + 1, 5):
            assert table.seqs_before(k) == before[k]
            assert table.batch_at(int(before[k])) == k
        b, j = table.locate(g)
        pairs = set(zip(b.tolist(), j.tolist(), strict=True))
        assert len(pairs) == table.num_batches  # every (bucket, batch) once


# ---- golden indexed plans, pinned to INDEXED_ALGORITHM (as test_plan_golden pins global plans) ----

INDEXED_CASES: dict[str, dict] = {
    "buckets:5 W4 split elastic -> W3": {
        "options": {"ordering": "buckets:5", "max_seqs": 8, "max_frames": 1600, "seed": 5},
        "world": 4,
        "elastic": (3, 3),
    },
    "laplace:.20 partition 3 W4 pad, filters": {
        "options": {"ordering": "laplace:.20", "max_frames": 2000, "partition_epoch": 3,
                    "uneven": "pad", "max_seq_length": 350, "seed": 2},
        "world": 4,
    },
    "files buckets:3 W3 split": {
        "options": {"ordering": "buckets:3", "max_frames": 1500, "distribution": "files"},
        "files": list(range(0, 301, 12)),
        "world": 3,
    },
    "files laplace W4 pad, merged buckets": {
        "options": {"ordering": "laplace", "max_frames": 3000, "distribution": "files",
                    "uneven": "pad", "seed": 4},
        "files": list(range(0, 301, 10)),
        "world": 4,
    },
    "mix buckets:4 partition 2 W3 split elastic -> W2": {
        "options": {"ordering": "buckets:4", "max_frames": 2000, "partition_epoch": 2, "seed": 3,
                    "mix": {"a": 0.5, "b": 1.0, "c": 2.5}},
        "world": 3,
        "elastic": (2, 2),
    },
    "mix laplace:.10 W4 pad, filters": {
        "options": {"ordering": "laplace:.10", "max_frames": 2500, "uneven": "pad",
                    "max_seq_length": 380, "mix": {"a": 0.7, "c": 3.0}},
        "world": 4,
    },
    "files buckets:4 W4 split elastic -> W3 -> W5": {
        "options": {"ordering": "buckets:4", "max_seqs": 6, "max_frames": 2500,
                    "distribution": "files", "seed": 1},
        "files": [*range(0, 300, 9), 300],
        "world": 4,
        "elastic": (3, 3),
        "elastic_again": (2, 5),
    },
    "files buckets:4 W4 drop elastic -> W3": {
        "options": {"ordering": "buckets:4", "max_seqs": 5, "max_frames": 2000,
                    "distribution": "files", "uneven": "drop", "seed": 8},
        "files": [*range(0, 300, 7), 300],
        "world": 4,
        "elastic": (4, 3),
    },
    "files laplace:.9 partition 2 W3 drop": {
        "options": {"ordering": "laplace:.9", "max_frames": 2400, "partition_epoch": 2,
                    "distribution": "files", "uneven": "drop", "seed": 3},
        "files": [*range(0, 300, 11), 300],
        "world": 3,
    },
    "chunked 100:50 buckets:5 W4 split elastic -> W3": {
        "options": {"ordering": "buckets:5", "max_seqs": 8, "max_frames": 700, "seed": 6,
                    "chunking": "100:50", "min_chunk_size": 20},
        "world": 4,
        "elastic": (3, 3),
    },
    "chunked 90:60 laplace:.20 partition 2 W3 pad": {
        "options": {"ordering": "laplace:.20", "max_frames": 900, "partition_epoch": 2,
                    "uneven": "pad", "chunking": "90:60", "seed": 2},
        "world": 3,
    },
    "chunked 80:40 buckets:3 partition 2 W3 random_seed_offset": {
        "options": {"ordering": "buckets:3", "max_frames": 600, "max_seqs": 9, "seed": 4,
                    "partition_epoch": 2, "chunking": "80:40", "min_chunk_size": 10,
                    "distribution": "random_seed_offset"},
        "world": 3,
    },
    "chunked 80:40 files laplace:.10 partition 2 W3 split elastic -> W2 -> W4": {
        "options": {"ordering": "laplace:.10", "max_frames": 700, "max_seqs": 9, "seed": 5,
                    "partition_epoch": 2, "chunking": "80:40", "min_chunk_size": 10,
                    "distribution": "files"},
        "files": list(range(0, 301, 10)),
        "world": 3,
        "elastic": (4, 2),
        "elastic_again": (3, 4),
    },
    "chunked 60:30 laplace:.10 W3 split, epoch_wise_filter elastic -> W2": {
        "options": {"ordering": "laplace:.10", "max_frames": 500, "max_seqs": 9, "seed": 2,
                    "chunking": "60:30", "min_chunk_size": 10,
                    "epoch_wise_filter": {(1, 1): {"max_mean_len": 150}}},
        "world": 3,
        "elastic": (3, 2),
    },
    "chunked 60:30 data, laplace:.8 W4 pad, max_frames per key (classes whole)": {
        "options": {"ordering": "laplace:.8", "max_frames": {"data": 600, "classes": 900},
                    "max_seqs": 12, "uneven": "pad", "seed": 7, "chunking": {"data": (60, 30)}},
        "classes": True,
        "world": 4,
        "elastic": (2, 3),
    },
    "mix files laplace:.10 partition 2 W3 split elastic -> W2 -> W4": {
        "options": {"ordering": "laplace:.10", "max_frames": 900, "max_seqs": 9, "seed": 3,
                    "partition_epoch": 2, "distribution": "files",
                    "mix": {"a": 0.7, "b": 2, "c": "1/3"}},
        "files": list(range(0, 301, 10)),
        "world": 3,
        "elastic": (2, 2),
        "elastic_again": (2, 4),
    },
    "chunked 80:40 mix files buckets:3 W3 pad elastic -> W2": {
        "options": {"ordering": "buckets:3", "max_frames": 700, "max_seqs": 9, "seed": 6,
                    "distribution": "files", "uneven": "pad", "chunking": "80:40",
                    "min_chunk_size": 10, "mix": {"a": 1.5, "c": 0.5}},
        "files": list(range(0, 301, 10)),
        "world": 3,
        "elastic": (3, 2),
    },
    "chunked 60:30 laplace:.10 partition 3 W3 split, epoch_wise_filter elastic -> W2": {
        "options": {"ordering": "laplace:.10", "max_frames": 500, "max_seqs": 9, "seed": 2,
                    "partition_epoch": 3, "chunking": "60:30", "min_chunk_size": 10,
                    "epoch_wise_filter": {(1, 1): {"max_mean_len": 150}}},
        "world": 3,
        "elastic": (2, 2),
    },
    "chunked 80:40 buckets:3 partition 2 W2 random_seed_offset, epoch_wise_filter": {
        "options": {"ordering": "buckets:3", "max_frames": 700, "max_seqs": 9, "seed": 4,
                    "partition_epoch": 2, "chunking": "80:40", "min_chunk_size": 10,
                    "distribution": "random_seed_offset",
                    "epoch_wise_filter": {(1, 2): {"max_mean_len": 120}}},
        "world": 2,
    },
    "files laplace:.10 W4 split, packed elastic -> W3": {
        "options": {"ordering": "laplace:.10", "batch_cost": "packed", "max_frames": 1500,
                    "max_seqs": 9, "distribution": "files", "seed": 2},
        "files": list(range(0, 301, 10)),
        "world": 4,
        "elastic": (3, 3),
    },
    "mix files laplace W3 pad, max_packed_frames": {
        "options": {"ordering": "laplace", "max_packed_frames": 1200, "distribution": "files",
                    "uneven": "pad", "seed": 7, "mix": {"a": 0.5, "b": 1.5, "c": 1.0}},
        "files": list(range(0, 301, 10)),
        "world": 3,
    },
    # the chunked mix under shard (mix_chunks.ChunkedBucketMix), recorded under /8 before its
    # draw took bucket runs and CellFinder: the same digests after (no plan moved)
    "chunked 80:40 mix laplace:.10 partition 2 W3 split elastic -> W2": {
        "options": {"ordering": "laplace:.10", "max_frames": 700, "max_seqs": 9, "seed": 5,
                    "partition_epoch": 2, "chunking": "80:40", "min_chunk_size": 10,
                    "mix": {"a": 0.7, "b": 2, "c": "1/3"}},
        "world": 3,
        "elastic": (3, 2),
    },
    "chunked 60:30 mix buckets:3 W4 pad": {
        "options": {"ordering": "buckets:3", "max_frames": 600, "max_seqs": 8, "seed": 2,
                    "uneven": "pad", "chunking": "60:30", "mix": {"a": 1.5, "c": 0.5}},
        "world": 4,
    },
}  # fmt: skip
# seqloader-plan-indexed/3: `files` orders a rank's batches with a stream apart from its member
# draw and fills a unit's batches in the order they come (elastic resume from counts); the shard
# tail's split follows its rule (the batch with the largest pieces splits again) where /2 stopped
# after one cut per batch. Moved: the buckets:N cases (mix too); laplace plans of /2 are unchanged.
# seqloader-plan-indexed/4: a mix takes floor(f·r·N_c) per corpus (the global mix's count),
# apportioned to buckets (indexed_mix.apportion), not floor(f·r·N_cb) per bucket. Moved: the mix
# cases only.
# seqloader-plan-indexed/5: bucket edges also cut where the batch size the lengths allow changes
# (histogram.batching_edges), and each bucket's list is sorted by length within windows of
# WINDOW_BATCHES batches (SortedWindows; `files`: within each unit): every case moved.
# Chunked cases added under /5 (chunking was refused before: no plan of an earlier id moved);
# so were the `files` + uneven="drop" cases (refused before).
# chunked random_seed_offset, files, epoch_wise_filter and other keys' limits added later,
# likewise (refused before); so were mix with files, chunked or not (refused before), and chunked
# epoch_wise_filter with partition_epoch > 1 (refused before).
# seqloader-plan-indexed/6: `files` cuts each old rank's buckets, laid end to end, into runs of
# one batch size (histogram.cut_runs) instead of merging neighbouring buckets into groups of 4
# full batches at the group's smallest size (merge_small): a rank has one short batch where the
# size falls below a batch's fill, not one per group. Moved: the `files` cases only (the mix
# over files too).
# seqloader-plan-indexed/7: `laplace` with `shard` (and random_seed_offset) lays the sub-epoch's
# buckets end to end and cuts them into runs of one batch size (histogram.row_runs, the runs of
# `files`), each run batched as one bucket of the laplace bins (drawn through RunDraw): one short
# batch per fall of the size, not one per bucket. Moved: the non-`files` laplace cases (here,
# the chunked epoch_wise_filter partition 3 case recorded under /6 just before included, and
# test_plan_indexed_options.NEW_GOLDEN's); buckets:N and `files` plans unchanged.
# seqloader-plan-indexed/8: `files` with `buckets:N` orders a rank's batches as a keyed random
# interleaving of its units' batches (plan/indexed/interleave.py: i.i.d. uniform keys refined over
# dyadic intervals by keyed binomial halves) instead of a numpy permutation drawn from the rank's
# order stream, so an elastic replay counts any prefix by descending the intervals, without
# listing it. Moved: the `files` buckets:N cases only (the chunked mix over files too).
# Also under /8: `files` with a limit on the sum of lengths alone (batch_cost="packed",
# max_packed_frames without max_frames) cuts each old rank's buckets by that sum
# (histogram.cut_packed) and the index cuts wide buckets of long sequences further
# (histogram.narrow_edges). No recorded case had such limits with `files`: none moved; the two
# `packed`/`max_packed_frames` files cases were added with it.
# Also under /8: `files` with `laplace` deals each rank's batches to its bins in length order
# (replay.laplace_blocks: the batch at position j of the rank's length order in bin j % B) where
# each unit spread its own batches over the bins from bin 0 (a one-batch unit always in bin 0, so
# on many ranks a rank's batches ran as one rising ramp). Moved: the `files` laplace cases only
# (the mix over files, chunked and packed ones too); no shard or buckets:N digest moved.
# seqloader-plan-indexed/9: `files` with `buckets:N` orders a rank's batches as a keyed
# stratified interleaving (plan/indexed/interleave.py: the rank's batches in ceil(N / 16) blocks,
# each unit's spread evenly over them from a keyed phase, a keyed random order within a block)
# instead of /8's keyed intervals, so an elastic replay counts each unit's batches in a prefix of
# blocks in closed form (replay_buckets.py). And `files` with `laplace` gives a rank at most half
# its batches in bins (at least 2; replay.files_bins), so a bin holds two batches or more and the
# rank's lengths rise and fall. Moved: the `files` buckets:N cases (the chunked mix over files
# too) and the `files` laplace:.N cases whose ranks had more bins than half their batches; no
# shard digest moved.
# seqloader-plan-indexed/10: the keyed bijection (plan/indexed/bijection.py) is an alternating
# Feistel network over a mixed-radix domain of 2**p * r values (2**p about sqrt(m), r = ceil(m /
# 2**p)), not a balanced one over 4**h >= m, so cycle-walking costs about one encryption a
# position instead of up to four; and a mix's draw (MixDraw) reads a corpus epoch the sub-epoch
# takes whole in stream order (its bucket's bijection orders the slots), drawing only the parts
# of corpus epochs by their streams' bijections. Moved: every plan with a keyed bijection
# (laplace and buckets:N with shard or random_seed_offset, random, sort_bin_shuffle's ties and
# _x2's bins, mixes); `files` plans (keyed by round_keys_many, no bijection) and the fixed
# orders unchanged.
# seqloader-plan-indexed/11: a `laplace` mix under `random_seed_offset` orders the mix's shared
# slots per bucket by the rank's own keyed order (RankOrderDraw), as without a mix; before, every
# rank planned the identical batches. No case here moved (none is that set); the one that did is
# in test_plan_indexed_options.py's SINCE_REFUSED_GOLDEN.
# seqloader-plan-indexed/12: a `buckets:N` mix under `random_seed_offset` does the same (each rank
# batches its own draw of the shared slots; before, the same batches in the rank's run order).
# No case here moved; test_plan_indexed_options.py's chunked one did, and a case was added there.
# seqloader-plan-indexed/13: a `random` or `sort_bin_shuffle` mix under `random_seed_offset`
# batches each rank's own slots (alike for the cut) of the shared selection; before, every rank
# the same batches in its own order. No case here moved (none is that set); two cases were added
# to test_plan_indexed_options.py's SINCE_REFUSED_GOLDEN.
INDEXED_GOLDEN = {
    "buckets:5 W4 split elastic -> W3": "4834dcb3f4143d74c17ea3b9576ea73a9b51a1e865176a9352689ee1d1da8e2f",
    "laplace:.20 partition 3 W4 pad, filters": "aca67ebafe53c1e2445dab4c377a0c29e84060bc45868fc447ebe470324f411f",
    "files buckets:3 W3 split": "053bdffa1aec5d4c413c8f7dfa9eec73ebd026e13c2d3382578ecaae82e7f9a2",
    "files laplace W4 pad, merged buckets": "cd38cc518387e0a7236ad5a665ca3b5c7d1473a44360702721b0ffebc39f1fd2",
    "mix buckets:4 partition 2 W3 split elastic -> W2": "3ba313f226bff452dd2a34941afb08088e3d3a0d95dceb7d3357ebad161f9d13",
    "mix laplace:.10 W4 pad, filters": "de12c2ffbcad8efd4c39467b92ee3c30d91ee9de493c7616f2ee84f8c7ccf2a2",
    "files buckets:4 W4 split elastic -> W3 -> W5": "74155cd55c5fb86189e7d7c969086f2d59b8a9865106802ba1abe585fbd5f25c",
    "files buckets:4 W4 drop elastic -> W3": "20b4d84b6daa414a9478e558fe9d8922605b1b79d873ff185fd27f04317113c5",
    "files laplace:.9 partition 2 W3 drop": "9215cb2b091c4bfcf6bd37ef22b9e453e133121a9e5831fc52185201f74ee0e9",
    "chunked 100:50 buckets:5 W4 split elastic -> W3": "f0a913f3166742b044ed917471f8f8c4aa1fa5c4434b849c18707eae752aebc5",
    "chunked 90:60 laplace:.20 partition 2 W3 pad": "bdf7a09269ebeb4ac21a16667ba04d4e8fc56ced57663bd7989e41b85bec24d4",
    "chunked 80:40 buckets:3 partition 2 W3 random_seed_offset": "b522c2375f6afd5804c73c2f14d302e6644471c5bb3cbc23c925afad7d4ee7f8",
    "chunked 80:40 files laplace:.10 partition 2 W3 split elastic -> W2 -> W4": "de2a28f3f8db086b51b6acfadca3566d20f5c6fd8fb10b08348dbbe20e9c5654",
    "chunked 60:30 laplace:.10 W3 split, epoch_wise_filter elastic -> W2": "78bbef1910b2cd54936aef52d102f66c4ce200de64f406d2be6640d23b64cf4d",
    "chunked 60:30 data, laplace:.8 W4 pad, max_frames per key (classes whole)": "7fe12f2f39a5f2f544689fc88d7c3d80776e92b47d5eaa9b24bad3997f8754f5",
    "mix files laplace:.10 partition 2 W3 split elastic -> W2 -> W4": "f5c7a20a941e2b86d5c723b7a9b4015285b5ad7020cb745e078a16e9350defe5",
    "chunked 80:40 mix files buckets:3 W3 pad elastic -> W2": "5c2a0a4240d205e801d7fa247842aec6e0b8ebded73f6ab40699e3c4adbf3852",
    "chunked 60:30 laplace:.10 partition 3 W3 split, epoch_wise_filter elastic -> W2": "a3e858aa51e8d8a2a340ff4bb31de7afa2cd079e8ff6992bf638b103b58a8015",
    "chunked 80:40 buckets:3 partition 2 W2 random_seed_offset, epoch_wise_filter": "3bf41828456fcf8b143d8a96b8d0854d4a017ad5412e52ad0ad89de7043f45ca",
    "files laplace:.10 W4 split, packed elastic -> W3": "7f1db7ba66d5517c8062bfc9d32b15747d82cc79d70d629fb096861bf4f26a9e",
    "mix files laplace W3 pad, max_packed_frames": "b35118c126bb1116db8d3aa19fbb230139a1b711aa9e5130161bb66fbc8ef8cb",
    "chunked 80:40 mix laplace:.10 partition 2 W3 split elastic -> W2": "8375487716f393608b7e9cb68db6defb5e59e3d6f4c6d496bd2cafa75d22009e",
    "chunked 60:30 mix buckets:3 W4 pad": "96a78bbb2d6c1c30c2f657ee1c85ee4971f719d57a41c0790f647ee768547be9",
}  # fmt: skip
INDEXED_GOLDEN_VERSION = "seqloader-plan-indexed/13"


def indexed_digest(case: dict) -> str:
    import hashlib

    lengths = (np.arange(300, dtype=np.int64) * 7919 + 17) % 400 + 1
    files = np.array(case["files"]) if "files" in case else None
    options = PlanOptions(**case["options"], planning="indexed")
    corpora = Corpora(("a", "b", "c"), np.array([0, 120, 250, 300])) if options.mix else None
    keys = {"data": lengths}
    if case.get("classes"):  # a second key, a third of the length (other keys' limits)
        keys["classes"] = lengths // 3
    # a source's own sort key (RETURNN's order_lengths), many ties
    order = (lengths * 31 + 5) % 50 if case.get("own_sort_key") else None
    planner = IndexedPlanner(keys, options, files=files, corpora=corpora, order_lengths=order)
    plans = [planner.global_plan(epoch, case["world"]) for epoch in (1, 2)]
    if "elastic" in case:
        steps, world = case["elastic"]
        plan, at = continue_plan(planner, Position(1, 0, case["world"], steps), world)
        plans.append(plan)
        if "elastic_again" in case:
            steps, world = case["elastic_again"]
            plans.append(continue_plan(planner, at.advanced(steps), world)[0])
    content = [
        [p.batches.seqs.tolist(), p.batches.bounds.tolist(), p.batches.real.tolist()] for p in plans
    ]
    for p, row in zip(plans, content):  # a mix: the corpus epoch of every slot too
        if p.batches.uses is not None:
            row.append(p.batches.uses.tolist())
        if p.batches.chunks is not None:  # chunked: the chunk of every slot too
            row.append(p.batches.chunks.tolist())
        if options.distribution == "files" and p.dropped:  # files + drop (refused before /5's
            row.append(["dropped", p.dropped])  # earlier cases): what it leaves out
    return hashlib.sha256(json.dumps([content, planner.filtered(1)]).encode()).hexdigest()


def test_indexed_golden_plans_are_pinned_to_their_algorithm_version() -> None:
    from seqloader.plan.indexed.planner import INDEXED_ALGORITHM

    got = {name: indexed_digest(case) for name, case in INDEXED_CASES.items()}
    assert INDEXED_ALGORITHM == INDEXED_GOLDEN_VERSION, (
        f"record the digests of {INDEXED_ALGORITHM!r}: {got}"
    )
    assert got == INDEXED_GOLDEN, (
        f"indexed plans changed without bumping INDEXED_ALGORITHM (plan/indexed/planner.py); if intended, "
        f"bump it and record: {got}"
    )
