"""``Topology``: which rank of how many this process is. Pure and validated; detection lives in
``seqloader.torch.process_rank`` (the only place that reads torch.distributed or the environment)."""

from __future__ import annotations

from dataclasses import dataclass

from seqloader.validate import int_option


@dataclass(frozen=True)
class Topology:
    """This process's rank and the number of ranks (``0 <= rank < world_size``).

    >>> Topology(rank=1, world_size=4)
    Topology(rank=1, world_size=4)
    """

    rank: int = 0
    world_size: int = 1

    def __post_init__(self) -> None:
        world_size = int_option("world_size", self.world_size, 1)
        expected = f"0 <= rank < world_size={world_size}"
        rank = int_option("rank", self.rank, 0, below=world_size, expected=expected)
        object.__setattr__(self, "world_size", world_size)  # numpy ints become plain ints
        object.__setattr__(self, "rank", rank)
