"""Per-sequence transforms for ``SeqLoader(..., transform=...)``: ``fn(seq, rng) -> seq``.

The loader seeds ``rng`` from (seed, epoch, sequence index), so a sequence gets the same
augmentation whichever worker runs it (C3/C4), and another one in the next epoch. Every transform
here is a frozen dataclass: picklable for spawned workers, comparable, printable. None modifies its
input arrays in place (a source may hand out shared arrays).

This module is part of the package face: ``Compose`` is generic; the audio steps live in
``seqloader.audio.transforms`` and are re-exported here (planning bounds for length-changing
steps: see that module).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from seqloader.audio.transforms import AddNoise, Features, SpecAugment, SpeedPerturb
from seqloader.errors import OptionError
from seqloader.loading.execute import Transform

Seq = dict[str, np.ndarray]

__all__ = ["AddNoise", "Compose", "Features", "SpecAugment", "SpeedPerturb", "compose"]


@dataclass(frozen=True)
class Compose:
    """Apply ``steps`` in order. Each step draws from its own child stream of ``rng``, so adding,
    removing or reconfiguring one step does not change the randomness of the others."""

    steps: tuple[Transform, ...]

    def __call__(self, seq: Seq, rng: np.random.Generator) -> Seq:
        for step, child in zip(self.steps, rng.spawn(len(self.steps)), strict=True):
            seq = step(seq, child)
        return seq


def compose(*steps: Transform) -> Compose:
    """``compose(SpeedPerturb(...), AddNoise(...), Features(lm), SpecAugment(...))``."""
    for s in steps:
        if not callable(s):
            raise OptionError(f"compose: got {s!r}, expected callables fn(seq, rng) -> seq")
    return Compose(tuple(steps))
