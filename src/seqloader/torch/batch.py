"""``Batch``: what the training loop receives — padded tensors plus which sequences they are."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, replace

import numpy as np
import torch

from seqloader.loading.collate import packed_offsets
from seqloader.loading.corpora import CorpusCounts
from seqloader.loading.counts import KeyCounts, count_key
from seqloader.loading.execute import LoadedBatch


@dataclass
class Batch(Mapping):
    """A mapping ``key -> padded tensor [B, T, ...]`` with the batch's bookkeeping; with
    ``layout="packed"`` each key is ``[sum T_i, ...]`` (its sequences concatenated along time, no
    padding) and ``offsets[key]`` int32 ``[B + 1]`` says where each starts (``cu_seqlens``).

    - ``lengths[key]``: int64 ``[B]`` true lengths.
    - ``seq_indices``: int64 ``[B]`` sequence indices in the source; ``seq_tags``: their tags.
    - ``mask``: bool ``[B]``; False marks a filler repeat (``uneven="pad"``, or a ``split`` with
      fewer sequences than batch slots) — weight its loss with 0.
    - ``epoch``, ``step``: where in the plan this batch sits (``step`` is this rank's index).
    - ``skipped``: messages of planned sequences the source skipped (``on_error="skip"``); they are
      not in the batch, and the epoch report counts them.
    - ``counts``: per key, what the epoch report counts (see ``counts_of``).
    - ``corpus``: for a source of named corpora (``ConcatSource``), the corpus name of each
      sequence, aligned with ``seq_tags``; None otherwise. ``corpus_counts``: per corpus, what the
      report counts.
    - ``fetch_wait_s``, ``fetch_bytes``: for remote files, how long building this batch waited for
      files to arrive in the local cache, and the bytes its reader fetched itself.
    - ``chunks``: with ``chunking``, int64 ``[B]`` the chunk of its sequence each row holds, and
      ``spans[key]`` int64 ``[B, 2]`` each row's ``[start, end)`` in the whole sequence, per
      chunked key (keys not chunked are whole); None / empty otherwise.

    >>> loader = sl.SeqLoader(sl.MemorySource({"data": [np.ones((n, 2), "float32") for n in (3, 5)]}, tags=["a", "b"]), max_seqs=2)
    >>> batch = next(iter(loader.epoch(1)))
    >>> batch["data"].shape, batch.lengths["data"].tolist(), batch.seq_tags, batch.mask.tolist()
    (torch.Size([2, 5, 2]), [3, 5], ['a', 'b'], [True, True])
    """

    data: dict[str, torch.Tensor]
    lengths: dict[str, torch.Tensor]
    seq_indices: torch.Tensor
    mask: torch.Tensor
    seq_tags: list[str]
    epoch: int
    step: int
    skipped: list[str] = field(default_factory=list)
    nonfinite: list[str] = field(default_factory=list)  # sequences with NaN/Inf (loading.screen)
    counts: dict[str, KeyCounts] = field(default_factory=dict)
    corpus: list[str] | None = None
    corpus_counts: dict[str, CorpusCounts] = field(default_factory=dict)
    fetch_wait_s: float = 0.0  # remote files: the reader waited for files not yet cached
    fetch_bytes: int = 0  # remote files: bytes the reader fetched itself (not prefetched)
    chunks: torch.Tensor | None = None
    spans: dict[str, torch.Tensor] = field(default_factory=dict)
    offsets: dict[str, torch.Tensor] = field(default_factory=dict)  # layout="packed" only

    def __getitem__(self, key: str) -> torch.Tensor:
        return self.data[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self.data)

    def __len__(self) -> int:
        return len(self.data)

    @property
    def size(self) -> int:
        return int(self.seq_indices.shape[0])

    def counts_of(self, key: str) -> KeyCounts:
        """The report's counts for ``key``: precomputed where the batch was built, else now."""
        found = self.counts.get(key)
        if found is None:
            packed = bool(self.offsets)  # layout="packed": no padding delivered
            found = count_key(self.lengths[key].numpy(), self.mask.numpy(), packed)
        return found

    def pin_memory(self) -> Batch:
        """Called by the DataLoader's pin-memory thread. The copies free the worker's slot."""
        return self._map_tensors(lambda t: t.pin_memory())

    def to(self, device: torch.device | str, non_blocking: bool = False) -> Batch:
        return self._map_tensors(lambda t: t.to(device, non_blocking=non_blocking))

    def _map_tensors(self, f) -> Batch:
        return replace(
            self,
            data={k: f(v) for k, v in self.data.items()},
            lengths={k: f(v) for k, v in self.lengths.items()},
            seq_indices=f(self.seq_indices),
            mask=f(self.mask),
            offsets={k: f(v) for k, v in self.offsets.items()},
        )

    def __repr__(self) -> str:
        shapes = ", ".join(f"{k}: {tuple(v.shape)}" for k, v in self.data.items())
        return f"Batch(epoch={self.epoch}, step={self.step}, size={self.size}, {shapes})"


def build_batch(loaded: LoadedBatch, data: dict[str, torch.Tensor]) -> Batch:
    """The one place a ``Batch`` is made, by field name, from what a worker (or the main process)
    loaded: ``loaded`` carries the bookkeeping (its ``data`` is not read), ``data`` the tensors
    (wrapped arrays, or views of a worker's shared slot). A new per-batch field is added here, to
    ``Batch`` and to ``LoadedBatch``; the hand-over carries ``LoadedBatch`` whole. Runs where the
    batch is received (a worker's result is unpickled in the trainer's receiving thread), so the
    counts cost the training thread nothing."""
    spec = loaded.spec
    real = np.ascontiguousarray(spec.real, dtype=bool)
    n_real, packed = int(np.count_nonzero(real)), loaded.packed
    return Batch(
        data=data,
        lengths={k: torch.from_numpy(v) for k, v in loaded.lengths.items()},
        seq_indices=torch.from_numpy(np.ascontiguousarray(spec.seqs, dtype=np.int64)),
        mask=torch.from_numpy(real),
        seq_tags=loaded.tags,
        epoch=spec.epoch,
        step=spec.step,
        skipped=loaded.skipped,
        nonfinite=list(loaded.nonfinite),
        counts={k: count_key(v, real, packed, n_real) for k, v in loaded.lengths.items()},
        corpus=loaded.corpus,
        corpus_counts=dict(loaded.corpus_counts or {}),
        fetch_wait_s=loaded.fetch_wait_s,
        fetch_bytes=loaded.fetch_bytes,
        chunks=None if spec.chunks is None else torch.from_numpy(np.array(spec.chunks, np.int64)),
        spans={k: torch.from_numpy(v) for k, v in loaded.spans.items()},
        offsets=(
            {k: torch.from_numpy(packed_offsets(v)) for k, v in loaded.lengths.items()}
            if loaded.packed
            else {}
        ),
    )
