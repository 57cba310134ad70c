"""Length variants (planned speed perturbation) under indexed planning
(``seqloader.plan.indexed.variants``): each full epoch's variants drawn per class of sequences,
every batch planned at the drawn variant's length, the variant carried by the plan's batches to
the worker that reads it. The planning contracts hold (``check_plan_contracts``); the loader's
workers read exactly the planned variant."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import seqloader as sl
from conftest import batch_record
from plan_contracts import check_plan_contracts
from seqloader.errors import DataError, OptionError
from seqloader.loading.variants import PlannedVariants
from seqloader.plan import Position, continue_plan
from seqloader.plan.inputs import PlanInputs
from seqloader.plan.options import PlanOptions
from seqloader.plan.planners import make_planner, resolve_planning
from seqloader.plan.variants import LengthVariants

FACTORS = (0.9, 1.0, 1.1)


def speed_variants(base: np.ndarray, keys: tuple[str, ...] = ("data",)) -> LengthVariants:
    """Each length at three speed factors (integer arithmetic: no resampler needed here)."""
    table = np.stack([np.ceil(base / f).astype(np.int64) for f in FACTORS])
    return LengthVariants({k: table for k in keys}, tuple(str(f) for f in FACTORS))


def planner_of(base: np.ndarray, **options) -> object:
    variants = speed_variants(base)
    given_ = PlanOptions(planning="indexed", **options)
    return make_planner({"data": variants.longest("data")}, given_, variants=variants)


def check_variants(planner, epoch: int, plan) -> None:
    """Every slot carries its variant; every batch fits ``max_frames`` at the variants' lengths;
    a sequence has one variant per full epoch, whichever plan, rank or world size lists it."""
    b = plan.batches
    assert b.variants is not None and len(b.variants) == len(b.seqs)
    table = planner.variants.table if planner.variants is not None else planner.drawn
    lengths = table[b.variants, b.seqs]
    limit = planner.options.max_frames
    for k in range(len(b)):
        got = lengths[b.bounds[k] : b.bounds[k + 1]]
        if len(got) and limit is not None:
            assert len(got) * int(got.max()) <= limit
    full = (epoch - 1) // planner.options.partition_epoch
    seen = SEEN.setdefault((id(planner), full), {})
    for i, v in zip(b.seqs.tolist(), b.variants.tolist()):
        assert seen.setdefault(i, v) == v


SEEN: dict[tuple[int, int], dict[int, int]] = {}


@settings(max_examples=16, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 300), min_size=1, max_size=90),
    seed=st.integers(0, 1000),
    ordering=st.sampled_from(
        ["laplace:.8", "laplace:3", "buckets:3", "buckets:1", "default", "reverse", "random:2"]
    ),
    distribution=st.sampled_from(["shard", "shard", "random_seed_offset"]),
    parts=st.integers(1, 2),
    uneven=st.sampled_from(["split", "pad", "drop"]),
)
def test_variant_plans_hold_every_contract(lengths, seed, ordering, distribution, parts, uneven):
    check_contracts(lengths, seed, ordering, distribution, parts, uneven, [0.4, 0.5])


def check_contracts(lengths, seed, ordering, distribution, parts, uneven, fractions) -> None:
    """``check_plan_contracts`` with resume chains 3 -> 2 -> 4 and ``check_variants``."""
    base = np.asarray(lengths, dtype=np.int64)
    options = {"max_frames": 1200, "max_seqs": 9, "ordering": ordering, "seed": seed,
               "partition_epoch": parts, "uneven": uneven, "distribution": distribution}  # fmt: skip
    SEEN.clear()
    check_plan_contracts(
        lambda: planner_of(base, **options),
        [3, 2, 4],
        fractions,
        epochs=list(range(1, 2 * parts + 1)),
        workers=(),
        each_plan=check_variants,
    )


SORTING = ["sorted", "sorted_reverse", "sort_bin_shuffle:.3", "sort_bin_shuffle_x2:3"]


@settings(max_examples=8, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 300), min_size=1, max_size=60),
    seed=st.integers(0, 1000),
    ordering=st.sampled_from(SORTING),
    distribution=st.sampled_from(["shard", "random_seed_offset"]),
    parts=st.integers(1, 2),
    uneven=st.sampled_from(["split", "pad", "drop"]),
)
def test_sorting_variant_plans_hold_every_contract(lengths, seed, ordering, distribution, parts,
                                                   uneven):  # fmt: skip
    check_contracts(lengths, seed, ordering, distribution, parts, uneven, [0.5])


@pytest.mark.parametrize("ordering", SORTING)
def test_sorting_orders_sort_by_the_class_draws_lengths(ordering):
    """The sorting orders read the class draw's full epoch laid out by drawn length: ``sorted``
    ascends, ``sorted_reverse`` descends, ``sort_bin_shuffle`` emits bins of it; each variant
    balanced within a class and a new draw each full epoch."""
    base = np.random.default_rng(3).integers(20, 120, 600)
    planner = planner_of(base, max_frames=1500, ordering=ordering, seed=4, partition_epoch=2)
    drawn = []
    for full in (0, 1):
        b = [planner.global_plan(2 * full + part, 1).batches for part in (1, 2)]
        seqs = np.concatenate([x.seqs for x in b])
        v = np.concatenate([x.variants for x in b])
        assert sorted(seqs.tolist()) == list(range(len(base)))
        got = planner.drawn[v, seqs]
        if ordering == "sorted":
            assert (np.diff(got) >= 0).all()
        elif ordering == "sorted_reverse":
            assert (np.diff(got) <= 0).all()
        else:
            assert not (np.diff(got) >= 0).all()  # bins emitted in a keyed order
        per = np.zeros(len(base), dtype=np.int64)
        per[seqs] = v
        classes = planner.corpus.sorted_variants
        members = np.asarray(classes.index.members)
        for c in range(len(classes.sizes)):
            start, end = classes.index.starts[c : c + 2]
            counts = np.bincount(per[members[start:end]], minlength=3)
            assert counts.max() - counts.min() <= 1
        drawn.append(per)
    assert not (drawn[0] == drawn[1]).all()


def test_each_full_epoch_draws_every_variant_evenly_and_anew():
    base = np.random.default_rng(1).integers(50, 800, 3000)
    planner = planner_of(base, max_frames=8000, ordering="laplace:.40", seed=5)
    drawn = []
    for epoch in (1, 2):
        b = planner.global_plan(epoch, 4).batches
        v = np.full(len(base), -1)
        v[b.seqs[b.real]] = b.variants[b.real]
        assert (v >= 0).all()  # every sequence once, in one variant
        counts = np.bincount(v, minlength=3)
        assert counts.max() - counts.min() <= planner.variants.sizes.size  # one per class
        drawn.append(v)
    assert abs(float(np.mean(drawn[0] == drawn[1])) - 1 / 3) < 0.05  # a new draw each epoch
    # the variants are a function of (seed, full epoch): any world size, rank or order rank
    again = planner_of(base, max_frames=8000, ordering="laplace:.40", seed=5)
    b = again.global_plan(1, 7).batches
    assert (b.variants == drawn[0][b.seqs]).all()
    other = planner_of(base, max_frames=8000, ordering="laplace:.40", seed=6)
    b = other.global_plan(1, 1).batches
    assert not (b.variants == drawn[0][b.seqs]).all()


@pytest.mark.parametrize("ordering", ["default", "reverse", "random"])
def test_greedy_orders_cut_on_global_plannings_per_sequence_draw(ordering):
    """The fixed orders and ``random`` are cut greedily each epoch on the drawn lengths, with
    global planning's draw (``variant_of``): the same batches as global planning for the fixed
    orders (one order), and each slot carries the variant the worker would have drawn."""
    from seqloader.plan.variants import variant_of

    base = np.random.default_rng(4).integers(20, 400, 500)
    variants = speed_variants(base)
    longest = {"data": variants.longest("data")}
    for epoch in (1, 2, 3):
        indexed = planner_of(base, max_frames=2000, ordering=ordering, seed=7, partition_epoch=2)
        b = indexed.global_plan(epoch, 1).batches
        full = (epoch - 1) // 2
        assert (b.variants == variant_of(7, full, b.seqs, 3)).all()
        if ordering != "random":
            options = PlanOptions(max_frames=2000, ordering=ordering, seed=7, partition_epoch=2,
                                  planning="global")  # fmt: skip
            want = make_planner(longest, options, variants=variants).global_plan(epoch, 1).batches
            assert b.seqs.tolist() == want.seqs.tolist()
            assert b.bounds.tolist() == want.bounds.tolist()


@pytest.mark.parametrize("ordering", ["buckets:4", "random"])
def test_admission_is_global_plannings_on_the_longest_variant(ordering):
    """Length filters and ``fixed_random_subset`` admit by the source's lengths (the longest
    variant's), the same sequences in every epoch and as global planning admits them."""
    base = np.random.default_rng(5).integers(20, 400, 400)
    variants = speed_variants(base)
    more = {"max_seq_length": 350, "min_seq_length": 40, "fixed_random_subset": 300}
    planner = planner_of(base, max_frames=3000, ordering=ordering, seed=2, **more)
    options = PlanOptions(max_frames=3000, ordering="laplace:.5", planning="global", **more)
    global_ = make_planner({"data": variants.longest("data")}, options, variants=variants)
    want = sorted(global_.admission.admitted.tolist())
    for epoch in (1, 2):
        b = planner.global_plan(epoch, 3).batches
        assert sorted(b.seqs[b.real].tolist()) == want
    assert planner.filtered(1) == global_.filtered(1)


