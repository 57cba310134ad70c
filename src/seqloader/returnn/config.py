"""``from_returnn_config``: a RETURNN config (file or dict) -> one ``SeqLoader`` per dataset it
defines, delivering every (sub-)epoch's sequences in RETURNN's own order (``seeding="returnn"``).

A config file is read by RETURNN's own ``Config.load_file`` (Python executed with the config's
namespace, or JSON), so whatever the file computes, it computes as in RETURNN. Only the data
options are read; model and training keys are not ours. Data options we cannot honour are errors
that name the key (and the dataset), never silently dropped.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, cast

from seqloader.errors import OptionError
from seqloader.plan.options import Distribution, PlanOptions
from seqloader.returnn.datasets import Converted, convert_dataset
from seqloader.torch.loader import SeqLoader, WorkerOptions

# global data options that change which sequences or batches RETURNN delivers, and that we refuse
REFUSED_GLOBAL = {
    "chunking": "cuts sequences into chunks",
    "torch_batching": "a custom batching pipeline",
    "custom_batching": "a custom batching pipeline",
    "packed_batch_size": "packed (unpadded) batch budgets",
    "packed_batch_size_train": "packed (unpadded) batch budgets",
    "packed_batch_size_dev": "packed (unpadded) batch budgets",
    "online_shuffle_batches": "a shuffle buffer of batches seeded from torch's RNG",
    "min_seq_length": "a lower bound on every key (seqloader's bounds only the length key)",
}
LOADER_OPTS = {"num_workers", "pin_memory", "prefetch_factor", "persistent_workers", "timeout"}
TRAIN, EVAL = "train", ("dev", "eval")


def import_returnn(feature: str) -> None:
    """RETURNN is needed to read config files and for targets vocabularies."""
    try:
        import returnn  # noqa: F401
    except ImportError as e:
        raise ImportError(
            f"{feature} needs the 'returnn' package; install it (pip install returnn), it is pure "
            "Python"
        ) from e


def read_config(config: str | os.PathLike | Mapping[str, Any]) -> dict[str, Any]:
    """The config's typed values: a dict as given, a file as RETURNN's ``Config.load_file``."""
    if isinstance(config, Mapping):
        return dict(config)
    path = os.fspath(config)
    if not os.path.isfile(path):
        raise OptionError(f"RETURNN config {path!r} does not exist")
    import_returnn("from_returnn_config(path)")
    from returnn.config import Config

    cfg = Config()
    cfg.load_file(path)
    if cfg.dict:
        raise OptionError(
            f"RETURNN config {path!r}: the old line-based format is not supported; write it as a "
            "Python config"
        )
    return dict(cfg.typed_dict)


def from_returnn_config(
    config: str | os.PathLike | Mapping[str, Any],
    *,
    rank: int | None = None,
    world_size: int | None = None,
) -> dict[str, SeqLoader]:
    """Loaders for the datasets ``config`` defines: ``train``, ``dev``, ``eval`` and each of
    ``eval_datasets``. ``rank`` / ``world_size`` as for ``SeqLoader`` (default: torch.distributed,
    else one process); ``torch_distributed`` in the config chooses how the train data is split."""
    values = read_config(config)
    for key, what in REFUSED_GLOBAL.items():
        if values.get(key):
            raise OptionError(f"RETURNN config option {key!r} ({what}) is not supported")
    specs: dict[str, tuple[Any, str]] = {}
    batching = values.get("batching")
    if values.get(TRAIN) is not None:
        specs[TRAIN] = (values[TRAIN], batching if isinstance(batching, str) else "default")
    for name in EVAL:  # RETURNN's dev/eval default: sorted
        if values.get(name) is not None:
            specs[name] = (values[name], "sorted")
    eval_datasets = values.get("eval_datasets") or {}
    if not isinstance(eval_datasets, Mapping):
        raise OptionError(f"RETURNN config eval_datasets: got {eval_datasets!r}, expected a dict")
    for name, spec in eval_datasets.items():
        specs[name] = (spec, "default")
    if not specs:
        raise OptionError("RETURNN config defines no dataset (train, dev, eval, eval_datasets)")
    workers = _worker_options(values)
    loaders = {}
    for name, (spec, default_ordering) in specs.items():
        spec = spec() if callable(spec) else spec
        converted = convert_dataset(name, spec, default_ordering)
        plan = _plan_options(name, converted, values)
        loaders[name] = SeqLoader(
            converted.source, plan=plan, workers=workers, rank=rank, world_size=world_size
        )
    return loaders


def _worker_options(values: Mapping[str, Any]) -> WorkerOptions:
    opts = values.get("torch_dataloader_opts") or {}
    if not isinstance(opts, Mapping):
        raise OptionError(f"RETURNN config torch_dataloader_opts: got {opts!r}, expected a dict")
    unknown = sorted(set(opts) - LOADER_OPTS)
    if unknown:
        raise OptionError(
            f"RETURNN config torch_dataloader_opts: {unknown} not supported; supported: "
            f"{sorted(LOADER_OPTS)}"
        )
    return WorkerOptions(**opts)


def _distribution(values: Mapping[str, Any]) -> str | None:
    opts = values.get("torch_distributed")
    if opts is None:
        return None
    if not isinstance(opts, Mapping):
        raise OptionError(f"RETURNN config torch_distributed: got {opts!r}, expected a dict")
    mode = opts.get("dataset_distribution", "random_seed_offset")  # RETURNN's default
    if mode not in ("random_seed_offset", "shard"):
        raise OptionError(
            f"RETURNN config torch_distributed dataset_distribution: got {mode!r}, expected "
            "'random_seed_offset' or 'shard'"
        )
    return str(mode)


def _per_split(values: Mapping[str, Any], key: str, train: bool) -> Any:
    """RETURNN's ``batch_size_train`` / ``batch_size_dev`` override ``batch_size``."""
    return values.get(f"{key}_{'train' if train else 'dev'}", values.get(key))


