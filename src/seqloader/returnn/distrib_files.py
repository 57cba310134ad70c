"""RETURNN's ``DistributeFilesDataset`` -> the sub-dataset over all files, planned in per-sub-epoch
file pools (``seqloader.plan.pools``): RETURNN's file shuffle and size bins per full epoch, the
sub-dataset's own ``seq_ordering`` within each pool.

RETURNN builds the sub-dataset anew per sub-epoch from ``get_sub_epoch_dataset(files)``. Here it
is built once over every file: that is the same data when the function returns a dataset that
reads exactly the files it is given (an ``HDFDataset``, an ``OggZipDataset``, a ``MetaDataset``
over file trees, in a ``MultiProcDataset`` or ``PostprocessingDataset``), with options that do
not depend on them; that is checked by calling it with all files and with one, and each file
entry's sequences are found by tag in the source that reads it.
"""

from __future__ import annotations

import functools
import json
import os
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from seqloader.errors import OptionError
from seqloader.plan.pools import FilePools
from seqloader.returnn.paths import plain_value
from seqloader.returnn.view import ReturnnView
from seqloader.sources.base import file_layout
from seqloader.sources.hdf import HDFSource
from seqloader.validate import supported_options

OWN = (
    "class",
    "files",
    "get_sub_epoch_dataset",
    "partition_epoch",
    "seq_ordering",
    "random_seed_offset",
    "fixed_random_seed",
    "distrib_shard_files",
)
# how RETURNN runs the sub-datasets (worker processes, preloading); the data is the same
NO_EFFECT = {
    "use_worker_proc": "runs the sub-dataset in a process of its own or not",
    "preload_next_n_sub_epochs": "builds the next sub-epochs' datasets ahead",
    "buffer_size": "sequences the sub-dataset's process reads ahead",
    "sharding_fix": "checked where the files are sharded over ranks (with_sharding_fix)",
    "name": "RETURNN's name for logs",
}
KIND = "DistributeFilesDataset"


def distribute_files(
    name: str,
    opts: dict[str, Any],
    default_ordering: str,
    convert: Callable[[str, dict[str, Any], str], Any],
) -> tuple[ReturnnView, str, int, int | None, dict[str, Any], int | None]:
    """``opts``: the ``DistributeFilesDataset`` dict; ``convert``: ``convert_dataset`` (for the
    sub-dataset). -> (the view carrying the file pools, the sub-dataset's ordering,
    ``partition_epoch``, ``random_seed_offset``, the sub-dataset's native plan options, a
    ``MultiProcDataset``'s worker count)."""
    where = f"{name} dataset ({KIND})"
    supported_options(where, opts, OWN, NO_EFFECT)
    files = _file_list(where, opts.get("files"))
    ordering = opts.get("seq_ordering", default_ordering)
    if ordering not in ("default", "random"):
        raise OptionError(
            f"{where}: seq_ordering {ordering!r}; RETURNN's DistributeFilesDataset orders its "
            "files 'default' or 'random' only (it raises on others too): set one of them, and "
            "the sequences' ordering in the dataset get_sub_epoch_dataset returns"
        )
    partition = opts.get("partition_epoch") or 1
    if isinstance(partition, bool) or not isinstance(partition, int) or partition < 1:
        raise OptionError(f"{where}: partition_epoch {partition!r}, expected an int >= 1")
    shard_files = opts.get("distrib_shard_files", False)
    if not isinstance(shard_files, bool):
        raise OptionError(f"{where}: distrib_shard_files {shard_files!r}, expected a bool")
    fixed = opts.get("fixed_random_seed")
    if fixed is not None and (isinstance(fixed, bool) or not isinstance(fixed, int)):
        raise OptionError(f"{where}: fixed_random_seed {fixed!r}, expected an int")
    sub = _sub_dataset(where, opts.get("get_sub_epoch_dataset"), files)
    offset = opts.get("random_seed_offset")
    sub = _without_offsets(where, sub, offset)
    inner = convert(f"{name}.get_sub_epoch_dataset(files)", sub, "default")
    if inner.partition_epoch != 1:
        raise OptionError(
            f"{where}: the dataset get_sub_epoch_dataset returns has partition_epoch "
            f"{inner.partition_epoch}; RETURNN refuses it too (each sub-epoch is one pool of "
            "files): set partition_epoch on the DistributeFilesDataset only"
        )
    view = inner.source
    bounds = _file_bounds(where, view, files)
    pools = FilePools(
        bounds,
        np.array([sum(map(os.path.getsize, leaves(f))) for f in files], np.int64),  # bin weights
        shuffle=ordering == "random",
        fixed_seed=fixed,
        shard_files=shard_files,
    )
    try:
        pools.check_bins(partition)
    except OptionError as e:
        raise OptionError(f"{where}: {e}") from e
    pooled = ReturnnView(
        view, order_lengths=view.order_lengths(), excluded=view.excluded(), pools=pools
    )
    return pooled, inner.ordering, partition, offset, inner.native, inner.num_workers