def test_batches_sort_and_bucket_by_the_drawn_length_not_the_longest():
    """A bucket's batch size follows its longest *drawn* length, so the plan's steps are those
    of the drawn lengths: fewer than planning every sequence at its slowest factor."""
    base = np.random.default_rng(2).integers(100, 1000, 4000)
    planner = planner_of(base, max_frames=20_000, ordering="buckets:20", seed=1)
    slowest = make_planner(
        {"data": speed_variants(base).longest("data")},
        PlanOptions(max_frames=20_000, ordering="buckets:20", seed=1, planning="indexed"),
    )
    assert planner.global_plan(1, 1).steps < slowest.global_plan(1, 1).steps


def test_auto_plans_variants_indexed_for_every_ordering():
    base = np.arange(10, 40, dtype=np.int64)
    variants = speed_variants(base)
    lengths = {"data": variants.longest("data")}
    for ordering, want in [("laplace:.5", "indexed"), ("buckets:3", "indexed"),
                           ("default", "indexed"), ("random", "indexed"), ("sorted", "indexed"),
                           ("sorted_reverse", "indexed"), ("sort_bin_shuffle:.4", "indexed"),
                           ("sort_bin_shuffle_x2", "indexed")]:  # fmt: skip
        options = PlanOptions(max_frames=500, ordering=ordering)
        got = resolve_planning(PlanInputs(lengths, options, variants=variants)).options.planning
        assert got == want, ordering


