"""A keyed permutation of ``[0, m)`` whose value at any position is computable alone.

numpy's ``Generator.permutation`` is a sequential Fisher-Yates: to know where one element goes, all
``m`` draws are made, and ``m`` int64 values are held. Indexed planning (``seqloader.plan.indexed.planner``)
needs only the members of one rank's batches (about ``1 / world_size`` of the corpus), so it uses
a bijection instead: an alternating Feistel network over a mixed-radix domain of ``2**p * r``
values, the smallest such with ``r = ceil(m / 2**p)`` and ``2**p`` about ``sqrt(m)``, so at most
``m + 2**p`` values (``m = 100``: 104; ``2**20``: exactly). A value is ``(hi, lo)`` with ``lo``
its low ``p`` bits and ``hi < r``; the rounds alternate ``lo ^= F(hi)`` (masked to ``p`` bits)
and ``hi = (hi + G(lo)) mod r`` (``G`` reduced to ``[0, r)``), each invertible, so the network is
a bijection of the domain; the multiply-xorshift round function is keyed per round. It is
restricted to ``[0, m)`` by cycle-walking (a value that lands at or past ``m`` is encrypted
again until it lands inside: a bijection of the smaller domain), which costs about one
encryption a position (the domain is within ``1 + 1/r`` of ``m``). Vectorised in numpy; the round
keys come from a ``SeedSequence``, so the permutation is a pure function of the key words, the
same on every machine.

What it can draw: 6 rounds of keyed 64-bit functions, so at most ``2**384`` of the ``m!``
permutations (a keyed family, not a uniform shuffle); its keys are the seed and what the caller
mixes in (epoch, part, bucket), so seeds and epochs give different orders.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np

#: Feistel rounds (alternating ``lo`` and ``hi`` updates: three of each)
ROUNDS = 6
_MUL1 = np.uint64(0x9E3779B97F4A7C15)
_MUL2 = np.uint64(0xBF58476D1CE4E5B9)
_M64 = (1 << 64) - 1
_U32 = np.uint64(32)
#: up to this many positions the rounds run on Python ints (the same bits): a numpy pass costs
#: about 50 array operations whatever the size, which small buckets pay per call
SMALL = 16
#: a call over at least ``(2**p + r) / _TABLE`` positions evaluates the rounds by lookup tables
#: (each round's function at every ``lo`` and ``hi`` value: ``2**p + r`` entries, about
#: ``2 * sqrt(m)``)
_TABLE = 2
#: from this many positions on, ``evaluate_many`` runs a bijection alone (no per-position keys)
BIG = 1 << 12


@lru_cache(maxsize=4096)
def _round_keys(words: tuple[int, ...]) -> tuple[int, ...]:
    """The round keys of ``words`` (a ``SeedSequence`` costs tens of microseconds; plans ask for
    the same bucket's bijection again on every rank and resume)."""
    state = np.random.SeedSequence(list(words)).generate_state(ROUNDS, np.uint64)
    return tuple(int(k) for k in state)


#: up to this many keys ``round_keys_many`` asks ``_round_keys`` one by one (cached: plans ask
#: for the same streams again on every rank and resume); the array path has a fixed cost of about
#: 0.4 ms, what tens of uncached ``SeedSequence`` calls cost
FEW_KEYS = 16

#: numpy ``SeedSequence``'s constants (its hash of the entropy and of the output words)
_INIT_A, _MULT_A, _INIT_B, _MULT_B = 0x43B0D7E5, 0x931E8875, 0x8B51F9DD, 0x58F38DED
_MIX_L, _MIX_R, _M32 = 0xCA01F9DD, 0x4973F715, 0xFFFFFFFF


def round_keys_many(words: Sequence[Sequence[int]], few: int = FEW_KEYS) -> np.ndarray:
    """The round keys of every key in ``words`` -> uint64 ``[len(words), ROUNDS]``, equal to
    ``SeedSequence(key).generate_state(ROUNDS, uint64)`` (``_round_keys``) for each, computed
    for all keys at once: the sequence's hash constants do not depend on the data, so its
    mixing runs as array operations over the keys (thousands of streams: ~12 us a key alone).
    Keys whose words are not all in ``[0, 2**64)`` or not all as long go one by one, and so do
    up to ``few`` keys.

    >>> round_keys_many([(1, 2), (3, 2**40)])[1].tolist() == list(_round_keys((3, 2**40)))
    True
    """
    out = np.empty((len(words), ROUNDS), dtype=np.uint64)
    if len(words) <= few:  # a few keys: the cached one-key path beats ~200 array operations
        for i, key in enumerate(words):
            out[i] = _round_keys(tuple(int(w) for w in key))
        return out
    try:
        table = np.array(words, dtype=np.uint64)
    except (ValueError, OverflowError):  # ragged, negative or too wide: one by one
        table = np.zeros((0, 0), np.uint64)
    if table.ndim != 2 or table.shape[0] != len(words) or table.shape[1] == 0:
        for i, key in enumerate(words):
            out[i] = _round_keys(tuple(int(w) for w in key))
        return out
    wide = table >> np.uint64(32) != 0  # a word of two 32-bit entropy words (low first)
    if (wide == wide[0]).all():  # one pattern (the usual case): no unique over rows
        patterns, which = wide[:1], np.zeros(len(wide), dtype=np.int64)
    else:
        patterns, which = np.unique(wide, axis=0, return_inverse=True)
        which = which.reshape(-1)
    for p, pattern in enumerate(patterns):
        rows = np.flatnonzero(which == p)
        entropy = []
        for j, two in enumerate(pattern.tolist()):
            entropy.append((table[rows, j] & np.uint64(_M32)).astype(np.uint32))
            if two:
                entropy.append((table[rows, j] >> np.uint64(32)).astype(np.uint32))
        out[rows] = _seed_state(entropy)
    return out


def _seed_state(entropy: list[np.ndarray]) -> np.ndarray:
    """``SeedSequence``'s pool of 4 and its ``2 * ROUNDS`` output words, for many keys at once
    (``entropy``: the keys' 32-bit entropy words, one array per word) -> uint64 ``[keys, ROUNDS]``."""
    h = _INIT_A

    def hashmix(v: np.ndarray) -> np.ndarray:
        nonlocal h
        v = v ^ np.uint32(h)
        h = (h * _MULT_A) & _M32
        v = v * np.uint32(h)
        return v ^ (v >> np.uint32(16))

    def mix(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        r = np.uint32(_MIX_L) * x - np.uint32(_MIX_R) * y
        return r ^ (r >> np.uint32(16))

    zero = np.zeros_like(entropy[0])
    pool = [hashmix(entropy[i] if i < len(entropy) else zero) for i in range(4)]
    for src in range(4):
        for dst in range(4):
            if src != dst:
                pool[dst] = mix(pool[dst], hashmix(pool[src]))
    for src in range(4, len(entropy)):
        for dst in range(4):
            pool[dst] = mix(pool[dst], hashmix(entropy[src]))
    hb = _INIT_B
    state = []
    for i in range(2 * ROUNDS):
        v = pool[i % 4] ^ np.uint32(hb)
        hb = (hb * _MULT_B) & _M32
        v = v * np.uint32(hb)
        state.append((v ^ (v >> np.uint32(16))).astype(np.uint64))
    return np.stack([lo | (hi << np.uint64(32)) for lo, hi in zip(state[0::2], state[1::2])], 1)


def radices(m: int) -> tuple[int, int]:
    """``(p, r)``: the domain of the bijection of ``[0, m)``, ``2**p * r`` values (``lo``: ``p``
    bits, ``hi < r``), with ``2**p`` about ``sqrt(m)`` and ``r = ceil(m / 2**p)``: fewer than
    ``2**p`` values past ``m``.

    >>> radices(100), radices(1 << 20), radices(1)
    ((3, 13), (10, 1024), (0, 1))
    """
    p = (max(int(m), 2) - 1).bit_length() // 2
    return p, max(1, -(-int(m) >> p))


def _mixed(v: np.ndarray) -> np.ndarray:
    """The multiply-xorshift of ``v`` (uint64, in place, wrapping modulo ``2**64``)."""
    v *= _MUL1
    v ^= v >> np.uint64(31)
    v *= _MUL2
    v ^= v >> np.uint64(29)
    return v


def _mixed_int(v: int) -> int:
    """``_mixed`` of one value on Python ints (the same bits)."""
    f = (v * 0x9E3779B97F4A7C15) & _M64
    f ^= f >> 31
    f = (f * 0xBF58476D1CE4E5B9) & _M64
    return f ^ (f >> 29)


def _round_values(
    i: int, v: np.ndarray, key: np.ndarray | np.uint64, mask: np.ndarray | np.uint64, r: np.ndarray
) -> np.ndarray:
    """Round ``i``'s function at ``v`` (uint64): even rounds ``F(hi)`` masked to ``p`` bits
    (``mask``), odd rounds ``G(lo)`` reduced to ``[0, r)`` by its high 32 bits -> uint64."""
    f = _mixed(v + key)  # wraps modulo 2**64, as intended
    if i % 2 == 0:
        return f & mask
    return ((f >> _U32) * r) >> _U32


class Bijection:
    """A keyed permutation of ``range(m)``: ``b(x)`` is where positions ``x`` go (any subset, in
    any order, computed alone).

    >>> b = Bijection(10, [1, 2])
    >>> sorted(b(np.arange(10)).tolist())
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    """

    def __init__(self, m: int, words: Sequence[int]) -> None:
        self.m = int(m)
        self._p, self._r = radices(self.m)
        self._int_keys = _round_keys(tuple(int(w) for w in words))
        self._keys = [np.uint64(k) for k in self._int_keys]
        self._tables: list[np.ndarray] | None = None  # made by the first large call

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """The images of ``x`` (ints in ``[0, m)``, any shape) -> uint64, same shape."""
        size = np.size(x)
        if self._tables is not None or size * _TABLE >= (1 << self._p) + self._r:
            return self._walk_by_tables(np.asarray(x, dtype=np.int64))
        x = np.asarray(x, dtype=np.uint64)
        if size <= SMALL:
            return np.array([self.one(v) for v in x.ravel().tolist()], np.uint64).reshape(x.shape)
        y = self._encrypt(x)
        outside = np.flatnonzero(y >= self.m)
        while len(outside):  # cycle-walking: rarely a second pass (fewer than 2**p values past m)
            y[outside] = self._encrypt(y[outside])
            outside = outside[y[outside] >= self.m]
        return y

    def _walk_by_tables(self, x: np.ndarray) -> np.ndarray:
        """``__call__`` by the round tables (made by the first large call, then used by every
        call: each round one gather and an xor or a modular add), on int64 (``intp``: the
        tables' index type, no conversions)."""
        tables = self._round_tables()
        y = _by_tables(x.ravel(), self._p, self._r, tables)
        outside = np.flatnonzero(y >= self.m)
        while len(outside):  # the few values past m: a pass or two
            z = _by_tables(y[outside], self._p, self._r, tables)
            y[outside] = z
            outside = outside[z >= self.m]
        return y.view(np.uint64).reshape(np.shape(x))

    def one(self, v: int) -> int:
        """The image of the position ``v`` alone, on Python ints (bit for bit ``__call__``'s).

        >>> b = Bijection(100, [1, 2])  # 100 positions: numpy's rounds
        >>> [b.one(v) for v in range(100)] == b(np.arange(100)).tolist()
        True
        """
        p, r = self._p, self._r
        mask = (1 << p) - 1
        while True:  # cycle-walking, as in __call__
            lo, hi = v & mask, v >> p
            for i, key in enumerate(self._int_keys):
                if i % 2 == 0:
                    lo ^= _mixed_int((hi + key) & _M64) & mask
                else:
                    hi = (hi + (((_mixed_int((lo + key) & _M64) >> 32) * r) >> 32)) % r
            v = (hi << p) | lo
            if v < self.m:
                return v

    def _encrypt(self, x: np.ndarray) -> np.ndarray:
        """One encryption of ``x`` (uint64) by the rounds' arithmetic -> uint64."""
        p, r = np.uint64(self._p), np.uint64(self._r)
        mask = np.uint64((1 << self._p) - 1)
        lo, hi = x & mask, x >> p
        for i, key in enumerate(self._keys):
            if i % 2 == 0:
                lo ^= _round_values(i, hi, key, mask, r)
            else:
                hi += _round_values(i, lo, key, mask, r)
                np.minimum(hi, hi - r, out=hi)  # mod r: hi - r wraps past hi when hi < r
        return (hi << p) | lo

    def _round_tables(self) -> list[np.ndarray]:
        """Each round's function at every value of its input (``r`` entries for an even round,
        ``2**p`` for an odd one): a round over many positions is then one lookup and an xor or
        an add, the same bits as ``_encrypt``'s."""
        tables = self._tables
        if tables is None:
            mask, r = np.uint64((1 << self._p) - 1), np.uint64(self._r)
            his, los = np.arange(self._r, dtype=np.uint64), np.arange(1 << self._p, dtype=np.uint64)
            tables = [
                _round_values(i, los if i % 2 else his, key, mask, r).astype(np.intp)
                for i, key in enumerate(self._keys)
            ]
            self._tables = tables
        return tables


def _by_tables(
    x: np.ndarray,
    p: int | np.ndarray,
    r: int | np.ndarray,
    tables: list[np.ndarray],
    rows: tuple[np.ndarray, np.ndarray] | None = None,
) -> np.ndarray:
    """One encryption of ``x`` (int64, ``0 <= x < 2**p * r``) by the round tables -> int64 (a
    new array): each round one gather into a reused buffer and an xor, or an add and a
    reduction, in place. One bijection (``Bijection._walk_by_tables``): ``p`` and ``r`` ints,
    ``rows`` None, the tables its own; a family (``Bijections._walk_by_tables``): ``p`` and
    ``r`` each position's bijection's, and ``rows`` its first entries in the family's even and
    odd rounds' tables (gathered at ``row + hi`` and ``row + lo``)."""
    lo = x & ((1 << p) - 1)
    hi = x >> p
    f = np.empty_like(lo)
    at = f if rows is None else np.empty_like(lo)  # a family's gather index
    wrapped = np.empty_like(lo)
    for i, table in enumerate(tables):
        if i % 2 == 0:
            index = hi if rows is None else np.add(rows[0], hi, out=at)
            np.take(table, index, out=f, mode="clip")  # in range: no bounds checks
            lo ^= f
        else:
            index = lo if rows is None else np.add(rows[1], lo, out=at)
            np.take(table, index, out=f, mode="clip")
            hi += f
            np.subtract(hi, r, out=wrapped)  # mod r: negative (huge unsigned) when hi < r
            np.minimum(hi.view(np.uint64), wrapped.view(np.uint64), out=hi.view(np.uint64))
    hi <<= p
    hi |= lo
    return hi


def evaluate_many(
    sizes: Sequence[int],
    words: Sequence[Sequence[int]],
    which: np.ndarray,
    x: np.ndarray,
    big: int = BIG,
) -> np.ndarray:
    """``Bijection(sizes[g], words[g])(x[i])`` with ``g = which[i]``, for every ``i``, in one
    vectorised pass -> uint64, bit for bit the one-bijection answers. Thousands of small
    bijections (a stream per length and corpus) cost one pass, not one numpy pass each; a
    bijection with ``big`` positions or more runs alone on its own (scalar) keys, which saves
    the per-position gathers of the keys (``Bijections``, made for one call).

    >>> x, which = np.array([3, 0, 7, 1]), np.array([0, 1, 1, 0])
    >>> got = evaluate_many([5, 9], [(1, 2), (3,)], which, x)
    >>> got.tolist() == [Bijection(5, (1, 2)).one(3), Bijection(9, (3,)).one(0),
    ...                  Bijection(9, (3,)).one(7), Bijection(5, (1, 2)).one(1)]
    True
    """
    return Bijections(sizes, words)(which, x, big)


def _radices_many(m: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``radices`` of every size of ``m`` (int64, below ``2**53``) -> (p, r) int64 each: the
    bit lengths by ``frexp``'s exponent (exact: such integers are exact doubles).

    >>> [a.tolist() for a in _radices_many(np.array([100, 1 << 20, 1, 0]))]
    [[3, 10, 0, 0], [13, 1024, 1, 1]]
    """
    bits = np.frexp((np.maximum(m, 2) - 1).astype(np.float64))[1].astype(np.int64)
    p = bits // 2
    return p, np.maximum(1, -(-m >> p))


def _one_or_all(v: np.ndarray, which: np.ndarray) -> int | np.ndarray:
    """``v[which]``, or the one value when all of ``v`` are equal (a scalar: no gathers)."""
    if len(v) and bool((v == v[0]).all()):
        return int(v[0])
    return v.take(which)


class Bijections:
    """A family of keyed bijections ``Bijection(sizes[g], words[g])`` evaluated together, their
    round keys derived once (``round_keys_many``): for callers that ask the same family block
    after block (``evaluate_many`` is one call of one).

    >>> family = Bijections([5, 9], [(1, 2), (3,)])
    >>> family(np.array([1, 0]), np.array([7, 3])).tolist() == [Bijection(9, (3,)).one(7),
    ...                                                         Bijection(5, (1, 2)).one(3)]
    True
    """

    def __init__(self, sizes: Sequence[int], words: Sequence[Sequence[int]]) -> None:
        self.sizes = [int(s) for s in sizes]
        self.words = words
        self._m = np.array(self.sizes, dtype=np.int64)
        self._p, self._r = _radices_many(self._m)
        self._keys = np.ascontiguousarray(round_keys_many(words).T)  # [ROUNDS, groups]

    def __call__(self, which: np.ndarray, x: np.ndarray, big: int = BIG) -> np.ndarray:
        """``Bijection(sizes[g], words[g])(x[i])`` with ``g = which[i]`` -> uint64."""
        which = np.asarray(which, dtype=np.int64)
        x = np.asarray(x, dtype=np.int64)
        sizes = self.sizes
        if len(sizes) > 1 and len(x) >= big:
            alone = np.flatnonzero(np.bincount(which, minlength=len(sizes)) >= big)
            if len(alone):
                y = np.empty(len(x), dtype=np.uint64)
                rest = np.ones(len(x), dtype=bool)
                for g in alone.tolist():
                    sel = np.flatnonzero(which == g)
                    y[sel] = Bijection(sizes[g], self.words[g])(x.take(sel))
                    rest[sel] = False
                left = np.flatnonzero(rest)
                y[left] = self(which.take(left), x.take(left), len(x) + 1)
                return y
        if int(((1 << self._p) + self._r).sum()) <= len(x):  # the tables no more than asked
            return self._walk_by_tables(which, x)
        p, r = _one_or_all(self._p, which), _one_or_all(self._r, which)
        one = len(sizes) == 1  # one bijection: scalar keys
        keys = [np.uint64(row[0]) if one else row.take(which) for row in self._keys]
        m = self._m.take(which)
        y = _encrypt_many(x, p, r, keys)
        outside = np.flatnonzero(y >= m)
        while len(outside):  # cycle-walking, as in Bijection.__call__
            sub = which.take(outside)
            z = _encrypt_many(
                y.take(outside),
                p if isinstance(p, int) else p.take(outside),
                r if isinstance(r, int) else r.take(outside),
                keys if one else [row.take(sub) for row in self._keys],
            )
            y[outside] = z
            outside = outside[z >= m.take(outside)]
        return y.view(np.uint64)

    def _walk_by_tables(self, which: np.ndarray, x: np.ndarray) -> np.ndarray:
        """``__call__`` by the family's round tables (each round's function at every input
        value of every bijection: ``sum(2**p + r)`` entries, no more than the positions
        asked): each round is then a gather and an xor or an add per position, where
        ``_encrypt_many`` gathers the position's round key and runs the multiply-xorshift
        (``sort_bin_shuffle_x2``'s bins of a few hundred positions). The same bits; nothing
        kept between calls."""
        p, r = self._p, self._r
        lows = 1 << p
        starts = [np.cumsum(n) - n for n in (r, lows)]  # each bijection's rows (even, odd)
        inputs, owner = [], []
        for n, s in zip((r, lows), starts):
            g = np.repeat(np.arange(len(n)), n)
            owner.append(g)
            inputs.append((np.arange(int(n.sum()), dtype=np.int64) - s[g]).astype(np.uint64))
        mask_of, r_of = (lows - 1).astype(np.uint64), r.astype(np.uint64)
        tables = []
        for i, key in enumerate(self._keys):  # [groups] each round's keys
            g = owner[i % 2]
            tables.append(
                _round_values(i, inputs[i % 2], key[g], mask_of[g], r_of[g]).astype(np.intp)
            )
        rows = (starts[0].take(which), starts[1].take(which))
        pw, rw = _one_or_all(p, which), _one_or_all(r, which)
        m = self._m.take(which)
        y = _by_tables(x, pw, rw, tables, rows)
        outside = np.flatnonzero(y >= m)
        while len(outside):  # cycle-walking, as in Bijection.__call__
            z = _by_tables(
                y.take(outside),
                pw if isinstance(pw, int) else pw.take(outside),
                rw if isinstance(rw, int) else rw.take(outside),
                tables,
                (rows[0].take(outside), rows[1].take(outside)),
            )
            y[outside] = z
            outside = outside[z >= m.take(outside)]
        return y.view(np.uint64)


def _encrypt_many(
    x: np.ndarray,
    p: int | np.ndarray,
    r: int | np.ndarray,
    keys: Sequence[np.ndarray | np.uint64],
) -> np.ndarray:
    """``Bijection._encrypt`` with each element's own ``p``, ``r`` and round keys (scalars where
    they are one for all) on int64 -> int64."""
    u = np.asarray(x, dtype=np.int64).view(np.uint64)
    pu = np.uint64(p) if isinstance(p, int) else np.asarray(p).astype(np.uint64)
    ru = np.uint64(r) if isinstance(r, int) else np.asarray(r).astype(np.uint64)
    mask = (np.uint64(1) << pu) - np.uint64(1)
    lo, hi = u & mask, u >> pu
    for i, key in enumerate(keys):
        if i % 2 == 0:
            lo ^= _round_values(i, hi, key, mask, ru)
        else:
            hi += _round_values(i, lo, key, mask, ru)
            np.minimum(hi, hi - ru, out=hi)  # mod r, as in Bijection._encrypt
    return ((hi << pu) | lo).view(np.int64)
