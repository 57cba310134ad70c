"""``mix`` under ``planning="indexed"`` (seqloader.plan.indexed.mix) on the pure planner:
per-corpus floor arithmetic over many epochs (the global mix's counts) and its apportionment to
buckets, per-corpus exactly-once over corpus
epochs across resume chains W -> W' -> W'', equal steps, a rank's share computed alone equal to
its part of the global list (uses included), determinism, the corpus epochs each slot carries,
per-corpus report counts from counts, and what stays refused (hypothesis; no torch, no I/O).
"""

from __future__ import annotations

from collections import Counter
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from plan_contracts import check_plan_contracts
from seqloader.errors import OptionError
from seqloader.plan import PlanOptions
from seqloader.plan.greedy.distribute import GlobalPlan
from seqloader.plan.indexed.mix import IndexedMix, apportion
from seqloader.plan.indexed.planner import IndexedPlanner
from seqloader.plan.mix import Corpora

pytestmark = pytest.mark.filterwarnings("ignore::seqloader.errors.DataWarning")  # tiny rates

RATES = [0.25, 0.5, 0.7, 1.0, 1.3, 2.0, 2.5, 0.125, 3.0]
ORDERINGS = ["buckets:1", "buckets:3", "laplace", "laplace:.5", "laplace:3"]


def decimal(rate: float) -> tuple[int, int]:
    """The rate as written, from its decimal digits: 0.7 -> (7, 10), 2.5 -> (25, 10)."""
    whole, _, frac = repr(rate).partition(".")
    return int(whole + frac), 10 ** len(frac)


@st.composite
def mixes(draw: st.DrawFn, uneven: tuple[str, ...] = ("split", "pad")) -> dict:
    n_corpora = draw(st.integers(1, 4))
    sizes = draw(st.lists(st.integers(1, 40), min_size=n_corpora, max_size=n_corpora))
    names = [f"c{i}" for i in range(n_corpora)]
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    lengths = rng.integers(1, draw(st.sampled_from([3, 40])) + 1, sum(sizes)).astype(np.int64)
    bounds = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    limit = draw(st.sampled_from([None, 30]))
    keep = np.ones(len(lengths), bool) if limit is None else lengths <= limit
    assume(all(keep[bounds[c] : bounds[c + 1]].any() for c in range(n_corpora)))
    rates = {n: draw(st.sampled_from(RATES)) for n in names if draw(st.booleans()) or n == "c0"}
    options = PlanOptions(
        ordering=draw(st.sampled_from(ORDERINGS)),
        max_seqs=draw(st.one_of(st.none(), st.integers(1, 6))),
        max_frames=draw(st.one_of(st.none(), st.integers(40, 200))),
        max_seq_length=limit,
        partition_epoch=draw(st.integers(1, 3)),
        uneven=draw(st.sampled_from(uneven)),
        seed=draw(st.integers(0, 3)),
        mix=rates,
        planning="indexed",
    )
    planner = IndexedPlanner({"data": lengths}, options, corpora=Corpora(tuple(names), bounds))
    epochs = draw(st.integers(1, 3)) * options.partition_epoch  # whole full epochs
    worlds = [draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)) for _ in range(epochs)]
    cuts = [
        draw(st.lists(st.floats(0, 1), min_size=len(w) - 1, max_size=len(w) - 1)) for w in worlds
    ]
    return {
        "planner": planner,
        "lengths": lengths,
        "keep": keep,
        "bounds": bounds,
        "rates": {n: rates.get(n, 1.0) for n in names},
        "epochs": epochs,
        "worlds": worlds,
        "cuts": cuts,
    }


def per_bucket_sizes(m: dict) -> np.ndarray:
    """Admitted sequences per (bucket, corpus), from the lengths and edges -> int ``[N, C]``."""
    planner: IndexedPlanner = m["planner"]
    bucket = np.searchsorted(planner.bucket_edges, m["lengths"], side="right")
    corpus = np.searchsorted(m["bounds"], np.arange(len(m["lengths"])), side="right") - 1
    out = np.zeros((len(planner.bucket_edges) + 1, len(m["bounds"]) - 1), dtype=np.int64)
    np.add.at(out, (bucket[m["keep"]], corpus[m["keep"]]), 1)
    return out


