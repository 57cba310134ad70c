"""``distribution="files"`` on the pure planner (hypothesis; no torch, no data read).

For every ordering (``buckets:N`` included), ``uneven`` policy, world size 1..6,
``partition_epoch`` 1..3, batch cost and random file layouts: equal steps (C2), exactly-once per
sub-epoch (C1) with sub-epochs that form the full epoch, each rank's sequences only from its own
files and files disjoint across ranks, sub-epochs of about 1/P of the frames, ranks balanced by
frames, determinism; resume chains (exact and elastic, repeated) keep exactly-once and equal steps.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import assume, given, note, settings
from hypothesis import strategies as st

import seqloader as sl
from conftest import ORDERINGS
from plan_contracts import check_plan_contracts, steps_units
from seqloader.errors import OptionError, ResumeError
from seqloader.plan import Planner, PlanOptions, Position, continue_plan
from seqloader.plan.files import cut_parts, split_batches
from seqloader.plan.lpt import assign_lpt
from seqloader.plan.options import batch_cost_option
from seqloader.plan.position import segment_plan
from seqloader.sources.base import file_layout
from test_plan_properties import assert_batches_fit

UNEVEN = ["split", "pad", "drop"]


@st.composite
def file_layouts(draw: st.DrawFn, n: int) -> np.ndarray:
    """Bounds ``[F + 1]`` over ``n`` sequences: random cuts, sometimes empty files."""
    cuts = draw(st.lists(st.integers(0, n), min_size=0, max_size=40))
    if draw(st.booleans()):
        cuts = sorted(set(cuts))  # no empty files
    return np.array([0, *sorted(cuts), n], dtype=np.int64)


@st.composite
def files_cases(draw: st.DrawFn) -> tuple[Planner, int]:
    n = draw(st.integers(1, 400))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    lengths = rng.integers(1, draw(st.sampled_from([5, 100, 3000])) + 1, size=n)
    if draw(st.booleans()):
        lengths[rng.random(n) < 0.1] = 0
    max_frames = draw(st.one_of(st.none(), st.integers(1, 12_000)))
    cost = draw(st.sampled_from(["frames", "quadratic:50"]))
    fits = None if max_frames is None else batch_cost_option(cost).longest_fitting(max_frames)
    if fits is not None and fits < 1:
        max_frames, fits = None, None
    options = PlanOptions(
        ordering=draw(st.sampled_from(ORDERINGS)),
        max_seqs=draw(st.one_of(st.none(), st.integers(1, 64))),
        max_frames=max_frames,
        max_seq_length=fits if fits is not None and fits < lengths.max() else None,
        batch_cost=cost,
        partition_epoch=draw(st.integers(1, 3)),
        distribution="files",
        uneven=draw(st.sampled_from(UNEVEN)),
        seed=draw(st.integers(0, 1000)),
    )
    bounds = draw(file_layouts(n))
    planner = Planner({"data": lengths.astype(np.int64)}, options, files=bounds)
    world = draw(st.integers(1, 6))
    used = int(np.count_nonzero(np.diff(np.searchsorted(planner.admission.admitted, bounds))))
    assume(used == 0 or used >= options.partition_epoch * world)  # else refused (tested apart)
    return planner, world


def file_of(planner: Planner, seqs: np.ndarray) -> np.ndarray:
    assert planner.files is not None
    return np.searchsorted(planner.files, seqs, side="right") - 1


def frames_of(planner: Planner, seqs: np.ndarray) -> int:
    return int(planner.lengths[seqs].sum())


@settings(max_examples=80, deadline=None)
@given(files_cases())
def test_files_plans_keep_every_contract(case: tuple[Planner, int]) -> None:
    planner, world = case
    note(f"{planner.options} {planner.files.tolist()} {planner.lengths.tolist()}")
    o = planner.options
    P = o.partition_epoch
    # the shared contracts (each sub-epoch once, fillers its own, equal steps, the full epoch,
    # determinism from a fresh planner) over the first full epoch and the next one's first part
    factory = lambda: Planner({"data": planner.lengths}, o, files=planner.files)  # noqa: E731
    plans = check_plan_contracts(factory, [world], [], range(1, P + 2)).plans
    sub_epochs, part_files = [], []
    for epoch in range(1, P + 1):
        units, unit_files = planner.sub_epoch_files(epoch)
        order = planner.sub_epoch_order(epoch)
        np.testing.assert_array_equal(order, units.seqs)
        assert len(set(unit_files.tolist())) == len(unit_files)  # one unit per file
        # a sub-epoch takes whole files: all their admitted sequences
        whole = np.isin(file_of(planner, planner.admission.admitted), unit_files)
        np.testing.assert_array_equal(np.sort(order), planner.admission.admitted[whole])
        sub_epochs.append(order)
        part_files.append(unit_files)

        plan = plans[epoch, world]
        assert_batches_fit(planner, plan.batches)
        if o.uneven == "drop":
            assert plan.repeats == 0
        else:
            assert plan.dropped == 0
            if o.uneven == "split":  # fillers only where a rank has fewer sequences than steps
                for r in range(world):
                    share = plan.rank_share(r)
                    assert share.real.all() or share.real_count() < plan.steps
        # every rank reads its own files; disjoint across ranks unless a sub-epoch has fewer
        # files than ranks (then the largest are halved, so that no rank is left without data)
        owned = [set(file_of(planner, plan.rank_share(r).seqs[plan.rank_share(r).real]).tolist())
                 for r in range(world)]  # fmt: skip
        if len(unit_files) >= world:
            for a in range(world):
                for b in range(a + 1, world):
                    assert not owned[a] & owned[b]
            if o.uneven != "drop":  # LPT: ranks differ by at most the largest file's frames
                loads = [frames_of(planner, plan.rank_share(r).seqs[plan.rank_share(r).real])
                         for r in range(world)]  # fmt: skip
                largest = max(frames_of(planner, units.batch(k)[0]) for k in range(len(units)))
                assert max(loads) - min(loads) <= largest
                assert all(owned)  # every rank got at least one file
    # C1 over the full epoch: sub-epochs are disjoint, whole files, and together every sequence
    joined = np.concatenate(sub_epochs)
    np.testing.assert_array_equal(np.sort(joined), planner.admission.admitted)
    files = np.concatenate(part_files)
    assert len(np.unique(files)) == len(files)
    if len(files) >= P:
        assert all(len(f) >= 1 for f in part_files)  # each sub-epoch about 1/P of the files
        total = frames_of(planner, joined)
        biggest = max((frames_of(planner, s) for s in np.split(
            np.sort(joined), np.searchsorted(np.sort(joined), planner.files[1:-1]))), default=0)  # fmt: skip
        if biggest * P <= total:  # no file over 1/P: parts within one file of 1/P
            for order in sub_epochs:
                assert frames_of(planner, order) * P <= total + P * biggest


def test_files_are_shuffled_per_epoch_and_seed() -> None:
    lengths = np.random.default_rng(0).integers(1, 50, size=400)
    bounds = np.arange(0, 401, 10)
    plans = {}
    for seed in (1, 2):
        planner = Planner(
            {"data": lengths}, PlanOptions(distribution="files", seed=seed), files=bounds
        )
        for epoch in (1, 2):
            plans[seed, epoch] = planner.sub_epoch_files(epoch)[1].tolist()
    assert len({tuple(v) for v in plans.values()}) == 4
    assert all(sorted(v) == list(range(40)) for v in plans.values())


# ---- resume: exact and elastic, on the pure planner ----


@settings(max_examples=80, deadline=None)
@given(
    files_cases(),
    st.lists(st.integers(1, 6), min_size=1, max_size=3),
    st.lists(st.floats(0, 1), min_size=2, max_size=2),
)
def test_resume_chains_keep_exactly_once(case, worlds, cuts) -> None:
    """W -> W' -> W'': stop at a fraction of the rest, save (JSON), resume; consumed over the
    chain = the sub-epoch once (less what ``drop`` leaves out of the last segment)."""
    planner, world = case
    worlds = [world, *worlds]
    P = planner.options.partition_epoch
    used = len(np.flatnonzero(np.diff(np.searchsorted(planner.admission.admitted, planner.files))))
    assume(used >= P * max(worlds) or used == 0)  # a step-0 state starts afresh: checked
    check_plan_contracts(
        lambda: Planner({"data": planner.lengths}, planner.options, files=planner.files),
        worlds,
        cuts[: len(worlds) - 1],
        [P],  # the last sub-epoch
    )


def test_elastic_resume_reassigns_the_rest_by_files() -> None:
    """2 -> 3 -> 1 ranks: each later segment gives the new ranks the files of what is left
    (whole remainders of files), and the history says where it came from."""
    lengths = np.random.default_rng(5).integers(1, 40, size=600)
    bounds = np.arange(0, 601, 20)  # 30 files
    options = PlanOptions(ordering="laplace:.8", max_frames=200, distribution="files")
    planner = Planner({"data": lengths}, options, files=bounds)
    position, consumed = Position(1, 0, 2, 0), []
    for world, steps in ((2, 5), (3, 4), (1, None)):
        plan, position = continue_plan(planner, position, world)
        owned = [set((plan.rank_share(r).seqs // 20).tolist()) for r in range(world)]
        assert all(not owned[a] & owned[b] for a in range(world) for b in range(a + 1, world))
        stop = plan.steps if steps is None else position.steps + steps
        consumed.append(steps_units(plan, position.steps, stop).seqs)
        position = position.advanced(stop - position.steps)
    assert position.history == ((2, 5), (3, 4))
    assert position.to_fields()["segment_history"] == [[2, 5], [3, 4]]
    np.testing.assert_array_equal(np.sort(np.concatenate(consumed)), np.arange(600))


def test_same_world_size_resume_continues_the_plan() -> None:
    lengths = np.random.default_rng(1).integers(1, 40, size=300)
    options = PlanOptions(ordering="random", max_seqs=4, distribution="files", partition_epoch=2)
    planner = Planner({"data": lengths}, options, files=np.arange(0, 301, 25))
    full = planner.global_plan(2, 3)
    plan, position = continue_plan(planner, Position(2, 0, 3, 2), 3)
    assert plan is not full and position == Position(2, 0, 3, 2)
    np.testing.assert_array_equal(plan.batches.seqs, full.batches.seqs)


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"segment_start": 3}, "segment_start: got 3, .* gives 20 sequences"),
        ({"prior_steps": 0}, "prior_steps: got 0, .* gives 2 steps consumed"),
        ({"segment_history": [[2, 99]]}, "has 6 steps, but 99"),
        ({"segment_history": [[0, 1]]}, "segment_history: got"),
        ({"segment_history": "x"}, "segment_history: got 'x'"),
    ],
)
def test_impossible_files_positions_are_refused(fields: dict, match: str) -> None:
    options = PlanOptions(max_seqs=5, distribution="files")
    planner = Planner({"data": np.arange(1, 51)}, options, files=np.arange(0, 51, 10))
    good = Position(1, 20, 3, 1, 2, None, ((2, 2),)).to_fields()
    segment_plan(planner, Position.from_fields(good))  # the good one is fine
    with pytest.raises(ResumeError, match=match):
        segment_plan(planner, Position.from_fields({**good, **fields}))


def test_shard_states_keep_their_format_and_replay_a_history() -> None:
    assert "segment_history" not in Position(1, 0, 2, 1).to_fields()
    planner = Planner({"data": np.arange(1, 30)}, PlanOptions(max_seqs=5))
    _, elastic = continue_plan(planner, Position(1, 0, 3, 1), 2)  # 1 step on 3 ranks: 15 seqs
    assert elastic.history == ((3, 1),) and elastic.segment_start == 15
    segment_plan(planner, elastic)
    with pytest.raises(ResumeError, match="segment_start: got 0, but its segment_history"):
        segment_plan(planner, Position(1, 0, 2, 1, 0, None, ((3, 1),)))


# ---- options, layouts and sources ----


def test_too_few_files_are_refused_naming_the_fix() -> None:
    options = PlanOptions(distribution="files", partition_epoch=2)
    planner = Planner({"data": np.arange(1, 31)}, options, files=[0, 10, 20, 30], origin="x.hdf")
    planner.global_plan(1, 1)
    with pytest.raises(OptionError, match=r"2 \* 2 = 4 files .* x.hdf has 3. Fix: .*'shard'"):
        planner.global_plan(1, 2)
    single = Planner({"data": np.arange(1, 31)}, PlanOptions(distribution="files"), files=[0, 30])
    with pytest.raises(OptionError, match=r"has 1\. Fix"):
        single.global_plan(1, 2)


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"seeding": "returnn"}, "distribution='files' is not supported with seeding='returnn'"),
        ({"mix": {"a": 1.0}, "planning": "global"}, "mix: not supported with distribution='files'"),
    ],
)
def test_options_files_cannot_keep_are_refused(options: dict, match: str) -> None:
    with pytest.raises(OptionError, match=match):
        PlanOptions(distribution="files", **options)


def test_layouts_are_checked_and_needed() -> None:
    options = PlanOptions(distribution="files")
    with pytest.raises(OptionError, match="needs a source that says which sequences"):
        Planner({"data": np.arange(1, 5)}, options, origin="src")
    for bad in ([0, 3], [1, 4], [0, 3, 2, 4], [[0, 4]]):
        with pytest.raises(OptionError, match="file_layout"):
            Planner({"data": np.arange(1, 5)}, options, files=np.array(bad))
    # shard ignores the layout: its plans and fingerprints do not change
    shard = Planner({"data": np.arange(1, 5)}, PlanOptions(), files=np.array([0, 2, 4]))
    assert shard.fingerprint("f") == Planner({"data": np.arange(1, 5)}, PlanOptions()).fingerprint(
        "f"
    )
    a = Planner({"data": np.arange(1, 5)}, options, files=np.array([0, 2, 4]))
    b = Planner({"data": np.arange(1, 5)}, options, files=np.array([0, 1, 4]))
    assert a.fingerprint("f") != b.fingerprint("f")


def test_sources_declare_their_files(tmp_path) -> None:
    from seqloader.sources.hdf_write import write_hdf

    seqs = [np.full((3, 2), i, dtype=np.float32) for i in range(7)]
    paths = [tmp_path / "a.hdf", tmp_path / "b.hdf"]
    write_hdf(paths[0], sl.MemorySource({"data": seqs[:3]}))
    write_hdf(paths[1], sl.MemorySource({"data": seqs[3:]}, tags=[f"b{i}" for i in range(4)]))
    hdf = sl.HDFSource(paths)
    np.testing.assert_array_equal(file_layout(hdf), [0, 3, 7])
    mem = sl.MemorySource({"data": seqs[:5]}, file_bounds=[0, 1, 5])
    np.testing.assert_array_equal(file_layout(mem), [0, 1, 5])
    np.testing.assert_array_equal(file_layout(sl.MemorySource({"data": seqs})), [0, 7])
    both = sl.ConcatSource({"h": hdf, "m": mem})
    np.testing.assert_array_equal(file_layout(both), [0, 3, 7, 8, 12])


# ---- the pieces ----


def test_cut_parts_balances_and_gives_every_part_an_item() -> None:
    np.testing.assert_array_equal(cut_parts(np.full(12, 5), 4), [0, 3, 6, 9, 12])
    np.testing.assert_array_equal(cut_parts(np.array([100, 1, 1, 1]), 3), [0, 1, 2, 4])
    np.testing.assert_array_equal(cut_parts(np.zeros(4, dtype=np.int64), 2), [0, 2, 4])
    np.testing.assert_array_equal(cut_parts(np.array([3]), 2), [0, 0, 1])  # fewer items: empty


def test_lpt_assigns_largest_first_to_the_lightest_rank() -> None:
    np.testing.assert_array_equal(assign_lpt(np.array([5, 9, 2, 7, 1]), 2), [1, 0, 0, 1, 0])
    np.testing.assert_array_equal(assign_lpt(np.zeros(4, dtype=np.int64), 2), [0, 1, 0, 1])


def test_split_batches_splits_the_largest_into_near_equal_pieces() -> None:
    batches = sl.plan.BatchList.from_bounds(np.arange(10), np.array([0, 6, 8, 10]))
    split = split_batches(batches, 5)
    np.testing.assert_array_equal(split.bounds, [0, 2, 4, 6, 8, 10])
    np.testing.assert_array_equal(split.seqs, np.arange(10))
    ones = split_batches(batches, 20)  # at most one piece per sequence
    np.testing.assert_array_equal(ones.bounds, np.arange(11))


def test_rank_files_lists_what_a_rank_reads_in_reading_order() -> None:
    lengths = np.random.default_rng(2).integers(1, 30, size=120)
    options = PlanOptions(ordering="sorted", max_seqs=4, distribution="files", partition_epoch=2)
    planner = Planner({"data": lengths}, options, files=np.arange(0, 121, 10))
    plan = planner.global_plan(1, 2)
    for r in range(2):
        share = plan.rank_share(r)
        read = (share.seqs // 10).tolist()
        files = planner.rank_files(plan, r)
        assert files.tolist() == list(dict.fromkeys(read))  # each once, in first-read order
        later = planner.rank_files(plan, r, plan.steps - 1)
        assert set(later.tolist()) == set((plan.rank_share(r, plan.steps - 1).seqs // 10).tolist())
    assert not set(planner.rank_files(plan, 0).tolist()) & set(planner.rank_files(plan, 1).tolist())
