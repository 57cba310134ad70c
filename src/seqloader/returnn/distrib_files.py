"""RETURNN's ``DistributeFilesDataset`` -> the sub-dataset over all files, planned in per-sub-epoch
file pools (``seqloader.plan.pools``): RETURNN's file shuffle and size bins per full epoch, the
sub-dataset's own ``seq_ordering`` within each pool.

RETURNN builds the sub-dataset anew per sub-epoch from ``get_sub_epoch_dataset(files)``. Here it
is built once over every file: that is the same data only when the function returns an
``HDFDataset`` over exactly the files it is given, with options that do not depend on them; that
is checked by calling it with all files and with one.
"""

from __future__ import annotations

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
    unknown = sorted(set(opts) - set(OWN) - set(NO_EFFECT))
    if unknown:
        raise OptionError(
            f"{where}: option(s) {unknown} not supported; supported: {sorted(OWN)}, accepted "
            f"without effect: {sorted(NO_EFFECT)}"
        )
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
    for part in (sub, _hdf_of(sub)):
        if "random_seed_offset" in part and part["random_seed_offset"] != offset:
            raise OptionError(
                f"{where}: get_sub_epoch_dataset sets random_seed_offset "
                f"{part['random_seed_offset']!r}, the DistributeFilesDataset {offset!r}; seqloader "
                "seeds the file shuffle and the sub-dataset's order from one offset: set it on the "
                "DistributeFilesDataset only (the sub-dataset inherits it, as in RETURNN)"
            )
    sub = {k: v for k, v in sub.items() if k != "random_seed_offset"}
    if sub is not _hdf_of(sub) and isinstance(sub.get("dataset"), dict):
        sub["dataset"] = {k: v for k, v in sub["dataset"].items() if k != "random_seed_offset"}
    inner = convert(f"{name}.get_sub_epoch_dataset(files)", sub, "default")
    if inner.partition_epoch != 1:
        raise OptionError(
            f"{where}: the dataset get_sub_epoch_dataset returns has partition_epoch "
            f"{inner.partition_epoch}; RETURNN refuses it too (each sub-epoch is one pool of "
            "files): set partition_epoch on the DistributeFilesDataset only"
        )
    view = inner.source
    bounds = file_layout(view.inner)
    assert bounds is not None and len(bounds) == len(files) + 1  # an HDFSource over `files`
    pools = FilePools(
        bounds,
        np.array([os.path.getsize(f) for f in files], dtype=np.int64),  # RETURNN's bin weights
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
        if not isinstance(f, str | os.PathLike):
            raise OptionError(
                f"{where}: 'files' entry {f!r} is a file tree (several files kept together per "
                "entry); not supported: give one HDF file per entry (e.g. dump the entries' "
                "MetaDataset to HDF with RETURNN's tools/hdf_dump.py)"
            )
        out.append(os.fspath(f))
    return out


def _hdf_of(got: Any) -> Any:
    """The ``HDFDataset`` dict of ``got``: itself, or the one a ``MultiProcDataset`` reads (its
    workers deliver the inner dataset's order, so the data is the inner dataset's)."""
    if isinstance(got, dict) and got.get("class") == "MultiProcDataset":
        return got.get("dataset")
    return got


def _sub_dataset(where: str, get: Any, files: list[str]) -> dict[str, Any]:
    """``get_sub_epoch_dataset``'s dataset, checked to be one ``HDFDataset`` over exactly the files
    it is given (alone or in a ``MultiProcDataset``), the same otherwise for any files."""
    if not callable(get):
        raise OptionError(
            f"{where}: get_sub_epoch_dataset {get!r}; expected a function of the files that "
            "returns a dataset dict"
        )
    whole, one = plain_value(get(list(files))), plain_value(get(list(files[:1])))
    fix = (
        "get_sub_epoch_dataset must return {'class': 'HDFDataset', 'files': <the files it is "
        "given>, 'seq_ordering': ...} (other options alike for any files), alone or as the "
        "'dataset' of a MultiProcDataset; for other sub-datasets use that dataset with "
        "seqloader's distribution='files'"
    )
    for given, outer in ((files, whole), (files[:1], one)):
        got = _hdf_of(outer)
        if not isinstance(got, dict) or got.get("class") != "HDFDataset":
            kind = got.get("class") if isinstance(got, dict) else type(got).__name__
            raise OptionError(f"{where}: get_sub_epoch_dataset returned a {kind!r}; {fix}")
        listed = got.get("files")
        listed = [listed] if isinstance(listed, str | os.PathLike) else list(listed or [])
        names = [os.fspath(f) for f in listed]
        if names != given:
            raise OptionError(
                f"{where}: get_sub_epoch_dataset({given[:2]}...) returned an HDFDataset over "
                f"{names[:2]}...; {fix}"
            )
    strip = {"files", "dataset"}
    rest = [
        [{k: v for k, v in d.items() if k not in strip} for d in (o, _hdf_of(o))]
        for o in (whole, one)
    ]
    if rest[0] != rest[1]:
        raise OptionError(
            f"{where}: get_sub_epoch_dataset returns other options for other files ({rest[0]} "
            f"vs {rest[1]}); {fix}"
        )
    hdf = _hdf_of(whole)
    if "seq_ordering" not in hdf and "seq_ordering" not in whole:
        raise OptionError(
            f"{where}: the dataset get_sub_epoch_dataset returns has no seq_ordering; RETURNN "
            "refuses that too: set one (e.g. 'laplace:.1000' or 'random')"
        )
    if hdf is not whole:
        return {**whole, "dataset": {**hdf, "files": list(files)}}
    return {**whole, "files": list(files)}
