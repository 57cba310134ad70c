"""``from_returnn_config``: a RETURNN config (file or dict) -> one ``SeqLoader`` per dataset it
defines, delivering every (sub-)epoch's sequences in RETURNN's own order (``seeding="returnn"``).

A config file is read by RETURNN's own ``Config.load_file`` (Python executed with the config's
namespace, or JSON), so whatever the file computes, it computes as in RETURNN. Only the data
options are read; model and training keys are not ours. Data options we cannot honour are errors
that name the key (and the dataset), never silently dropped.
"""

from __future__ import annotations

import os
import sys
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, cast

import numpy as np

from seqloader.errors import OptionError
from seqloader.extras import require
from seqloader.plan.options import Distribution, PlanOptions
from seqloader.returnn.combined import refuse_sharding
from seqloader.returnn.datasets import Converted, convert_dataset
from seqloader.returnn.distrib_files import sharded, with_sharding_fix
from seqloader.returnn.paths import plain_value
from seqloader.returnn.pre_process import speed_conversion
from seqloader.returnn.stubs import find_stub, stub_imports
from seqloader.returnn.tf_engine import is_tf_config, tf_chunking
from seqloader.returnn.view import ReturnnView
from seqloader.sources.base import length_variants
from seqloader.torch.loader import SeqLoader
from seqloader.trainer.checks import CheckOptions
from seqloader.trainer.loader_options import WorkerOptions

# global data options that change which sequences or batches RETURNN delivers, and that we refuse:
# what they do, and what to do instead
REFUSED_GLOBAL = {
    "custom_batching": "a user-written batching function; remove it and use batch_size / max_seqs",
    "online_shuffle_batches": "a shuffle buffer of batches seeded from torch's global RNG, so no "
    "run reproduces it; remove it (seqloader's orderings, e.g. 'laplace:.1000', already mix "
    "batches deterministically)",
    "packed_batch_cost": "a user cost function per sequence; no native form: use "
    "packed_batch_size (seqloader's max_packed_frames) or batch_size alone",
    "packed_batch_cost_train": "a user cost function per sequence; no native form: use "
    "packed_batch_size or batch_size alone",
    "packed_batch_cost_dev": "a user cost function per sequence; no native form: use "
    "packed_batch_size or batch_size alone",
}
# RETURNN's batching options, which a torch_batching dict replaces (for train and dev alike)
BATCHING = tuple(
    f"{key}{split}"
    for key in ("batch_size", "max_seqs", "packed_batch_size", "packed_batch_cost")
    for split in ("", "_train", "_dev")
)
BATCHING_ARGS = ("batch_size", "max_seqs", "packed_batch_size", "packed_batch_cost")
NATIVE_BATCHING = (
    "seqloader plans its batches ahead from the lengths (RETURNN's BatchingIterDataPipe: "
    "batch_size, max_seqs, packed_batch_size; orderings such as 'laplace:.1000' group similar "
    "lengths, 'buckets:N' in length buckets with every rank in the same bucket)"
)
LOADER_OPTS = {"num_workers", "pin_memory", "prefetch_factor", "persistent_workers", "timeout"}
TRAIN, EVAL = "train", ("dev", "eval")


def read_config(
    config: str | os.PathLike | Mapping[str, Any] | Any, *, stub_modules: bool = False
) -> dict[str, Any]:
    """The config's typed values: a dict as given, a file as RETURNN's ``Config.load_file``, an
    object with ``config`` / ``post_config`` dicts (sisyphus' ``ReturnnConfig``) as their union.

    ``stub_modules=True``: imports the file makes that fail (its model code, e.g. an experiments
    package) resolve to stand-ins while it is read; a warning names them. A data option that
    then holds a stand-in value is an error naming it."""
    if not isinstance(config, Mapping | str | os.PathLike) and isinstance(
        getattr(config, "config", None), Mapping
    ):
        post = getattr(config, "post_config", None) or {}
        return {k: plain_value(v) for k, v in {**config.config, **post}.items()}
    if isinstance(config, Mapping):
        return {k: plain_value(v) for k, v in config.items()}
    path = os.fspath(config)
    if not os.path.isfile(path):
        raise OptionError(f"RETURNN config {path!r} does not exist")
    cfg = require("returnn.config", "from_returnn_config(path)").Config()
    if stub_modules:
        with stub_imports(path) as stubbed:  # the name RETURNN compiles the file under
            cfg.load_file(path)
        if stubbed:
            warnings.warn(
                f"RETURNN config {path!r}: stubbed the modules it imports that are not installed "
                f"here: {', '.join(sorted(stubbed))} (model code; the data options must not use "
                "them)",
                stacklevel=2,
            )
    else:
        try:
            cfg.load_file(path)
        except ImportError as e:
            raise OptionError(
                f"RETURNN config {path!r} imports {e.name or e}, which is not installed here "
                f"({e}); its data part usually needs none of it: pass stub_modules=True (command "
                "line: --stub-modules) to read the config with the missing modules stubbed "
                "(named in a warning)"
            ) from e
    if cfg.dict:
        raise OptionError(
            f"RETURNN config {path!r} was read in RETURNN's old line-based format, which is not "
            "supported: RETURNN executes a config as Python only when its first line starts "
            "with '#!' (JSON when it starts with '{'). Fix: make '#!rnn.py' the first line of "
            "the file, or pass the config's values as a dict: from_returnn_config({...})"
        )
    return {k: plain_value(v) for k, v in cfg.typed_dict.items()}