def sharded(converted: Any) -> Any:
    """The same dataset with its files sharded over the ranks (``torch_distributed``
    ``"shard"``: RETURNN then shards the files as with ``distrib_shard_files``)."""
    from dataclasses import replace

    view = converted.source
    pools = view.file_pools()
    if pools is None or pools.shard_files:
        return converted
    pools = replace(pools, shard_files=True)
    new = ReturnnView(
        view.inner, order_lengths=view.order_lengths(), excluded=view.excluded(), pools=pools
    )
    return replace(converted, source=new)


def with_sharding_fix(converted: Any, opts: Mapping[str, Any], behavior_version: int) -> Any:
    """Sharded pools as RETURNN's fixed sharding (each rank all sequences of its files), or
    refused on more than one rank (``FilePools.refuse_sharding``) where RETURNN's legacy one
    applies: without ``sharding_fix`` (and ``behavior_version`` < 26) RETURNN shards each
    sub-epoch's sequences again, so a rank reads 1/W of its own files' sequences."""
    from dataclasses import replace

    view = converted.source
    pools = view.file_pools()
    if pools is None or not pools.shard_files:
        return converted
    fix = opts.get("sharding_fix")
    if fix is True or (fix is None and behavior_version >= 26):
        return converted
    why = (
        f"{KIND} sharded over the ranks (distrib_shard_files, or torch_distributed 'shard') "
        f"with sharding_fix={fix!r} and behavior_version={behavior_version}: RETURNN's legacy "
        "sharding then shards each sub-epoch's sequences again on top of the files, so a rank "
        "reads 1/world_size of its own files (rwth-i6/returnn issue 1738); seqloader plans the "
        "fixed sharding only. Fix: set 'sharding_fix': True in the dataset (or behavior_version "
        ">= 26), or train on one process"
    )
    new = ReturnnView(
        view.inner,
        order_lengths=view.order_lengths(),
        excluded=view.excluded(),
        pools=replace(pools, refuse_sharding=why),
    )
    return replace(converted, source=new)


def _file_list(where: str, files: Any) -> list[str]:
    """RETURNN's ``files``: a list, a function returning one, or a ``.txt`` (a file a line, ``#``
    comments), ``.json`` or ``.py`` (a Python literal) file holding one."""
    if callable(files):
        files = files()
    files = plain_value(files)
    if isinstance(files, str | os.PathLike):
        path = os.fspath(files)
        ext = os.path.splitext(path)[1]
        try:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise OptionError(f"{where}: cannot read the file list {path!r}: {e}") from e
        if ext == ".txt":
            files = [s.strip() for s in text.splitlines()]
            files = [s for s in files if s and not s.startswith("#")]
        elif ext == ".json":
            files = json.loads(text)
        elif ext == ".py":
            import ast

            files = ast.literal_eval(text)
        else:
            raise OptionError(
                f"{where}: file list {path!r}: expected a .txt, .json or .py file (as RETURNN)"
            )
    if not isinstance(files, list | tuple) or not files:
        raise OptionError(f"{where}: 'files' {files!r}; expected a non-empty list of files")
    out = []
    for f in files:
        try:
            out.append(_tree(f))
        except TypeError:
            raise OptionError(
                f"{where}: 'files' entry {f!r}: expected a file, or a file tree (a dict, tuple or "
                "list of files, as RETURNN's FileTree)"
            ) from None
    return out