@pytest.mark.parametrize(
    ("option", "value", "named"),
    [
        ("distribution", "files", "distribution='files'"),
        ("chunking", "50:25", "chunking"),
    ],
)
def test_what_indexed_planning_does_not_plan_with_variants_is_refused_by_name(option, value, named):
    base = np.arange(10, 40, dtype=np.int64)
    variants = speed_variants(base)
    given_ = {"max_frames": 500, "ordering": "laplace:.5", "planning": "indexed", option: value}
    with pytest.raises(OptionError, match=rf"length variants .*{named}"):
        make_planner({"data": variants.longest("data")}, PlanOptions(**given_), variants=variants)


def test_a_sources_own_sort_key_with_a_sorting_order_and_variants_is_refused_by_name():
    """Global planning sorts by the source's own key, the class draw by the drawn lengths."""
    base = np.arange(10, 40, dtype=np.int64)
    variants = speed_variants(base)
    options = PlanOptions(max_frames=500, ordering="sorted", planning="indexed")
    given_ = PlanInputs({"data": variants.longest("data")}, options, variants=variants,
                        order_lengths=base[::-1].copy())  # fmt: skip
    with pytest.raises(OptionError, match=r"length variants .*own sort key"):
        make_planner(given_)


def test_a_worker_given_no_variants_by_an_indexed_plan_says_so():
    carried = PlannedVariants(3, carried=True)
    with pytest.raises(DataError, match="carries each sequence's length variant"):
        carried.of(1, 1, np.array([4, 5]))


