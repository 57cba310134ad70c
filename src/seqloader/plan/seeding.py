"""Seed derivation. ``SeedSequence([seed, epoch, ...])`` instead of ``seed + epoch``, which collides
(seed 1, epoch 0 == seed 0, epoch 1) and correlates neighbouring streams."""

from __future__ import annotations

import numpy as np

# Purposes keep the streams for different uses independent.
PURPOSE_ORDER = 1
PURPOSE_TRANSFORM = 2


def rng_for(seed: int, *words: int) -> np.random.Generator:
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence([seed, *words])))
