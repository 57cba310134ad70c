"""RETURNN dataset dicts -> seqloader sources planned in RETURNN's order (``ReturnnView``).

Every key of a dataset dict is either supported (mapped below), accepted as having no effect on
the data (``NO_EFFECT``, with the reason), or an error naming the key and the dataset.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from seqloader.audio.manifest import OggZip, open_manifest
from seqloader.audio.returnn_features import ReturnnFeatures
from seqloader.audio.source import AudioSource
from seqloader.errors import OptionError
from seqloader.returnn.combined import combined
from seqloader.returnn.distrib_files import distribute_files
from seqloader.returnn.huggingface import HF_OWN, check_ordering, huggingface
from seqloader.returnn.librispeech import OWN as LIBRISPEECH_OWN
from seqloader.returnn.librispeech import (
    librispeech_epoch_filter,
    librispeech_source,
    old_filter_orders,
)
from seqloader.returnn.paths import plain_value
from seqloader.returnn.postprocessing import postprocessing
from seqloader.returnn.pre_process import pre_process_speed
from seqloader.returnn.read_whole import LM_OWN, REFUSED, TRANSLATION_OWN, read_lm, read_translation
from seqloader.returnn.seq_lists import meta_seq_lists, read_seq_list, relisted, seq_lens
from seqloader.returnn.view import ReturnnView
from seqloader.returnn.vocab import ReturnnVocab
from seqloader.sources.base import Source
from seqloader.sources.concat import ConcatSource
from seqloader.sources.hdf import HDFSource
from seqloader.sources.joined import ZipSource

COMMON = (
    "class",
    "seq_ordering",
    "partition_epoch",
    "random_seed_offset",
    "seq_list_filter_file",
    "fixed_random_seed",
)
# dataset options refused with the reason and what to do instead
REFUSED_OPTIONS = {
    "targets_post_process": "RETURNN applies the function to the text before the vocabulary; "
    "apply it when writing the corpus listing (NAME.txt), or encode with a transform "
    "(seqloader.transforms)",
    "window": "RETURNN's context window joins neighbouring frames into one; do it in a transform "
    "(seqloader.transforms) or in the model",
    "repeat_epoch": "RETURNN repeats the sequences within an epoch; use more epochs, or a mix "
    "(seqloader.ConcatSource with mix={...}) to weight corpora",
}
NO_OP_VALUES = {"window": 1, "repeat_epoch": 1}  # RETURNN's defaults: accepted
# orderings that draw no random number: RETURNN's fixed_random_seed changes nothing for them
UNDRAWN = ("default", "sorted", "sorted_reverse", "reverse")
# dataset classes refused, with the reason and what to do instead
REFUSED_CLASSES: dict[str, str] = {}
# RETURNN's generating datasets (returnn/datasets/generating.py): new data every epoch
GENERATING = (
    "Task12AXDataset",
    "TaskEpisodicCopyDataset",
    "TaskXmlModelingDataset",
    "TaskVariableAssignmentDataset",
    "TaskNumberBaseConvertDataset",
    "DummyDataset",
    "DummyDatasetMultipleSequenceLength",
    "DummyDatasetMultipleDataKeys",
    "DummyGenericDataset",
    "CopyTaskDataset",
)
REFUSED_CLASSES.update(
    {
        kind: "RETURNN generates its sequences anew every epoch from one RandomState in reading "
        "order (the data itself changes per epoch), which no fixed source holds; dump the epochs "
        "you train on to HDF (RETURNN's tools/hdf_dump.py) and read those with HDFDataset, or "
        "generate data with seqloader.synthetic"
        for kind in GENERATING
    }
)
# dataset classes over other datasets
WRAPPERS = (
    "CombinedDataset",
    "ConcatDataset",
    "DistributeFilesDataset",
    "MetaDataset",
    "MultiProcDataset",
    "PostprocessingDataset",
)
NO_EFFECT = {
    "name": "RETURNN's name for logs",
    "cache_byte_size": "RETURNN's in-memory cache of HDFDataset (our reads need none)",
    "use_cache_manager": "copies files to a cluster-local cache first; the data is the same",
    "estimated_num_seqs": "a hint for RETURNN's progress display",
    "context_window": "RETURNN stores it as ctx_left / ctx_right but reads them nowhere (its "
    "chunking, torch pipeline included, cuts chunks without context)",
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
    num_workers: int | None = None  # MultiProcDataset's worker processes
    native: dict[str, Any] = field(default_factory=dict)  # PlanOptions fields, by their names


def convert_dataset(name: str, opts: dict[str, Any], default_ordering: str) -> Converted:
    """``opts`` is a RETURNN dataset dict (``{"class": "HDFDataset", ...}``)."""
    if not isinstance(opts, dict) or "class" not in opts:
        raise OptionError(
            f"{name} dataset: got {opts!r}; expected a dict with a 'class' (RETURNN's string "
            "dataset specs are not supported: write the dict)"
        )
    opts = plain_value(opts)  # CachedFile(...), tk.Path, ...: their paths, as RETURNN reads them
    kind = opts["class"]
    if kind == "MetaDataset":
        return _meta(name, opts, default_ordering)
    if kind == "ConcatDataset":
        return _concat(name, opts)
    if kind == "MultiProcDataset":
        return _multi_proc(name, opts, default_ordering)
    if kind == "PostprocessingDataset":
        return postprocessing(name, opts, convert_dataset)
    if kind == "CombinedDataset":
        view, ordering, parts, offset = combined(name, opts, default_ordering, convert_dataset)
        return Converted(view, ordering, parts, offset, kind)
    if kind == "DistributeFilesDataset":
        view, ordering, parts, offset, sub_native, workers = distribute_files(
            name, opts, default_ordering, convert_dataset
        )
        return Converted(view, ordering, parts, offset, kind, workers, native=sub_native)
    if kind in REFUSED_CLASSES:
        raise OptionError(
            f"{name} dataset: class {kind!r} is not supported: {REFUSED_CLASSES[kind]}"
        )
    if kind not in _BUILDERS:
        raise OptionError(
            f"{name} dataset: class {kind!r} is not supported; supported: "
            f"{sorted([*_BUILDERS, *WRAPPERS])}"
        )
    own_keys, build = _BUILDERS[kind]
    for key, why in REFUSED_OPTIONS.items():
        if opts.get(key) not in (None, NO_OP_VALUES.get(key)):
            raise OptionError(f"{name} dataset ({kind}): option {key!r} is not supported: {why}")
    given = {k for k in opts if k not in REFUSED_OPTIONS}  # those: checked above, no-ops left
    unknown = sorted(given - set(COMMON) - set(NO_EFFECT) - set(own_keys))
    if unknown:
        raise OptionError(
            f"{name} dataset ({kind}): option(s) {unknown} not supported (remove them; "
            f"docs/migrating.md says why each is refused); supported: "
            f"{sorted({*COMMON, *own_keys})}, accepted without effect: {sorted(NO_EFFECT)}"
        )
    where = f"{name} dataset ({kind})"
    inner, indices, order_lengths = build(where, opts)
    view = ReturnnView(inner, indices=indices, order_lengths=order_lengths)
    filter_file = opts.get("seq_list_filter_file")
    if filter_file:
        listed = set(read_filter_list(where, filter_file))
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
    if kind == "HuggingFaceDataset":
        check_ordering(where, ordering, order_lengths)
    native: dict[str, Any] = {}
    fixed = opts.get("fixed_random_seed")
    if fixed is not None and ordering.split(":")[0] not in UNDRAWN:
        native["fixed_random_seed"] = fixed  # else: no draw, RETURNN's fixed seed changes nothing
    old = None
    if kind == "LibriSpeechCorpus" and opts.get("epoch_wise_filter"):
        assert isinstance(inner, AudioSource) and order_lengths is not None
        masks = list(view.excluded().values())
        excluded = np.logical_or.reduce(masks) if masks else None
        old = old_filter_orders(where, opts["epoch_wise_filter"], opts, inner, indices,
                                order_lengths, excluded, ordering, int(partition_epoch))  # fmt: skip
    if old is not None:  # RETURNN re-sorts the sub-epoch: the source orders itself
        view = ReturnnView(inner, indices=indices, order_lengths=order_lengths,
                           excluded=view.excluded(), orders=old)  # fmt: skip
        return Converted(view, "default", int(partition_epoch), offset, kind)
    if opts.get("epoch_wise_filter"):
        native["epoch_wise_filter"] = opts["epoch_wise_filter"]
        if kind == "LibriSpeechCorpus":  # subdirs: epoch selections of the view
            assert isinstance(inner, AudioSource)
            means, selections = librispeech_epoch_filter(
                where, opts["epoch_wise_filter"], opts, inner, indices
            )
            native.pop("epoch_wise_filter")
            if means:
                native["epoch_wise_filter"] = means
            view = ReturnnView(
                inner,
                indices=indices,
                order_lengths=order_lengths,
                excluded=view.excluded(),
                selections=selections,
            )
    return Converted(view, ordering, int(partition_epoch), offset, kind, native=native)


MULTI_PROC_OWN = ("class", "dataset", "num_workers", "buffer_size", "sharding_method")


def _multi_proc(name: str, opts: dict[str, Any], default_ordering: str) -> Converted:
    """RETURNN's ``MultiProcDataset``: the inner dataset read by ``num_workers`` processes in the
    inner dataset's order; its other options are the inner dataset's defaults (RETURNN passes them
    on). The workers become the loader's ``num_workers`` (unless torch_dataloader_opts sets it)."""
    where = f"{name} dataset (MultiProcDataset)"
    inner = opts.get("dataset")
    if not isinstance(inner, dict):
        raise OptionError(f"{where}: 'dataset' {inner!r}; expected the inner dataset's dict")
    workers = opts.get("num_workers")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        raise OptionError(f"{where}: num_workers {workers!r}; expected an int >= 1 (RETURNN too)")
    method = opts.get("sharding_method", "seq_order")
    if method not in ("seq_order", "dedicated"):
        raise OptionError(f"{where}: sharding_method {method!r}; expected 'seq_order'")
    if method == "dedicated":
        raise OptionError(
            f"{where}: sharding_method 'dedicated' lets each worker order its own shard (another "
            "order per num_workers); not supported: use 'seq_order' (RETURNN's default)"
        )
    merged = dict(inner)
    for key, value in opts.items():
        if key not in MULTI_PROC_OWN:
            merged.setdefault(key, value)  # RETURNN: kwargs become the inner dataset's defaults
    c = convert_dataset(name, merged, default_ordering)
    return Converted(
        c.source,
        c.ordering,
        c.partition_epoch,
        c.random_seed_offset,
        c.kind,
        num_workers=workers,
        native=c.native,
    )