@dataclass(frozen=True)
class ReturnnDataset:
    """One dataset of a RETURNN config as seqloader plans it: the source (in RETURNN's order
    hints) and the loader options the config's data options map to."""

    name: str
    source: ReturnnView
    plan: PlanOptions
    workers: WorkerOptions
    #: RETURNN's CombinedDataset delivers the keys of the other sub-datasets empty by design:
    #: no warning about empty sequences then
    checks: CheckOptions | None = None

    def loader(self, rank: int | None, world_size: int | None) -> SeqLoader:
        """The ``SeqLoader`` of this dataset on ``rank`` of ``world_size``."""
        return SeqLoader(
            self.source,
            plan=self.plan,
            workers=self.workers,
            checks=self.checks,
            rank=rank,
            world_size=world_size,
        )


def returnn_datasets(
    config: str | os.PathLike | Mapping[str, Any] | Any,
    *,
    stub_modules: bool = False,
    only: str | None = None,
    native_speed_perturb: bool = False,
) -> dict[str, ReturnnDataset]:
    """The datasets ``config`` defines (``train``, ``dev``, ``eval``, each of ``eval_datasets``;
    ``only``: just that one), converted; what ``from_returnn_config`` builds its loaders from
    (``native_speed_perturb`` as there)."""
    values = torch_batching(read_config(config, stub_modules=stub_modules))
    for key, what in REFUSED_GLOBAL.items():
        if values.get(key):
            raise OptionError(
                f"RETURNN config option {key!r} = {values[key]!r}: not supported: {what}"
            )
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
    if only is not None:
        if only not in specs:
            raise OptionError(f"RETURNN config: no dataset {only!r}; it defines {sorted(specs)}")
        specs = {only: specs[only]}
    out = {}
    for name, (spec, default_ordering) in specs.items():
        spec = spec() if callable(spec) else spec
        stub = find_stub(spec, name)
        if stub:
            raise OptionError(
                f"{name} dataset: {stub} comes from a module stubbed while reading the config; "
                "the data options cannot use it: install that module, or write the value"
            )
        with speed_conversion(native_speed_perturb) as native:
            converted = convert_dataset(name, spec, default_ordering)
        if native and length_variants(converted.source) is None:
            raise OptionError(
                f"{name} dataset: the speed perturbation of {', '.join(native)} cannot be planned "
                f"inside {type(converted.source).__name__}, which does not pass length variants "
                "on; convert without native_speed_perturb (it is then refused), or read that "
                "corpus with seqloader.AudioSource(..., speed=...) directly"
            )
        if name == TRAIN and _distribution(values) == "shard":
            refuse_sharding(name, converted.kind)
            converted = sharded(converted)  # RETURNN shards a DistributeFilesDataset's files
        if isinstance(spec, Mapping) and spec.get("class") == "DistributeFilesDataset":
            converted = with_sharding_fix(converted, spec, int(values.get("behavior_version") or 0))
        plan = _plan_options(name, converted, values)
        _check_fits(name, converted, plan, values)
        workers = _worker_options(values, converted.num_workers)
        checks = CheckOptions(empty="off") if converted.kind == "CombinedDataset" else None
        out[name] = ReturnnDataset(name, converted.source, plan, workers, checks)
    return out


