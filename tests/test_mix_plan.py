"""Mixed epochs on the pure planner (``mix``, seqloader.plan.mix): per-corpus exactly-once over
corpus epochs for random rates, corpus sizes, orderings, world sizes, ``partition_epoch`` and resume
chains (W -> W' -> W''), the selection formula, and bad options (hypothesis; no torch, no I/O)."""

from __future__ import annotations

import json
import math
import warnings
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import MIX_ORDERINGS
from plan_contracts import check_plan_contracts
from seqloader.errors import DataWarning, OptionError
from seqloader.plan import Planner, PlanOptions
from seqloader.plan.bounds import MAX_EPOCH_SLOTS
from seqloader.plan.mix import (
    Corpora,
    corpus_epoch_permutation,
    select_corpus,
    stream_span,
)

RATES = [0.25, 0.5, 0.7, 1.0, 1.3, 2.0, 2.5, 3.0, 1 / 3]


@st.composite
def mixes(draw: st.DrawFn) -> dict:
    n_corpora = draw(st.integers(1, 4))
    sizes = draw(st.lists(st.integers(1, 25), min_size=n_corpora, max_size=n_corpora))
    names = [f"c{i}" for i in range(n_corpora)]
    total = sum(sizes)
    lengths = np.array(draw(st.lists(st.integers(1, 30), min_size=total, max_size=total)))
    rates = {n: draw(st.sampled_from(RATES)) for n in names if draw(st.booleans()) or n == "c0"}
    options = PlanOptions(
        ordering=draw(st.sampled_from(MIX_ORDERINGS)),
        max_seqs=draw(st.one_of(st.none(), st.integers(1, 6))),
        max_frames=draw(st.one_of(st.none(), st.integers(30, 150))),
        partition_epoch=draw(st.integers(1, 3)),
        uneven=draw(st.sampled_from(["split", "pad"])),
        seed=draw(st.integers(0, 3)),
        mix=rates,
    )
    epochs = draw(st.integers(1, 3)) * options.partition_epoch  # whole full epochs
    worlds = [draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)) for _ in range(epochs)]
    cuts = [
        draw(st.lists(st.floats(0, 1), min_size=len(w) - 1, max_size=len(w) - 1)) for w in worlds
    ]
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    return {
        "planner": Planner({"data": lengths}, options, corpora=Corpora(tuple(names), bounds)),
        "epochs": epochs,
        "worlds": worlds,
        "cuts": cuts,
    }


# 100 examples (was 150) draw every ordering, chain length and rate the 150 drew
@settings(max_examples=100, deadline=None)
@given(mixes())
def test_every_sequence_once_per_corpus_epoch_across_resumes(m: dict) -> None:
    """Every epoch's slots consumed over its resumes (W -> W' -> W'', through JSON), in order,
    whatever the resumes; per corpus every sequence once per corpus epoch; equal steps,
    determinism from fresh planners (the contracts of every plan kind)."""
    planner: Planner = m["planner"]
    check_plan_contracts(
        lambda: Planner({"data": planner.lengths}, planner.options, corpora=planner.corpora),
        m["worlds"],
        m["cuts"],
        range(1, m["epochs"] + 1),
        ordered=True,
    )


