"""Seed derivation. ``SeedSequence([seed, epoch, ...])`` instead of ``seed + epoch``, which collides
(seed 1, epoch 0 == seed 0, epoch 1) and correlates neighbouring streams."""

from __future__ import annotations

import numpy as np

# Purposes keep the streams for different uses independent.
PURPOSE_ORDER = 1
PURPOSE_TRANSFORM = 2
PURPOSE_MIX = 3  # corpus epochs of a mix (seqloader.plan.mix)
PURPOSE_MIX_TRANSFORM = 4  # transforms of mixed epochs: keyed by (sequence, corpus epoch)
PURPOSE_BUCKETS = 5  # buckets:N arranges each sub-epoch (its runs' order) with its own stream
PURPOSE_FILES = 6  # distribution="files": each full epoch's file shuffle
PURPOSE_FILES_ORDER = 7  # distribution="files": each rank's order of its files' sequences
PURPOSE_FIXED_ORDER = 8  # fixed_random_seed: one order for every epoch
PURPOSE_INDEXED_MEMBERS = 9  # planning="indexed": each bucket's keyed member permutation
PURPOSE_INDEXED_RUNS = 10  # planning="indexed", buckets:N: the order of the runs
PURPOSE_INDEXED_FILES = 11  # planning="indexed", files: each rank's draw of its own sequences
PURPOSE_INDEXED_MIX = 12  # planning="indexed" mix: corpus epochs of each (corpus, bucket) stream
PURPOSE_INDEXED_MIX_ORDER = 13  # planning="indexed" mix: corpora interleaved in a bucket's list
PURPOSE_INDEXED_FILES_ORDER = 14  # planning="indexed", files: a rank's order of its batches
PURPOSE_VARIANTS = 15  # length variants (planned speed perturbation): each sequence's per epoch
PURPOSE_INDEXED_RANK = 16  # planning="indexed", random_seed_offset: a rank's own draws
PURPOSE_INDEXED_ORDER = 17  # planning="indexed", ordering="random": each epoch's keyed order
PURPOSE_INDEXED_FILES_MIX = 18  # planning="indexed", mix over files: file streams, epoch shuffle
PURPOSE_INDEXED_BATCH_ORDER = 19  # indexed random + random_seed_offset: a rank's batch order
PURPOSE_INDEXED_PARTS = 20  # indexed chunked epoch_wise_filter: a length class's sub-epoch sets


_WORD = 1 << 32


def rng_for(seed: int, *words: int) -> np.random.Generator:
    """The stream of ``SeedSequence([seed, *words])``. Words below 2^32 are handed over as one
    uint32 array, the same entropy ``SeedSequence`` makes of the list, coerced in one step (half
    the construction's time: an elastic replay makes one per rank)."""
    entropy: list[int] | np.ndarray = [seed, *words]
    if all(0 <= w < _WORD for w in entropy):
        entropy = np.array(entropy, dtype=np.uint32)
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(entropy)))


#: RETURNN's seed distance between ranks under ``random_seed_offset`` distribution.
RETURNN_RANK_SEED_STEP = 16127


def returnn_rng(seed_epoch: int, offset: int, rank: int = 0) -> np.random.RandomState:
    """RETURNN's ordering draws: ``RandomState(seed_epoch + 1 + offset + 16127 * rank)``
    (``Dataset._get_random_seed_for_epoch`` with its per-rank default offset). ``seed_epoch`` is the
    0-based full epoch after RETURNN's ``:K`` grouping."""
    value = seed_epoch + 1 + offset + RETURNN_RANK_SEED_STEP * rank
    return np.random.RandomState(value)
