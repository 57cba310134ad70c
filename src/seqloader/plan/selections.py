"""Epoch selections: the sequences some epochs are restricted to (RETURNN's ``LibriSpeechCorpus``
``epoch_wise_filter`` ``subdirs``: the first epochs of a curriculum train on some corpus parts
only). A pure function of the epoch, applied to each sub-epoch's order after the cut, before the
``max_mean_len`` filters, as RETURNN applies it; what it leaves out is counted per epoch."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from seqloader.errors import OptionError
from seqloader.plan.admission import counted_filters


@dataclass(frozen=True)
class EpochSelection:
    """Epochs ``first..last`` (1-based, ``last`` None: no end) keep only the sequences in ``keep``
    (bool ``[n]``); ``name`` says which in the report (e.g. ``subdirs=['train-clean-100']``).

    >>> s = EpochSelection(1, 2, np.array([True, False, True]), "subdirs=['a']")
    >>> s.applies(2), s.applies(3)
    (True, False)
    """

    first: int
    last: int | None
    keep: np.ndarray
    name: str

    def applies(self, epoch: int) -> bool:
        return self.first <= epoch and (self.last is None or epoch <= self.last)


def checked_selections(selections: Sequence[EpochSelection], n: int) -> tuple[EpochSelection, ...]:
    """The selections, each mask checked to be bool ``[n]``."""
    out = []
    for s in selections:
        keep = np.asarray(s.keep)
        if keep.dtype != bool or keep.shape != (n,):
            raise OptionError(
                f"epoch selection {s.name!r}: keep has dtype {keep.dtype} shape {keep.shape}; "
                f"expected bool [{n}] (one per sequence)"
            )
        out.append(EpochSelection(s.first, s.last, keep, s.name))
    return tuple(out)


def apply_selections(
    selections: Sequence[EpochSelection], epoch: int, part: np.ndarray
) -> tuple[np.ndarray, dict[str, int]]:
    """The selections that apply to ``epoch`` on a sub-epoch's order ``part`` (each on what the
    ones before kept) -> (kept, in order; dropped per report reason).

    >>> sel = EpochSelection(1, 1, np.array([True, False, True, False]), "subdirs=['a']")
    >>> apply_selections([sel], 1, np.array([3, 2, 1, 0]))
    (array([2, 0]), {"epoch_wise_filter subdirs=['a'] (epoch 1)": 2})
    """
    applying = (s for s in selections if s.applies(epoch))
    return counted_filters(
        part,
        ((f"epoch_wise_filter {s.name} (epoch {epoch})", s.keep.__getitem__) for s in applying),
    )


def selections_bytes(selections: Sequence[EpochSelection]) -> bytes:
    """What the plan fingerprint holds of ``selections``: each one's epochs, name and mask.

    >>> selections_bytes([EpochSelection(1, 2, np.array([True, False]), "a")])
    b"(1, 2, 'a')\\x80"
    """
    out = b""
    for sel in selections:
        out += repr((sel.first, sel.last, sel.name)).encode() + np.packbits(sel.keep).tobytes()
    return out


@runtime_checkable
class HasEpochSelections(Protocol):
    """A source whose sequences some epochs are restricted to (``seqloader.returnn``'s view of
    ``LibriSpeechCorpus``' ``subdirs``); empty when none."""

    def epoch_selections(self) -> tuple[EpochSelection, ...]: ...
