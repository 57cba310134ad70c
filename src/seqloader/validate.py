"""One validator for options: ints, bools, seconds, choices — one wording, one notion of "an int".

Every option class (``PlanOptions``, ``WorkerOptions``, ``CheckOptions``, ``Topology``) checks its
fields here, so they agree: numpy integers count as ints (a value read from an array is fine), bools
never do (``True`` is not a rank), and every refusal reads "NAME: got X, expected Y" as an
``OptionError``. Choice sets are ``Literal`` types, so type checkers see them and the runtime check
reads its choices from the same definition. Pure: numpy and ``seqloader.errors`` only, so ``plan/``
may use it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal, TypeGuard, get_args

import numpy as np

from seqloader.errors import OptionError

#: What to do about a finding (data checks, the epoch audit): raise, warn and count, or skip it.
Policy = Literal["off", "warn", "error"]
POLICIES: tuple[str, ...] = get_args(Policy)


def choices(literal: Any) -> tuple[str, ...]:
    """The strings of a ``Literal[...]`` type, in their declared order."""
    return tuple(get_args(literal))


def is_int(value: object) -> TypeGuard[int | np.integer]:
    """An integer (numpy ones included), but not a bool (``True`` is no count and no rank); a
    ``TypeGuard``, so checked values are ints to the type checker too."""
    return isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))


def is_number(value: object) -> TypeGuard[int | float | np.integer | np.floating]:
    """An int or float (numpy ones included), but not a bool."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(
        value, (bool, np.bool_)
    )


def int_option(
    name: str,
    value: object,
    minimum: int,
    *,
    below: int | None = None,
    expected: str | None = None,
) -> int:
    """``value`` as a plain ``int`` in ``[minimum, below)``. ``expected`` replaces the default
    "an int >= MINIMUM" in the message when the range needs words ("0 <= rank < world_size=2")."""
    if is_int(value) and minimum <= value and (below is None or value < below):
        return int(value)
    if expected is None:
        expected = f"an int >= {minimum}" + (f" and < {below}" if below is not None else "")
    raise OptionError(f"{name}: got {value!r}, expected {expected}")


def bounds_option(name: str, value: object, parts: int) -> np.ndarray:
    """``value`` as the bounds of ``parts`` consecutive parts (part ``p`` holds
    ``[bounds[p], bounds[p + 1])``: corpora, files): int64 ``[parts + 1]``, starting at 0,
    non-decreasing.

    >>> bounds_option("corpora", [0, 3, 3, 5], 3).tolist()
    [0, 3, 3, 5]
    """
    bounds = np.asarray(value, dtype=np.int64)
    if bounds.shape != (parts + 1,) or bounds[0] != 0 or (np.diff(bounds) < 0).any():
        raise OptionError(
            f"{name}: got bounds {bounds.tolist()}, expected {parts + 1} non-decreasing offsets "
            "starting at 0"
        )
    return bounds


def optional_int_option(name: str, value: object, minimum: int) -> int | None:
    """``int_option``, or None for None ("unbounded", "default")."""
    if value is None:
        return None
    return int_option(name, value, minimum, expected=f"an int >= {minimum} or None")


def bool_option(name: str, value: object) -> bool:
    """``value`` as a plain ``bool`` (numpy bools included); ints are refused (1 is no switch)."""
    if isinstance(value, (bool, np.bool_)):
        return bool(value)
    raise OptionError(f"{name}: got {value!r}, expected True or False")


def seconds_option(name: str, value: object, zero: str = "") -> float:
    """A duration in seconds, ``>= 0`` (ints and floats; bools refused). ``zero`` says what 0
    means, for the message."""
    if is_number(value) and value >= 0:
        return value if isinstance(value, (int, float)) else float(value)
    meaning = f" ({zero})" if zero else ""
    raise OptionError(f"{name}: got {value!r}, expected seconds >= 0{meaning}")


def choice_option(
    name: str, value: object, allowed: tuple[Any, ...], *, expected: str | None = None
) -> Any:
    """``value`` if it is one of ``allowed`` (e.g. ``choices(Policy)``), else "got X, expected one
    of (...)"; ``expected`` replaces that wording."""
    if isinstance(value, (str, type(None))) and value in allowed:
        return value
    raise OptionError(f"{name}: got {value!r}, expected {expected or f'one of {allowed}'}")


def supported_options(
    where: str, given: Iterable[str], own: Iterable[str], no_effect: Iterable[str] = ()
) -> None:
    """An ``OptionError`` naming the options ``given`` that are neither supported (``own``) nor
    accepted without effect (``no_effect``), with both lists (a peer's dataset options).

    >>> supported_options("train", ["files", "seq_ordering"], ["files"], ["buffer_size"])
    Traceback (most recent call last):
    ...
    seqloader.errors.OptionError: train: option(s) ['seq_ordering'] not supported; supported: ['files'], accepted without effect: ['buffer_size']
    """
    own, no_effect = sorted(own), sorted(no_effect)
    unknown = sorted(set(given) - set(own) - set(no_effect))
    if unknown:
        accepted = f", accepted without effect: {no_effect}" if no_effect else ""
        raise OptionError(f"{where}: option(s) {unknown} not supported; supported: {own}{accepted}")


def policy_option(name: str, value: object) -> Policy:
    """One of ``POLICIES`` ("off", "warn", "error")."""
    return choice_option(name, value, POLICIES)
