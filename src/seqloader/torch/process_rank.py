"""The one impure place that decides rank and world size."""

from __future__ import annotations

import os

from seqloader.errors import OptionError
from seqloader.plan.topology import Topology


def detect(rank: int | None = None, world_size: int | None = None) -> Topology:
    """Explicit arguments win; else an initialized ``torch.distributed`` process group (global rank,
    so multi-node works the same); else ``RANK``/``WORLD_SIZE`` (as set by torchrun); else 0/1."""
    if rank is not None or world_size is not None:
        if rank is None or world_size is None:
            raise OptionError(
                f"rank and world_size go together: got rank={rank!r}, world_size={world_size!r}"
            )
        return Topology(rank, world_size)
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return Topology(dist.get_rank(), dist.get_world_size())
    env_rank, env_world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
    if env_rank is not None and env_world is not None:
        try:
            return Topology(int(env_rank), int(env_world))
        except ValueError as e:
            raise OptionError(
                f"RANK={env_rank!r} / WORLD_SIZE={env_world!r} from the environment: {e}"
            ) from e
    return Topology(0, 1)
