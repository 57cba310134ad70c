"""Chunked plans under ``planning="indexed"``: the contracts as properties over random corpora and
chunkings (hypothesis; pure numpy, no torch).

Every chunk of an epoch exactly once across ranks, and the chunks are global planning's (same
windows, per-key sizes, ``min_chunk_size`` rule, the same sequences filtered and counted); equal
steps; batches within their limits by their windows; a rank's share computed alone equal to its
part of the global list (C3); determinism (C4); exact and elastic resume chains W -> W' -> W''
(positions count chunks; C5) and the reachability check of resume states; the per-sequence chunk
table never made for planning.
"""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from plan_contracts import check_plan_contracts
from seqloader.errors import OptionError, ResumeError, SequenceTooLongError
from seqloader.plan import Planner, PlanOptions, Position, continue_plan
from seqloader.plan.admission import mean_len_selection
from seqloader.plan.epochs import EpochIndex
from seqloader.plan.indexed import IndexedPlanner, index_key
from seqloader.plan.indexed.plan import ChunkDraw, MemberDraw
from seqloader.plan.indexed.units import part_classes
from seqloader.plan.position import check_reachable
from test_files_plan import file_layouts

ORDERINGS = ["buckets:1", "buckets:3", "buckets:7", "laplace", "laplace:3", "laplace:.7"]
DISTRIBUTIONS = ["shard", "random_seed_offset"]
STRIDE = 1 << 20  # unit code of (sequence, chunk) in these tests: fewer chunks per sequence


