"""Indexed planning with chunking that leaves the length key unchunked (e.g.
``chunking={"classes": (2, 1)}`` with ``data`` the length key): the length classes are keyed
by (length, chunk count) (``ChunkGeometry``), every chunk as long as its sequence in the
length key. Every contract (each chunk once per sub-epoch, equal steps, resume chains W -> W'
-> W'', determinism from a fresh planner) for shard and files, the fixed, random, bucketed and
sort_bin_shuffle orders, sub-epochs and ``min_chunk_size``; every batch within ``max_frames``
counting the whole length-key length per chunk; the chunks planned are global planning's."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from plan_contracts import check_plan_contracts
from seqloader.plan import Planner, PlanOptions
from seqloader.plan.indexed import IndexedPlanner
from seqloader.plan.indexed.chunks import ChunkGeometry
from seqloader.plan.indexed.planner import INDEXED_ALGORITHM
from seqloader.plan.mix import Corpora
from test_plan_indexed import indexed_digest

ORDERINGS = ["default", "sorted", "sorted_reverse", "random", "random:2", "laplace",
             "laplace:.5", "buckets:1", "buckets:3", "sort_bin_shuffle:.3"]  # fmt: skip
STRIDE = 1 << 20


@st.composite
def cases(draw: st.DrawFn) -> dict:
    distribution = draw(st.sampled_from(["shard", "random_seed_offset", "files"]))
    n = draw(st.integers(40 if distribution == "files" else 0, 120))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    data = rng.integers(0, draw(st.sampled_from([5, 40, 200])) + 1, size=n).astype(np.int64)
    classes = rng.integers(0, draw(st.sampled_from([3, 20, 60])) + 1, size=n).astype(np.int64)
    size = draw(st.integers(1, 12))
    step = draw(st.integers(1, size + 3))
    least = draw(st.sampled_from([0, 1, size // 2, size, size + 1]))
    parts = draw(st.integers(1, 2))
    files = None
    if distribution == "files":  # enough files for every rank of every sub-epoch
        cuts = rng.choice(np.arange(1, n), size=14, replace=False)
        files = np.unique(np.r_[0, cuts, n]).astype(np.int64)
    kwargs = {
        "ordering": draw(st.sampled_from(ORDERINGS)),
        "distribution": distribution,
        "length_key": "data",
        "chunking": {"classes": (size, step)},
        "min_chunk_size": {"classes": least},
        "max_seqs": draw(st.one_of(st.none(), st.integers(1, 8))),
        "max_frames": draw(st.sampled_from([None, 200, 400])),
        "batch_cost": draw(st.sampled_from(["frames", "quadratic:100"])),
        "max_seq_length": {"data": 200},  # every chunk (the whole length) fits a batch
        "partition_epoch": parts,
        "uneven": draw(st.sampled_from(["split", "pad", "drop"])),
        "seed": draw(st.integers(0, 5)),
    }
    if distribution != "files":
        kwargs["fixed_random_subset"] = draw(st.sampled_from([None, 0.5]))
    if kwargs["max_frames"] is not None:  # every chunk (the whole length) fits a batch
        fits = PlanOptions(**kwargs).cost.longest_fitting(kwargs["max_frames"])
        kwargs["max_seq_length"] = {"data": int(min(fits, 200))}
    return {
        "lengths": {"data": data, "classes": classes},
        "files": files,
        "kwargs": kwargs,
        "worlds": draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)),
        "cut": draw(st.floats(0, 1)),
    }


def indexed(case: dict) -> IndexedPlanner:
    options = PlanOptions(**case["kwargs"], planning="indexed")
    return IndexedPlanner(case["lengths"], options, files=case["files"])


def codes(seqs: np.ndarray, chunks: np.ndarray | None) -> np.ndarray:
    assert chunks is not None
    return np.asarray(seqs, dtype=np.int64) * STRIDE + np.asarray(chunks, dtype=np.int64)


def whole_length_per_chunk(planner: IndexedPlanner, epoch: int, plan) -> None:
    """Every chunk weighs its sequence's whole length-key length; every batch within the
    budget by it (``each_plan``)."""
    b = plan.batches
    if not len(b):
        return
    whole = np.asarray(planner.lengths[b.seqs], dtype=np.int64)
    costs = planner.slot_costs(b)
    np.testing.assert_array_equal(costs, planner.options.cost.units(whole))
    if planner.options.max_frames is not None:
        sizes = np.diff(b.bounds)
        assert (sizes * np.maximum.reduceat(costs, b.bounds[:-1])).max() <= planner.budget


@settings(max_examples=60, deadline=None)
@given(cases())
def test_every_contract_and_global_plannings_chunks(case: dict) -> None:
    planner = indexed(case)
    assert planner.algorithm == INDEXED_ALGORITHM
    reference = Planner(case["lengths"], PlanOptions(**case["kwargs"]), files=case["files"])
    assert planner.admission.filtered == reference.admission.filtered
    worlds, parts = case["worlds"], planner.options.partition_epoch
    checked = check_plan_contracts(
        lambda: indexed(case),
        worlds,
        [case["cut"]] * (len(worlds) - 1),
        list(range(1, parts + 1)),
        each_plan=whole_length_per_chunk,
        workers=(),
    )
    plans = [checked.plans[e, worlds[0]] for e in range(1, parts + 1)]
    if any(p.dropped for p in plans) or planner.options.distribution == "random_seed_offset":
        return  # (random_seed_offset: every rank its own order of every chunk)
    got = np.concatenate([codes(p.batches.seqs[p.batches.real],
                                p.batches.chunks[p.batches.real]) for p in plans])  # fmt: skip
    want = [codes(u.seqs, u.chunks) for u in map(reference.sub_epoch_units, range(1, parts + 1))]
    np.testing.assert_array_equal(np.sort(got), np.sort(np.concatenate(want)))


@settings(max_examples=15, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.sampled_from(["default", "random", "laplace:.5", "buckets:2", "sorted"]),
    st.lists(st.integers(1, 4), min_size=1, max_size=3),
    st.floats(0, 1),
)
def test_a_sharded_mix_plans_each_chunk_of_its_slots(
    seed: int, ordering: str, worlds: list[int], cut: float
) -> None:
    """A mix: each slot's chunks once (the contracts over the mix's own expected units),
    within the limits by the whole length."""
    rng = np.random.default_rng(seed)
    lengths = {"data": rng.integers(1, 150, 60), "classes": rng.integers(1, 30, 60)}
    corpora = Corpora(("a", "b"), np.array([0, 25, 60]))
    options = PlanOptions(ordering=ordering, length_key="data", chunking={"classes": (6, 3)},
                          max_frames=400, mix={"a": 0.5, "b": 1.5}, planning="indexed")  # fmt: skip
    check_plan_contracts(
        lambda: IndexedPlanner(lengths, options, corpora=corpora),
        worlds,
        [cut] * (len(worlds) - 1),
        [1],
        each_plan=whole_length_per_chunk,
        workers=(),
    )


def test_classes_are_keyed_by_length_and_chunk_count() -> None:
    """One class per admitted (length, chunks); every chunk of a class as long as its length."""
    lengths = {"data": np.array([7, 7, 7, 3, 0]), "classes": np.array([4, 2, 4, 1, 3])}
    options = PlanOptions(chunking={"classes": (2, 2)}, length_key="data", planning="auto")
    planner = IndexedPlanner(lengths, options)
    assert options.resolved_planning == "indexed"
    geometry = planner.corpus.chunking
    assert geometry == ChunkGeometry(2, 2, 0, per=3)  # at most 2 chunks a sequence
    assert planner.index.longest.tolist() == [0 * 3 + 2, 3 * 3 + 1, 7 * 3 + 1, 7 * 3 + 2]
    b = planner.global_plan(1, 1).batches
    got = sorted(zip(b.seqs.tolist(), b.chunks.tolist()))
    assert got == [(0, 0), (0, 1), (1, 0), (2, 0), (2, 1), (3, 0), (4, 0), (4, 1)]
    np.testing.assert_array_equal(planner.slot_costs(b), lengths["data"][b.seqs])


#: option sets planned since indexed planning plans chunking that leaves the length key
#: unchunked (refused before: no plan of the current INDEXED_ALGORITHM moved)
def unchunked_case(world: int, elastic: tuple[int, int] | None = None, **options: object) -> dict:
    """A golden case (``indexed_digest``'s): ``classes`` (a third of ``data``) chunked,
    ``data`` the length key; ``distribution="files"``: files of 10 sequences."""
    case: dict = {"options": {"length_key": "data", **options}, "classes": True, "world": world}
    if elastic is not None:
        case["elastic"] = elastic
    if options.get("distribution") == "files":
        case["files"] = list(range(0, 301, 10))
    return case


TWENTY_TEN = {"classes": (20, 10)}
UNCHUNKED_KEY_CASES = {
    "classes 20:10 laplace:.10 W3 split elastic -> W2": unchunked_case(
        3, (2, 2), ordering="laplace:.10", max_frames=2000, chunking=TWENTY_TEN),
    "classes 30:30 buckets:3 partition 2 W2 pad, min_chunk_size": unchunked_case(
        2, ordering="buckets:3", max_frames=1500, chunking={"classes": (30, 30)},
        min_chunk_size={"classes": 10}, partition_epoch=2, uneven="pad"),
    "classes 20:10 random W3 split elastic -> W4": unchunked_case(
        3, (2, 4), ordering="random", max_frames=1500, chunking=TWENTY_TEN),
    "classes 25:25 sorted partition 2 W2 split": unchunked_case(
        2, ordering="sorted", max_frames=1200, chunking={"classes": (25, 25)}, partition_epoch=2),
    "files classes 20:10 laplace:.10 W3 split elastic -> W2": unchunked_case(
        3, (2, 2), ordering="laplace:.10", max_frames=2000, chunking=TWENTY_TEN,
        distribution="files"),
    "files classes 20:20 default W2 pad": unchunked_case(
        2, ordering="default", max_frames=1500, chunking={"classes": (20, 20)},
        distribution="files", uneven="pad"),
    "classes 20:10 sort_bin_shuffle:.10 W2 random_seed_offset": unchunked_case(
        2, ordering="sort_bin_shuffle:.10", max_frames=1500, chunking=TWENTY_TEN,
        distribution="random_seed_offset"),
    "classes 20:10 mix laplace:.10 W3 split": unchunked_case(
        3, ordering="laplace:.10", max_frames=2000, chunking=TWENTY_TEN,
        mix={"a": 0.7, "b": 1.5, "c": 1}),
}  # fmt: skip
UNCHUNKED_KEY_GOLDEN = {
    "classes 20:10 laplace:.10 W3 split elastic -> W2": (
        "96aeb7e9801864e6b454d9f0e1544e1ce3f69993a08d25edb7cd640840cdf194"
    ),
    "classes 30:30 buckets:3 partition 2 W2 pad, min_chunk_size": (
        "7f89ecce1e56610135d03460789465f7a6eb781305822f81140fb12ccba0a334"
    ),
    "classes 20:10 random W3 split elastic -> W4": (
        "173502f3192249951d4a9576cca716250c229643d0da1a22de6ad3e306a99dfb"
    ),
    "classes 25:25 sorted partition 2 W2 split": (
        "04aaa7c693becd1be9e08e4f5824dd8a5dfa48b079e3d710b9c595268a718449"
    ),
    "files classes 20:10 laplace:.10 W3 split elastic -> W2": (
        "52042f1bcf15f99c1e0a5cd417ff25337813eb71c88fc1ea929c178dae6c84a3"
    ),
    "files classes 20:20 default W2 pad": (
        "346ff42748a3f3921dcbea43e470c0dfda3d3fc5ebfe16abec515331966e62d4"
    ),
    "classes 20:10 sort_bin_shuffle:.10 W2 random_seed_offset": (
        "20ec6f8ddb4cd75bf8c177b15d266dba43fd1c309c78fd2b1c1ac9ab1729de42"
    ),
    "classes 20:10 mix laplace:.10 W3 split": (
        "bf5655a11bd2ddb2628ff1ecedd613c1b7b35daca88f5b04d99303480b69bd16"
    ),
}


def test_unchunked_key_golden_plans_are_pinned() -> None:
    """Recorded under ``seqloader-plan-indexed/10``; bump it and record anew if one changes."""
    got = {name: indexed_digest(case) for name, case in UNCHUNKED_KEY_CASES.items()}
    assert got == UNCHUNKED_KEY_GOLDEN, f"record: {got}"


@settings(max_examples=20, deadline=None)
@given(
    st.integers(0, 2**32 - 1),
    st.sampled_from(["laplace:.5", "random", "sorted", "sort_bin_shuffle:.3"]),
    st.floats(5.5, 11),
)
def test_epoch_wise_filter_keeps_global_plannings_sequences(
    seed: int, ordering: str, mean: float
) -> None:
    """``epoch_wise_filter`` keeps RETURNN's shortest by (length, index), as global planning:
    across the classes of one length (one per chunk count) the lowest indices."""
    rng = np.random.default_rng(seed)
    lengths = {"data": rng.integers(5, 12, 150), "classes": rng.integers(1, 12, 150)}
    kwargs = {"ordering": ordering, "chunking": {"classes": (4, 2)}, "length_key": "data",
              "epoch_wise_filter": {(1, 1): {"max_mean_len": mean}}, "max_frames": 100}  # fmt: skip
    planner = IndexedPlanner(lengths, PlanOptions(**kwargs, planning="indexed"))
    reference = Planner(lengths, PlanOptions(**kwargs, planning="global"))
    b = planner.global_plan(1, 2).batches
    want = reference.sub_epoch_units(1)
    got = np.sort(codes(b.seqs[b.real], b.chunks[b.real]))
    np.testing.assert_array_equal(got, np.sort(codes(want.seqs, want.chunks)))