def from_returnn_config(
    config: str | os.PathLike | Mapping[str, Any] | Any,
    *,
    rank: int | None = None,
    world_size: int | None = None,
    stub_modules: bool = False,
    native_speed_perturb: bool = False,
) -> dict[str, SeqLoader]:
    """Loaders for the datasets ``config`` defines: ``train``, ``dev``, ``eval`` and each of
    ``eval_datasets``. ``rank`` / ``world_size`` as for ``SeqLoader`` (default: torch.distributed,
    else one process); ``torch_distributed`` in the config chooses how the train data is split.
    ``stub_modules=True`` reads a config whose model code is not installed (``read_config``).
    ``native_speed_perturb=True``: an audio ``pre_process`` that is a speed perturbation becomes
    seqloader's planned one (``AudioSource(speed=SpeedPerturb(factors))``: RETURNN's factors,
    seqloader's draws, exact planned lengths); without it such a config is refused.

    >>> sl.write_hdf("train.hdf", sl.MemorySource({"data": [np.ones((n, 2), "float32") for n in (3, 5, 4)]}))
    >>> config = {"train": {"class": "HDFDataset", "files": ["train.hdf"]}, "batch_size": 10, "max_seqs": 2}
    >>> loaders = from_returnn_config(config)
    >>> loaders["train"].steps(1)
    2
    """
    return {
        name: d.loader(rank, world_size)
        for name, d in returnn_datasets(
            config, stub_modules=stub_modules, native_speed_perturb=native_speed_perturb
        ).items()
    }


def torch_batching(values: dict[str, Any]) -> dict[str, Any]:
    """RETURNN's ``torch_batching``: ``{"class": "BatchingIterDataPipe", ...}`` is RETURNN's own
    batching with the dict's arguments instead of the config's batching options (for train and
    dev alike): the values with those options replaced. Anything else (a function, another class)
    is refused, naming why and the native equivalent.

    >>> torch_batching({"batch_size": 5, "torch_batching": {"class": "BatchingIterDataPipe", "batch_size": 9}})
    {'batch_size': 9}
    """
    spec = values.get("torch_batching")
    if spec is None:
        return values
    where = f"RETURNN config option 'torch_batching' = {spec!r}"
    if callable(spec):
        raise OptionError(
            f"{where}: not supported: a user-written batching function, run over the stream of "
            "sequences while training reads them, so its batches (and whether it drops, reorders "
            f"or repeats sequences) are known only then; {NATIVE_BATCHING}. Remove torch_batching "
            "and set batch_size / max_seqs (a batch made of one kind of data: a CombinedDataset's "
            "train_step can branch on which keys are empty)"
        )
    if not isinstance(spec, Mapping) or not isinstance(spec.get("class"), str):
        raise OptionError(f"{where}: expected a dict with a 'class' or a function (RETURNN too)")
    kind = spec["class"]
    if kind != "BatchingIterDataPipe":
        why = {
            "BucketOrderingIterDataPipe": "it holds sequences back in length buckets until a "
            "bucket is full and drops those longer than its largest bucket (its random bucket "
            "choice is seeded from torch's global RNG), a reordering of the read stream that "
            "seqloader does not plan"
        }.get(kind, "not a batching class RETURNN's torch engine builds batches with here")
        raise OptionError(f"{where}: class {kind!r} is not supported: {why}; {NATIVE_BATCHING}")
    args = {k: v for k, v in spec.items() if k != "class"}
    unknown = sorted(set(args) - set(BATCHING_ARGS))
    if unknown:
        raise OptionError(
            f"{where}: {unknown} are no arguments of BatchingIterDataPipe (RETURNN fails on "
            f"them); it takes {list(BATCHING_ARGS)}"
        )
    for key, value in args.items():
        if callable(value) and key != "packed_batch_cost":
            raise OptionError(
                f"{where}: {key} is a function (of the epoch and position while reading); "
                f"seqloader plans with fixed limits: give {key} as a number or a dict of keys"
            )
    out = {k: v for k, v in values.items() if k not in BATCHING and k != "torch_batching"}
    size = args.get("batch_size", 1)  # RETURNN's default: one sequence a batch
    out["batch_size"] = sys.maxsize if size is None else size  # None: no limit, as RETURNN
    for key in BATCHING_ARGS[1:]:
        if args.get(key) is not None:
            out[key] = args[key]
    return out


