"""RETURNN dataset dicts -> seqloader sources planned in RETURNN's order (``ReturnnView``).

Every key of a dataset dict is either supported (mapped below), accepted as having no effect on
the data (``NO_EFFECT``, with the reason), or an error naming the key and the dataset.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from seqloader.audio.manifest import open_manifest
from seqloader.audio.returnn_features import ReturnnFeatures
from seqloader.audio.source import AudioSource
from seqloader.errors import OptionError
from seqloader.returnn.view import ReturnnView
from seqloader.returnn.vocab import ReturnnVocab
from seqloader.sources.base import Source
from seqloader.sources.concat import ConcatSource
from seqloader.sources.hdf import HDFSource
from seqloader.sources.joined import ZipSource

COMMON = ("class", "seq_ordering", "partition_epoch", "random_seed_offset", "seq_list_filter_file")
NO_EFFECT = {
    "name": "RETURNN's name for logs",
    "cache_byte_size": "RETURNN's in-memory cache of HDFDataset (our reads need none)",
    "use_cache_manager": "copies files to a cluster-local cache first; the data is the same",
}
EXCLUDED_REASON = "not in seq_list_filter_file"


@dataclass(frozen=True)
class Converted:
    """One RETURNN dataset as seqloader sees it: the source and its own planning options."""

    source: ReturnnView
    ordering: str
    partition_epoch: int
    random_seed_offset: int | None  # None: RETURNN's default (global offset, per-rank step)
    kind: str


def convert_dataset(name: str, opts: dict[str, Any], default_ordering: str) -> Converted:
    """``opts`` is a RETURNN dataset dict (``{"class": "HDFDataset", ...}``)."""
    if not isinstance(opts, dict) or "class" not in opts:
        raise OptionError(
            f"{name} dataset: got {opts!r}; expected a dict with a 'class' (RETURNN's string "
            "dataset specs are not supported: write the dict)"
        )
    kind = opts["class"]
    if kind == "MetaDataset":
        return _meta(name, opts)
    if kind == "ConcatDataset":
        return _concat(name, opts)
    if kind == "CombinedDataset":
        raise OptionError(
            f"{name} dataset: class 'CombinedDataset' is not supported: its orderings interleave "
            "or sample the sub-datasets with RETURNN's RandomState per sequence, which seqloader "
            "does not reproduce; build seqloader.ConcatSource(...) with mix={...} instead (exact "
            "per-corpus epochs, docs/corpora.md)"
        )
    if kind not in _BUILDERS:
        raise OptionError(
            f"{name} dataset: class {kind!r} is not supported; supported: "
            f"{sorted([*_BUILDERS, 'ConcatDataset', 'MetaDataset'])}"
        )
    own_keys, build = _BUILDERS[kind]
    unknown = sorted(set(opts) - set(COMMON) - set(NO_EFFECT) - set(own_keys))
    if unknown:
        raise OptionError(
            f"{name} dataset ({kind}): option(s) {unknown} not supported; supported: "
            f"{sorted({*COMMON, *own_keys})}, accepted without effect: {sorted(NO_EFFECT)}"
        )
    where = f"{name} dataset ({kind})"
    inner, indices, order_lengths = build(where, opts)
    view = ReturnnView(inner, indices=indices, order_lengths=order_lengths)
    filter_file = opts.get("seq_list_filter_file")
    if filter_file:
        listed = set(read_tag_list(where, filter_file))
        mask = np.fromiter((t not in listed for t in view.tags), dtype=bool, count=len(view))
        view = ReturnnView(
            inner, indices=indices, order_lengths=order_lengths, excluded={EXCLUDED_REASON: mask}
        )
    partition_epoch = opts.get("partition_epoch") or 1
    offset = opts.get("random_seed_offset")
    if offset is not None and (not isinstance(offset, int) or offset < 0):
        raise OptionError(f"{where}: random_seed_offset {offset!r}, expected an int >= 0")
    ordering = opts.get("seq_ordering", default_ordering)
    if not isinstance(ordering, str):
        raise OptionError(f"{where}: seq_ordering {ordering!r}; a function is not supported")
    return Converted(view, ordering, int(partition_epoch), offset, kind)


META_OWN = ("class", "datasets", "data_map", "seq_order_control_dataset", "random_seed_offset")


def _meta(name: str, opts: dict[str, Any]) -> Converted:
    """RETURNN's ``MetaDataset`` with ``seq_order_control_dataset`` -> ``ZipSource``: the control
    dataset's own options decide the order (RETURNN ignores the MetaDataset's), sub-datasets
    inherit its ``random_seed_offset``; keys joined by tag through ``data_map``."""
    where = f"{name} dataset (MetaDataset)"
    unknown = sorted(set(opts) - set(META_OWN) - set(NO_EFFECT))
    if unknown:
        raise OptionError(
            f"{where}: option(s) {unknown} not supported; supported: {sorted(META_OWN)} (with "
            "seq_order_control_dataset set, RETURNN orders by the control dataset's own "
            "seq_ordering, partition_epoch and seq_list_filter_file: set them there)"
        )
    control = opts.get("seq_order_control_dataset")
    datasets, data_map = opts.get("datasets") or {}, opts.get("data_map") or {}
    if not control:
        raise OptionError(
            f"{where}: seq_order_control_dataset is not set (RETURNN then orders by the "
            "MetaDataset's own options over the default dataset's tags): not supported; set it"
        )
    used = {sub for sub, _ in data_map.values()}
    missing = sorted((used | {control}) - set(datasets))
    if missing:
        raise OptionError(f"{where}: datasets {missing} are named but not defined in 'datasets'")
    offset = opts.get("random_seed_offset")
    converted = {}
    for sub in sorted(used | {control}):
        sub_opts = dict(datasets[sub])
        if offset is not None:
            sub_opts.setdefault("random_seed_offset", offset)  # RETURNN: inherited from the parent
        converted[sub] = convert_dataset(f"{name}.{sub}", sub_opts, "default")
    mapped = {
        out: (sub, "text" if key == "orth" and converted[sub].kind == "OggZipDataset" else key)
        for out, (sub, key) in data_map.items()
    }
    joined = ZipSource({s: c.source for s, c in converted.items()}, mapped, control=control)
    ctrl = converted[control]
    order = ctrl.source.order_lengths()
    if order is None:  # RETURNN sorts by the control's own first length column
        keys = ctrl.source.keys
        order = ctrl.source.lengths("data" if "data" in keys else keys[0])
    index = joined.source_index(control)  # [n] the control's own order and subset
    view = ReturnnView(
        joined,
        order_lengths=np.asarray(order)[index],
        excluded={k: np.asarray(m)[index] for k, m in ctrl.source.excluded().items()},
    )
    return Converted(
        view, ctrl.ordering, ctrl.partition_epoch, ctrl.random_seed_offset, "MetaDataset"
    )


def _concat(name: str, opts: dict[str, Any]) -> Converted:
    """RETURNN's ``ConcatDataset`` -> ``ConcatSource``, where RETURNN's order is one seqloader can
    plan: RETURNN goes through the sub-datasets one after another, each in its own order, so only
    sub-datasets in ``default`` order without ``partition_epoch`` give a single order (the
    concatenation as stored); anything else is refused, naming the sub-dataset."""
    where = f"{name} dataset (ConcatDataset)"
    unknown = sorted(set(opts) - {"class", "datasets"} - set(NO_EFFECT))
    if unknown:
        raise OptionError(
            f"{where}: option(s) {unknown} not supported (RETURNN's ConcatDataset takes its order "
            "from the sub-datasets, in sequence); supported: ['datasets']"
        )
    subs = opts.get("datasets") or []
    if not isinstance(subs, list | tuple) or not subs:
        raise OptionError(f"{where}: 'datasets' must be a non-empty list of dataset dicts")
    converted = []
    for i, sub in enumerate(subs):
        c = convert_dataset(f"{name}.datasets[{i}]", sub, "default")
        if c.ordering != "default" or c.partition_epoch != 1:
            raise OptionError(
                f"{name}.datasets[{i}] ({c.kind}): seq_ordering={c.ordering!r}, "
                f"partition_epoch={c.partition_epoch} inside a ConcatDataset: RETURNN orders each "
                "part on its own and concatenates, which is no single order seqloader plans; use "
                "'default' order without partition_epoch there, or seqloader's ConcatSource + mix"
            )
        converted.append(c)
    joined = ConcatSource({f"{i}": c.source for i, c in enumerate(converted)})
    reasons = sorted({r for c in converted for r in c.source.excluded()})
    excluded = {
        r: np.concatenate(
            [c.source.excluded().get(r, np.zeros(len(c.source), dtype=bool)) for c in converted]
        )
        for r in reasons
    }
    return Converted(ReturnnView(joined, excluded=excluded), "default", 1, None, "ConcatDataset")


def read_tag_list(where: str, path: str) -> list[str]:
    """RETURNN's seq list file: one tag per line, optionally gzipped."""
    if str(path).endswith(".pkl"):
        raise OptionError(f"{where}: seq list {path!r}: pickled lists are not supported")
    try:
        if str(path).endswith(".gz"):
            with gzip.open(path, "rt", encoding="utf-8") as f:
                return f.read().splitlines()
        with open(path, encoding="utf-8") as f:
            return f.read().splitlines()
    except OSError as e:
        raise OptionError(f"{where}: cannot read the seq list {path!r}: {e}") from e