META_OWN = (
    "class",
    "datasets",
    "data_map",
    "seq_order_control_dataset",
    "random_seed_offset",
    "seq_list_file",
    "seq_lens_file",
    "data_dims",
    "data_dtypes",
)
# the MetaDataset's options RETURNN reads but that leave the data as it is
META_NO_EFFECT = {
    "data_dims": "legacy: RETURNN only checks it names every data_map key",
    "data_dtypes": "legacy: not used by RETURNN",
    "partition_epoch": "with seq_order_control_dataset RETURNN takes the control dataset's order "
    "and sub-epochs and ignores the MetaDataset's",
    "seq_lens_file": "with seq_order_control_dataset RETURNN orders by the control dataset and "
    "reads no lengths from it",
}


# the MetaDataset's own ordering options, used by RETURNN when no sub-dataset controls the order
META_ORDER = ("seq_ordering", "partition_epoch", "seq_list_filter_file", "fixed_random_seed")


def _meta(name: str, opts: dict[str, Any], default_ordering: str) -> Converted:
    """RETURNN's ``MetaDataset`` -> ``ZipSource`` (keys joined by tag through ``data_map``).
    With ``seq_order_control_dataset``, the control dataset's own options decide the order
    (RETURNN ignores the MetaDataset's), sub-datasets inherit its ``random_seed_offset``. Without
    it, RETURNN orders by the MetaDataset's own options over the tags of the dataset that gives
    ``data``, sorting by that dataset's ``data`` lengths (``_own_order``)."""
    where = f"{name} dataset (MetaDataset)"
    control = opts.get("seq_order_control_dataset")
    allowed = set(META_OWN) | set(NO_EFFECT) | ({"partition_epoch"} if control else set(META_ORDER))
    if opts.get("window", 1) != 1:
        raise OptionError(f"{where}: window {opts['window']!r}; RETURNN's MetaDataset asserts 1")
    allowed.add("window")
    dims = opts.get("data_dims")
    if dims and set(opts.get("data_map") or {}) - set(dims):
        raise OptionError(
            f"{where}: data_dims lacks the data_map key(s) "
            f"{sorted(set(opts['data_map']) - set(dims))}; RETURNN asserts it names every one"
        )
    unknown = sorted(set(opts) - allowed)
    if unknown:
        raise OptionError(
            f"{where}: option(s) {unknown} not supported; supported: {sorted(allowed)} (with "
            "seq_order_control_dataset set, RETURNN orders by the control dataset's own "
            "seq_ordering, partition_epoch and seq_list_filter_file: set them there)"
        )
    datasets, data_map = opts.get("datasets") or {}, opts.get("data_map") or {}
    if not control:
        return _own_order(name, where, opts, datasets, data_map, default_ordering)
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
    lists = meta_seq_lists(where, opts.get("seq_list_file"), used | {control})
    sources: dict[str, Any] = {s: c.source for s, c in converted.items()}
    if lists is not None:  # RETURNN indexes the lists by the control dataset's corpus index
        control_tags = list(sources[control].tags)
        if lists[control] != control_tags:
            raise OptionError(
                f"{where}: the seq list of the control dataset {control!r} is not its corpus "
                f"({len(lists[control])} tags, the dataset has {len(control_tags)}; RETURNN takes "
                "the i-th line for its i-th sequence and fails where they disagree): list its "
                "tags in corpus order"
            )
        for sub in sorted(used - {control}):
            sources[sub] = relisted(where, sub, sources[sub], lists[sub], control_tags)
    mapped = {
        out: (sub, "text" if key == "orth" and converted[sub].kind == "OggZipDataset" else key)
        for out, (sub, key) in data_map.items()
    }
    joined = ZipSource(sources, mapped, control=control)
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
    for sub, c in converted.items():
        if sub != control and c.native:
            raise OptionError(
                f"{name}.{sub} ({c.kind}): {sorted(c.native)} on a dataset that does not control "
                f"the order; RETURNN orders by {control!r}: set them there"
            )
    return Converted(
        view,
        ctrl.ordering,
        ctrl.partition_epoch,
        ctrl.random_seed_offset,
        "MetaDataset",
        native=ctrl.native,
    )


