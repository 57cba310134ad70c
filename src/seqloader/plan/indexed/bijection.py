"""A keyed permutation of ``[0, m)`` whose value at any position is computable alone.

numpy's ``Generator.permutation`` is a sequential Fisher-Yates: to know where one element goes, all
``m`` draws are made, and ``m`` int64 values are held. Indexed planning (``seqloader.plan.indexed.planner``)
needs only the members of one rank's batches (about ``1 / world_size`` of the corpus), so it uses
a bijection instead: a balanced Feistel network on ``2 * h`` bits (``4**h >= m``, so at most 4x
the domain) with a multiply-xorshift round function, restricted to ``[0, m)`` by cycle-walking
(a value that lands at or past ``m`` is encrypted again until it lands inside: a bijection of the
smaller domain). Vectorised in numpy ``uint64``; the round keys come from a ``SeedSequence``, so
the permutation is a pure function of the key words, the same on every machine.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np

#: Feistel rounds: 6 balanced rounds of a good round function pass the usual mixing tests
ROUNDS = 6
_MUL1 = np.uint64(0x9E3779B97F4A7C15)
_MUL2 = np.uint64(0xBF58476D1CE4E5B9)
_M64 = (1 << 64) - 1
#: up to this many positions the rounds run on Python ints (the same bits): a numpy pass costs
#: about 50 array operations whatever the size, which small buckets pay per call
SMALL = 16
#: a call over at least this many positions per half value evaluates the rounds by lookup tables
_TABLE = 4
#: from this many positions on, ``evaluate_many`` runs a bijection alone (no per-position keys)
BIG = 1 << 12
#: ``Bijections`` whose halves are all at most this many bits evaluate by round tables (where
#: the tables are no more entries than the positions asked)
GROUP_HALF = 8
#: positions still outside after a cycle-walking pass by tables that walk on Python ints (a
#: pass costs about what a few positions' walks do; the last few need as many passes as the rest)
TAIL = 4


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


class Bijection:
    """A keyed permutation of ``range(m)``: ``b(x)`` is where positions ``x`` go (any subset, in
    any order, computed alone).

    >>> b = Bijection(10, [1, 2])
    >>> sorted(b(np.arange(10)).tolist())
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    """

    def __init__(self, m: int, words: Sequence[int]) -> None:
        self.m = int(m)
        bits = max(2, (max(self.m, 2) - 1).bit_length())
        self._half = (bits + 1) // 2  # bits per Feistel half
        self._mask = np.uint64((1 << self._half) - 1)
        self._int_keys = _round_keys(tuple(int(w) for w in words))
        self._keys = [np.uint64(k) for k in self._int_keys]
        self._tables: list[np.ndarray] | None = None  # made by the first large call

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """The images of ``x`` (ints in ``[0, m)``, any shape) -> uint64, same shape."""
        if self._tables is not None or np.size(x) >= _TABLE * (1 << self._half):
            return self._walk_by_table(np.asarray(x, dtype=np.int64))
        x = np.asarray(x, dtype=np.uint64)
        if x.size <= SMALL:
            return np.array([self.one(v) for v in x.ravel().tolist()], np.uint64).reshape(x.shape)
        y = self._encrypt(x)
        outside = np.flatnonzero(y >= self.m)
        while len(outside):  # cycle-walking: at most a few passes (the domain is < 4m)
            y[outside] = self._encrypt(y[outside])
            outside = outside[y[outside] >= self.m]
        return y

    def _walk_by_table(self, x: np.ndarray) -> np.ndarray:
        """``__call__`` by the round tables (made by the first large call, then used by every
        call: a cycle-walking pass over the few positions still outside costs a dozen array
        operations, not fifty), on int64 (``intp``: the tables' index type, no conversions);
        the last ``TAIL`` positions still outside walk on Python ints (``one``, from where they
        are: the walk goes on by encrypting)."""
        tables = self._round_tables()
        y = _by_tables(x.ravel(), self._half, tables)
        outside = np.flatnonzero(y >= self.m)
        while len(outside) > TAIL:  # the domain is < 4m: most positions land within a pass or two
            z = _by_tables(y[outside], self._half, tables)
            y[outside] = z
            outside = outside[z >= self.m]
        if len(outside):
            y[outside] = [self.one(v) for v in y[outside].tolist()]
        return y.view(np.uint64).reshape(np.shape(x))

    def one(self, v: int) -> int:
        """The image of the position ``v`` alone, on Python ints (bit for bit ``__call__``'s).

        >>> b = Bijection(100, [1, 2])  # 100 positions: numpy's rounds
        >>> [b.one(v) for v in range(100)] == b(np.arange(100)).tolist()
        True
        """
        h, mask = self._half, (1 << self._half) - 1
        while True:  # cycle-walking, as in __call__
            left, right = v >> h, v & mask
            for key in self._int_keys:
                f = ((right + key) * 0x9E3779B97F4A7C15) & _M64
                f ^= f >> 31
                f = (f * 0xBF58476D1CE4E5B9) & _M64
                f ^= f >> 29
                left, right = right, left ^ (f & mask)
            v = (left << h) | right
            if v < self.m:
                return v

    def _encrypt(self, x: np.ndarray) -> np.ndarray:
        h = np.uint64(self._half)
        left, right = x >> h, x & self._mask
        for key in self._keys:
            f = right + key  # wraps modulo 2**64, as intended
            f *= _MUL1
            f ^= f >> np.uint64(31)
            f *= _MUL2
            f ^= f >> np.uint64(29)
            f &= self._mask
            left, right = right, left ^ f
        return (left << h) | right

    def _round_tables(self) -> list[np.ndarray]:
        """Each round's function at every half value (``2**half`` entries each): a round over
        many positions is then one lookup and one xor, the same bits as ``_encrypt``'s."""
        tables = self._tables
        if tables is None:
            r = np.arange(1 << self._half, dtype=np.uint64)
            tables = []
            for key in self._keys:
                f = r + key
                f *= _MUL1
                f ^= f >> np.uint64(31)
                f *= _MUL2
                f ^= f >> np.uint64(29)
                f &= self._mask
                tables.append(f.astype(np.intp))
            self._tables = tables
        return tables


def _by_tables(
    x: np.ndarray, half: int | np.ndarray, tables: list[np.ndarray], row: np.ndarray | None = None
) -> np.ndarray:
    """One encryption of ``x`` (int64, ``0 <= x < 4**half``) by the round tables -> int64 (a new
    array): each round one gather into a reused buffer and an xor in place. One bijection
    (``Bijection._walk_by_table``): ``half`` an int, ``row`` None, the tables its own; a family
    (``Bijections._walk_by_tables``): ``half`` each position's bijection's width and ``row`` its
    first entry in the family's tables (gathered at ``row + right``)."""
    left = x >> half
    right = x & ((1 << half) - 1)
    f = np.empty_like(left)
    at = f if row is None else np.empty_like(left)  # a family's gather index (row + right)
    for table in tables:
        index = right if row is None else np.add(row, right, out=at)
        np.take(table, index, out=f, mode="clip")  # in range (masked): no bounds checks
        left ^= f
        left, right = right, left
    left <<= half
    left |= right
    return left


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
        self._m = np.array(self.sizes, dtype=np.uint64)
        bits = _bit_lengths(np.maximum(self._m.astype(np.int64), 2) - 1)
        self._half = (np.maximum(bits, 2) + 1) // 2
        self._mask = (np.uint64(1) << self._half) - np.uint64(1)
        self._keys = np.ascontiguousarray(round_keys_many(words).T)  # [ROUNDS, groups]

    def __call__(self, which: np.ndarray, x: np.ndarray, big: int = BIG) -> np.ndarray:
        """``Bijection(sizes[g], words[g])(x[i])`` with ``g = which[i]`` -> uint64."""
        which = np.asarray(which, dtype=np.int64)
        x = np.asarray(x, dtype=np.uint64)
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
        half, mask, keys = self._half, self._mask, self._keys
        hmax = int(half.max()) if len(sizes) else 0
        if hmax <= GROUP_HALF and len(sizes) << hmax <= len(x):  # small domains: by tables
            return self._walk_by_tables(which, x, hmax)
        y = _encrypt_many(x, half, mask, keys, which)
        outside = np.flatnonzero(y >= self._m.take(which))
        while len(outside):  # cycle-walking, as in Bijection.__call__
            g = which.take(outside)
            y[outside] = _encrypt_many(y.take(outside), half, mask, keys, g)
            outside = outside[y.take(outside) >= self._m.take(g)]
        return y

    def _walk_by_tables(self, which: np.ndarray, x: np.ndarray, hmax: int) -> np.ndarray:
        """``__call__`` where every bijection's half is at most ``hmax <= GROUP_HALF`` bits
        and the family's round tables (each round's function at every half value of every
        bijection: ``groups * 2**hmax`` entries a round) are no more than the positions asked:
        each round is then a gather and an xor per position, where ``_encrypt_many`` gathers
        the element's round key and runs the multiply-xorshift (``sort_bin_shuffle_x2``'s bins
        of a few hundred positions). The same bits; nothing kept between calls."""
        v = np.arange(1 << hmax, dtype=np.uint64)
        tables = []
        for key in self._keys:  # [groups] each round's keys
            f = v[None, :] + key[:, None]  # wraps modulo 2**64, as in _encrypt_many
            f *= _MUL1
            f ^= f >> np.uint64(31)
            f *= _MUL2
            f ^= f >> np.uint64(29)
            f &= self._mask[:, None]
            tables.append(f.astype(np.intp).ravel())
        half, m = self._half.astype(np.int64), self._m.astype(np.int64)
        one = bool((half == hmax).all())  # one width (bins of about one size): a scalar shift

        def width(g: np.ndarray) -> int | np.ndarray:
            return hmax if one else half.take(g)

        y = _by_tables(x.astype(np.int64), width(which), tables, which << hmax)
        outside = np.flatnonzero(y >= m.take(which))
        while len(outside):  # cycle-walking, as in Bijection.__call__
            g = which.take(outside)
            z = _by_tables(y.take(outside), width(g), tables, g << hmax)
            y[outside] = z
            outside = outside[z >= m.take(g)]
        return y.view(np.uint64)


def _bit_lengths(v: np.ndarray) -> np.ndarray:
    """``int.bit_length`` of each of ``v`` (int64, ``0 <= v < 2**53``) -> uint64: ``frexp``'s
    exponent (exact: such integers are exact doubles)."""
    return np.frexp(v.astype(np.float64))[1].astype(np.uint64)


def _encrypt_many(
    x: np.ndarray, half: np.ndarray, mask: np.ndarray, keys: np.ndarray, which: np.ndarray
) -> np.ndarray:
    """``Bijection._encrypt`` with each element's own half width, mask and round keys
    (``keys``: ``[ROUNDS, groups]``); one group's are scalars (no gathers)."""
    if len(half) == 1:
        h, msk, rounds = half[0], mask[0], list(keys[:, 0])
    else:
        h, msk, rounds = half.take(which), mask.take(which), [row.take(which) for row in keys]
    left, right = x >> h, x & msk
    for key in rounds:
        f = right + key  # wraps modulo 2**64, as intended
        f *= _MUL1
        f ^= f >> np.uint64(31)
        f *= _MUL2
        f ^= f >> np.uint64(29)
        f &= msk
        left, right = right, left ^ f
    return (left << h) | right