Built = tuple[Source, np.ndarray | None, np.ndarray | None]


def _hdf(where: str, opts: dict[str, Any]) -> Built:
    files = opts.get("files")
    if isinstance(files, str | os.PathLike):
        files = [files]
    if not files:
        raise OptionError(f"{where}: 'files' is empty; expected a list of HDF files")
    source = HDFSource(list(files))
    return source, None, None  # RETURNN sorts by the first seqLengths column: our length key


def _oggzip(where: str, opts: dict[str, Any]) -> Built:
    paths = opts.get("path")
    path_list = [paths] if isinstance(paths, str | os.PathLike) else list(paths or [])
    if not path_list or not all(os.fspath(p).endswith(".zip") for p in path_list):
        raise OptionError(f"{where}: 'path' {paths!r}; expected one or more NAME.zip files")
    if opts.get("zip_audio_files_have_name_as_prefix", True) is not True:
        raise OptionError(f"{where}: zip_audio_files_have_name_as_prefix=False is not supported")
    for key in ("targets_post_process", "fixed_random_subset", "epoch_wise_filter"):
        if opts.get(key):
            raise OptionError(f"{where}: option {key!r} is not supported (it changes the corpus)")
    audio, targets = opts.get("audio"), opts.get("targets")
    features = None
    if audio is not None:
        if not isinstance(audio, dict):
            raise OptionError(f"{where}: audio {audio!r}; expected a dict of feature options")
        try:
            rate = _first_rate(path_list) if audio.get("sample_rate") is None else None
            features = ReturnnFeatures.from_returnn(audio, sample_rate=rate)
        except OptionError as e:
            raise OptionError(f"{where}: {e}") from e
    vocab = None
    if targets is not None:
        if not isinstance(targets, dict):
            raise OptionError(
                f"{where}: targets {targets!r}; expected a dict of vocabulary options"
            )
        vocab = ReturnnVocab(targets)
    keys = [k for k, on in (("data", features), ("text", True), ("classes", vocab)) if on]
    source = AudioSource(path_list, keys=keys, vocab=vocab, features=features)
    durations = source.durations()
    order_lengths = (durations * 100).astype(np.int64)  # RETURNN: int(duration * 100)
    indices = None
    if opts.get("segment_file"):
        listed = set(read_tag_list(where, opts["segment_file"]))
        indices = np.array([i for i, t in enumerate(source.tags) if t in listed], dtype=np.int64)
        order_lengths = order_lengths[indices]
        if not len(indices):
            raise OptionError(f"{where}: no sequence of the corpus is in segment_file")
    return source, indices, order_lengths


def _first_rate(paths: Sequence[str | os.PathLike]) -> int:
    """The rate of the corpus's first audio file (RETURNN's ``sample_rate=None``): decoded once."""
    manifest = open_manifest(paths[0])
    try:
        return manifest.read_audio(0)[1]
    finally:
        manifest.close()


_BUILDERS: dict[str, tuple[tuple[str, ...], Callable[[str, dict[str, Any]], Built]]] = {
    "HDFDataset": (("files",), _hdf),
    "OggZipDataset": (
        (
            "path",
            "audio",
            "targets",
            "segment_file",
            "zip_audio_files_have_name_as_prefix",
            "targets_post_process",
            "fixed_random_subset",
            "epoch_wise_filter",
        ),
        _oggzip,
    ),
}