def _check_fits(name: str, c: Converted, plan: PlanOptions, values: Mapping[str, Any]) -> None:
    """A sequence longer than ``batch_size`` (and not dropped by ``max_seq_length`` or a seq
    list) is an error in the config's words; RETURNN would put it in a batch of its own."""
    keys = c.source.keys
    bounds: dict[str, int] = {}
    if isinstance(plan.max_frames, int):
        bounds = {plan.length_key or keys[0]: plan.max_frames}
    elif isinstance(plan.max_frames, Mapping):
        per_key: Mapping[str, int] = plan.max_frames
        bounds = {k: int(per_key.get(k, per_key.get("*", 0))) for k in keys}
        bounds = {k: v for k, v in bounds.items() if v > 0}
    keep = np.ones(len(c.source), dtype=bool)
    for mask in c.source.excluded().values():
        keep &= ~np.asarray(mask, dtype=bool)
    if isinstance(plan.max_seq_length, Mapping):
        for k, limit in plan.max_seq_length.items():
            keep &= c.source.lengths(k) <= limit
    for key, bound in bounds.items():
        lengths = c.source.lengths(key)
        over = np.flatnonzero(keep & (lengths > bound))
        if not len(over):
            continue
        i = int(over[0])
        option = (
            "batch_size"
            if "batch_size" in values
            else f"batch_size_{'train' if name == TRAIN else 'dev'}"
        )
        shown = str(bound) if isinstance(plan.max_frames, int) else f"{{{key!r}: {bound}}}"
        raise OptionError(
            f"{name} dataset ({c.kind}): {option} {shown} is smaller than sequence "
            f"{c.source.tag(i)!r} (length {int(lengths[i])} of {key!r}; {len(over)} sequence(s) "
            "like this). RETURNN gives such a sequence a batch of its own; seqloader plans no "
            f"batch over the budget. Fix: raise {option} to >= {int(lengths[over].max())} for "
            f"{key!r}, or set max_seq_length = {{{key!r}: {bound}}} to drop them (counted in the "
            "report)"
        )


def _worker_options(values: Mapping[str, Any], dataset_workers: int | None) -> WorkerOptions:
    """``torch_dataloader_opts``; a ``MultiProcDataset``'s ``num_workers`` where it sets none."""
    opts = values.get("torch_dataloader_opts") or {}
    if not isinstance(opts, Mapping):
        raise OptionError(f"RETURNN config torch_dataloader_opts: got {opts!r}, expected a dict")
    unknown = sorted(set(opts) - LOADER_OPTS)
    if unknown:
        raise OptionError(
            f"RETURNN config torch_dataloader_opts: {unknown} not supported; supported: "
            f"{sorted(LOADER_OPTS)} (seqloader builds its own collate and sampler)"
        )
    opts = dict(opts)
    if dataset_workers is not None and "num_workers" not in opts:
        opts["num_workers"] = dataset_workers
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
    max_frames, length_key = _batch_size(where, _per_split(values, "batch_size", train), c.source)
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
    # native field -> (RETURNN option, its value)
    native, origin = dict(c.native), {k: (k, v) for k, v in c.native.items()}
    if isinstance(max_frames, Mapping):
        origin["max_frames"] = ("batch_size", _per_split(values, "batch_size", train))
    chunks = values  # a TF-engine config: the chunks of RETURNN's TF engine (tf_engine.py)
    chunking = values.get("chunking")
    if is_tf_config(values) and chunking not in (None, 0, "0", "") and not callable(chunking):
        tf_chunks, tf_min = tf_chunking(where, values, c.source, train)
        chunks = {**values, "chunking": tf_chunks, "min_chunk_size": tf_min}
    for field, key in (
        ("chunking", "chunking"),
        ("min_chunk_size", "min_chunk_size"),
        ("min_seq_length", "min_seq_length"),
        ("max_packed_frames", "packed_batch_size"),
    ):
        value = chunks.get(key) if key != "packed_batch_size" else _per_split(values, key, train)
        if key == "chunking" and callable(value):
            raise OptionError(
                f"{where}: chunking {value!r} is a user function; seqloader plans chunks itself: "
                "give chunking as 'size:step' or {key: size} (its native chunking=)"
            )
        if value in (None, 0, "0", "", -1) or (key == "min_chunk_size" and not value):
            continue
        native[field] = _every_key(value) if field != "chunking" else value
        origin[field] = (key, value)
    try:
        plan = PlanOptions(
            ordering=c.ordering,
            max_seqs=None if max_seqs in (None, -1) else max_seqs,
            max_frames=max_frames,
            max_seq_length=_length_limit(where, values.get("max_seq_length"), keys),
            partition_epoch=c.partition_epoch,
            distribution=cast(Distribution, distribution or "shard"),  # PlanOptions checks it
            seed=offset,
            length_key=length_key,
            seeding="returnn",
            **native,
        )
    except OptionError as e:
        named = ", ".join(f"{k} = {v!r}" for k, v in origin.values())
        raise OptionError(f"{where}: RETURNN's {named}: {e}" if named else f"{where}: {e}") from e
    return plan


