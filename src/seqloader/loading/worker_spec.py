"""``WorkerSpec``: everything a worker needs besides the source and the planned batch, fixed once
when the loader is built and handed to the workers' dataset at construction.

Frozen and picklable (spawned workers receive it pickled): a worker's batch depends only on the
source, the ``BatchSpec`` and this spec, never on which worker builds it (contracts C3/C4).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from seqloader.loading.variants import PlannedVariants

Transform = Callable[[dict, np.random.Generator], dict]


class FrameCounter(Protocol):
    """Features whose frame count is a formula of the sample count (``KaldiFbank``, ``LogMel``)."""

    def num_frames(self, samples: int | np.ndarray) -> int | np.ndarray: ...


#: a chunked plan's windows as ``((key, (size, step)), ...)``: the planner's ``chunks.spec``, frozen
ChunkPairs = tuple[tuple[str, tuple[int, int]], ...]


@dataclass(frozen=True)
class WorkerSpec:
    """``seed``: keys each sequence's transform RNG (``transform_rng``). ``transform``: applied to
    every sequence as read. ``screen``: look for NaN/Inf (``loading.screen``). ``chunking``: a
    chunked plan's ``(key, (size, step))`` pairs; each slot then holds one window of its sequence.
    ``packed``: keys concatenated along time, no padding (``layout="packed"``). ``variants``: the
    plan drew length variants (``loading.variants``): each sequence is read in its planned one.
    ``deferred``: the features of a deferred ``data`` key (``features_on``): the batch carries the
    waveforms as ``audio`` and ``data``'s frame counts, computed later on the trainer's device.

    >>> spec = WorkerSpec(seed=7, chunking=WorkerSpec.pairs({"data": (4, 2)}))
    >>> spec.chunk_spec
    {'data': (4, 2)}
    """

    seed: int
    transform: Transform | None = None
    screen: bool = False
    chunking: ChunkPairs = ()
    packed: bool = False
    variants: PlannedVariants | None = None
    deferred: FrameCounter | None = None

    @staticmethod
    def pairs(chunking: Mapping[str, tuple[int, int]] | None) -> ChunkPairs:
        """``{key: (size, step)}`` (e.g. ``planner.chunks.spec``) as the frozen ``chunking``."""
        return tuple(
            (key, (int(size), int(step))) for key, (size, step) in (chunking or {}).items()
        )

    @property
    def chunk_spec(self) -> dict[str, tuple[int, int]]:
        """``chunking`` as ``{key: (size, step)}`` (empty when the plan is not chunked)."""
        return dict(self.chunking)