def _own_order(
    name: str,
    where: str,
    opts: dict[str, Any],
    datasets: dict[str, Any],
    data_map: dict[str, Any],
    default_ordering: str,
) -> Converted:
    """A ``MetaDataset`` without ``seq_order_control_dataset``: its own ``seq_ordering``,
    ``partition_epoch``, ``random_seed_offset``, ``fixed_random_seed`` and
    ``seq_list_filter_file``, over the tags of the dataset giving ``data`` (RETURNN's default
    dataset), sorted by that dataset's ``data`` lengths; the sub-datasets follow that order."""
    if "data" not in data_map:
        raise OptionError(
            f"{where}: no seq_order_control_dataset and no 'data' in data_map; RETURNN needs one "
            "of them (it asserts): set seq_order_control_dataset"
        )
    default = data_map["data"][0]
    used = {sub for sub, _ in data_map.values()}
    missing = sorted(used - set(datasets))
    if missing:
        raise OptionError(f"{where}: datasets {missing} are named but not defined in 'datasets'")
    converted = {}
    for sub in sorted(used):
        ignored = sorted(set(datasets[sub]) & {*META_ORDER, "random_seed_offset"})
        if ignored:
            raise OptionError(
                f"{name}.{sub}: {ignored} are ignored by RETURNN here (without "
                "seq_order_control_dataset the MetaDataset orders every sub-dataset): remove "
                "them, or set them on the MetaDataset"
            )
        converted[sub] = convert_dataset(f"{name}.{sub}", dict(datasets[sub]), "default")
    lens_file = opts.get("seq_lens_file")
    if not lens_file and converted[default].kind != "HDFDataset":
        raise OptionError(
            f"{where}: no seq_order_control_dataset, and the 'data' dataset {default!r} is a "
            f"{converted[default].kind}, whose lengths RETURNN reads before loading (not reliable "
            "there): set seq_order_control_dataset, or give seq_lens_file"
        )
    mapped = {
        out: (sub, "text" if key == "orth" and converted[sub].kind == "OggZipDataset" else key)
        for out, (sub, key) in data_map.items()
    }
    sources: dict[str, Any] = {s: c.source for s, c in converted.items()}
    lists = meta_seq_lists(where, opts.get("seq_list_file"), used)
    if lists is not None:  # the corpus is the default dataset's list, the others line by line
        for sub in sorted(used):
            sources[sub] = relisted(where, sub, sources[sub], lists[sub], lists[default])
    joined = ZipSource(sources, mapped, control=default)
    index = joined.source_index(default)  # [n] the default dataset's corpus order
    src = sources[default]
    if lens_file:  # RETURNN sorts by the file's 'data' length of each (listed) tag
        order = seq_lens(where, lens_file, [joined.tag(i) for i in range(len(joined))])
    else:
        order = np.asarray(src.lengths("data" if "data" in src.keys else src.keys[0]))[index]
    excluded = {}
    if opts.get("seq_list_filter_file"):
        listed = set(read_filter_list(where, opts["seq_list_filter_file"]))
        tags = [joined.tag(i) for i in range(len(joined))]
        excluded[EXCLUDED_REASON] = np.fromiter((t not in listed for t in tags), dtype=bool)
    view = ReturnnView(joined, order_lengths=order, excluded=excluded)
    ordering = opts.get("seq_ordering", default_ordering)
    if not isinstance(ordering, str):
        raise OptionError(f"{where}: seq_ordering {ordering!r}; a function is not supported")
    offset = opts.get("random_seed_offset")
    if offset is not None and (not isinstance(offset, int) or offset < 0):
        raise OptionError(f"{where}: random_seed_offset {offset!r}, expected an int >= 0")
    native: dict[str, Any] = {}
    fixed = opts.get("fixed_random_seed")
    if fixed is not None and ordering.split(":")[0] not in UNDRAWN:
        native["fixed_random_seed"] = fixed
    partition = int(opts.get("partition_epoch") or 1)
    return Converted(view, ordering, partition, offset, "MetaDataset", native=native)


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
        if c.ordering != "default" or c.partition_epoch != 1 or c.native:
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


