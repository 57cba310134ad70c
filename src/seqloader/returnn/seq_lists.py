"""RETURNN's ``MetaDataset`` ``seq_list_file``: which sequence of each sub-dataset belongs to the
i-th sequence of the MetaDataset, when the sub-datasets tag their sequences differently (e.g.
``corpus/rec/1`` in the features, ``line-0`` in a translation). One file (a tag list used for every
sub-dataset, or a pickled ``{dataset key: tags}``) or ``{dataset key: file}``; text files hold a
tag a line, optionally gzipped, ``.pkl`` files a pickled list or dict (as RETURNN reads them)."""

from __future__ import annotations

import gzip
import json
import os
import pickle
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from seqloader.errors import OptionError
from seqloader.returnn.view import ReturnnView
from seqloader.sources.tag_join import join, packed


def read_seq_list(where: str, path: Any) -> Any:
    """A seq list file as RETURNN's ``Dataset._load_seq_list_file`` reads it: ``.pkl`` (optionally
    ``.gz``) a pickled object, anything else one tag a line."""
    path = os.fspath(path)
    plain = path[: -len(".gz")] if path.endswith(".gz") else path
    try:
        if plain.endswith(".pkl"):
            opener = gzip.open if path.endswith(".gz") else open
            with opener(path, "rb") as f:
                return pickle.load(f)  # the user's own list file, as RETURNN loads it
        if path.endswith(".gz"):
            with gzip.open(path, "rt", encoding="utf-8") as f:
                return f.read().splitlines()
        with open(path, encoding="utf-8") as f:
            return f.read().splitlines()
    except (OSError, pickle.UnpicklingError, EOFError) as e:
        raise OptionError(f"{where}: cannot read the seq list {path!r}: {e}") from e


def meta_seq_lists(where: str, spec: Any, keys: Iterable[str]) -> dict[str, list[str]] | None:
    """``seq_list_file`` -> ``{dataset key: tags}`` for every sub-dataset in ``keys`` (all of equal
    length, as RETURNN asserts); None when not given.

    >>> _ = open("speech.txt", "w").write("rec/1\\nrec/2\\n")
    >>> meta_seq_lists("dev dataset (MetaDataset)", "speech.txt", ["speech", "text"])["text"]
    ['rec/1', 'rec/2']
    """
    if not spec:
        return None
    keys = sorted(keys)
    if isinstance(spec, dict):
        missing = sorted(set(keys) - set(spec))
        if missing:
            raise OptionError(
                f"{where}: seq_list_file names no file for the sub-dataset(s) {missing} (RETURNN "
                "raises 'seq_list_file does not contain all datasets'): add them"
            )
        lists: Any = {k: read_seq_list(where, spec[k]) for k in keys}
    else:
        lists = read_seq_list(where, spec)
    if isinstance(lists, list):
        lists = {k: lists for k in keys}
    if not isinstance(lists, dict) or any(not isinstance(lists.get(k), list) for k in keys):
        raise OptionError(
            f"{where}: seq_list_file {spec!r} holds {type(lists).__name__}; expected a tag list, "
            f"or a dict with a tag list for each of {keys}"
        )
    sizes = {k: len(lists[k]) for k in keys}
    if len(set(sizes.values())) > 1:
        raise OptionError(
            f"{where}: the seq lists differ in length {sizes}; RETURNN pairs them line by line "
            "(and asserts equal lengths): give every sub-dataset one tag per sequence"
        )
    return {k: [str(t) for t in lists[k]] for k in keys}


def relisted(where: str, sub: str, source: Any, listed: Sequence[str], tags: Sequence[str]) -> Any:
    """``source``'s sequences ``listed`` (its own tags), in that order, reported under ``tags``
    (the MetaDataset's, line by line): a listed tag ``source`` lacks is an error here, where
    RETURNN would fail when it reached that sequence."""
    index = join(packed(list(listed)), packed(source.tags))
    lacking = np.flatnonzero(index < 0)
    if len(lacking):
        examples = [listed[int(i)] for i in lacking[:3]]
        raise OptionError(
            f"{where}: the seq list of sub-dataset {sub!r} names {len(lacking)} tag(s) it does not "
            f"have (e.g. {examples}); RETURNN fails when it reaches them: fix the list"
        )
    return ReturnnView(source, indices=index, tags=list(tags))


def seq_lens(where: str, path: Any, tags: Sequence[str]) -> np.ndarray:
    """RETURNN's MetaDataset ``seq_lens_file`` (JSON ``{tag: {key: length}}``): each tag's
    ``data`` length, what RETURNN sorts by without a control dataset -> int64 ``[len(tags)]``;
    a tag or ``data`` entry the file lacks is an error here (RETURNN's fails mid-epoch)."""
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as f:
            table = json.load(f)
    except (OSError, ValueError) as e:
        raise OptionError(f"{where}: cannot read the seq_lens_file {path!r}: {e}") from e
    if not isinstance(table, dict):
        raise OptionError(f"{where}: seq_lens_file {path!r} holds no {{tag: {{key: length}}}}")
    lacking = [t for t in tags if not isinstance(table.get(t), dict) or "data" not in table[t]]
    if lacking:
        raise OptionError(
            f"{where}: seq_lens_file {path!r} has no 'data' length for {len(lacking)} sequence(s) "
            f"(e.g. {lacking[:3]}); RETURNN sorts by it and fails there: complete the file"
        )
    return np.array([int(table[t]["data"]) for t in tags], dtype=np.int64)