@st.composite
def cases(draw: st.DrawFn) -> dict:
    n = draw(st.integers(0, 300))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    high = draw(st.sampled_from([5, 40, 300]))
    data = rng.integers(0, high + 1, size=n).astype(np.int64)
    size = draw(st.integers(1, 60))
    step = draw(st.integers(1, size + 5))
    least = draw(st.sampled_from([0, 1, size // 2, size, size + 1]))
    form = draw(st.sampled_from(["every key", "length key", "per key"]))
    # "classes" at twice the frame rate, chunked twice as long: the same number of chunks
    if form == "every key":
        lengths, chunking, mins = {"data": data}, (size, step), least
    elif form == "length key":
        lengths = {"data": data, "classes": data // 3}
        chunking, mins = {"data": (size, step)}, least
    else:
        lengths = {"data": data, "classes": 2 * data}
        chunking = {"data": (size, step), "classes": (2 * size, 2 * step)}
        mins = {"data": least, "classes": 2 * least}
    max_frames = draw(st.one_of(st.none(), st.integers(60, 3000)))
    kwargs = {
        "ordering": draw(st.sampled_from(ORDERINGS)),
        "max_seqs": draw(st.one_of(st.none(), st.integers(1, 20))),
        "max_frames": max_frames,
        "batch_cost": draw(st.sampled_from(["frames", "quadratic:100"])),
        "partition_epoch": draw(st.integers(1, 3)),
        "uneven": draw(st.sampled_from(["split", "pad", "drop"])),
        "seed": draw(st.integers(0, 5)),
        "chunking": chunking,
        "min_chunk_size": mins,
        "max_seq_length": draw(st.sampled_from([None, 250])),
        "fixed_random_subset": draw(st.sampled_from([None, 0.5, 7])),
        "fixed_random_seed": draw(st.sampled_from([None, 3])),
    }
    fits = None if max_frames is None else PlanOptions(**kwargs).cost.longest_fitting(max_frames)
    if fits is not None and fits < min(size, high):  # a chunk fits no batch: filter, as a user
        if fits < 1:
            kwargs["max_frames"] = None
        else:
            kwargs["max_seq_length"] = min(fits, kwargs["max_seq_length"] or fits)
    return {
        "lengths": lengths,
        "kwargs": kwargs,
        "world": draw(st.integers(1, 9)),
        "worlds": draw(st.lists(st.integers(1, 6), min_size=1, max_size=3)),
        "cut": draw(st.floats(0, 1)),
    }


def indexed(case: dict) -> IndexedPlanner:
    return IndexedPlanner(case["lengths"], PlanOptions(**case["kwargs"], planning="indexed"))


def greedy(case: dict) -> Planner:
    return Planner(case["lengths"], PlanOptions(**case["kwargs"]))


def codes(seqs: np.ndarray, chunks: np.ndarray | None) -> np.ndarray:
    assert chunks is not None
    return np.asarray(seqs, dtype=np.int64) * STRIDE + np.asarray(chunks, dtype=np.int64)


def real_units(plan, a: int, b: int) -> np.ndarray:
    """Codes of the real chunks of global steps ``[a, b)`` (all ranks)."""
    batches = plan.batches
    lo, hi = batches.bounds[a * plan.world_size], batches.bounds[b * plan.world_size]
    real = batches.real[lo:hi]
    return codes(batches.seqs[lo:hi][real], batches.chunks[lo:hi][real])


def real_codes(share) -> np.ndarray:
    """Codes of a share's real chunks (an empty share: none)."""
    if not len(share.seqs):
        return np.zeros(0, dtype=np.int64)
    return codes(share.seqs[share.real], share.chunks[share.real])


def every_chunk(planner: Planner) -> np.ndarray:
    """Codes of every chunk global planning plans in a full epoch, sorted."""
    epochs = range(1, planner.options.partition_epoch + 1)
    units = [planner.sub_epoch_units(e) for e in epochs]
    return np.sort(np.concatenate([codes(u.seqs, u.chunks) for u in units] + [np.zeros(0, int)]))


def limits_by_window(planner: IndexedPlanner, epoch: int, plan) -> None:
    """Every batch within ``max_frames`` by each slot's window in cost units (``each_plan``)."""
    b = plan.batches
    if planner.options.max_frames is not None and len(b):
        costs = planner.slot_costs(b)  # each slot's window in cost units
        sizes = np.diff(b.bounds)
        assert (sizes * np.maximum.reduceat(costs, b.bounds[:-1])).max() <= planner.budget


# 40 examples (was 80) draw every ordering, chunking and uneven the 80 drew
@settings(max_examples=40, deadline=None)
@given(cases())
def test_every_chunk_exactly_once_and_the_chunks_of_global_planning(case: dict) -> None:
    """Every contract over a full epoch (each chunk once per sub-epoch and full epoch, equal
    steps, a rank's share alone, determinism from a fresh planner), within the limits by
    window; the chunks planned are global planning's (less what ``drop`` leaves out)."""
    planner, reference = indexed(case), greedy(case)
    assert planner.admission.filtered == reference.admission.filtered  # no chunk: counted alike
    world, parts = case["world"], planner.options.partition_epoch
    # workers: simulate runs in test_resume_chain_with_world_size_changes
    checked = check_plan_contracts(
        lambda: indexed(case), [world], [], each_plan=limits_by_window, workers=()
    )
    plans = [checked.plans[e, world] for e in range(1, parts + 1)]
    got = np.concatenate([real_units(p, 0, p.steps) for p in plans])
    dropped = sum(p.dropped for p in plans)
    want = every_chunk(reference)
    assert len(got) + dropped == len(want)
    assert np.isin(got, want).all()
    if not dropped:
        np.testing.assert_array_equal(np.sort(got), want)


# 40 examples (was 80) draw every ordering, chunking and uneven the 80 drew
@settings(max_examples=40, deadline=None)
@given(cases())
def test_resume_chain_with_world_size_changes(case: dict) -> None:
    """Elastic resume W -> W' -> W'': stop anywhere, save as JSON, continue on another world
    size: every chunk of the sub-epoch exactly once (drop: the missing ones are the last
    plan's dropped), equal steps in every segment, positions counting chunks, and at every
    cut the same world size continuing the uninterrupted plan from a fresh planner."""
    worlds = case["worlds"]
    check_plan_contracts(lambda: indexed(case), worlds, [case["cut"]] * (len(worlds) - 1), [1])


def with_options(case: dict, **options: object) -> dict:
    return {**case, "kwargs": {**case["kwargs"], **options}}


# random_seed_offset unchunked: test_plan_indexed_options.py; chunked through loaders, resumed
# batch for batch and with workers: test_indexed_loader.py
@settings(max_examples=30, deadline=None)
@given(cases())
def test_random_seed_offset_gives_each_rank_every_chunk_once_per_full_epoch(case: dict) -> None:
    """``random_seed_offset``: every rank plans every chunk of the sub-epoch with its own draws
    (chunks bucketed and drawn as under ``shard``): per rank, a full epoch is global planning's
    chunks exactly once; equal steps; the contracts (each rank a prefix of its own order, resume
    chains on its world size, a rank's plan computed alone)."""
    case = with_options(case, distribution="random_seed_offset")
    planner, reference = indexed(case), greedy(case)
    assert planner.admission.filtered == reference.admission.filtered
    world = min(case["world"], 4)
    want = every_chunk(reference)
    epochs = range(1, planner.options.partition_epoch + 1)
    plans = [planner.global_plan(e, world) for e in epochs]
    assert sum(p.dropped for p in plans) == 0  # the same chunks per bucket on every rank
    for r in range(world):
        shares = [p.rank_share(r) for p in plans]
        got = np.sort(np.concatenate([real_codes(s) for s in shares] + [np.zeros(0, int)]))
        np.testing.assert_array_equal(got, want)
    worlds = case["worlds"]
    check_plan_contracts(lambda: indexed(case), worlds, [case["cut"]] * (len(worlds) - 1), [1])


# epoch_wise_filter unchunked: test_plan_indexed_options.py; with sub-epochs, chunked: the test below
@settings(max_examples=35, deadline=None)
@given(cases(), st.sampled_from([40.0, 120.0, 400.0]), st.sampled_from(DISTRIBUTIONS))
def test_epoch_wise_filter_keeps_global_plannings_sequences_and_plans_their_chunks(
    case: dict, mean: float, distribution: str
) -> None:
    """``epoch_wise_filter`` (one sub-epoch per epoch): the filter keeps whole sequences, the
    ones global planning keeps (counted alike per epoch), and exactly their chunks are planned;
    every contract, resume chains included, on a filtered and an unfiltered epoch."""
    wise = {(1, 1): {"max_mean_len": mean}, (3, 3): {"max_mean_len": mean * 2}}
    case = with_options(case, partition_epoch=1, epoch_wise_filter=wise, distribution=distribution)
    planner = indexed(case)
    # global planning's kept set does not depend on the ordering (one sub-epoch: all of it)
    reference = Planner(case["lengths"], PlanOptions(**{**case["kwargs"], "ordering": "laplace"}))
    for epoch in (1, 2, 3):
        assert planner.filtered(epoch) == reference.filtered(epoch)
        got, want = planner.sub_epoch_units(epoch), reference.sub_epoch_units(epoch)
        np.testing.assert_array_equal(
            np.sort(codes(got.seqs, got.chunks)), np.sort(codes(want.seqs, want.chunks))
        )
    worlds = case["worlds"]
    check_plan_contracts(lambda: indexed(case), worlds, [case["cut"]] * (len(worlds) - 1), [1, 2])


@settings(max_examples=50, deadline=None)
@given(
    cases(),
    st.sampled_from([40.0, 120.0, 400.0]),
    st.sampled_from(DISTRIBUTIONS),
    st.integers(2, 3),
)
def test_epoch_wise_filter_with_sub_epochs_keeps_whole_sequences_of_each_sub_epoch(
    case: dict, mean: float, distribution: str, parts: int
) -> None:
    """``epoch_wise_filter`` with ``partition_epoch > 1``: every sub-epoch is a set of whole
    sequences (each length class's keyed slice), the sets of a full epoch disjoint and together
    every admitted sequence; a filtered sub-epoch keeps RETURNN's selection of its set
    (``mean_len_selection``: the shortest by (length, index)), counts what it drops, and plans
    exactly the kept sequences' chunks (global planning's chunks of them); an unfiltered one all
    its sequences' chunks. Every contract over the full epoch, resume chains included."""
    wise = {(1, 1): {"max_mean_len": mean}, (parts + 2, parts + 2): {"max_mean_len": mean / 2}}
    case = with_options(
        case, partition_epoch=parts, epoch_wise_filter=wise, distribution=distribution
    )
    planner = indexed(case)
    admitted = np.asarray(planner.admission.admitted, dtype=np.int64)
    chunks_of = every_chunk(greedy(with_options(case, epoch_wise_filter=None)))
    base = sum(planner.admission.filtered.values())
    for full in (0, 1):
        sets = []
        for epoch in range(full * parts + 1, (full + 1) * parts + 1):
            whole = np.asarray(part_classes(planner, EpochIndex(epoch, parts)).members, np.int64)
            got = planner.sub_epoch_units(epoch)
            kept = np.unique(got.seqs)
            means = [m["max_mean_len"] for (a, b), m in wise.items() if a <= epoch <= b]
            want = whole
            for m in means:
                want = want[mean_len_selection(want, case["lengths"]["data"], m)]
            np.testing.assert_array_equal(kept, np.sort(want))
            dropped = sum(planner.filtered(epoch).values()) - base
            assert dropped == len(whole) - len(want)
            want_codes = chunks_of[np.isin(chunks_of // STRIDE, want)]
            np.testing.assert_array_equal(np.sort(codes(got.seqs, got.chunks)), want_codes)
            sets.append(whole)
        every = np.concatenate(sets)
        np.testing.assert_array_equal(np.sort(every), admitted)
    worlds = case["worlds"]
    cuts = [case["cut"]] * (len(worlds) - 1)
    check_plan_contracts(lambda: indexed(case), worlds, cuts, list(range(1, parts + 1)))


@settings(max_examples=50, deadline=None)
@given(cases(), st.integers(20, 400), st.sampled_from(["max_frames", "max_packed_frames"]))
def test_limits_on_other_keys_hold_by_window(case: dict, limit: int, name: str) -> None:
    """A limit on the other key (chunked with the length key, or carried whole by every chunk):
    every batch within it by each slot's window in that key (``ChunkBuckets.window_max`` per
    chunk bucket); a first chunk over it alone is refused naming the sequence; every contract."""
    if "classes" not in case["lengths"]:  # chunked as "data" (every key): as long, as many
        case = {**case, "lengths": {**case["lengths"], "classes": case["lengths"]["data"] + 0}}
    # buckets:N and a quadratic cost take no per-key or packed limits (refused by name)
    kwargs = {**case["kwargs"], "batch_cost": "frames"}
    if kwargs["ordering"].startswith("buckets"):
        kwargs["ordering"] = "laplace:.7"
    if name == "max_frames":
        kwargs["max_frames"] = {"data": kwargs["max_frames"] or 10**9, "classes": limit}
    else:
        kwargs["max_packed_frames"] = {"classes": limit}
    case = {**case, "kwargs": kwargs}
    try:
        indexed(case)
    except SequenceTooLongError as e:  # a first chunk in "classes" over the limit alone
        event("refused: a chunk over the limit alone")
        assert "'classes'" in str(e)
        with pytest.raises(SequenceTooLongError):
            greedy(case)
        return

    def each_plan(planner: IndexedPlanner, epoch: int, plan) -> None:
        b = plan.batches
        if not len(b):
            return
        window = planner.chunks.window("classes", planner.chunks.whole["classes"][b.seqs], b.chunks)
        sizes = np.diff(b.bounds)
        if name == "max_frames":
            assert (sizes * np.maximum.reduceat(window, b.bounds[:-1])).max() <= limit
        else:
            assert np.add.reduceat(window, b.bounds[:-1]).max() <= limit

    worlds = case["worlds"]
    check_plan_contracts(
        lambda: indexed(case), worlds, [case["cut"]] * (len(worlds) - 1), [1], each_plan=each_plan
    )


def files_case(case: dict, data: st.DataObject) -> tuple[dict, np.ndarray]:
    n = len(case["lengths"]["data"])  # no fixed_random_subset with files (refused by name)
    return with_options(case, distribution="files", fixed_random_subset=None), data.draw(
        file_layouts(n)
    )


def whole_files_per_rank(planner: IndexedPlanner, epoch: int, plan) -> None:
    """A file's chunks all on one rank's share (indexed ``files`` never splits a file)."""
    assert planner.files is not None
    owner: dict[int, int] = {}
    for r in range(plan.world_size):
        share = plan.rank_share(r)
        for f in set(np.searchsorted(planner.files, share.seqs[share.real], "right").tolist()):
            assert owner.setdefault(f, r) == r, f"file {f - 1} on ranks {owner[f]} and {r}"


@settings(max_examples=60, deadline=None)
@given(cases(), st.data())
def test_files_every_chunk_once_whole_files_per_rank_and_resume_chains(
    case: dict, data: st.DataObject
) -> None:
    """``distribution="files"``: the chunks of a sub-epoch's files are the planned units, a
    file's chunks on one rank; every contract (each chunk once per sub-epoch and full epoch,
    global planning's chunks, equal steps, a rank's share alone, determinism, ``simulate``,
    resume chains W -> W' -> W'' replayed from counts, the reachability check), within the
    limits by window."""
    case, bounds = files_case(case, data)
    options = PlanOptions(**case["kwargs"], planning="indexed")

    def make() -> IndexedPlanner:
        return IndexedPlanner(case["lengths"], options, files=bounds)

    planner = make()
    # global planning's files plans refuse fixed_random_seed (they would ignore it): the
    # admission and the chunks do not depend on it
    greedy = PlanOptions(**{**case["kwargs"], "fixed_random_seed": None})
    reference = Planner(case["lengths"], greedy, files=bounds)
    assert planner.admission.filtered == reference.admission.filtered
    assert int(planner.index.file_counts.sum()) == len(every_chunk(reference))

    def each_plan(planner: IndexedPlanner, epoch: int, plan) -> None:
        whole_files_per_rank(planner, epoch, plan)
        limits_by_window(planner, epoch, plan)

    def each_segment(planner: IndexedPlanner, position: Position, plan, consumed) -> None:
        check_reachable(planner, position)

    worlds = [case["world"] % 5 + 1, *case["worlds"]]
    check_plan_contracts(
        make, worlds, [case["cut"]] * (len(worlds) - 1), each_plan=each_plan,
        each_segment=each_segment,
    )  # fmt: skip


def test_files_chunk_table_of_a_prebuilt_index_is_checked() -> None:
    """The node's index of a chunked ``files`` plan holds chunks per (file, chunk bucket); one
    built for other options is refused by name, with the fix."""
    data, files = corpus(), np.arange(0, 2001, 50)
    options = PlanOptions(**OPTIONS, distribution="files")
    built = IndexedPlanner(data, options, files=files)
    assert built.index.file_counts.shape == (40, len(built.bucket_counts))
    np.testing.assert_array_equal(built.index.file_counts.sum(axis=0), built.bucket_counts)
    again = IndexedPlanner(data, options, files=files, index=built.index)
    a, b = built.global_plan(1, 3).rank_share(2), again.global_plan(1, 3).rank_share(2)
    np.testing.assert_array_equal(codes(a.seqs, a.chunks), codes(b.seqs, b.chunks))
    other = PlanOptions(**{**OPTIONS, "chunking": "300:300"}, distribution="files")
    with pytest.raises(OptionError, match=r"bucket index.*Fix: rebuild it"):
        IndexedPlanner(data, other, files=files, index=built.index)


def corpus(n: int = 2000, seed: int = 0) -> dict[str, np.ndarray]:
    return {"data": np.random.default_rng(seed).integers(0, 2001, n)}


OPTIONS = {
    "ordering": "buckets:5",
    "max_seqs": 50,
    "max_frames": 5000,
    "chunking": "500:250",
    "min_chunk_size": 100,
    "planning": "indexed",
}


def test_planning_never_makes_the_per_sequence_chunk_table() -> None:
    """The loader reads ``chunks.spec``; a rank's plan needs no O(n) table (the audit and
    checks make it when they read it)."""
    planner = IndexedPlanner(corpus(), PlanOptions(**OPTIONS))
    assert planner.chunks is not None and planner.chunks.spec == {"data": (500, 250)}
    plan = planner.global_plan(1, 4)
    share = plan.rank_share(2)
    assert planner.chunks.__dict__["_table"] is None
    copied = pickle.loads(pickle.dumps(planner.chunks))  # pickles, still not made
    assert copied.__dict__["_table"] is None and copied.spec == planner.chunks.spec
    assert planner.chunks.num_units == int(planner.bucket_counts.sum())  # made when read
    assert copied.num_units == planner.chunks.num_units
    assert planner.chunks.__dict__["_table"] is not None
    whole = planner.chunks.whole["data"][share.seqs]
    windows = planner.chunks.window("data", whole, share.chunks)
    np.testing.assert_array_equal(planner.slot_costs(share), windows)


def test_unreachable_positions_are_refused() -> None:
    """``check_reachable`` covers chunked indexed plans: a segment past chunk 0 needs earlier
    steps, each of which consumed at least one chunk; a position inside a batch is refused."""
    planner = IndexedPlanner(corpus(), PlanOptions(**OPTIONS))
    plan = planner.global_plan(1, 4)
    after = plan.consumed_seqs(3)
    check_reachable(planner, Position(1, after, 2, 0, prior_steps=3))
    with pytest.raises(ResumeError, match="prior_steps 0"):
        check_reachable(planner, Position(1, after, 2, 0))
    with pytest.raises(ResumeError, match="cannot start before"):
        check_reachable(planner, Position(1, 2, 2, 0, prior_steps=3))
    with pytest.raises(OptionError, match="batch boundary"):
        planner.global_plan(1, 2, start=after + 1)
    plan2, position = continue_plan(planner, Position(1, 0, 4, 3), 2)  # elastic: 4 -> 2
    assert position.segment_start == after and position.prior_steps == 3
    assert position.seq_offset(plan2) == after


def test_a_prebuilt_index_gives_the_same_plan_and_its_own_node_file() -> None:
    options = PlanOptions(**OPTIONS)
    built = IndexedPlanner(corpus(), options)
    given_index = IndexedPlanner(corpus(), options, index=built.index)
    a, b = built.global_plan(2, 3).batches, given_index.global_plan(2, 3).batches
    np.testing.assert_array_equal(codes(a.seqs, a.chunks), codes(b.seqs, b.chunks))
    unchunked = {k: v for k, v in OPTIONS.items() if k not in ("chunking", "min_chunk_size")}
    assert index_key(options) != index_key(PlanOptions(**unchunked))
    assert "chunking" not in index_key(PlanOptions(**unchunked))  # node files keep their names
    other = IndexedPlanner(corpus(), PlanOptions(**unchunked))
    with pytest.raises(OptionError, match="bucket index"):
        IndexedPlanner(corpus(), options, index=other.index)


def test_refusals_name_the_option_and_the_fix() -> None:
    # chunking that leaves the length key unchunked is planned (test_plan_indexed_unchunked_key)
    two = {"data": np.array([10, 20, 30]), "classes": np.array([5, 10, 15])}
    assert IndexedPlanner(two, PlanOptions(**{**OPTIONS, "chunking": {"classes": (4, 2)}}))
    uneven = {**OPTIONS, "chunking": {"data": (10, 5), "classes": (10, 5)}, "min_chunk_size": 0}
    mismatch = {"data": np.array([10, 20, 30]), "classes": np.array([10, 10, 30])}
    with pytest.raises(OptionError, match=r"sequence 1 \(tag 'b'\).*same number of chunks"):
        IndexedPlanner(mismatch, PlanOptions(**uneven), tags=["a", "b", "c"])
    # a sharded mix with chunking is planned (plan/indexed/mix_chunks.py), not refused
    assert PlanOptions(**{**OPTIONS, "mix": {"a": 1.0}}).resolved_planning == "indexed"


def test_epochs_and_seeds_draw_other_batches() -> None:
    p = IndexedPlanner(corpus(), PlanOptions(**OPTIONS, seed=1))
    q = IndexedPlanner(corpus(), PlanOptions(**OPTIONS, seed=2))
    e1, e2 = p.global_plan(1, 4).batches, p.global_plan(2, 4).batches
    assert not np.array_equal(codes(e1.seqs, e1.chunks), codes(e2.seqs, e2.chunks))
    f1 = q.global_plan(1, 4).batches
    assert not np.array_equal(codes(e1.seqs, e1.chunks), codes(f1.seqs, f1.chunks))
    r = IndexedPlanner(corpus(), PlanOptions(**OPTIONS, distribution="random_seed_offset"))
    a, b = (r.global_plan(1, 2).rank_share(rank) for rank in (0, 1))  # each rank its own draws
    assert not np.array_equal(codes(a.seqs, a.chunks), codes(b.seqs, b.chunks))
    np.testing.assert_array_equal(
        np.sort(codes(a.seqs, a.chunks)), np.sort(codes(b.seqs, b.chunks))
    )


@pytest.mark.parametrize("parts", [1, 3])
def test_corpus_counts_and_the_simulated_check(parts: int) -> None:
    """Per corpus the epoch's chunks (``corpus_plan``: from the length index, or drawn per
    sub-epoch), and ``seqloader check``'s simulation (every chunk once, equal steps, workers)."""
    from seqloader.plan.mix import Corpora
    from seqloader.plan.simulate import simulate

    data = corpus(3000, seed=parts)
    corpora = Corpora(("a", "b", "c"), np.array([0, 700, 2100, 3000]))
    options = PlanOptions(**{**OPTIONS, "partition_epoch": parts})
    planner = IndexedPlanner(data, options, corpora=corpora)
    for epoch in range(1, parts + 1):
        sub = planner.sub_epoch_units(epoch)
        want = np.bincount(np.searchsorted(corpora.bounds, sub.seqs, "right") - 1, minlength=3)
        assert [n for _, n, _ in planner.corpus_plan(epoch)] == want.tolist()
    assert simulate(planner, 3, 2, range(1, parts + 2)).ok


@settings(max_examples=15, deadline=None)
@given(cases(), st.randoms(use_true_random=False))
def test_chunk_draws_sorted_windows_give_the_generic_draws_slots(case: dict, rnd) -> None:
    """``ChunkDraw``'s shortcuts (``sort_keys``: a window's lengths from its cells, codes made
    only for the positions asked; ``alike_windows``: a window of one window length left in list
    order, only the positions asked drawn) give the slots of ``SortedWindows`` over a plain
    ``MemberDraw`` of the same list (every window drawn, its codes' lengths looked up), for any
    subset of the positions in any order. So planning's faster path plans what it planned."""
    try:
        planner = indexed(case)
    except (OptionError, SequenceTooLongError):
        return
    sorted_windows = planner.draw(1)
    outer = getattr(sorted_windows, "draw", None)
    inner = getattr(outer, "draw", outer)
    if not isinstance(inner, ChunkDraw):  # fixed orders, random, a shared set's rank order
        return
    plain = MemberDraw(inner.members, inner.starts, inner.offsets, inner.words)
    generic = copy.copy(sorted_windows)
    generic.draw = plain if outer is inner else copy.copy(outer)
    if outer is not inner:
        generic.draw.draw = plain
    counts = np.asarray(sorted_windows.counts, dtype=np.int64)
    bucket = np.repeat(np.arange(len(counts), dtype=np.int64), counts)
    pos = np.arange(len(bucket), dtype=np.int64) - np.repeat(np.cumsum(counts) - counts, counts)
    some = np.array(rnd.sample(range(len(pos)), rnd.randint(0, len(pos))), np.int64)
    for b_at, p_at in [(bucket, pos), (bucket[some], pos[some])]:
        np.testing.assert_array_equal(
            sorted_windows.slots(b_at, p_at)[0], generic.slots(b_at, p_at)[0]
        )