def read_filter_list(where: str, path: str) -> list[str]:
    """RETURNN's ``seq_list_filter_file``, read as its ``Dataset._load_seq_list_file``: a tag a
    line (optionally gzipped), or a pickled list (``.pkl``, ``.pkl.gz``)."""
    tags = read_seq_list(where, path)
    if not isinstance(tags, list):
        raise OptionError(f"{where}: seq_list_filter_file {path!r} holds no list of tags")
    return [str(t) for t in tags]


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
    first = "data" if "data" in source.keys else source.keys[0]
    return source, None, source.lengths(first)  # RETURNN sorts by the first seqLengths column


def oggzip_corpora(where: str, paths: Any, name_as_prefix: bool) -> list[OggZip]:
    """RETURNN's ``path``: one or more ``NAME.zip``, each optionally with a separate listing
    ``NAME.txt.gz`` next to it in the list (the official LibriSpeech layout)."""
    path_list = [paths] if isinstance(paths, str | os.PathLike) else list(paths or [])
    zips: list[str] = []
    listings: dict[str, str] = {}
    for p in [os.fspath(x) for x in path_list]:
        base = os.path.basename(p)
        if base.endswith(".txt.gz"):
            listings[base[: -len(".txt.gz")]] = p
        elif base.endswith(".zip"):
            zips.append(p)
        else:
            raise OptionError(
                f"{where}: path {p!r}: expected NAME.zip files, each optionally with its listing "
                "NAME.txt.gz (as RETURNN's OggZipDataset reads them)"
            )
    if not zips:
        raise OptionError(f"{where}: 'path' {paths!r} names no NAME.zip file")
    corpora = [OggZip(z, None, name_as_prefix) for z in zips]
    names = [c.name for c in corpora]
    unmatched = sorted(set(listings) - set(names))
    if unmatched:
        raise OptionError(
            f"{where}: listing(s) {[listings[n] for n in unmatched]} have no NAME.zip of the same "
            f"name in 'path' (zips: {names})"
        )
    return [OggZip(c.zip, listings.get(c.name), name_as_prefix) for c in corpora]