@settings(max_examples=100, deadline=None)
@given(mixes(), st.integers(0, 6))
def test_epoch_takes_floor_differences_of_each_stream(m: dict, full_epoch: int) -> None:
    """Full epoch e (1-based) takes floor(e·r·N) - floor((e-1)·r·N) sequences of corpus c, the
    next ones of c's stream: corpus epoch k is the permutation seeded by (seed, c, k)."""
    planner: Planner = m["planner"]
    mix = planner.mix
    selection = mix.select(full_epoch)
    counts = mix.corpora.counts(selection.seqs)
    e = full_epoch + 1
    for c, (name, rate, members) in enumerate(zip(mix.corpora.names, mix.rates, mix.members)):
        n = len(members)
        r = Fraction(rate)
        assert counts[c] == math.floor(e * r * n) - math.floor((e - 1) * r * n)
        # the stream itself, built the slow way: concatenated permutations
        a, b = stream_span(full_epoch, rate, n)
        stream = np.concatenate(
            [members[corpus_epoch_permutation(mix.seed, name, k, n)] for k in range(b // n + 1)]
        )
        mine = mix.corpora.corpus_of(selection.seqs) == c
        got = sorted(zip(selection.seqs[mine].tolist(), selection.uses[mine].tolist()))
        want = sorted((int(stream[p]), p // n) for p in range(a, b))
        assert got == want
    assert np.all(np.diff(selection.seqs) >= 0), "canonical order: ascending sequence index"


def test_a_corpus_stream_does_not_depend_on_the_other_corpora() -> None:
    members = np.arange(10, 17)
    alone = select_corpus(5, "ted", members, 1.7, 3)
    lengths = {"data": np.full(40, 3)}
    corpora = Corpora(("libri", "ted", "swb"), np.array([0, 10, 17, 40]))
    planner = Planner(lengths, PlanOptions(seed=5, mix={"ted": 1.7, "swb": 0.2}), corpora=corpora)
    sel = planner.mix.select(3)
    ted = (sel.seqs >= 10) & (sel.seqs < 17)
    np.testing.assert_array_equal(sel.seqs[ted], alone[0])
    np.testing.assert_array_equal(sel.uses[ted], alone[1])


def test_worked_example_of_the_docs() -> None:
    """docs/corpora.md: corpora a (4 seqs, rate 0.5) and b (3 seqs, rate 2.0)."""
    corpora = Corpora(("a", "b"), np.array([0, 4, 7]))
    planner = Planner(
        {"data": np.full(7, 10)}, PlanOptions(mix={"a": 0.5, "b": 2.0}), corpora=corpora
    )
    counts = [planner.mix.epoch_counts(f) for f in range(4)]
    assert counts == [(2, 6), (2, 6), (2, 6), (2, 6)]
    a_uses = [sorted(planner.mix.select(f).seqs[:2].tolist()) for f in range(2)]
    assert sorted(a_uses[0] + a_uses[1]) == [0, 1, 2, 3]  # corpus epoch 1 of a over epochs 1-2
    b = planner.mix.select(0)
    assert b.seqs[2:].tolist() == [4, 4, 5, 5, 6, 6] and b.uses[2:].tolist() == [0, 1] * 3


def test_uneven_rates_keep_exact_boundaries() -> None:
    """A rate that is not a short binary fraction (0.1) must not lose or add a sequence to float
    rounding: over 10 epochs exactly one corpus epoch of 10 sequences."""
    corpora = Corpora(("x",), np.array([0, 10]))
    planner = Planner({"data": np.full(10, 1)}, PlanOptions(mix={"x": 0.1}), corpora=corpora)
    total = sum(planner.mix.epoch_counts(f)[0] for f in range(10))
    assert total == 10
    seqs = np.concatenate([planner.mix.select(f).seqs for f in range(10)])
    assert sorted(seqs.tolist()) == list(range(10))


@pytest.mark.parametrize(
    ("mix", "message"),
    [
        ({"libri": 0.0}, "expected a number > 0"),
        ({"libri": -1}, "expected a number > 0"),
        ({"libri": float("nan")}, "expected a number > 0"),
        ({"libri": float("inf")}, "expected a number > 0"),
        ({"libri": True}, "expected a number > 0"),
        ({"libri": "seven tenths"}, "or a string such as '7/10'"),
        ({"libri": "1/0"}, "expected a number > 0"),
        ({"libri": Fraction(-1, 2)}, "expected a number > 0"),
        ({"": 1.0}, "non-empty string"),
        ([("libri", 1.0)], "expected a mapping"),
    ],
)
def test_bad_mix_options(mix: object, message: str) -> None:
    with pytest.raises(OptionError, match=message):
        PlanOptions(mix=mix)  # type: ignore[arg-type]


def test_the_attack_rate_0_7_takes_1400_of_2000() -> None:
    """The binary float 0.7 is 0.69999...: taken as that, epoch 1 took 1399 of 2000 sequences."""
    corpora = Corpora(("x",), np.array([0, 2000]))
    planner = Planner(
        {"data": np.ones(2000, np.int64)}, PlanOptions(mix={"x": 0.7}), corpora=corpora
    )
    assert planner.mix is not None
    assert [planner.mix.epoch_counts(f)[0] for f in range(3)] == [1400, 1400, 1400]
    assert len(planner.mix.select(0).seqs) == 1400


# rates as a user writes them: decimals with up to 3 places in (0, 5], a few named ones
WRITTEN_RATES = st.one_of(
    st.sampled_from(["0.3", "0.7", "2.3", "0.1", "1.1", "0.35", "4.9"]),
    st.integers(1, 5000).map(lambda m: f"{m // 1000}.{m % 1000:03d}"),
)


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(WRITTEN_RATES, st.integers(1, 3000)), min_size=1, max_size=3),
    st.sampled_from(["float", "str", "fraction"]),
    st.integers(1, 12),
)
def test_rates_are_taken_as_written(corpora: list, form: str, epochs: int) -> None:
    """After e epochs corpus c has given floor(e·r·N) sequences in all, r being the decimal the
    user wrote (docs/corpora.md). The expected count is integer arithmetic on the decimal's
    digits (r = m / 10^d), independent of the planner's rationals; a float, its string and a
    Fraction plan alike."""
    names = [f"c{i}" for i in range(len(corpora))]
    sizes = [n for _, n in corpora]
    as_given = {"float": float, "str": str, "fraction": Fraction}[form]
    mix = {name: as_given(text) for name, (text, _) in zip(names, corpora)}
    bounds = np.concatenate([[0], np.cumsum(sizes)])
    planner = Planner(
        {"data": np.ones(int(bounds[-1]), np.int64)},
        PlanOptions(mix=mix),
        corpora=Corpora(tuple(names), bounds),
    )
    assert planner.mix is not None
    total = np.zeros(len(names), np.int64)
    for f in range(epochs):
        total += planner.mix.epoch_counts(f)
        e = f + 1
        for c, (text, n) in enumerate(corpora):
            whole, _, decimals = text.partition(".")
            m, scale = int(whole + decimals), 10 ** len(decimals)
            assert total[c] == e * m * n // scale, (text, n, e)


def test_a_rate_written_three_ways_plans_alike() -> None:
    """0.7, '7/10' and Fraction(7, 10) are one rate: one fingerprint, one plan. A binary float
    rate (0.5) keeps the fingerprint JSON it had when rates were floats."""
    jsons = {PlanOptions(mix={"a": r}).to_json() for r in (0.7, "7/10", "0.7", Fraction(7, 10))}
    assert len(jsons) == 1 and '"7/10"' in jsons.pop()
    assert json.loads(PlanOptions(mix={"a": 0.5, "b": 3}).to_json())["mix"] == {"a": 0.5, "b": 3.0}


def test_options_that_scale_memory_are_bounded_before_any_work() -> None:
    """A rate whose epoch would need terabytes is named with the bound at Planner creation (no
    numpy MemoryError); the bound counts all corpora; a rate just under it is accepted."""
    corpora = Corpora(("a", "b"), np.array([0, 2000, 3000]))
    data = {"data": np.ones(3000, np.int64)}
    with pytest.raises(OptionError, match=r"mix\['a'\]: got rate 1e\+09.*TiB.*MAX_EPOCH_SLOTS"):
        Planner(data, PlanOptions(mix={"a": 1e9}), corpora=corpora)
    fits = (MAX_EPOCH_SLOTS - 1000) // 2000
    planner = Planner(data, PlanOptions(mix={"a": fits}), corpora=corpora)  # nothing allocated
    assert planner.mix is not None and sum(planner.mix.epoch_counts(0)) <= MAX_EPOCH_SLOTS
    with pytest.raises(OptionError, match=r"mix\['a'\]"):
        Planner(data, PlanOptions(mix={"a": fits + 1}), corpora=corpora)
    with pytest.raises(OptionError, match=r"'laplace:1000000000'.*bound is max\(sequences"):
        Planner(data, PlanOptions(ordering="laplace:1000000000"))
    with pytest.raises(OptionError, match=r"'buckets:1000000000'.*Fix: buckets:N"):
        Planner(data, PlanOptions(ordering="buckets:1000000000"))
    Planner(data, PlanOptions(ordering="laplace:5000"))  # more bins than sequences: allowed
    long = {"data": np.full(3, 2**30, np.int64)}  # 3 long sequences cut into 1-frame chunks
    with pytest.raises(OptionError, match=r"chunking: .*3,221,225,472 chunks.*MAX_EPOCH_SLOTS"):
        Planner(long, PlanOptions(chunking="1:1", max_frames=10))
    assert Planner(long, PlanOptions(chunking="1000:1000", max_frames=1000)).chunks is not None


def test_a_rate_giving_no_sequence_per_epoch_warns_naming_the_corpus() -> None:
    corpora = Corpora(("a", "b"), np.array([0, 2000, 3000]))
    data = {"data": np.ones(3000, np.int64)}
    with pytest.warns(DataWarning, match=r"corpus 'b' \(1000 admitted.*every 1,000,000 epochs"):
        planner = Planner(data, PlanOptions(mix={"b": 1e-9}), corpora=corpora)
    assert planner.mix is not None and planner.mix.epoch_counts(0) == (2000, 0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        Planner(data, PlanOptions(mix={"b": "1/1000"}), corpora=corpora)  # one per epoch: quiet


def test_unknown_corpus_names_it_and_the_known_ones() -> None:
    corpora = Corpora(("libri", "ted"), np.array([0, 3, 5]))
    with pytest.raises(
        OptionError, match=r"unknown corpus name\(s\) \['swb'\].*\['libri', 'ted'\]"
    ):
        Planner({"data": np.ones(5, np.int64)}, PlanOptions(mix={"swb": 2.0}), corpora=corpora)


def test_mix_needs_corpora_and_shard() -> None:
    with pytest.raises(OptionError, match="ConcatSource"):
        Planner({"data": np.ones(5, np.int64)}, PlanOptions(mix={"a": 1.0}))
    with pytest.raises(OptionError, match=r"random_seed_offset.*use planning='indexed'"):
        PlanOptions(mix={"a": 1.0}, distribution="random_seed_offset", planning="global")


def test_a_corpus_with_no_admitted_sequence_is_an_error() -> None:
    corpora = Corpora(("libri", "ted"), np.array([0, 3, 5]))
    lengths = {"data": np.array([5, 5, 5, 50, 60])}
    options = PlanOptions(mix={"ted": 2.0}, max_seq_length=40)
    with pytest.raises(OptionError, match=r"corpus 'ted' has no admitted sequences \(all its 2"):
        Planner(lengths, options, corpora=corpora)


def test_unmixed_options_keep_their_json() -> None:
    """Adding ``mix`` must not change unmixed plans' fingerprints (saved states stay loadable)."""
    assert "mix" not in json.loads(PlanOptions().to_json())
    assert json.loads(PlanOptions(mix={"b": 2, "a": 0.5}).to_json())["mix"] == {"a": 0.5, "b": 2.0}