# ---------------------------------------------------------------- golden digests (new sets)

CASES = {
    "laplace:.8 W3 split elastic -> W2": {
        "options": {"ordering": "laplace:.8", "max_frames": 2400, "seed": 3}, "world": 3,
        "elastic": (2, 2)},
    "buckets:4 partition 2 W4 pad": {
        "options": {"ordering": "buckets:4", "max_frames": 3000, "max_seqs": 12, "seed": 8,
                    "partition_epoch": 2, "uneven": "pad"}, "world": 4},
    "random_seed_offset laplace:3 W2 drop, quadratic": {
        "options": {"ordering": "laplace:3", "max_frames": 900_000, "seed": 1,
                    "batch_cost": "quadratic:200", "distribution": "random_seed_offset",
                    "uneven": "drop"}, "world": 2},
    "default partition 2 W3 split elastic -> W2": {
        "options": {"ordering": "default", "max_frames": 2000, "seed": 5,
                    "partition_epoch": 2}, "world": 3, "elastic": (2, 2)},
    "random_seed_offset random W2 pad": {
        "options": {"ordering": "random", "max_frames": 1500, "max_seqs": 7, "seed": 2,
                    "distribution": "random_seed_offset", "uneven": "pad"}, "world": 2},
    "sorted_reverse partition 2 W3 split elastic -> W2": {
        "options": {"ordering": "sorted_reverse", "max_frames": 2000, "seed": 6,
                    "partition_epoch": 2}, "world": 3, "elastic": (2, 2)},
    "random_seed_offset sort_bin_shuffle_x2:3 W2 pad": {
        "options": {"ordering": "sort_bin_shuffle_x2:3", "max_frames": 1500, "max_seqs": 7,
                    "seed": 4, "distribution": "random_seed_offset", "uneven": "pad"},
        "world": 2},
}  # fmt: skip
GOLDEN = {
    "laplace:.8 W3 split elastic -> W2": (
        "789cfafd7bf46c589ddc79f4ad18bf69004bf071d792575fdcfc8007c375f33b"
    ),
    "buckets:4 partition 2 W4 pad": (
        "e516f85a9b67d0d69e16c3cb0c8a7d13ec5e9b2dc4e29b01c50c6ab62053b148"
    ),
    "random_seed_offset laplace:3 W2 drop, quadratic": (
        "a0e3edfd521d6f3a081f08e12e2833984cf5baf79d60d4a7a827f84d4a0f2c5e"
    ),
    "default partition 2 W3 split elastic -> W2": (
        "71b5520fae579a66ea47e4b5f813253a37c81fbbc61a66b0a925ddc4c66160bc"
    ),
    "random_seed_offset random W2 pad": (
        "7cb54c8c059ec1c60551c4792a39c6969aef08513ef76fb5d13415f74071b4dd"
    ),
    "sorted_reverse partition 2 W3 split elastic -> W2": (
        "9aabf47b9d6b4fb42f239734e1e81799601993ad7fb0c88eeb284b1343964c05"
    ),
    "random_seed_offset sort_bin_shuffle_x2:3 W2 pad": (
        "ccbebae7ecf482bd7380e83f28e48e24666c84f90246a56fe693614420c886d5"
    ),
}