@settings(max_examples=80, deadline=None)
@given(mixes(), st.integers(1, 12))
def test_per_corpus_counts_are_floor_arithmetic(m: dict, epochs: int) -> None:
    """After F full epochs corpus c has given floor(F·r·N_c) slots, the global mix's count
    (integer arithmetic on the rate's decimal digits); each bucket's stream moves on only, and
    stands at k·N_cb whenever F·r = k is whole; the plans hold exactly those counts."""
    planner: IndexedPlanner = m["planner"]
    mix = planner.mix
    assert isinstance(mix, IndexedMix)
    n_cb = per_bucket_sizes(m)
    np.testing.assert_array_equal(mix.counts, n_cb)
    total = np.zeros(n_cb.shape[1], dtype=np.int64)
    for f in range(epochs):
        total += mix.epoch_counts(f)
        start, end = mix.spans(f)
        assert (end >= start).all()
        if f:
            np.testing.assert_array_equal(start, mix.spans(f - 1)[1])
        if f < 2:  # the plans of the first full epochs hold what the counts say
            held: Counter = Counter()
            for part in range(planner.options.partition_epoch):
                plan = planner.global_plan(f * planner.options.partition_epoch + part + 1, 3)
                b = plan.batches
                held.update(np.searchsorted(m["bounds"], b.seqs[b.real], side="right") - 1)
            assert [held[c] for c in range(len(total))] == list(mix.epoch_counts(f))
    _, end = mix.spans(epochs - 1)
    for c, name in enumerate(mix.corpora.names):
        p, q = decimal(m["rates"][name])
        assert total[c] == epochs * p * int(n_cb[:, c].sum()) // q
        if epochs * p % q == 0:  # whole corpus epochs: every bucket at a corpus epoch boundary
            np.testing.assert_array_equal(end[:, c], epochs * p // q * n_cb[:, c])


@settings(deadline=None)  # no time limit: a loaded machine took 224 ms for one example
@given(st.integers(0, 400), st.lists(st.integers(0, 30), min_size=1, max_size=12))
def test_apportion_is_the_first_positions_in_time_order(total: int, sizes: list[int]) -> None:
    """The divisor method: position j of bucket b at time (j + 1/2) / N_b, the first ``total``
    in (time, bucket) order, listed the slow way."""
    assume(sum(sizes) > 0)
    times = sorted(
        (Fraction(2 * j + 1, 2 * n), b) for b, n in enumerate(sizes) if n for j in range(total + 1)
    )
    want = Counter(b for _, b in times[:total])
    assert apportion(total, sizes) == [want[b] for b in range(len(sizes))]


def test_apportion_orders_times_exactly_where_their_floats_tie() -> None:
    """Buckets of about 2**60 members: times 3 / (2 N_b) that differ yet round to one float
    are ordered exactly (the heap's float key falls to the exact ratio), as by ``Fraction``."""
    a, b = 2**60 + 1, 2**60 + 3
    assert 3 / (2 * a) == 3 / (2 * b) and Fraction(3, 2 * a) > Fraction(3, 2 * b)
    # 3 positions: each bucket's first (times 1/(2N)), then the second of the larger bucket
    assert apportion(3, [a, b]) == [1, 2]
    assert apportion(3, [b, a]) == [2, 1]


# 1-3 full epochs of resume chains per example; the mix's per-corpus counts and shares alone are
# the tests around this one; its contracts chunked: test_plan_indexed_mix_chunks.py; over files:
# test_plan_indexed_files_mix.py
# 25 examples (was 45) draw every ordering, partition_epoch, uneven and rate the 45 drew
@settings(max_examples=25, deadline=None)
@given(mixes())
def test_every_sequence_once_per_corpus_epoch_across_resumes(m: dict) -> None:
    """Consecutive full epochs, each sub-epoch resumed W -> W' -> W'' through JSON: consumed =
    the sub-epoch's slots (as a multiset: the last round is cut per world size); per corpus every sequence exactly once per corpus epoch (the
    mix check); with rate <= 1 no sequence repeats before its corpus epoch is complete."""
    planner: IndexedPlanner = m["planner"]
    mix = planner.mix
    assert isinstance(mix, IndexedMix)
    checked = check_plan_contracts(
        lambda: IndexedPlanner({"data": m["lengths"]}, planner.options, corpora=planner.corpora),
        m["worlds"],
        m["cuts"],
        range(1, m["epochs"] + 1),
    )  # consumed + remaining = the slots, as a multiset (the last round is cut per world size)
    consumed = [checked.consumed[e] for e in range(1, m["epochs"] + 1)]
    seqs, uses = [c.seqs for c in consumed], [c.uses for c in consumed]
    P = planner.options.partition_epoch
    full = m["epochs"] // P
    all_seqs, all_uses = np.concatenate(seqs), np.concatenate(uses)
    check = mix.check(range(full), all_seqs, all_uses)
    assert check.ok, check.problems
    corpus = mix.corpora.corpus_of(all_seqs)
    for c, name in enumerate(mix.corpora.names):
        rate = m["rates"][name]
        mine = all_seqs[corpus == c]
        if rate * full <= 1:  # at most one corpus epoch so far: no repeats
            assert len(np.unique(mine)) == len(mine)
            assert set(all_uses[corpus == c].tolist()) <= {0}
        if rate * full == 1:  # exactly one pass: every admitted sequence once
            assert sorted(mine.tolist()) == mix.members[c].tolist()
        if rate >= 1 and float(rate).is_integer():  # whole passes: each sequence rate x full
            counts = Counter(mine.tolist())
            assert set(counts.values()) == {int(rate) * full}
            assert sorted(counts) == mix.members[c].tolist()


@settings(max_examples=60, deadline=None)
@given(mixes(uneven=("split", "pad", "drop")), st.integers(1, 9), st.integers(1, 3))
def test_shares_alone_equal_the_global_list_with_equal_steps(m: dict, world: int, epoch: int):
    """C2/C3: every rank the same steps; a rank's share computed alone (by a fresh planner, as
    another process would) is its part of the interleaved global list, uses included; the
    epoch's multiset of (sequence, corpus epoch) is the mix's selection (drop: a sub-multiset)."""
    planner: IndexedPlanner = m["planner"]
    checked = check_plan_contracts(
        lambda: IndexedPlanner({"data": m["lengths"]}, planner.options, corpora=planner.corpora),
        [world],
        [],
        [epoch],
    )
    plan, b = checked.plans[epoch, world], checked.batches[epoch, world]
    o = planner.options
    sizes = np.diff(b.bounds)
    if o.max_seqs is not None and len(sizes):
        assert sizes.max() <= o.max_seqs
    if o.max_frames is not None and len(sizes):
        longest = np.maximum.reduceat(m["lengths"][b.seqs], b.bounds[:-1])
        assert (sizes * longest).max() <= o.max_frames
    if o.partition_epoch == 1:
        selection = planner.mix.select(0 if epoch == 1 else epoch - 1)
        want = Counter(zip(selection.seqs.tolist(), selection.uses.tolist()))
        got = Counter(zip(b.seqs[b.real].tolist(), b.uses[b.real].tolist()))
        assert not got - want
        if o.uneven != "drop":
            assert got == want
        assert plan.real_total() + plan.dropped == len(selection.seqs)


@settings(max_examples=40, deadline=None)
@given(mixes())
def test_report_counts_and_progress_come_from_counts(m: dict) -> None:
    """corpus_plan (the report's planned slots and progress) equals counting the sub-epoch's
    order; at a full epoch's end the progress is the stream position over buckets."""
    planner: IndexedPlanner = m["planner"]
    mix = planner.mix
    assert isinstance(mix, IndexedMix)
    P = planner.options.partition_epoch
    done = np.zeros(len(mix.sizes), dtype=np.int64)
    for epoch in range(1, P + 1):
        counted = mix.corpora.counts(planner.sub_epoch_order(epoch))
        done += counted
        for c, (name, slots_, progress) in enumerate(planner.corpus_plan(epoch)):
            assert name == mix.corpora.names[c] and slots_ == counted[c]
            assert progress is not None and progress.used == done[c]
    for c, (_, _, progress) in enumerate(planner.corpus_plan(P)):
        _, end = mix.spans(0)
        assert progress is not None
        assert progress.corpus_epochs_done == int(end[:, c].sum()) / mix.sizes[c]


def test_deterministic_and_keyed_by_seed_and_epoch() -> None:
    lengths = np.random.default_rng(0).integers(1, 200, 3000)
    corpora = Corpora(("a", "b", "c"), np.array([0, 1500, 2500, 3000]))

    def plan(seed: int, epoch: int) -> GlobalPlan:
        options = PlanOptions(
            ordering="buckets:4", max_frames=2000, planning="indexed", seed=seed,
            mix={"a": 0.5, "b": 1.0, "c": 2.5},
        )  # fmt: skip
        return IndexedPlanner({"data": lengths}, options, corpora=corpora).global_plan(epoch, 4)

    one, again = plan(1, 1).batches, plan(1, 1).batches
    np.testing.assert_array_equal(one.seqs, again.seqs)
    np.testing.assert_array_equal(one.uses, again.uses)
    assert not np.array_equal(one.seqs, plan(2, 1).batches.seqs)
    assert not np.array_equal(one.seqs, plan(1, 2).batches.seqs)
    # corpora interleave in batches: most batches hold more than one corpus
    corpus = corpora.corpus_of(one.seqs)
    mixed = [len(set(corpus[a:b].tolist())) > 1 for a, b in zip(one.bounds[:-1], one.bounds[1:])]
    assert np.mean(mixed) > 0.5


def test_uses_count_whole_passes_and_partial_corpus_epochs() -> None:
    """Rate 2.5 over 2 full epochs: corpus epochs 0..4 each exactly once per sequence; the slot
    of corpus epoch k carries k."""
    lengths = (np.arange(120) * 37) % 50 + 1
    corpora = Corpora(("a", "b"), np.array([0, 80, 120]))
    options = PlanOptions(
        ordering="laplace:.4", max_frames=300, planning="indexed", mix={"b": 2.5}, seed=3
    )
    planner = IndexedPlanner({"data": lengths}, options, corpora=corpora)
    got: Counter = Counter()
    for epoch in (1, 2):
        b = planner.global_plan(epoch, 3).batches
        got.update(zip(b.seqs[b.real].tolist(), b.uses[b.real].tolist()))
    b_pairs = {pair: n for pair, n in got.items() if pair[0] >= 80}
    assert set(b_pairs.values()) == {1}
    assert sorted(b_pairs) == [(s, k) for s in range(80, 120) for k in range(5)]
    a_pairs = {pair: n for pair, n in got.items() if pair[0] < 80}
    assert sorted(a_pairs) == [(s, k) for s in range(80) for k in range(2)]


def test_a_corpus_stream_is_kept_when_another_corpus_is_reweighted() -> None:
    """Within the same bucket edges, a corpus' selection depends on its own rate only."""
    lengths = (np.arange(300) * 7919) % 400 + 1
    corpora = Corpora(("a", "b"), np.array([0, 200, 300]))

    def selected(mix: dict) -> list:
        options = PlanOptions(ordering="buckets:5", max_frames=3000, planning="indexed", mix=mix)
        planner = IndexedPlanner({"data": lengths}, options, corpora=corpora)
        sel = planner.mix.select(1)
        return sorted(zip(sel.seqs[sel.seqs < 200].tolist(), sel.uses[sel.seqs < 200].tolist()))

    assert selected({"a": 0.7, "b": 1.0}) == selected({"a": 0.7, "b": 3.0})


def test_mix_under_indexed_planning_options() -> None:
    """buckets:N takes a mix under indexed planning (refused under global planning, with the
    reason); so does files (tests/test_plan_indexed_files_mix.py); a mix needs named corpora
    with admitted sequences."""
    PlanOptions(ordering="buckets:3", mix={"a": 2.0}, planning="indexed")
    with pytest.raises(OptionError, match="planning='indexed'"):
        PlanOptions(ordering="buckets:3", mix={"a": 2.0}, planning="global")
    assert PlanOptions(ordering="buckets:3", mix={"a": 2.0}).resolved_planning == "indexed"
    PlanOptions(ordering="laplace", mix={"a": 2.0}, distribution="files", planning="indexed")
    options = PlanOptions(ordering="laplace", mix={"a": 2.0}, planning="indexed", max_seq_length=5)
    with pytest.raises(OptionError, match="needs named corpora"):
        IndexedPlanner({"data": np.arange(1, 10)}, options)
    corpora = Corpora(("a", "b"), np.array([0, 4, 9]))
    with pytest.raises(OptionError, match="corpus 'b' has no admitted sequences"):
        IndexedPlanner({"data": np.array([1, 2, 3, 4, 9, 9, 9, 9, 9])}, options, corpora=corpora)
    with pytest.raises(OptionError, match="unknown corpus"):
        IndexedPlanner(
            {"data": np.arange(1, 10)},
            PlanOptions(ordering="laplace", mix={"x": 2.0}, planning="indexed"),
            corpora=corpora,
        )


def test_the_check_finds_a_lost_and_a_repeated_use() -> None:
    lengths = (np.arange(60) * 13) % 30 + 1
    corpora = Corpora(("a", "b"), np.array([0, 40, 60]))
    options = PlanOptions(ordering="laplace", max_seqs=4, planning="indexed", mix={"b": 1.5})
    planner = IndexedPlanner({"data": lengths}, options, corpora=corpora)
    seqs, uses = planner.sub_epoch_slots(1)
    assert planner.mix.check([0], seqs, uses).ok
    lost = planner.mix.check([0], seqs[1:], uses[1:])
    assert not lost.ok and "expected" in lost.problems[0]
    twice = planner.mix.check([0], np.append(seqs, seqs[0]), np.append(uses, uses[0]))
    assert not twice.ok and any("twice" in p for p in twice.problems)
    summary = planner.mix.check([0], seqs, uses).summary()
    assert f"b: {int((seqs >= 40).sum())} uses" in summary
