"""Planned speed perturbation (``AudioSource(speed=SpeedPerturb(...))``, ``seqloader.plan.variants``):
each utterance's factor is drawn at planning time from (seed, full epoch, index), batches are
planned on the exact perturbed lengths, and the workers read exactly the planned factor.

Contracts against the real thing: real FLAC/WAV files decoded by soundfile, real DataLoader
workers (0 and 2, fork and spawn), resume through the loader's JSON state."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import seqloader as sl
from conftest import batch_record
from seqloader.audio.resample import speed_length
from seqloader.errors import DataError, OptionError
from seqloader.plan.options import PlanOptions
from seqloader.plan.planners import make_planner
from seqloader.plan.variants import LengthVariants, variant_of
from seqloader.transforms import AddNoise, Features, SpeedPerturb, compose

LM = sl.LogMel(sample_rate=16000, n_mels=20)
SPEED = SpeedPerturb((0.9, 1.0, 1.1))


# ---------------------------------------------------------------- the plan alone (pure numpy)


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    epoch=st.integers(0, 1000),
    count=st.integers(1, 7),
    picks=st.lists(st.integers(0, 10**9), min_size=1, max_size=50),
)
def test_a_sequences_variant_is_the_same_alone_or_among_any_others(seed, epoch, count, picks):
    idx = np.asarray(picks, dtype=np.int64)
    whole = variant_of(seed, epoch, idx, count)
    assert ((whole >= 0) & (whole < count)).all()
    for j, i in enumerate(picks):
        assert variant_of(seed, epoch, np.array([i]), count)[0] == whole[j]


def test_variants_are_uniform_and_change_between_epochs_and_seeds():
    idx = np.arange(30_000)
    a, b, c = variant_of(1, 0, idx, 3), variant_of(1, 1, idx, 3), variant_of(2, 0, idx, 3)
    for v in (a, b, c):
        assert np.abs(np.bincount(v, minlength=3) - 10_000).max() < 400  # ~4.6 sigma
    for other in (b, c):  # independent draws agree on about a third
        assert abs(float(np.mean(a == other)) - 1 / 3) < 0.02


def speed_variants(samples: np.ndarray, factors=(0.9, 1.0, 1.1)) -> LengthVariants:
    table = np.stack([np.asarray(speed_length(samples, f), dtype=np.int64) for f in factors])
    return LengthVariants({"data": table}, tuple(str(f) for f in factors))


@settings(max_examples=40, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 300), min_size=1, max_size=120),
    max_frames=st.integers(400, 3000),
    seed=st.integers(0, 1000),
    ordering=st.sampled_from(["random", "laplace:.8", "sorted", "default", "sort_bin_shuffle:.6"]),
    parts=st.integers(1, 3),
    world=st.integers(1, 3),
)
def test_every_epoch_is_batched_on_its_exact_drawn_lengths(
    lengths, max_frames, seed, ordering, parts, world
):
    base = np.asarray(lengths, dtype=np.int64)
    variants = speed_variants(base)
    longest = variants.longest("data")
    options = PlanOptions(
        max_frames=max_frames, ordering=ordering, seed=seed, partition_epoch=parts,
        planning="global",  # global's draw (indexed: tests/test_speed_plan_indexed.py)
    )  # fmt: skip
    planner = make_planner({"data": longest}, options, variants=variants)
    for full in range(2):
        exact = variants.at(seed, full, {"data": longest})["data"]
        seen = []
        for part in range(parts):
            epoch = full * parts + part + 1
            plan = planner.global_plan(epoch, world)
            b = plan.batches
            for k in range(len(b)):
                seqs, real = b.batch(k)
                assert len(seqs) * exact[seqs].max() <= max_frames  # exact, no surprise
                seen.extend(seqs[real].tolist())
                if world == 1 and k + 1 < len(b):  # greedy on the exact lengths: next won't fit
                    grown = np.append(seqs, b.batch(k + 1)[0][0])
                    assert len(grown) * exact[grown].max() > max_frames
        assert sorted(seen) == list(range(len(base)))  # exactly once per full epoch


def test_sorting_orderings_sort_by_the_drawn_lengths():
    base = np.arange(100, 400, 3, dtype=np.int64)
    variants = speed_variants(base)
    planner = make_planner(
        {"data": variants.longest("data")},
        PlanOptions(max_frames=10**6, ordering="sorted", seed=4, planning="global"),
        variants=variants,
    )
    exact = variants.at(4, 0, {"data": variants.longest("data")})["data"]
    order = planner.sub_epoch_order(1)
    assert (np.diff(exact[order]) >= 0).all()
    assert not (np.diff(base[order]) >= 0).all()  # not the unperturbed order


def test_a_resumed_position_batches_the_rest_as_the_uninterrupted_epoch():
    base = np.random.default_rng(0).integers(50, 400, 200)
    variants = speed_variants(base)
    planner = make_planner(
        {"data": variants.longest("data")},
        PlanOptions(max_frames=2000, ordering="laplace:.20", seed=9, planning="global"),
        variants=variants,
    )
    whole = planner.global_plan(3, 1).batches
    for k in (1, 5, len(whole) - 1):
        start = int(whole.bounds[k])
        rest = planner.global_plan(3, 1, start=start).batches
        assert rest.seqs.tolist() == whole.seqs[start:].tolist()
        assert (rest.bounds + start).tolist() == whole.bounds[k:].tolist()


def test_the_planned_step_imbalance_costs_the_epochs_drawn_lengths():
    from seqloader.plan.cost import step_imbalance

    base = np.random.default_rng(2).integers(50, 400, 300)
    variants = speed_variants(base)
    longest = variants.longest("data")
    planner = make_planner(
        {"data": longest},
        PlanOptions(max_frames=2000, ordering="random", seed=3),
        variants=variants,
    )
    plan = planner.global_plan(2, 3)
    exact = variants.at(3, 1, {"data": longest})["data"]
    b = plan.batches
    want = step_imbalance(b.seqs, b.bounds, 3, exact)
    assert planner.step_imbalance(plan, 0).compute() == pytest.approx(want)
    assert want != pytest.approx(step_imbalance(b.seqs, b.bounds, 3, longest))


def test_plans_without_variants_do_not_change():
    base = np.random.default_rng(1).integers(1, 500, 300)
    options = PlanOptions(max_frames=3000, ordering="laplace:.30", seed=2)
    plain = make_planner({"data": base}, options)
    fingerprint = plain.fingerprint("src")
    again = make_planner({"data": base}, options, variants=None)
    assert again.fingerprint("src") == fingerprint
    assert (
        again.global_plan(2, 2).batches.seqs.tolist()
        == plain.global_plan(2, 2).batches.seqs.tolist()
    )
    variants = speed_variants(base)
    planned = make_planner({"data": variants.longest("data")}, options, variants=variants)
    assert planned.fingerprint("src") != make_planner(
        {"data": variants.longest("data")}, options
    ).fingerprint("src")


@pytest.mark.parametrize(
    ("option", "value"),
    [("chunking", "50:25"), ("ordering", "buckets:4")],
)
def test_options_that_cannot_follow_per_epoch_lengths_are_refused_by_name(option, value):
    base = np.arange(10, 40, dtype=np.int64)
    variants = speed_variants(base)
    given = {"ordering": "laplace:.5", "planning": "global", option: value}
    options = PlanOptions(max_frames=500, **given)
    with pytest.raises(OptionError, match=rf"length variants .*{option}"):
        make_planner({"data": variants.longest("data")}, options, variants=variants)


# ---------------------------------------------------------------- through AudioSource and workers

soundfile = pytest.importorskip("soundfile")


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    from seqloader.synthetic.audio import write_audio_corpus

    return write_audio_corpus(
        tmp_path_factory.mktemp("speed"),
        16,
        formats=("flac", "wav"),
        sample_rates=(16000, 8000),
        seconds=(0.2, 0.9),
        seed=5,
    )


def planned_source(corpus, **kw) -> sl.AudioSource:
    return sl.AudioSource(corpus.oggzip, features=LM, speed=SPEED, **kw)


def run(source, epochs=(1, 2), **options) -> list:
    with sl.SeqLoader(source, **options) as loader:
        return [batch_record(b) for e in epochs for b in loader.epoch(e)]


def test_the_source_plans_the_slowest_factor_and_declares_every_factors_lengths(corpus):
    src = planned_source(corpus, keys=("data", "audio"))
    bound = sl.AudioSource(corpus.oggzip, features=LM, keys=("data", "audio"), min_speed=0.9)
    labels, table = src.length_variants()
    assert labels == ("speed 0.9", "speed 1", "speed 1.1")
    for key in ("data", "audio"):
        assert (src.lengths(key) == bound.lengths(key)).all()  # lengths(): the longest
        assert (table[key].max(axis=0) == src.lengths(key)).all()
    for v, factor in enumerate(SPEED.factors):  # each variant is read at exactly its lengths
        seq = src.read_variant(3, v)
        assert len(seq["audio"]) == table["audio"][v, 3] == speed_length(src._samples[3], factor)
        assert len(seq["data"]) == table["data"][v, 3]


def test_a_variant_is_the_unperturbed_audio_resampled_by_its_factor(corpus):
    from seqloader.audio.transforms import perturb

    plain = sl.AudioSource(corpus.oggzip, keys=("audio",))
    src = sl.AudioSource(corpus.oggzip, keys=("audio",), speed=SPEED)
    for v, factor in enumerate(SPEED.factors):
        want = perturb(plain.read(2)["audio"], factor)
        assert np.array_equal(src.read_variant(2, v)["audio"], want)


@settings(max_examples=3, deadline=None)
@given(
    max_frames=st.integers(150, 700),
    seed=st.integers(0, 10_000),
    ordering=st.sampled_from(["random", "laplace:.4", "sorted"]),
)
def test_loader_batches_exact_planned_lengths_once_each_independent_of_workers(
    corpus, max_frames, seed, ordering
):
    src = planned_source(corpus)
    options = {"max_frames": max_frames, "seed": seed, "ordering": ordering, "planning": "global"}
    reference = run(src, num_workers=0, **options)
    labels, table = src.length_variants()
    for epoch in (1, 2):
        records = [r for r in reference if r.epoch == epoch]
        assert sorted(i for r in records for i in r.seqs) == list(range(len(src)))
        for r in records:
            lens = np.asarray(dict(r.lengths)["data"])
            seqs = np.asarray(r.seqs)
            v = variant_of(seed, epoch - 1, seqs, len(labels))
            assert (lens == table["data"][v, seqs]).all()  # the planned factor was applied
            assert len(lens) * lens.max() <= max_frames
    assert run(src, num_workers=2, **options) == reference  # batches, factors, bytes
    assert run(src, num_workers=0, **options) == reference  # determinism


# spawn: make chaos (the factors travel in the plan the workers get, as with fork; an AudioSource
# reaching a spawned worker: test_audio.py's fork-and-spawn test)
@pytest.mark.parametrize("context", ["fork", pytest.param("spawn", marks=pytest.mark.extended)])
def test_workers_of_either_start_method_apply_the_same_factors(corpus, context):
    src = planned_source(corpus, defer_features=True)
    steps = compose(AddNoise((10.0, 20.0)), Features(LM))
    options = {"max_frames": 500, "seed": 3, "ordering": "laplace:.4", "transform": steps}
    reference = run(src, num_workers=0, **options)
    # one spawned worker (it imports torch anew); two forked ones split the work
    workers = 2 if context == "fork" else 1
    got = run(src, num_workers=workers, multiprocessing_context=context, **options)
    assert got == reference


@pytest.mark.parametrize("cut", [1, 3])
def test_a_resumed_loader_draws_the_same_factors_and_batches(corpus, cut):
    src = planned_source(corpus)
    options = {"max_frames": 400, "seed": 8, "ordering": "laplace:.4", "num_workers": 2}
    reference = run(src, epochs=(2,), **options)
    with sl.SeqLoader(src, **options) as loader:
        batches = loader.epoch(2)
        head = [batch_record(next(batches)) for _ in range(cut)]
        state = json.loads(json.dumps(loader.state_dict()))
        batches.close()
    with sl.SeqLoader(src, **options) as resumed:
        resumed.load_state_dict(state)
        tail = [batch_record(b) for b in resumed.epoch(2)]
    assert head + tail == reference


def test_a_transform_that_changes_a_planned_length_is_an_error_naming_the_tag(corpus):
    src = planned_source(corpus, defer_features=True)
    steps = compose(SpeedPerturb((0.8,)), Features(LM))  # perturbs again, on the fly
    loader = sl.SeqLoader(src, max_frames=10**6, max_seqs=1, transform=steps)
    message = r"\(tag 'u\d+'\) in variant 'speed .*' has \d+ frames of 'data'"
    with loader, pytest.raises(DataError, match=message):
        next(iter(loader.epoch(1)))


def test_reading_without_the_plan_and_conflicting_options_are_refused(corpus):
    src = planned_source(corpus)
    with pytest.raises(OptionError, match="reads each utterance at the factor its plan drew"):
        src.read(0)
    with pytest.raises(OptionError, match="min_speed"):
        sl.AudioSource(corpus.oggzip, features=LM, speed=SPEED, min_speed=0.9)
    with pytest.raises(OptionError, match="no audio or features to perturb"):
        sl.AudioSource(corpus.oggzip, keys=("text",), speed=SPEED)
    from seqloader.audio.keys import parse_options

    for owner in ("LhotseSource", "HFSource", "ShardSource"):  # read no variants: say so
        with pytest.raises(OptionError, match=rf"{owner}: speed=SpeedPerturb.*AudioSource only"):
            parse_options(owner, None, {"speed": SPEED})
    with pytest.raises(OptionError, match=r"length variants .*chunking"):
        sl.SeqLoader(src, max_frames=500, planning="indexed", chunking="50:25")


def test_a_returnn_view_of_listed_sequences_passes_their_variants_on(corpus):
    from seqloader.returnn.view import ReturnnView

    src = planned_source(corpus)
    listed = np.array([5, 2, 9])
    view = ReturnnView(src, indices=listed)
    labels, table = view.length_variants()
    assert labels == src.length_variants()[0]
    assert np.array_equal(table["data"], src.length_variants()[1]["data"][:, listed])
    seq = view.read_variant(1, 2)
    assert len(seq["data"]) == table["data"][2, 1]
    options = {"max_frames": 400, "seed": 2, "ordering": "laplace:.2"}
    records = run(view, epochs=(1,), num_workers=0, **options)
    assert sorted(i for r in records for i in r.seqs) == [0, 1, 2]


@pytest.mark.parametrize("uneven", ["split", "pad"])
def test_each_rank_delivers_its_share_at_the_factors_of_a_single_process_run(corpus, uneven):
    """Two ranks (rank/world_size given, no process group needed for one epoch each) together
    deliver every utterance once, each at the factor a one-process run gives it; the audit
    passes on both."""
    src = planned_source(corpus)
    options = {"max_frames": 500, "seed": 6, "ordering": "laplace:.4", "uneven": uneven}
    options["planning"] = "global"  # global's draw (indexed: tests/test_speed_plan_indexed.py)
    labels, table = src.length_variants()
    delivered: dict[int, int] = {}
    for rank in (0, 1):
        with sl.SeqLoader(src, rank=rank, world_size=2, audit=True, **options) as loader:
            for batch in loader.epoch(3):
                for row, i in enumerate(batch.seq_indices.tolist()):
                    if batch.mask[row]:
                        assert i not in delivered
                        delivered[i] = int(batch.lengths["data"][row])
            verdict = loader.report().audit
            assert verdict is not None and verdict.batch_errors == verdict.missing == 0
    assert sorted(delivered) == list(range(len(src)))
    seqs = np.array(sorted(delivered))
    v = variant_of(6, 2, seqs, len(labels))
    assert [delivered[i] for i in seqs.tolist()] == table["data"][v, seqs].tolist()


def test_an_elastic_resume_from_two_ranks_to_one_keeps_every_factor_and_each_utterance_once(
    corpus,
):
    src = planned_source(corpus)
    options = {"max_frames": 300, "seed": 4, "ordering": "laplace:.4", "planning": "global"}
    labels, table = src.length_variants()
    delivered: list[tuple[int, int]] = []
    states = []
    for rank in (0, 1):
        with sl.SeqLoader(src, rank=rank, world_size=2, **options) as loader:
            batches = loader.epoch(1)
            for _ in range(2):
                b = next(batches)
                delivered += [
                    (i, int(n))
                    for i, n, real in zip(b.seq_indices.tolist(), b.lengths["data"], b.mask)
                    if real
                ]
            states.append(json.loads(json.dumps(loader.state_dict())))
            batches.close()
    assert states[0] == states[1]  # both ranks at the same position
    with sl.SeqLoader(src, rank=0, world_size=1, **options) as resumed:
        resumed.load_state_dict(states[0])
        for b in resumed.epoch(1):
            assert len(b.lengths["data"]) * int(b.lengths["data"].max()) <= 300
            delivered += [
                (i, int(n))
                for i, n, real in zip(b.seq_indices.tolist(), b.lengths["data"], b.mask)
                if real
            ]
    assert sorted(i for i, _ in delivered) == list(range(len(src)))
    seqs = np.array([i for i, _ in delivered])
    v = variant_of(4, 0, seqs, len(labels))
    assert [n for _, n in delivered] == table["data"][v, seqs].tolist()