FileTree = Any  # a path, or a dict / tuple / list of file trees (RETURNN's FileTree)


def _tree(entry: Any) -> FileTree:
    """``entry`` with its paths as strings; TypeError where a leaf is no path."""
    if isinstance(entry, str | os.PathLike):
        return os.fspath(entry)
    if isinstance(entry, dict):
        return {k: _tree(v) for k, v in entry.items()}
    if isinstance(entry, list | tuple) and entry:
        return type(entry)(_tree(v) for v in entry)
    raise TypeError(entry)


def leaves(entry: FileTree) -> list[str]:
    """The files of one entry in RETURNN's order (``tree.flatten``: dicts by sorted key).

    >>> leaves({"b": "x.hdf", "a": ("y.hdf", "z.hdf")})
    ['y.hdf', 'z.hdf', 'x.hdf']
    """
    if isinstance(entry, str):
        return [entry]
    if isinstance(entry, dict):
        return [f for k in sorted(entry) for f in leaves(entry[k])]
    return [f for v in entry for f in leaves(v)]


def _paths_in(entry: FileTree, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Where the files of an entry sit: key paths to its leaves."""
    if isinstance(entry, str):
        return [prefix]
    items = sorted(entry.items()) if isinstance(entry, dict) else enumerate(entry)
    return [p for k, v in items for p in _paths_in(v, (*prefix, k))]


def _at(entry: FileTree, path: tuple[Any, ...]) -> Any:
    for k in path:
        entry = entry[k]
    return entry


def _marked(value: Any, given: list[FileTree]) -> Any:
    """``value`` (what get_sub_epoch_dataset returned) with every list of the given files (or of
    one leaf of each given file tree) replaced by a marker naming which, and functions by what
    they compute (their code, a partial's arguments): equal for other files exactly when only
    the files differ."""
    if isinstance(value, list | tuple) and value:
        for path in _paths_in(given[0]):
            try:
                column = [_at(e, path) for e in given]
            except (KeyError, IndexError, TypeError):
                continue
            if [os.fspath(v) if isinstance(v, os.PathLike) else v for v in value] == column:
                return ("<the files>", path)
        return type(value)(_marked(v, given) for v in value)
    if isinstance(value, dict):
        return {k: _marked(v, given) for k, v in value.items()}
    if isinstance(value, functools.partial):
        return ("<partial>", _marked(value.func, given), _marked(list(value.args), given),
                _marked(dict(value.keywords), given))  # fmt: skip
    code = getattr(value, "__code__", None)
    if code is not None:
        return ("<function>", code, _marked(list(value.__defaults__ or ()), given))
    return value


def _without_offsets(where: str, sub: Any, offset: Any) -> Any:
    """``sub`` without ``random_seed_offset`` anywhere, refused where one differs from the
    DistributeFilesDataset's (the sub-dataset inherits it, as in RETURNN)."""
    if isinstance(sub, dict):
        own = sub.get("random_seed_offset", offset)
        if own != offset:
            raise OptionError(
                f"{where}: get_sub_epoch_dataset sets random_seed_offset {own!r}, the "
                f"DistributeFilesDataset {offset!r}; seqloader seeds the file shuffle and the "
                "sub-dataset's order from one offset: set it on the DistributeFilesDataset only "
                "(the sub-dataset inherits it, as in RETURNN)"
            )
        return {
            k: _without_offsets(where, v, offset)
            for k, v in sub.items()
            if k != "random_seed_offset"
        }
    return sub


def _keys_in(value: Any) -> set[str]:
    if isinstance(value, dict):
        return set(value) | {k for v in value.values() for k in _keys_in(v)}
    if isinstance(value, list | tuple):
        return {k for v in value for k in _keys_in(v)}
    return set()


FIX = (
    "get_sub_epoch_dataset must return a dataset dict that reads exactly the files it is given "
    "(e.g. {'class': 'HDFDataset', 'files': files, 'seq_ordering': ...}, an OggZipDataset with "
    "'path': files, a MetaDataset over file trees, any of them in a MultiProcDataset or "
    "PostprocessingDataset), with options that are the same for any files"
)


def _sub_dataset(where: str, get: Any, files: list[FileTree]) -> dict[str, Any]:
    """``get_sub_epoch_dataset``'s dataset over all files, checked to read exactly the files
    it is given, the same way for any files (called with all of them and with the first one)."""
    if not callable(get):
        raise OptionError(
            f"{where}: get_sub_epoch_dataset {get!r}; expected a function of the files that "
            "returns a dataset dict"
        )
    whole, one = plain_value(get(list(files))), plain_value(get(list(files[:1])))
    for got in (whole, one):
        if not isinstance(got, dict) or not isinstance(got.get("class"), str):
            raise OptionError(f"{where}: get_sub_epoch_dataset returned {got!r}; {FIX}")
    marked = _marked(whole, files)
    if marked != _marked(one, files[:1]):
        raise OptionError(
            f"{where}: get_sub_epoch_dataset returns other options for other files (called with "
            f"all files and with the first one); {FIX}"
        )
    if "<the files>" not in repr(marked):
        raise OptionError(
            f"{where}: the {whole['class']!r} get_sub_epoch_dataset returns does not read the "
            f"files it is given as a list; {FIX}"
        )
    if not _keys_in(whole) & {"seq_ordering", "seq_order_control_dataset", "map_seq_stream"}:
        raise OptionError(
            f"{where}: the dataset get_sub_epoch_dataset returns has no seq_ordering; RETURNN "
            "refuses that too: set one (e.g. 'laplace:.1000' or 'random')"
        )
    return whole


def _file_bounds(where: str, view: ReturnnView, files: list[FileTree]) -> np.ndarray:
    """Which sequences of ``view`` (the sub-dataset over all files) each file entry holds ->
    int64 ``[F + 1]``: from a source inside it that reads one file per entry (an HDF file's
    sequences, an OggZip corpus), by tag; refused unless the entries' sequences lie one after
    another, as RETURNN's sub-dataset over a pool of them reads them."""
    tags = list(view.tags)
    for leaf in _sources_in(view):
        own = _own_files(leaf)
        if own is None or len(own) != len(files) + 1:
            continue
        file_of = {leaf.tag(i): f for f in range(len(files)) for i in range(own[f], own[f + 1])}
        of = np.array([file_of.get(t, -1) for t in tags], dtype=np.int64)
        if len(of) and (of >= 0).all() and (np.diff(of) >= 0).all():
            counts = np.bincount(of, minlength=len(files))
            return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    raise OptionError(
        f"{where}: cannot tell which sequences each of the {len(files)} file entries holds (no "
        "HDF or OggZip source inside reads one file per entry, its sequences in entry order); "
        f"{FIX}"
    )


def _sources_in(source: Any) -> list[Any]:
    """``source`` and every source inside it (views, mapped and joined sources), outermost first."""
    out = [source]
    for attr in ("inner", "_inner"):
        inner = getattr(source, attr, None)
        if inner is not None and inner is not source:
            return out + _sources_in(inner)
    subs = getattr(source, "sources", None)
    if isinstance(subs, dict):
        out += [s for sub in subs.values() for s in _sources_in(sub)]
    return out


def _own_files(source: Any) -> np.ndarray | None:
    """File bounds of a source reading files itself: an HDF source's, an OggZip corpus's."""
    manifests = getattr(source, "manifest_bounds", None)
    if callable(manifests):
        return np.asarray(manifests(), dtype=np.int64)
    if isinstance(source, HDFSource):
        return file_layout(source)
    return None
