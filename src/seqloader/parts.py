"""Which part holds an index, for index spaces cut into consecutive parts (files, corpora, runs).

A source of several files, a concatenation of corpora, a plan of bucket runs: each lays its parts
out as ascending ``bounds`` (part ``p`` holds ``[bounds[p], bounds[p + 1])``). ``part_of`` answers
"which part holds index i" for all of them, and ``by_part`` / ``scatter`` read per part and put
the results back in the asked order. numpy only, so every layer may use it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import TypeVar, cast

import numpy as np

T = TypeVar("T")


def part_of(bounds: np.ndarray, indices: np.ndarray | Sequence[int] | int) -> np.ndarray:
    """The part holding each index: ``bounds`` ascending (``[P + 1]``, or the parts' starts
    ``[P]``) -> int64 like ``indices``.

    >>> part_of(np.array([0, 3, 5, 9]), [0, 2, 3, 8])
    array([0, 0, 1, 2])
    """
    return np.searchsorted(bounds, indices, side="right") - 1


def by_part(
    bounds: np.ndarray, indices: np.ndarray
) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """Group ``indices`` by part, parts in ascending order: ``(part, positions in indices, indices
    local to the part)``.

    >>> groups = by_part(np.array([0, 3, 5]), np.array([4, 0, 3]))
    >>> [(p, pos.tolist(), local.tolist()) for p, pos, local in groups]
    [(0, [1], [0]), (1, [0, 2], [1, 0])]
    """
    parts = part_of(bounds, indices)
    for p in np.unique(parts).tolist():
        pos = np.flatnonzero(parts == p)
        yield p, pos, indices[pos] - bounds[p]


def scatter(n: int, groups: Iterable[tuple[np.ndarray, Sequence[T]]]) -> list[T]:
    """``n`` results in the asked order from ``(positions, results)`` groups that together fill
    every position once (what ``by_part`` readers return).

    >>> scatter(3, [(np.array([1]), ["b"]), (np.array([0, 2]), ["a", "c"])])
    ['a', 'b', 'c']
    """
    out: list[T] = [cast(T, None)] * n  # every position is filled below (checked)
    filled = 0
    for pos, items in groups:
        for p, item in zip(pos.tolist(), items, strict=True):
            out[p] = item
        filled += len(pos)
    if filled != n:
        raise ValueError(f"scatter: {filled} results for {n} positions")
    return out
