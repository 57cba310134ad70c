"""Options that scale the plan's memory, checked against what the plan would allocate before any
work: an impossible option is an ``OptionError`` naming it and the bound at ``Planner`` creation,
not a numpy ``MemoryError`` (``Unable to allocate 1.82 TiB``) deep in the first epoch.

Three things grow with options rather than with the data: the slots of a mixed epoch (a rate ``r``
gives a corpus of ``N`` sequences up to ``ceil(r·N)`` slots per epoch), the units of a chunked
epoch (``chunking`` with a step of ``s`` frames gives about ``frames / s`` chunks) and the bins of
binned orderings (``laplace:N``, ``sort_bin_shuffle:N``, ``buckets:N`` allocate arrays of ``N+1``).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from fractions import Fraction
from typing import Protocol

from seqloader.errors import DataWarning, OptionError


class Binned(Protocol):
    """What ``check_bins`` reads of an ordering (``plan.options.Ordering``, which imports this
    module: a protocol, not an import, keeps the module graph free of loops)."""

    @property
    def kind(self) -> str: ...

    @property
    def bins(self) -> int | None: ...

    @property
    def bin_size(self) -> int | None: ...


#: At most this many slots (sequence uses) per mixed epoch, all corpora together. An epoch's plan
#: keeps about ``PLAN_BYTES_PER_SLOT`` bytes per slot (selection, order, costs, batches), so the
#: bound is about 100 GiB: far above any real epoch, far below what fails with ``MemoryError``.
MAX_EPOCH_SLOTS = 2**31
PLAN_BYTES_PER_SLOT = 48

#: Bins may not outgrow the data: at most max(sequences, this) bins (more bins than sequences only
#: adds empty ones, and the bin arrays then stay within what the sequences' arrays take anyway).
MIN_BINS_BOUND = 2**20


def human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if n < 1024 or unit == "PiB":
            return f"{n:.3g} {unit}"
        n /= 1024
    raise AssertionError("unreachable")


def check_mix_slots(names: Sequence[str], rates: Sequence[Fraction], sizes: Sequence[int]) -> None:
    """Refuse a mix whose epoch would exceed ``MAX_EPOCH_SLOTS`` slots (naming the corpus with the
    largest share and the rate that fits); warn, naming the corpus, when a rate gives a corpus
    fewer than one sequence per epoch (most epochs then take none of it)."""
    per_epoch = [math.ceil(r * n) for r, n in zip(rates, sizes)]  # the most any epoch takes
    total = sum(per_epoch)
    if total > MAX_EPOCH_SLOTS:
        c = max(range(len(names)), key=lambda i: per_epoch[i])
        others = total - per_epoch[c]
        fits = Fraction(max(MAX_EPOCH_SLOTS - others, 0), sizes[c])
        raise OptionError(
            f"mix[{names[c]!r}]: got rate {float(rates[c]):g}, which gives corpus {names[c]!r} "
            f"({sizes[c]} admitted sequences) {per_epoch[c]:,} slots per epoch ({total:,} with "
            f"the other corpora); the plan of one epoch would allocate about "
            f"{human_bytes(total * PLAN_BYTES_PER_SLOT)}. The bound is {MAX_EPOCH_SLOTS:,} slots "
            f"per epoch (seqloader.plan.bounds.MAX_EPOCH_SLOTS). Fix: a rate of at most "
            f"{float(fits):.6g} for {names[c]!r} (a rate is corpus epochs per epoch), or more "
            "epochs at a lower rate."
        )
    for name, rate, n in zip(names, rates, sizes):
        if rate * n < 1:
            every = math.ceil(1 / (rate * n))
            warnings.warn(
                f"mix[{name!r}]: rate {float(rate):g} gives corpus {name!r} ({n} admitted "
                f"sequences) {float(rate * n):.3g} sequences per epoch, so epochs go by "
                f"taking none of it (one sequence about every {every:,} epochs). Fix: a rate of at least "
                f"{float(Fraction(1, n)):.3g} (1/{n}) to use it every epoch, or leave it out.",
                DataWarning,
                stacklevel=4,
            )


def check_bins(ordering: Binned, text: str, n: int) -> None:
    """Refuse a binned ordering with more bins than ``max(n, MIN_BINS_BOUND)``: its bin arrays
    (``bins + 1`` int64 each) would outgrow the data."""
    if ordering.bins is None or ordering.bin_size is not None:
        return
    bound = max(n, MIN_BINS_BOUND)
    if ordering.bins > bound:
        raise OptionError(
            f"ordering: got {text!r}, {ordering.bins:,} bins for {n:,} sequences; the plan would "
            f"allocate {human_bytes(8 * (ordering.bins + 1))} per bin array. The bound is "
            f"max(sequences, {MIN_BINS_BOUND:,}) = {bound:,} bins (more bins than sequences are "
            f"empty). Fix: {ordering.kind}:N with N <= {bound:,}, or {ordering.kind}:.S for about "
            "S sequences per bin."
        )


def check_chunk_units(units: int, chunking: object, sequences: int) -> None:
    """Refuse a ``chunking`` whose epoch would hold more than ``MAX_EPOCH_SLOTS`` chunks (each a
    planned unit, like a slot): counted from the lengths before any epoch is planned."""
    if units > MAX_EPOCH_SLOTS:
        raise OptionError(
            f"chunking: got {chunking!r}, which cuts the {sequences:,} sequences into {units:,} "
            f"chunks per epoch; the plan of one epoch would allocate about "
            f"{human_bytes(units * PLAN_BYTES_PER_SLOT)}. The bound is {MAX_EPOCH_SLOTS:,} "
            "planned units per epoch (seqloader.plan.bounds.MAX_EPOCH_SLOTS). Fix: a larger "
            "chunk step (chunking='SIZE:STEP'), so that each sequence gives fewer chunks."
        )