def _plan_options(name: str, c: Converted, values: Mapping[str, Any]) -> PlanOptions:
    train = name == TRAIN
    where = f"{name} dataset ({c.kind})"
    keys = c.source.keys
    max_frames, length_key = _batch_size(where, _per_split(values, "batch_size", train), keys)
    max_seqs = values.get("max_seqs", -1)
    distribution = _distribution(values)
    if not train and distribution is not None:
        distribution = "random_seed_offset"  # RETURNN evaluates the whole set on every rank
    if (
        train
        and distribution == "random_seed_offset"
        and c.random_seed_offset is not None
        and values.get("torch_distributed") is not None
    ):
        raise OptionError(
            f"{where}: random_seed_offset={c.random_seed_offset} with torch_distributed "
            "dataset_distribution 'random_seed_offset' gives every rank RETURNN's same order "
            "(each rank the same data); remove one of them"
        )
    offset = c.random_seed_offset
    if offset is None:
        offset = int(values.get("dataset_random_seed_offset", 0))
    return PlanOptions(
        ordering=c.ordering,
        max_seqs=None if max_seqs in (None, -1) else max_seqs,
        max_frames=max_frames,
        max_seq_length=_length_limit(where, values.get("max_seq_length"), keys),
        partition_epoch=c.partition_epoch,
        distribution=cast(Distribution, distribution or "shard"),  # PlanOptions checks it
        seed=offset,
        length_key=length_key,
        seeding="returnn",
    )


def _batch_size(where: str, value: Any, keys: tuple[str, ...]) -> tuple[int | None, str | None]:
    """RETURNN's ``batch_size``: padded frames; a dict names the key it counts."""
    if value is None:
        raise OptionError(f"{where}: the RETURNN config has no batch_size (RETURNN needs one too)")
    if isinstance(value, Mapping):
        if len(value) != 1:
            raise OptionError(
                f"{where}: batch_size {dict(value)!r} limits several keys; seqloader bounds one "
                "key's padded frames: give one key"
            )
        ((key, limit),) = value.items()
        if key not in keys:
            raise OptionError(f"{where}: batch_size key {key!r} is not one of {list(keys)}")
        return int(limit), key
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise OptionError(f"{where}: batch_size {value!r}; expected an int or a one-key dict")
    return int(value), None


def _length_limit(where: str, value: Any, keys: tuple[str, ...]) -> Any:
    """RETURNN's ``max_seq_length``: a number limits every key, a dict the keys it names."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        unknown = sorted(set(value) - set(keys))
        if unknown:
            raise OptionError(f"{where}: max_seq_length keys {unknown} are not in {list(keys)}")
        return {k: int(v) for k, v in value.items()}
    return {k: int(value) for k in keys}