def _oggzip(where: str, opts: dict[str, Any]) -> Built:
    prefix = opts.get("zip_audio_files_have_name_as_prefix", True)
    if not isinstance(prefix, bool):
        raise OptionError(
            f"{where}: zip_audio_files_have_name_as_prefix {prefix!r}, expected a bool"
        )
    corpora = oggzip_corpora(where, opts.get("path"), prefix)
    audio, targets = opts.get("audio"), opts.get("targets")
    features, speed = None, None
    if audio is not None:
        if not isinstance(audio, dict):
            raise OptionError(f"{where}: audio {audio!r}; expected a dict of feature options")
        try:
            rate = _first_rate(corpora) if audio.get("sample_rate") is None else None
            features = ReturnnFeatures.from_returnn(audio, sample_rate=rate)
        except OptionError as e:
            raise OptionError(f"{where}: {e}") from e
        features, speed = pre_process_speed(where, features)
    vocab = None
    if targets is not None:
        if not isinstance(targets, dict):
            raise OptionError(
                f"{where}: targets {targets!r}; expected a dict of vocabulary options"
            )
        vocab = ReturnnVocab(targets)
    keys = [k for k, on in (("data", features), ("text", True), ("classes", vocab)) if on]
    source = AudioSource(corpora, keys=keys, vocab=vocab, features=features, speed=speed)
    durations = source.durations()
    order_lengths = (durations * 100).astype(np.int64)  # RETURNN: int(duration * 100)
    indices = np.arange(len(source), dtype=np.int64)
    if opts.get("segment_file"):
        listed = set(read_tag_list(where, opts["segment_file"]))
        indices = np.array([i for i, t in enumerate(source.tags) if t in listed], dtype=np.int64)
        if not len(indices):
            raise OptionError(f"{where}: no sequence of the corpus is in segment_file")
    subset = opts.get("fixed_random_subset")
    if subset:
        indices = fixed_random_subset(
            where, indices, subset, opts.get("fixed_random_subset_seed", 42)
        )
    if len(indices) == len(source) and np.array_equal(indices, np.arange(len(source))):
        return source, None, order_lengths
    return source, indices, order_lengths[indices]


