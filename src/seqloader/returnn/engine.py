"""``use_in_engine()``: RETURNN's own torch engine (``rnn.py CONFIG``) trains on seqloader.

Called in a RETURNN config, it replaces the data loaders RETURNN's torch engine builds for
``train``, ``dev``, ``eval`` and ``eval_datasets`` (``Engine._create_data_loader``) by loaders
``from_returnn_config`` builds from the same config: RETURNN's batches in RETURNN's order, but the
same with any ``num_workers``, and under ``torch_distributed`` equal steps on every rank. The
engine keeps everything else (model, steps, saving, restarts). RETURNN has no hook for this, so
it depends on the engine's internals: it runs only with the RETURNN versions it was tested with,
and says so in RETURNN's log when it takes over.
"""

from __future__ import annotations

import functools
import re
import sys
import weakref
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from seqloader.errors import OptionError
from seqloader.extras import require
from seqloader.plan.epoch_plan import EpochPlan
from seqloader.returnn.config import TRAIN, returnn_datasets
from seqloader.torch.batch import Batch
from seqloader.torch.loader import SeqLoader

# RETURNN versions (the date part of 1.YYYYMMDD.hhmmss) this hook was tested with
TESTED = (20261022, 20261022)
PINNED = "returnn==1.20261022.211313"
_MARK = "_seqloader_original"
_ROUTE = (
    "or leave RETURNN's engine: build the loaders with seqloader.returnn.from_returnn_config(config) "
    "in your own training loop (docs/migrating.md)"
)


def use_in_engine() -> None:
    """Make RETURNN's torch engine train (and evaluate) on seqloader loaders for this config's
    ``train``, ``dev``, ``eval`` and ``eval_datasets``; call it in the RETURNN config itself.

    Refuses (``OptionError``) a RETURNN version outside the tested range, a second call, and a
    call from anywhere but a RETURNN config that RETURNN is reading.

    >>> use_in_engine()
    Traceback (most recent call last):
    ...
    seqloader.errors.OptionError: seqloader.returnn.use_in_engine() must be called in a RETURNN config ...
    """
    config = _calling_config(sys._getframe(1).f_globals)
    check_version(require("returnn", "seqloader.returnn.use_in_engine()").__version__)
    engine_cls = _torch_engine()
    if getattr(engine_cls._create_data_loader, _MARK, None) is not None:
        raise OptionError(
            "seqloader.returnn.use_in_engine() was called twice in this process; the engine's "
            "data loaders are already seqloader's. Fix: call it once, in the RETURNN config"
        )
    backend = config.typed_dict.get("backend")
    if backend not in (None, "torch"):
        raise OptionError(
            f"seqloader.returnn.use_in_engine(): the config sets backend = {backend!r}; seqloader "
            "replaces the data loaders of RETURNN's torch engine only. Fix: backend = 'torch'"
        )
    original = engine_cls._create_data_loader

    def _create_data_loader(
        self: Any, dataset: Any, *, train: bool = False, dataset_init_epoch: bool = True
    ) -> Any:
        name = _dataset_name(self, dataset, train) if dataset_init_epoch else None
        if name is None:  # e.g. forward / search: RETURNN's own pipeline, as without the hook
            return original(self, dataset, train=train, dataset_init_epoch=dataset_init_epoch)
        return engine_loader_class()(self, name, dataset)

    setattr(_create_data_loader, _MARK, original)
    engine_cls._create_data_loader = _create_data_loader


def check_version(version: str) -> None:
    """Refuse a RETURNN version outside ``TESTED``, naming it and the fix.

    >>> check_version("1.20261022.211313")
    >>> check_version("1.20240101.000000")
    Traceback (most recent call last):
    ...
    seqloader.errors.OptionError: seqloader.returnn.use_in_engine() depends on the internals of RETURNN's torch engine and was tested with RETURNN 1.20261022 only; this is RETURNN 1.20240101.000000. Fix: pin returnn==1.20261022.211313, or leave RETURNN's engine: ...
    """
    match = re.match(r"1\.(\d{8})", version)
    date = int(match.group(1)) if match else None
    if date is not None and TESTED[0] <= date <= TESTED[1]:
        return
    tested = f"1.{TESTED[0]}" if TESTED[0] == TESTED[1] else f"1.{TESTED[0]} to 1.{TESTED[1]}"
    raise OptionError(
        "seqloader.returnn.use_in_engine() depends on the internals of RETURNN's torch engine "
        f"and was tested with RETURNN {tested} only; this is RETURNN {version}. Fix: pin "
        f"{PINNED}, {_ROUTE}"
    )


