"""``Batch``: what the training loop receives — padded tensors plus which sequences they are."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field

import torch


@dataclass
class Batch(Mapping):
    """A mapping ``key -> padded tensor [B, T, ...]`` with the batch's bookkeeping.

    - ``lengths[key]``: int64 ``[B]`` true lengths.
    - ``seq_indices``: int64 ``[B]`` sequence indices in the source; ``seq_tags``: their tags.
    - ``mask``: bool ``[B]``; False marks a filler repeat (``uneven="pad"``, or a ``split`` with
      fewer sequences than batch slots) — weight its loss with 0.
    - ``epoch``, ``step``: where in the plan this batch sits (``step`` is this rank's index).
    - ``skipped``: messages of planned sequences the source skipped (``on_error="skip"``); they are
      not in the batch, and the epoch report counts them.
    """

    data: dict[str, torch.Tensor]
    lengths: dict[str, torch.Tensor]
    seq_indices: torch.Tensor
    mask: torch.Tensor
    seq_tags: list[str]
    epoch: int
    step: int
    skipped: list[str] = field(default_factory=list)
    nonfinite: list[str] = field(default_factory=list)  # sequences with NaN/Inf (seqloader.checks)

    def __getitem__(self, key: str) -> torch.Tensor:
        return self.data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)

    @property
    def size(self) -> int:
        return int(self.seq_indices.shape[0])

    def pin_memory(self) -> Batch:
        """Called by the DataLoader's pin-memory thread."""
        return Batch(
            {k: v.pin_memory() for k, v in self.data.items()},
            {k: v.pin_memory() for k, v in self.lengths.items()},
            self.seq_indices.pin_memory(),
            self.mask.pin_memory(),
            self.seq_tags,
            self.epoch,
            self.step,
            self.skipped,
            self.nonfinite,
        )

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        move = lambda t: t.to(device, non_blocking=non_blocking)  # noqa: E731
        return Batch(
            {k: move(v) for k, v in self.data.items()},
            {k: move(v) for k, v in self.lengths.items()},
            move(self.seq_indices),
            move(self.mask),
            self.seq_tags,
            self.epoch,
            self.step,
            self.skipped,
            self.nonfinite,
        )

    def __repr__(self) -> str:
        shapes = ", ".join(f"{k}: {tuple(v.shape)}" for k, v in self.data.items())
        return f"Batch(epoch={self.epoch}, step={self.step}, size={self.size}, {shapes})"