def fixed_random_subset(where: str, indices: np.ndarray, subset: Any, seed: Any) -> np.ndarray:
    """RETURNN's ``fixed_random_subset``: the corpus (after ``segment_file``) shuffled by
    ``RandomState(fixed_random_subset_seed)``, its first ``n`` kept in that shuffled order (a
    fraction ``0 < f < 1`` keeps ``int(n_corpus * f)``; more than the corpus keeps all of it)."""
    if isinstance(subset, bool) or not isinstance(subset, int | float) or subset <= 0:
        raise OptionError(
            f"{where}: fixed_random_subset {subset!r}; expected a count >= 1 or a fraction in (0, 1)"
        )
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise OptionError(f"{where}: fixed_random_subset_seed {seed!r}; expected an int")
    n = int(len(indices) * subset) if subset < 1 else int(subset)
    if not isinstance(n, int) or n < 1:
        raise OptionError(
            f"{where}: fixed_random_subset {subset!r} keeps no sequence of {len(indices)}"
        )
    shuffled = list(indices)
    np.random.RandomState(seed).shuffle(shuffled)
    return np.asarray(shuffled[:n], dtype=np.int64)


def _first_rate(paths: Sequence[str | os.PathLike]) -> int:
    """The rate of the corpus's first audio file (RETURNN's ``sample_rate=None``): decoded once."""
    manifest = open_manifest(paths[0])
    try:
        return manifest.read_audio(0)[1]
    finally:
        manifest.close()


def _librispeech(where: str, opts: dict[str, Any]) -> Built:
    """RETURNN's ``LibriSpeechCorpus`` (``seqloader.returnn.librispeech``), sorted by transcription
    length; ``fixed_random_subset`` with its fixed seed 42 (the subset in its shuffled order)."""
    source, order_lengths = librispeech_source(where, opts)
    subset = opts.get("fixed_random_subset")
    if not subset:
        return source, None, order_lengths
    indices = fixed_random_subset(where, np.arange(len(source), dtype=np.int64), subset, 42)
    return source, indices, order_lengths[indices]


_BUILDERS: dict[str, tuple[tuple[str, ...], Callable[[str, dict[str, Any]], Built]]] = {
    "TranslationDataset": ((*TRANSLATION_OWN, *REFUSED["TranslationDataset"]), read_translation),
    "LmDataset": ((*LM_OWN, *REFUSED["LmDataset"]), read_lm),
    "LibriSpeechCorpus": (LIBRISPEECH_OWN, _librispeech),
    "HDFDataset": (("files",), _hdf),
    "HuggingFaceDataset": (HF_OWN, huggingface),
    "OggZipDataset": (
        (
            "path",
            "audio",
            "targets",
            "segment_file",
            "zip_audio_files_have_name_as_prefix",
            "fixed_random_subset",
            "fixed_random_subset_seed",
            "epoch_wise_filter",
        ),
        _oggzip,
    ),
}
