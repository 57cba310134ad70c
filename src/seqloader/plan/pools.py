"""File pools per sub-epoch: RETURNN's ``DistributeFilesDataset`` as a plan step (numpy only).

RETURNN's ``DistributeFilesDataset`` does not order the whole corpus. Per full epoch it shuffles
its *files* (``RandomState(full_epoch + 1 + random_seed_offset)``, or keeps them in the given order
with ``seq_ordering="default"``), cuts the shuffled list into ``partition_epoch`` bins of about
equal bytes on disk (``_distribute_evenly_by_size``, every bin at least one file) and builds, for
sub-epoch p, a dataset over bin p's files only, which orders *its* sequences with its own
``seq_ordering``, seeded by the full epoch. ``FilePools`` holds what that needs (the files' sequence
ranges and sizes, the file shuffle), and ``pool`` gives a sub-epoch's sequences in the order the
sub-dataset stores them (file after file of the bin). The planner orders each pool with the
sub-dataset's ordering, so every full epoch uses every file, hence every sequence, exactly once.

``distrib_shard_files`` (RETURNN) cuts ``num_shards * partition_epoch`` bins of one file order (the
same on every rank) and gives shard s the bins ``[s * P, (s + 1) * P)``; ``pool(..., num_shards,
shard)`` takes that form. Each rank then orders and batches its own pool; RETURNN's torch engine
ends the sub-epoch when the first rank runs out, so the planner keeps the shortest rank's batch
count on every rank and counts the rest as dropped.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from seqloader.errors import OptionError
from seqloader.validate import bounds_option


@dataclass(frozen=True)
class FilePools:
    """Files of a corpus as RETURNN's ``DistributeFilesDataset`` distributes them.

    - ``bounds``: int64 ``[F + 1]``, file f holds sequences ``[bounds[f], bounds[f + 1])`` (the
      files in the config's order);
    - ``sizes``: int64 ``[F]``, each file's size in bytes (RETURNN bins by ``os.path.getsize``);
    - ``shuffle``: shuffle the files per full epoch (RETURNN's ``seq_ordering="random"`` of the
      ``DistributeFilesDataset``), else keep the given order (``"default"``);
    - ``fixed_seed``: RETURNN's ``fixed_random_seed`` of the ``DistributeFilesDataset`` (the same
      file order every full epoch); None: seeded by the full epoch and the plan's seed;
    - ``shard_files``: RETURNN's ``distrib_shard_files`` (or ``torch_distributed`` ``"shard"``):
      ranks take disjoint bins of files instead of one order;
    - ``refuse_sharding``: why sharding these files over more than one rank is refused (the
      caller's words, naming the fix), or None.

    >>> pools = FilePools(np.array([0, 2, 5, 6]), np.array([10, 30, 10]), shuffle=False)
    >>> [b.tolist() for b in pools.bins(2, np.random.RandomState(1))]
    [[0, 1], [2]]
    >>> pools.pool(1, 2, np.random.RandomState(1)).tolist()
    [5]
    """

    bounds: np.ndarray
    sizes: np.ndarray
    shuffle: bool = True
    fixed_seed: int | None = None
    shard_files: bool = False
    refuse_sharding: str | None = None

    def __post_init__(self) -> None:
        sizes = np.asarray(self.sizes, dtype=np.int64)
        if sizes.ndim != 1 or not len(sizes):
            raise OptionError(f"FilePools: got sizes of shape {sizes.shape}, expected [F], F >= 1")
        object.__setattr__(self, "bounds", bounds_option("FilePools", self.bounds, len(sizes)))
        object.__setattr__(self, "sizes", sizes)

    @property
    def num_files(self) -> int:
        return len(self.sizes)

    def check_bins(self, partition_epoch: int, num_shards: int = 1) -> None:
        """RETURNN needs at least one file per bin: refused otherwise, with the fix."""
        need = partition_epoch * (num_shards if self.shard_files else 1)
        if self.num_files < need:
            shards = (
                f" x {num_shards} ranks (distrib_shard_files)" if need != partition_epoch else ""
            )
            raise OptionError(
                f"DistributeFilesDataset: {self.num_files} files for partition_epoch "
                f"{partition_epoch}{shards}; every sub-epoch needs at least one file (RETURNN "
                "refuses this too). Fix: lower partition_epoch, or split the data into more files"
            )

    def file_order(self, rng: np.random.RandomState) -> np.ndarray:
        """The full epoch's file order -> int64 ``[F]`` (``rng``: RETURNN's epoch RandomState)."""
        if not self.shuffle:
            return np.arange(self.num_files, dtype=np.int64)
        if self.fixed_seed is not None:
            rng = np.random.RandomState(self.fixed_seed)
        order = np.arange(self.num_files, dtype=np.int64)
        rng.shuffle(order)  # RETURNN: RandomState.shuffle of the file list, the same draws
        return order

    def bins(self, bins: int, rng: np.random.RandomState) -> list[np.ndarray]:
        """A full epoch's files (``rng``: its RandomState) cut into ``bins`` parts of about equal
        size -> file indices per bin."""
        order = self.file_order(rng)
        return distribute_evenly_by_size(self.sizes[order], bins, order)

    def pool(
        self,
        part: int,
        partition_epoch: int,
        rng: np.random.RandomState,
        num_shards: int = 1,
        shard: int = 0,
    ) -> np.ndarray:
        """Sub-epoch ``part``'s sequences, file after file of its bin -> int64 ``[m]`` (``rng``:
        the full epoch's RandomState; ``shard``: this rank's bins with ``shard_files``)."""
        shards = num_shards if self.shard_files else 1
        files = self.bins(partition_epoch * shards, rng)[
            (shard if self.shard_files else 0) * partition_epoch + part
        ]
        starts, ends = self.bounds[files], self.bounds[files + 1]
        if not len(files):
            return np.zeros(0, dtype=np.int64)
        return np.concatenate([np.arange(s, e, dtype=np.int64) for s, e in zip(starts, ends)])


def distribute_evenly_by_size(
    sizes: np.ndarray, num_bins: int, items: np.ndarray
) -> list[np.ndarray]:
    """RETURNN's ``DistributeFilesDataset._distribute_evenly_by_size``: walk ``items`` (with their
    ``sizes``, in that order) and fill bins of about ``remaining size / remaining bins`` each, a
    file going to the bin where it brings the size closer to that average; every bin gets at least
    one file. -> ``items`` per bin, in order."""
    n = len(items)
    if n < num_bins:
        raise OptionError(f"{n} files for {num_bins} bins: every bin needs a file")
    total = int(np.sum(sizes))
    sizes_list = [int(s) for s in sizes]
    out: list[list[int]] = [[] for _ in range(num_bins)]
    avg = total / num_bins
    b, taken, total_taken = 0, 0, 0
    for i, size in enumerate(sizes_list):
        remaining = n - i
        total_taken += size
        if remaining <= num_bins - b - 1:  # every bin left must still get a file
            b += 1
            avg = (total - total_taken) / (num_bins - b)
            out[b].append(i)
            taken = size
            continue
        if b == num_bins - 1:
            out[b].append(i)
            taken += size
            continue
        if taken + size <= avg:
            out[b].append(i)
            taken += size
            continue
        if not out[b] or abs((taken + size) - avg) <= abs(taken - avg):
            out[b].append(i)
            taken = 0
        else:
            out[b + 1].append(i)
            taken = size
        b += 1
        avg = (total - total_taken) / (num_bins - b)
    items = np.asarray(items, dtype=np.int64)
    return [items[np.asarray(positions, dtype=np.int64)] for positions in out]


@runtime_checkable
class HasFilePools(Protocol):
    """A source planned with per-sub-epoch file pools (``seqloader.returnn``'s view of RETURNN's
    ``DistributeFilesDataset``): None when it has none."""

    def file_pools(self) -> FilePools | None: ...
