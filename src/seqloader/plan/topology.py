"""``Topology``: which rank of how many this process is. Pure and validated; detection lives in
``seqloader.torch.topology`` (the only place that reads torch.distributed or the environment)."""

from __future__ import annotations

from dataclasses import dataclass

from seqloader.errors import OptionError


@dataclass(frozen=True)
class Topology:
    rank: int = 0
    world_size: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.world_size, int) or self.world_size < 1:
            raise OptionError(f"world_size: got {self.world_size!r}, expected an int >= 1")
        if not isinstance(self.rank, int) or not 0 <= self.rank < self.world_size:
            raise OptionError(
                f"rank: got {self.rank!r}, expected 0 <= rank < world_size={self.world_size}"
            )