def _calling_config(namespace: Mapping[str, Any]) -> Any:
    """The RETURNN ``Config`` whose file calls us: RETURNN executes a config with ``config``
    (the ``Config`` being read) in its namespace."""
    config = namespace.get("config")
    cls = getattr(sys.modules.get("returnn.config"), "Config", None)
    if cls is None or not isinstance(config, cls):
        raise OptionError(
            "seqloader.returnn.use_in_engine() must be called in a RETURNN config that RETURNN "
            "reads (rnn.py CONFIG, python -m returnn CONFIG): it replaces the data loaders of "
            f"RETURNN's torch engine. Fix: put the call in the config file, {_ROUTE}"
        )
    return config


def _torch_engine() -> Any:
    """RETURNN's torch ``Engine``, checked for the internals the hook relies on."""
    try:
        from returnn.torch.engine import Engine
    except ImportError as e:
        raise OptionError(
            f"seqloader.returnn.use_in_engine(): RETURNN's torch engine cannot be imported ({e}). "
            f"Fix: install RETURNN with torch ({PINNED}), {_ROUTE}"
        ) from e
    code = getattr(getattr(Engine, "_create_data_loader", None), "__code__", None)
    params = set(code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]) if code else set()
    if not {"dataset", "train", "dataset_init_epoch"} <= params:
        raise OptionError(
            "seqloader.returnn.use_in_engine(): this RETURNN's torch engine has no "
            "Engine._create_data_loader(dataset, train=, dataset_init_epoch=), which the hook "
            f"replaces. Fix: pin {PINNED}, {_ROUTE}"
        )
    return Engine


def _dataset_name(engine: Any, dataset: Any, train: bool) -> str | None:
    """Which of the config's datasets the engine asks a loader for (None: not one of them)."""
    if train and dataset is engine.train_dataset:
        return TRAIN
    for name, other in engine.eval_datasets.items():
        if other is dataset:
            return str(name)
    return None


def _loader_for(engine: Any, name: str) -> SeqLoader:
    """``from_returnn_config``'s loader for ``name``: train split over the engine's ranks,
    dev/eval whole on each rank (RETURNN evaluates on rank 0 while the others wait)."""
    (dataset,) = returnn_datasets(dict(engine.config.typed_dict), only=name).values()
    ctx = engine._torch_distributed_ctx
    rank, world_size = (ctx.rank(), ctx.size()) if ctx is not None and name == TRAIN else (0, 1)
    return dataset.loader(rank, world_size)


def _log(text: str) -> None:
    from returnn.log import log

    print(text, file=log.v3)


@functools.cache
def engine_loader_class() -> type:
    """The class of the engine's loaders, built on first use: RETURNN's engine stops its loaders
    with ``shutdown_data_loader``, which takes a ``PinMemoryDataLoader`` whose ``data_loader`` is
    not a DataLoader by calling its ``close()``; so ours is one (RETURNN imported only here)."""
    from returnn.datasets.packing import packed_batch_config
    from returnn.torch.data.pin_memory import PinMemoryDataLoader

    class EngineLoader(PinMemoryDataLoader):
        """What the engine iterates once per (sub-)epoch: seqloader's batches of the engine's
        current epoch, as the raw dicts RETURNN's own pipeline yields."""

        def __init__(self, engine: Any, name: str, dataset: Any) -> None:  # no pinning thread
            self.data_loader = None
            self.name = name
            self.loader = _loader_for(engine, name)
            self._rename = returnn_names(self.loader.source.keys, dataset.get_data_keys())
            keys = [self._rename.get(k, k) for k in self.loader.source.keys]
            check_extern_data(engine.config.typed_value("extern_data") or {}, name, keys)
            self._engine = weakref.ref(engine)  # the engine holds this loader
            self._packing = packed_batch_config()
            topology = self.loader.topology
            _log(
                f"seqloader.returnn.use_in_engine: RETURNN's {name!r} data loader is seqloader's "
                f"(rank {topology.rank}/{topology.world_size}, num_workers "
                f"{self.loader.worker_options.num_workers}, plan {self.loader.fingerprint})"
            )

        def __iter__(self) -> Iterator[dict[str, Any]]:
            engine = self._engine()
            if engine is None:
                raise RuntimeError("seqloader: the RETURNN engine of this loader is gone")
            return self._epoch(int(engine.epoch))

        def _epoch(self, epoch: int) -> Iterator[dict[str, Any]]:
            yield from engine_epoch(self.loader, epoch, self._packing, self._rename, self.name)
            report = self.loader.report()
            if report is not None:
                _log(f"seqloader {self.name}: {report.format()}")

        def close(self) -> None:
            self.loader.close()

        def __repr__(self) -> str:
            return f"EngineLoader({self.name!r}, {self.loader.source!r})"

    return EngineLoader


