"""Length variants: each sequence has ``F`` versions of known lengths (speed perturbation: one per
factor), and every full epoch plans each sequence at one of them, drawn here at planning time.

Why planning draws it: a batch planned on the unperturbed lengths overflows when a worker later
draws a slow factor, and one planned on the slowest factor pads every other one. When the draw is
a pure function of (seed, full epoch, sequence index), the plan knows every length exactly, and the
worker that reads the sequence computes the same variant from the same three numbers: the same for
any worker count, rank count, and after a resume.

The draw is a keyed hash, vectorised over the sequences (``variant_of``): building one numpy
``Generator`` per sequence costs ~20 us, 20 s per epoch for a million utterances. Keyed by the
*full* epoch, because the full epoch's order (sorted by the drawn lengths) is made before it is cut
into sub-epochs.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from seqloader.errors import OptionError
from seqloader.plan.seeding import PURPOSE_VARIANTS

_M1 = np.uint64(0xBF58476D1CE4E5B9)  # SplitMix64's finaliser constants
_M2 = np.uint64(0x94D049BB133111EB)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """SplitMix64's finaliser, in place on uint64 (a bijection with full avalanche). An array
    reuses one scratch array for its three shifts (each a fresh array of its size otherwise)."""
    if isinstance(x, np.ndarray) and x.ndim:
        t = x >> np.uint64(30)
        x ^= t
        x *= _M1
        x ^= np.right_shift(x, np.uint64(27), out=t)
        x *= _M2
        x ^= np.right_shift(x, np.uint64(31), out=t)
        return x
    x ^= x >> np.uint64(30)
    x *= _M1
    x ^= x >> np.uint64(27)
    x *= _M2
    x ^= x >> np.uint64(31)
    return x


def variant_of(seed: int, full_epoch: int, indices: np.ndarray, count: int) -> np.ndarray:
    """The variant (``0 <= v < count``) of sequences ``indices`` in 0-based ``full_epoch`` ->
    int64, same shape: uniform, independent across sequences and epochs, a pure function of its
    arguments (the bias of the final modulo is below ``count / 2**64``).

    >>> v = variant_of(1, 0, np.arange(6000), 3)
    >>> np.bincount(v).tolist()  # about 2000 each
    [2011, 1983, 2006]
    >>> bool((variant_of(1, 0, np.arange(5, 9), 3) == v[5:9]).all())  # any subset, alone
    True
    """
    key = np.random.SeedSequence([seed, PURPOSE_VARIANTS, full_epoch]).generate_state(2, np.uint64)
    with np.errstate(over="ignore"):
        x = np.asarray(indices, dtype=np.int64).astype(np.uint64) ^ key[0]
        x = splitmix64(x)
        x ^= key[1]
        x = splitmix64(x)
    return (x % np.uint64(count)).astype(np.int64)


@dataclass(frozen=True)
class LengthVariants:
    """The lengths of every variant of every sequence, for the keys whose length varies
    (``lengths``: key -> int64 ``[F, n]``); ``labels`` name the variants (``F`` of them) in
    messages. The source's own lengths of these keys must be the longest variant's (admission,
    the "fits no batch" check and every other reader see a bound that holds in every epoch).

    >>> lv = LengthVariants({"audio": np.array([[10, 20], [9, 18]])}, ("0.9", "1.0"))
    >>> lv.at(7, 0, {"audio": np.array([10, 20]), "text": np.array([3, 4])})["text"].tolist()
    [3, 4]
    """

    lengths: Mapping[str, np.ndarray]
    labels: tuple[str, ...]

    def __post_init__(self) -> None:
        count = len(self.labels)
        if count < 1 or not self.lengths:
            raise OptionError("LengthVariants: expected >= 1 variant and >= 1 varying key")
        sizes = {np.shape(v) for v in self.lengths.values()}
        if len(sizes) != 1 or len(next(iter(sizes))) != 2 or next(iter(sizes))[0] != count:
            raise OptionError(
                f"LengthVariants: got lengths of shapes {sorted(sizes)}, expected one "
                f"[{count}, n] array per key ({count} labels)"
            )

    @property
    def count(self) -> int:
        return len(self.labels)

    @property
    def size(self) -> int:
        """Sequences ``n``."""
        return int(np.shape(next(iter(self.lengths.values())))[1])

    def draw(self, seed: int, full_epoch: int, indices: np.ndarray) -> np.ndarray:
        """The variant of ``indices`` in ``full_epoch`` (``variant_of``)."""
        return variant_of(seed, full_epoch, indices, self.count)

    def at(
        self, seed: int, full_epoch: int, base: Mapping[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        """Every key's lengths in ``full_epoch`` (int64 ``[n]``): the drawn variant's for the
        varying keys, ``base`` (the source's) for the others."""
        n = self.size
        v = self.draw(seed, full_epoch, np.arange(n, dtype=np.int64))
        rows = np.arange(n, dtype=np.int64)
        return {
            k: np.asarray(self.lengths[k], dtype=np.int64)[v, rows]
            if k in self.lengths
            else np.asarray(base[k], dtype=np.int64)
            for k in base
        }

    def longest(self, key: str) -> np.ndarray:
        """The longest variant of ``key`` per sequence (int64 ``[n]``)."""
        return np.asarray(self.lengths[key], dtype=np.int64).max(axis=0)

    def digest(self) -> bytes:
        """What the plan fingerprint adds: the variants' names (their lengths follow from the
        source, whose fingerprint covers its options)."""
        return b"variants" + repr(self.labels).encode()


#: ``refuse_clashes``' words for options that cannot follow per-epoch lengths
VARIANTS_REFUSED = (
    "length variants (planned speed perturbation) are",
    "each epoch's lengths are drawn per sequence and batched greedily in one global order. Use "
    "planning='global' without these options, or plan on the slowest factor "
    "(AudioSource(..., min_speed=...)) with an on-the-fly transform",
)