def _every_key(value: Any) -> Any:
    """RETURNN's NumbersDict: a number applies to every key (seqloader's ``{"*": v}``)."""
    return {"*": int(value)} if isinstance(value, int | float) else dict(value)


def _batch_size(
    where: str, value: Any, source: Any
) -> tuple[int | dict[str, int] | None, str | None]:
    """RETURNN's ``batch_size``: padded frames; a dict names the key it counts."""
    keys = source.keys
    if value is None:
        raise OptionError(f"{where}: the RETURNN config has no batch_size (RETURNN needs one too)")
    if isinstance(value, Mapping):
        unknown = sorted(set(value) - set(keys))
        if unknown:
            raise OptionError(
                f"{where}: batch_size keys {unknown} are not keys of the data {list(keys)} "
                "(RETURNN would bound nothing by them): name keys the dataset has"
            )
        if len(value) == 1:
            ((key, limit),) = value.items()
            return int(limit), key
        return {k: int(v) for k, v in value.items()}, None  # each named key bounded, as RETURNN
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise OptionError(f"{where}: batch_size {value!r}; expected an int or a dict of keys")
    try:
        return int(value), longest_key(where, int(value), source)
    except OptionError:  # seqloader's per-key bound: exact everywhere
        return {"*": int(value)}, None


def longest_key(where: str, batch_size: int, source: Any) -> str | None:
    """RETURNN's int ``batch_size`` bounds every key's padded length (``n * max_len <= B`` for
    each): the same as bounding one key wherever that key is the longest of every sequence
    (speech: ``data`` frames; translation: often the targets). None: ``data`` is that key."""
    keys = source.keys
    lengths = {k: np.asarray(source.lengths(k)) for k in keys}
    for k in sorted(keys, key=lambda k: k != "data"):
        if all(bool(np.all(lengths[k] >= lengths[j])) for j in keys):
            return None if k == "data" else k
    a, b = keys[0], next(j for j in keys[1:] if bool(np.any(lengths[j] > lengths[keys[0]])))
    i = int(np.flatnonzero(lengths[b] > lengths[a])[0])
    j = int(np.flatnonzero(lengths[a] > lengths[b])[0]) if np.any(lengths[a] > lengths[b]) else i
    raise OptionError(
        f"{where}: batch_size {batch_size} bounds the padded length of every key (RETURNN), but "
        f"no key is the longest of every sequence: sequence {source.tag(i)!r} has {b!r} "
        f"{int(lengths[b][i])} > {a!r} {int(lengths[a][i])}, sequence {source.tag(j)!r} "
        f"{a!r} {int(lengths[a][j])} vs {b!r} {int(lengths[b][j])}; seqloader bounds one key, so "
        f"its batches would differ: give batch_size as a dict naming the key to bound (e.g. "
        f"{{{a!r}: {batch_size}}}; RETURNN then bounds that key only)"
    )


def _length_limit(where: str, value: Any, keys: tuple[str, ...]) -> Any:
    """RETURNN's ``max_seq_length``: a number limits every key, a dict the keys it names."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        unknown = sorted(set(value) - set(keys))
        if unknown:  # RETURNN's LenFilterDataPipe compares only the keys a sequence has
            warnings.warn(
                f"{where}: max_seq_length names {unknown}, which the data does not have (its "
                f"keys: {list(keys)}); ignored, as RETURNN ignores them",
                stacklevel=4,
            )
        limits = {k: int(v) for k, v in value.items() if k in keys}
        return limits or None
    return {k: int(value) for k in keys}