def engine_epoch(
    loader: SeqLoader,
    epoch: int,
    packing: Mapping[str, Any] | None,
    rename: Mapping[str, str] | None = None,
    name: str = TRAIN,
) -> Iterator[dict[str, Any]]:
    """``loader``'s batches of ``epoch`` as the engine's raw dicts (``raw_batch``) with RETURNN's
    ``epoch``, ``num_seqs`` (this rank's sequences) and ``complete_frac`` (all ranks' sequences
    through this step: the same on every rank). The epoch is planned once (``loader.epoch``); the
    counts come from that plan, once per epoch, and a step that holds only filler repeats on
    some rank is refused on every rank before the first batch (``check_no_filler_step``).

    >>> src = sl.MemorySource({"data": [np.ones((n, 2), "float32") for n in (3, 5, 2)]})
    >>> [(r["num_seqs"].item(), r["complete_frac"].item()) for r in engine_epoch(sl.SeqLoader(src, max_seqs=2), 1, None)]
    [(3, 0.6666666865348816), (3, 1.0)]
    """
    batches = loader.epoch(epoch)
    plan = loader.running_plan
    assert plan is not None  # epoch() planned it
    counts = StepCounts.of(plan)
    counts.check_no_filler_step(name, epoch)
    rank = loader.topology.rank
    num_seqs = int(counts.real[:, rank].sum())
    total = max(int(counts.through[-1]), 1)
    done = 0
    for batch in batches:
        raw = raw_batch(batch, packing, done, rename)
        done += len(raw["seq_tag"])
        raw["epoch"] = np.array(epoch)
        raw["num_seqs"] = np.array(num_seqs)
        raw["complete_frac"] = np.array(counts.through[batch.step + 1] / total, dtype=np.float32)
        yield raw


@dataclass(frozen=True)
class StepCounts:
    """Real sequences of one (sub-)epoch's plan per step and rank, counted once per epoch (one
    cumulative sum over its slots): ``real`` int64 ``[steps, world_size]``, ``through`` int64
    ``[steps + 1]`` (all ranks' real sequences of the first ``s`` steps, ``consumed_seqs(s)``).

    >>> plan = sl.SeqLoader(sl.MemorySource({"x": [np.ones(2)] * 3}), max_seqs=1, rank=0, world_size=2).global_plan(1)
    >>> counts = StepCounts.of(plan)
    >>> counts.real.tolist(), counts.through.tolist()
    ([[1, 1], [1, 0]], [0, 2, 3])
    """

    real: np.ndarray
    through: np.ndarray

    @classmethod
    def of(cls, plan: EpochPlan) -> StepCounts:
        b, world_size = plan.batches, plan.world_size
        n = plan.steps * world_size
        slots = np.zeros(len(b.real) + 1, dtype=np.int64)
        np.cumsum(b.real, out=slots[1:])
        at = slots[b.bounds[: n + 1]]  # [n + 1] real sequences before each batch
        return cls(np.diff(at).reshape(plan.steps, world_size), at[::world_size])

    def check_no_filler_step(self, name: str, epoch: int) -> None:
        """Refuse a plan in which some rank has a step of filler repeats only: RETURNN's engine
        cannot skip a step (a batch must hold data) and would fail there on that rank alone,
        leaving the others waiting in its per-step all-reduce. Every rank computes the same
        plan, so every rank raises here, before the first batch.

        >>> StepCounts(np.array([[1, 1], [1, 0]]), np.array([0, 2, 3])).check_no_filler_step("train", 3)
        Traceback (most recent call last):
        ...
        seqloader.errors.OptionError: seqloader: the train dataset's sub-epoch 3 has 3 sequences for 2 steps x 2 ranks: rank 1 at step 1 would get only filler repeats, ...
        """
        empty = np.argwhere(self.real == 0)  # [k, 2] (step, rank)
        if not len(empty):
            return
        steps, world_size = self.real.shape
        where = ", ".join(f"rank {r} at step {s}" for s, r in empty[:5].tolist())
        more = f" (and {len(empty) - 5} more)" if len(empty) > 5 else ""
        raise OptionError(
            f"seqloader: the {name} dataset's sub-epoch {epoch} has {int(self.through[-1])} "
            f"sequences for {steps} steps x {world_size} ranks: {where}{more} would get only "
            "filler repeats, and RETURNN's engine cannot skip a step (the other ranks would wait "
            "for that rank forever). Fix: fewer ranks, or a smaller partition_epoch (more "
            "sequences per sub-epoch)"
        )