def digest(case: dict, make=planner_of) -> str:
    """The plans of ``case`` (``make(base, **options)`` builds the planner), hashed."""
    base = (np.arange(300, dtype=np.int64) * 7919 + 17) % 400 + 1
    planner = make(base, **case["options"])
    plans = [planner.global_plan(epoch, case["world"]) for epoch in (1, 2)]
    if "elastic" in case:
        steps, world = case["elastic"]
        plans.append(continue_plan(planner, Position(1, 0, case["world"], steps), world)[0])
    content = [
        [p.batches.seqs.tolist(), p.batches.bounds.tolist(), p.batches.real.tolist(),
         p.batches.variants.tolist()]
        for p in plans
    ]  # fmt: skip
    return hashlib.sha256(json.dumps(content).encode()).hexdigest()


def test_variant_golden_plans_are_pinned():
    """Recorded when these sets were first planned; bump ``INDEXED_ALGORITHM`` and record anew
    if one changes."""
    got = {name: digest(case) for name, case in CASES.items()}
    assert got == GOLDEN, f"record: {got}"


# ---------------------------------------------------------------- through AudioSource and workers

soundfile = pytest.importorskip("soundfile")
LM = sl.LogMel(sample_rate=16000, n_mels=20)
SPEED = sl.transforms.SpeedPerturb(FACTORS)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    from seqloader.synthetic.audio import write_audio_corpus

    return write_audio_corpus(
        tmp_path_factory.mktemp("speed_indexed"), 16, formats=("flac",), sample_rates=(16000,),
        seconds=(0.2, 0.9), seed=7,
    )  # fmt: skip


def test_real_workers_read_the_variant_the_indexed_plan_drew(corpus):
    src = sl.AudioSource(corpus.oggzip, features=LM, speed=SPEED)
    options = {"max_frames": 400, "seed": 11, "ordering": "buckets:3"}  # auto: indexed
    _labels, table = src.length_variants()
    with sl.SeqLoader(src, num_workers=2, **options) as loader:
        assert loader.planner.options.planning == "indexed"
        planned = {e: loader.planner.global_plan(e, 1).batches for e in (1, 2)}
        records = [batch_record(b) for e in (1, 2) for b in loader.epoch(e)]
    for epoch in (1, 2):
        b = planned[epoch]
        want = dict(zip(b.seqs.tolist(), table["data"][b.variants, b.seqs].tolist()))
        got = [r for r in records if r.epoch == epoch]
        assert sorted(i for r in got for i in r.seqs) == list(range(len(src)))
        for r in got:
            lens = dict(r.lengths)["data"]
            assert list(lens) == [want[i] for i in r.seqs]  # the planned factor was applied
            assert len(lens) * max(lens) <= 400
    with sl.SeqLoader(src, num_workers=0, **options) as loader:
        assert [batch_record(b) for e in (1, 2) for b in loader.epoch(e)] == records


def test_a_node_store_of_the_variant_classes_plans_what_the_rank_builds(
    corpus, tmp_path, monkeypatch
):
    from seqloader.loading import variant_store
    from seqloader.loading.planner_for import planner_for

    src = sl.AudioSource(corpus.oggzip, features=LM, speed=SPEED)
    options = sl.PlanOptions(max_frames=400, seed=11, ordering="buckets:3", planning="indexed")
    want = [planner_for(src, options).global_plan(e, 2).rank_share(1) for e in (1, 2)]
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(variant_store, "MIN_SEQUENCES", 1)
    report = sl.prepare(src, plan=options, screen=False)
    assert [s.built for s in report.stores if s.kind == variant_store.KIND] == [True]
    stores: list = []
    planner = planner_for(src, options, stores=stores)
    got = [planner.global_plan(e, 2).rank_share(1) for e in (1, 2)]
    assert [s.built for s in stores if s.kind == variant_store.KIND] == [False]  # mapped
    for a, b in zip(got, want):
        assert a.seqs.tolist() == b.seqs.tolist() and a.bounds.tolist() == b.bounds.tolist()
        assert a.variants.tolist() == b.variants.tolist()
