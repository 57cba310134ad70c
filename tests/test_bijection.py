"""The keyed permutation of indexed planning (``seqloader.plan.indexed.bijection``) computes a few
positions on Python ints and many with numpy: both give the same images, bit for bit, so a plan
does not depend on how many positions a bucket's draw asks for at once (plans are pinned by the
golden digests of ``test_plan_indexed``)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from seqloader.plan.indexed.bijection import (
    FEW_KEYS,
    ROUNDS,
    SMALL,
    Bijection,
    Bijections,
    evaluate_many,
    radices,
    round_keys_many,
)


@settings(max_examples=80, deadline=None)
@given(
    st.integers(1, 5000),
    st.lists(st.integers(0, 2**63 - 1), min_size=1, max_size=4),
    st.data(),
)
def test_python_ints_and_numpy_give_the_same_images(m: int, words: list[int], data) -> None:
    b = Bijection(m, words)
    x = np.asarray(data.draw(st.lists(st.integers(0, m - 1), min_size=SMALL + 1, max_size=60)))
    many = b(x)  # numpy's rounds and cycle-walking
    assert many.dtype == np.uint64 and (many < m).all()
    assert [b.one(v) for v in x.tolist()] == many.tolist()
    for k in range(0, len(x), SMALL):  # SMALL or fewer at once: Python ints
        np.testing.assert_array_equal(b(x[k : k + SMALL]), many[k : k + SMALL])
    np.testing.assert_array_equal(b(x[:6].reshape(2, 3)), many[:6].reshape(2, 3))  # any shape
    assert b(x[:0]).shape == (0,)


def families(largest: int, most: int) -> st.SearchStrategy[list]:
    """Families of keyed bijections: ``(size, key words)`` each, sizes up to ``largest``."""
    keyed = st.tuples(st.integers(1, largest), st.lists(st.integers(0, 2**63 - 1), max_size=3))
    return st.lists(keyed, min_size=1, max_size=most)


@settings(max_examples=40, deadline=None)
@given(families(3000, 6), st.data())
def test_many_bijections_at_once_give_each_ones_images(keyed: list, data) -> None:
    """``evaluate_many`` (the mix's partial corpus epochs of every stream in one pass) is each
    bijection's own answer at every position, whatever the mixture and order of positions."""
    which = np.asarray(
        data.draw(st.lists(st.integers(0, len(keyed) - 1), min_size=0, max_size=80)), np.int64
    )
    x = np.array([data.draw(st.integers(0, keyed[g][0] - 1)) for g in which.tolist()], np.int64)
    big = data.draw(st.sampled_from([1, 8, 1 << 12]))  # bijections with this many run alone
    got = evaluate_many([m for m, _ in keyed], [w for _, w in keyed], which, x, big)
    assert got.dtype == np.uint64 and got.shape == x.shape
    assert got.tolist() == [Bijection(*keyed[g]).one(v) for g, v in zip(which.tolist(), x.tolist())]


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.lists(st.integers(0, 2**64 - 1), min_size=0, max_size=5),
        min_size=1,
        max_size=8,
    ),
    st.sampled_from([0, FEW_KEYS]),
)
def test_round_keys_of_many_keys_are_each_keys_own(keys: list, few: int) -> None:
    """``round_keys_many`` (every stream's round keys at once, or a few one by one) equals
    numpy's ``SeedSequence`` per key, for ragged keys, 0, and words of one or two 32-bit halves."""
    want = [np.random.SeedSequence(k).generate_state(ROUNDS, np.uint64).tolist() for k in keys]
    assert round_keys_many(keys, few).tolist() == want


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 3000), st.lists(st.integers(0, 2**63 - 1), min_size=1, max_size=3))
def test_round_tables_give_the_rounds_images(m: int, words: list[int]) -> None:
    """A call over many positions per half value evaluates the rounds by lookup tables: the
    same images as the arithmetic rounds (a few positions) and the Python ints."""
    b = Bijection(m, words)
    every = b(np.tile(np.arange(m), 2))[:m]  # enough for the tables (2 * sqrt(m) entries)
    assert b._tables is not None  # the large call made them
    assert sorted(every.tolist()) == list(range(m))
    few = np.concatenate([b(np.arange(k, min(k + 40, m))) for k in range(0, m, 40)])
    np.testing.assert_array_equal(every, few)
    assert [b.one(v) for v in range(min(m, 50))] == every[:50].tolist()


@settings(max_examples=12, deadline=None)
@given(families(200, 5), st.randoms(use_true_random=False))
def test_a_family_of_small_bijections_by_round_tables_gives_each_ones_images(keyed, rnd) -> None:
    """A family asked at no fewer positions than its round tables hold
    (``sort_bin_shuffle_x2``'s bins) evaluates by those tables: every bijection's own images at
    every position, in any order."""
    family = Bijections([m for m, _ in keyed], [w for _, w in keyed])
    which = np.concatenate([np.full(m, g) for g, (m, _) in enumerate(keyed)]).astype(np.int64)
    x = np.concatenate([np.arange(m) for m, _ in keyed]).astype(np.int64)
    entries = int(((1 << family._p) + family._r).sum())
    reps = -(-entries // len(x))  # enough positions for the tables' path
    which, x = np.tile(which, reps), np.tile(x, reps)
    mixed = list(range(len(x)))
    rnd.shuffle(mixed)
    which, x = which[mixed], x[mixed]
    assert entries <= len(x)
    got = family(which, x, big=len(x) + 1)
    assert got.dtype == np.uint64
    want = {g: Bijection(*keyed[g]) for g in range(len(keyed))}
    assert got.tolist() == [want[g].one(v) for g, v in zip(which.tolist(), x.tolist())]


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 3000), st.lists(st.integers(0, 2**63 - 1), min_size=1, max_size=3))
def test_the_domain_is_the_positions_and_at_most_a_root_more(m: int, words: list[int]) -> None:
    """The network's domain (``radices``) holds ``m`` and fewer than ``2**p <= sqrt(2m)`` values
    more (cycle-walking: about one encryption a position), and the bijection is one of exactly
    ``[0, m)``."""
    p, r = radices(m)
    assert m <= (r << p) < m + (1 << p) and (1 << (2 * p)) <= max(2 * m, 1)
    assert sorted(Bijection(m, words)(np.arange(m)).tolist()) == list(range(m))


@settings(max_examples=20, deadline=None)
@given(st.integers(8, 2000), st.integers(0, 2**32))
def test_keys_give_different_orders(m: int, seed: int) -> None:
    """Another key word (seed, epoch, part) gives another order: the family is keyed, not one
    order relabelled."""
    x = np.arange(m)
    one, other = Bijection(m, [seed, 1])(x), Bijection(m, [seed, 2])(x)
    assert one.tolist() != other.tolist()
    assert Bijection(m, [seed + 1, 1])(x).tolist() != one.tolist()