def returnn_names(ours: Sequence[str], theirs: Sequence[str]) -> dict[str, str]:
    """Our key -> RETURNN's name for it where they differ: an OggZip corpus's transcription is
    seqloader's ``text``, RETURNN's ``orth``.

    >>> returnn_names(["data", "text"], ["data", "classes", "orth", "raw"])
    {'text': 'orth'}
    """
    if "text" in ours and "orth" in theirs and "text" not in theirs and "orth" not in ours:
        return {"text": "orth"}
    return {}


def check_extern_data(extern_data: Mapping[str, Any], name: str, keys: Sequence[str]) -> None:
    """Every key ``extern_data`` declares is one of ``keys`` (what the loader delivers, in
    RETURNN's names); the engine would fail at the first step with a bare KeyError otherwise.

    >>> check_extern_data({"data": {"dim": 5}, "raw": {}}, "train", ["data", "orth"])
    Traceback (most recent call last):
    ...
    seqloader.errors.OptionError: seqloader.returnn.use_in_engine: extern_data declares ['raw'], ...
    """
    missing = sorted(set(extern_data) - {*keys, "seq_tag"})
    if missing:
        raise OptionError(
            f"seqloader.returnn.use_in_engine: extern_data declares {missing}, which the {name} "
            f"dataset as seqloader reads it does not have (it has {keys}). Fix: remove them from "
            f"extern_data, {_ROUTE}"
        )


def raw_batch(
    batch: Batch,
    packing: Mapping[str, Any] | None,
    first_idx: int = 0,
    rename: Mapping[str, str] | None = None,
) -> dict:
    """One seqloader ``Batch`` as RETURNN's ``collate_batch`` builds it: per key the padded
    tensor (or, with RETURNN's ``packed_tensors``, the sequences concatenated and
    ``<key>:packed``) and ``<key>:seq_len`` (int32), ``seq_tag`` (numpy str array), ``seq_idx``
    (position in this rank's sub-epoch); ``rename``: RETURNN's names for ours
    (``returnn_names``). Filler rows (``mask`` False) are left out.

    >>> b = next(iter(sl.SeqLoader(sl.MemorySource({"data": [np.ones((n, 2), "float32") for n in (3, 5)]}, tags=["a", "b"]), max_seqs=2).epoch(1)))
    >>> raw = raw_batch(b, None)
    >>> raw["data"].shape, raw["data:seq_len"].tolist(), raw["seq_tag"].tolist()
    (torch.Size([2, 5, 2]), [3, 5], ['a', 'b'])
    """
    keep = batch.mask.numpy().astype(bool)
    rows = np.flatnonzero(keep)
    if len(rows) == 0:
        raise OptionError(
            f"seqloader: epoch {batch.epoch} step {batch.step} holds only filler repeats (the "
            "sub-epoch has fewer sequences than steps x ranks); RETURNN's engine cannot skip a "
            "step. Fix: fewer ranks, or a smaller partition_epoch"
        )
    whole = bool(keep.all())
    from returnn.datasets.packing import packed_batch_key_opts

    raw: dict[str, Any] = {}
    for ours, tensor in batch.data.items():
        key = (rename or {}).get(ours, ours)
        lengths = batch.lengths[ours].to(torch.int32)
        if not whole:
            index = torch.from_numpy(rows)
            lengths = lengths[index]
            tensor = tensor[index][:, : int(lengths.max())] if tensor.ndim > 1 else tensor[index]
        tensor = _returnn_dtype(tensor)
        opts = None if packing is None else packed_batch_key_opts(dict(packing), key)
        if opts is not None and tensor.ndim > 1:
            raw[key] = torch.cat([tensor[i, :n] for i, n in enumerate(lengths.tolist())])
            raw[f"{key}:packed"] = opts
        else:
            raw[key] = tensor
        raw[f"{key}:seq_len"] = lengths
    raw["seq_tag"] = np.array([batch.seq_tags[i] for i in rows])
    raw["seq_idx"] = torch.arange(first_idx, first_idx + len(rows), dtype=torch.int64)
    return raw


def _returnn_dtype(tensor: torch.Tensor) -> torch.Tensor:
    """RETURNN's ``create_tensor``: uint32 -> int64, uint16 -> int32."""
    if tensor.dtype == torch.uint32:
        return tensor.to(torch.int64)
    if tensor.dtype == torch.uint16:
        return tensor.to(torch.int32)
    return tensor
