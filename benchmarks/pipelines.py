"""The pipelines compared, each reading the same RETURNN HDF file into padded batches.

Every pipeline reads both keys (``data``: float32 ``[T, 40]``, ``classes``: sparse int32 labels),
pads them, shuffles with a per-epoch seed and makes batches of ``max_seqs`` sequences, so each does
the same work per batch. ``epoch(e)`` yields one epoch's batches; ``count(batch)`` says how many
sequences and ``data`` frames a batch holds (called outside the timed ``next()``).

- ``h5py``: a bare read-and-pad loop in the trainer process — the floor a user could hand-write.
- ``torch``: a hand-written map-style ``torch.utils.data.Dataset`` + ``DataLoader`` (shuffle, pad
  collate) — what most PyTorch users write.
- ``returnn``: RETURNN's own PyTorch pipeline, as its engine builds it (``HDFDataset`` ->
  ``ReturnnDatasetIterDataPipe`` -> ``BatchingIterDataPipe`` -> ``DataLoader`` with its
  non-daemonic spawn workers and a manager-held epoch counter).
- ``seqloader``: ``HDFSource`` + ``SeqLoader`` (random ordering).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

import h5py
import numpy as np
import torch


@dataclass(frozen=True)
class RunSpec:
    """One configuration: which pipeline, on which file, with how many workers."""

    pipeline: str  # see PIPELINES
    layout: str  # "chunked" (as RETURNN writes) or "contiguous"
    workers: int
    path: str
    max_seqs: int
    seed: int = 1

    @property
    def label(self) -> str:
        return f"{self.pipeline}/{self.layout}/w{self.workers}"


class Pipeline(Protocol):
    def epoch(self, epoch: int) -> Iterator[Any]: ...

    def count(self, batch: Any) -> tuple[int, int]: ...

    def close(self) -> None: ...


def _offsets(lengths: np.ndarray) -> np.ndarray:
    starts = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=starts[1:])
    return starts


class _Index:
    """Per-sequence row offsets of both keys, from ``seqLengths`` (what every reader needs)."""

    def __init__(self, path: str) -> None:
        with h5py.File(path, "r") as f:
            lens = f["seqLengths"][...].astype(np.int64)  # [n, 2]: data, classes
            self.dim = int(f["inputs"].shape[1])
        self.n = len(lens)
        self.data_starts = _offsets(lens[:, 0])
        self.label_starts = _offsets(lens[:, 1])


# ---- (a) bare h5py loop ----
class BareH5py:
    """Read each sequence with h5py slicing and pad into numpy, in the trainer process."""

    def __init__(self, spec: RunSpec) -> None:
        if spec.workers:
            raise ValueError(f"the bare h5py loop has no workers; got workers={spec.workers}")
        self.spec = spec
        self.index = _Index(spec.path)
        self.file = h5py.File(spec.path, "r")
        self.inputs, self.classes = self.file["inputs"], self.file["targets/data/classes"]

    def epoch(self, epoch: int) -> Iterator[tuple[torch.Tensor, ...]]:
        ix, b = self.index, self.spec.max_seqs
        order = np.random.default_rng([self.spec.seed, epoch]).permutation(ix.n)
        for k in range(0, ix.n, b):
            seqs = order[k : k + b]
            d0, d1 = ix.data_starts[seqs], ix.data_starts[seqs + 1]
            l0, l1 = ix.label_starts[seqs], ix.label_starts[seqs + 1]
            dlen, llen = d1 - d0, l1 - l0
            data = np.zeros((len(seqs), int(dlen.max()), ix.dim), np.float32)
            labels = np.zeros((len(seqs), int(llen.max())), np.int32)
            for j in range(len(seqs)):
                data[j, : dlen[j]] = self.inputs[d0[j] : d1[j]]
                labels[j, : llen[j]] = self.classes[l0[j] : l1[j]]
            yield (
                torch.from_numpy(data),
                torch.from_numpy(dlen),
                torch.from_numpy(labels),
                torch.from_numpy(llen),
            )

    def count(self, batch: tuple[torch.Tensor, ...]) -> tuple[int, int]:
        return int(batch[0].shape[0]), int(batch[1].sum())

    def close(self) -> None:
        self.file.close()


# ---- (b) hand-written torch DataLoader ----
class HDFSequences(torch.utils.data.Dataset):
    """Map-style dataset over the HDF file; opens it lazily in each process (fork-safe)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.index = _Index(path)
        self._file: h5py.File | None = None
        self._pid = -1

    def __len__(self) -> int:
        return self.index.n

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self._pid != os.getpid():
            self._file, self._pid = h5py.File(self.path, "r"), os.getpid()
        f, ix = self._file, self.index
        x = f["inputs"][ix.data_starts[i] : ix.data_starts[i + 1]]
        y = f["targets/data/classes"][ix.label_starts[i] : ix.label_starts[i + 1]]
        return torch.from_numpy(x), torch.from_numpy(y)

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_file": None, "_pid": -1}


def pad_collate(items: list[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, ...]:
    xs, ys = zip(*items)
    pad = torch.nn.utils.rnn.pad_sequence
    return (
        pad(list(xs), batch_first=True),
        torch.tensor([len(x) for x in xs]),
        pad(list(ys), batch_first=True),
        torch.tensor([len(y) for y in ys]),
    )


class TorchDataLoader:
    def __init__(self, spec: RunSpec) -> None:
        self.spec = spec
        extra = {"persistent_workers": True} if spec.workers else {}
        self.generator = torch.Generator()
        self.loader = torch.utils.data.DataLoader(
            HDFSequences(spec.path),
            batch_size=spec.max_seqs,
            shuffle=True,
            generator=self.generator,
            collate_fn=pad_collate,
            num_workers=spec.workers,
            **extra,
        )

    def epoch(self, epoch: int) -> Iterator[tuple[torch.Tensor, ...]]:
        self.generator.manual_seed(self.spec.seed * 1_000_003 + epoch)
        return iter(self.loader)

    def count(self, batch: tuple[torch.Tensor, ...]) -> tuple[int, int]:
        return int(batch[0].shape[0]), int(batch[1].sum())

    def close(self) -> None:
        shutdown_dataloader(self.loader)


def shutdown_dataloader(loader: torch.utils.data.DataLoader) -> None:
    from seqloader.torch._compat import shutdown_workers  # torch internals live there

    shutdown_workers(loader)


# ---- (c) RETURNN's PyTorch pipeline ----
class ReturnnPipeline:
    """Built as ``returnn.torch.engine.Engine._create_data_loader`` builds it."""

    def __init__(self, spec: RunSpec) -> None:
        from returnn.config import Config, global_config_ctx
        from returnn.datasets.hdf import HDFDataset
        from returnn.torch.data import pipeline, returnn_dataset_wrapper
        from returnn.util import multi_proc_manager_with_watchdog

        self.spec = spec
        self._config_ctx = global_config_ctx(Config({"behavior_version": 24}))
        self._config_ctx.__enter__()
        self.dataset = HDFDataset(
            files=[spec.path], seq_ordering="random", random_seed_offset=spec.seed
        )
        self.dataset.initialize()
        self._manager = multi_proc_manager_with_watchdog.create_manager()
        self._epoch = self._manager.Value("i", 0)
        wrapped = returnn_dataset_wrapper.ReturnnDatasetIterDataPipe(
            self.dataset,
            reset_callback=returnn_dataset_wrapper.ReturnnDatasetResetMpSharedEpochCallback(
                dataset=self.dataset, epoch_mp_shared=self._epoch
            ),
            shard_workers=True,  # each worker its share (RETURNN's default since behavior 37)
        )
        batches = pipeline.BatchingIterDataPipe(wrapped, batch_size=None, max_seqs=spec.max_seqs)
        self.loader = pipeline.create_data_loader_from_batches(
            batches, {"num_workers": spec.workers}
        )
        if spec.workers:
            self.dataset.finish_epoch(free_resources=True)  # as the engine does

    def epoch(self, epoch: int) -> Iterator[dict[str, Any]]:
        self._epoch.value = epoch
        return iter(self.loader)

    def count(self, batch: dict[str, Any]) -> tuple[int, int]:
        return int(batch["data"].shape[0]), int(batch["data:seq_len"].sum())

    def close(self) -> None:
        shutdown_dataloader(self.loader)
        self._manager.shutdown()
        self._config_ctx.__exit__(None, None, None)


# ---- (d) seqloader ----
class SeqLoaderPipeline:
    def __init__(self, spec: RunSpec) -> None:
        import seqloader as sl

        self.source = sl.HDFSource(spec.path)
        self.loader = sl.SeqLoader(
            self.source,
            ordering="random",
            max_seqs=spec.max_seqs,
            seed=spec.seed,
            num_workers=spec.workers,
        )

    def epoch(self, epoch: int) -> Iterator[Any]:
        return self.loader.epoch(epoch)

    def count(self, batch: Any) -> tuple[int, int]:
        return batch.size, int(batch.lengths["data"].sum())

    def close(self) -> None:
        self.loader.close()


PIPELINES = {
    "h5py": BareH5py,
    "torch": TorchDataLoader,
    "returnn": ReturnnPipeline,
    "seqloader": SeqLoaderPipeline,
}


def returnn_available() -> bool:
    try:
        import returnn.torch.data.pipeline  # noqa: F401
    except Exception:  # not installed, or a missing dependency of it
        return False
    return True


# what each pipeline imports: done before timing starts (a trainer has imported its libraries
# long before it asks for the first batch)
IMPORTS = {
    "returnn": (
        "returnn.config",
        "returnn.datasets.hdf",
        "returnn.torch.data.pipeline",
        "returnn.torch.data.returnn_dataset_wrapper",
        "returnn.util.multi_proc_manager_with_watchdog",
    ),
    "seqloader": ("seqloader",),
}


def import_modules(pipeline: str) -> None:
    import importlib

    for name in IMPORTS.get(pipeline, ()):
        importlib.import_module(name)


def open_pipeline(spec: RunSpec) -> Pipeline:
    return PIPELINES[spec.pipeline](spec)
