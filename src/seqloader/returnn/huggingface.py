"""RETURNN's ``HuggingFaceDataset`` over a local ``datasets`` copy -> ``HFColumns``.

The dataset is opened once at conversion by RETURNN's own class (its ``dataset_opts`` forms,
``rename_columns``, ``cast_columns``, ``seq_tag_column``, ``data_format`` checks and tags), so the
columns, dtypes and tags are RETURNN's. Number columns are then read lazily per sequence from the
memory-mapped Arrow tables (``HFSource``); string columns with a ``vocab`` are encoded once by
RETURNN's own vocabulary (its ``get_seq``), as RETURNN encodes them per read. What RETURNN sorts by
(``sorting_seq_len_column``: a column's value, e.g. a float duration; ``sorting_seq_len_column_data``:
a list column's length) becomes the planning order: floats by their rank, which sorts the same.

Refused at conversion, by name: a hub name or anything else not on this machine (RETURNN would
download it), ``streaming``, a ``DatasetDict`` without a split, ``map_func`` (a function of the
whole table), strings without a vocabulary, a value per row without a time axis, undecoded audio.
"""

from __future__ import annotations

import glob
import hashlib
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from seqloader.adapters.hf import HFSource
from seqloader.audio.keys import AudioOptions
from seqloader.audio.manifest import StringTable, import_soundfile
from seqloader.errors import DataError, OptionError
from seqloader.extras import require
from seqloader.sources.base import KeySpec, LoaderNeeds, Source, SourceBase, fingerprint_of

HF_OWN = (
    "dataset_opts",
    "use_file_cache",
    "map_func",
    "rename_columns",
    "cast_columns",
    "data_format",
    "seq_tag_column",
    "sorting_seq_len_column_data",
    "sorting_seq_len_column",
)
# datasets' packaged readers of local files (``load_dataset("parquet", data_files=...)``)
PACKAGED = ("parquet", "arrow", "json", "csv", "text")
LOCAL_FIX = (
    "save a local copy once (datasets.load_dataset(...).save_to_disk(DIR), or the parquet/arrow "
    "files) and give dataset_opts=DIR (or the list of .arrow files, or {'path': 'parquet', "
    "'data_files': [...], 'split': 'train'})"
)
# orderings RETURNN's HuggingFaceDataset sorts by its sorting column's values
SORTING = ("sorted", "sorted_reverse", "laplace")


class HFColumns(SourceBase):
    """A ``datasets.Dataset``'s rows as RETURNN's ``HuggingFaceDataset`` gives them: number and
    audio columns read per sequence by ``hf`` (renamed from ``hf``'s keys by ``rename``), string
    columns as token ids encoded at conversion (``encoded``: key -> (flat ids, offsets)).
    ``bounds``: the rows of each Arrow file it was built from (for ``DistributeFilesDataset``).

    >>> import datasets
    >>> table = datasets.Dataset.from_dict({"x": [[1, 2], [3]], "id": ["a", "b"]})
    >>> src = HFColumns("demo", HFSource(table, {"x": "x"}, "id"), {"feat": "x"}, {}, ["a", "b"])
    >>> src.read(1)["feat"].tolist(), src.lengths("feat").tolist()
    ([3], [2, 1])
    """

    def __init__(
        self,
        name: str,
        hf: HFSource | None,
        rename: Mapping[str, str],
        encoded: Mapping[str, tuple[np.ndarray, np.ndarray, KeySpec]],
        tags: Sequence[str],
        specs: Mapping[str, KeySpec] | None = None,
        bounds: np.ndarray | None = None,
    ) -> None:
        self._name = name
        self._hf = hf
        self._rename = dict(rename)
        self._encoded = {k: (flat, offsets) for k, (flat, offsets, _) in encoded.items()}
        self._tags = StringTable(tags)
        self._bounds = bounds
        lengths: dict[str, np.ndarray] = {}
        schema: dict[str, KeySpec] = {}
        for key, inner in self._rename.items():
            assert hf is not None
            lengths[key] = hf.lengths(inner)
            schema[key] = (specs or {}).get(key) or hf.schema[inner]
        for key, (_, offsets, spec) in encoded.items():
            lengths[key] = np.diff(offsets)
            schema[key] = spec
        self._lengths, self._schema = lengths, schema
        self._fingerprint: str | None = None

    def read(self, index: int) -> dict[str, np.ndarray]:
        if not 0 <= index < len(self):
            raise IndexError(f"{self._name}: sequence {index} out of range for {len(self)}")
        out: dict[str, np.ndarray] = {}
        if self._rename:
            assert self._hf is not None
            got = self._hf.read(index)
            out.update({key: got[inner] for key, inner in self._rename.items()})
        for key, (flat, offsets) in self._encoded.items():
            out[key] = flat[offsets[index] : offsets[index + 1]].copy()
        return out

    def manifest_bounds(self) -> np.ndarray:
        """Sequences per Arrow file it reads (int64 ``[files + 1]``); one file if not built from
        a list of files."""
        if self._bounds is None:
            return np.array([0, len(self)], dtype=np.int64)
        return self._bounds

    def where(self, index: int) -> str:
        if self._hf is not None:
            return self._hf.where(index)
        return f"{self._name} row {index} (tag {self.tag(index)!r})"

    def loader_needs(self) -> LoaderNeeds:
        return self._hf.loader_needs() if self._hf is not None else LoaderNeeds()

    def fingerprint(self) -> str:
        if self._fingerprint is None:
            h = hashlib.sha256(repr(sorted(self._rename.items())).encode())
            if self._hf is not None:
                h.update(self._hf.fingerprint().encode())
            for key, (flat, offsets) in sorted(self._encoded.items()):
                h.update(key.encode() + flat.tobytes() + offsets.tobytes())
            self._fingerprint = fingerprint_of(
                self._tags, self._lengths, self._schema, h.hexdigest()
            )
        return self._fingerprint

    def __repr__(self) -> str:
        return f"{self._name} ({len(self)} rows; keys {list(self._schema)})"


def huggingface(where: str, opts: dict[str, Any]) -> tuple[Source, None, np.ndarray | None]:
    """RETURNN's ``HuggingFaceDataset`` dict -> (the source, no subset, the lengths it orders by:
    None without a sorting column)."""
    hf_module = require("returnn.datasets.huggingface", "HuggingFaceDataset")
    datasets = require("datasets", "HuggingFaceDataset")
    if opts.get("map_func") is not None:
        raise OptionError(
            f"{where}: option 'map_func' is not supported: it is a function of the whole table, run "
            "in every process that opens it; apply it once (ds.map(...).save_to_disk(DIR)) and give "
            "dataset_opts=DIR"
        )
    if "data_format" not in opts:
        raise OptionError(f"{where}: 'data_format' is missing (RETURNN requires it too)")
    dataset_opts, files = _local(
        where, opts.get("dataset_opts"), opts.get("use_file_cache"), datasets, hf_module
    )
    kwargs = {k: opts[k] for k in HF_OWN[3:] if k in opts}
    try:
        dataset = hf_module.HuggingFaceDataset(dataset_opts, **kwargs)
        tags = dataset.get_all_tags()  # opens the table as RETURNN does (and checks it)
    except (AssertionError, TypeError, ValueError, KeyError) as e:
        raise OptionError(f"{where}: RETURNN's HuggingFaceDataset refuses it: {e}") from e
    table = dataset.hf_dataset
    plain = table.with_format(None)
    hf_keys: dict[str, str] = {}
    specs: dict[str, KeySpec] = {}
    encoded: dict[str, tuple[np.ndarray, np.ndarray, KeySpec]] = {}
    for key, tensor in dataset.data_format.items():
        feature = table.features[key]
        if tensor.ndim == 0:
            raise OptionError(
                f"{where}: data_format {key!r} has no time axis (one value per row); RETURNN "
                "hands it out as a scalar, seqloader keys are sequences: store it as a one-element "
                "list column (ds.map(lambda r: {NAME: [r[NAME]]})) with shape [1]"
            )
        if isinstance(feature, datasets.Audio):
            if not feature.decode:
                raise OptionError(
                    f"{where}: column {key!r} is Audio(decode=False): RETURNN hands out the "
                    "encoded file's bytes; not supported: keep decode=True (the samples)"
                )
            if "audio" in hf_keys.values():
                raise OptionError(f"{where}: two audio columns; one source decodes one")
            hf_keys[key] = "audio"
        elif getattr(feature, "dtype", None) in ("string", "large_string"):
            if tensor.vocab is None:
                raise OptionError(
                    f"{where}: column {key!r} holds strings and data_format gives no 'vocab': "
                    "RETURNN hands out the string itself, which is no tensor; give a vocab "
                    "(its ids are then RETURNN's) or encode the column when writing the dataset"
                )
            encoded[key] = _encode(where, key, list(plain[key]), tensor, tags)
        else:
            hf_keys[key] = f"k{len(hf_keys)}"
            if None not in tensor.shape[1:]:  # else: the frame size the table holds
                specs[key] = KeySpec(
                    np.dtype(tensor.dtype),
                    tuple(int(d) for d in tensor.shape[1:]),
                    bool(tensor.sparse),
                    int(tensor.dim) if tensor.sparse else None,
                )
    hf = None
    if hf_keys:
        options = None
        audio = [key for key, inner in hf_keys.items() if inner == "audio"]
        if audio and table.features[audio[0]].sampling_rate is None:
            options = AudioOptions(sample_rate=_native_rate(where, audio[0], table, datasets))
        keys = {inner: key for key, inner in hf_keys.items()}
        hf = HFSource(table, keys, dataset.seq_tag_column, options=options)
    bounds = None
    if files is not None:
        rows = [datasets.Dataset.from_file(f).num_rows for f in files]
        bounds = np.concatenate([[0], np.cumsum(rows)]).astype(np.int64)
    source = HFColumns(where, hf, hf_keys, encoded, tags, specs, bounds)
    return source, None, _sort_lengths(where, opts, plain, table)


def _local(
    where: str, value: Any, use_file_cache: Any, datasets: Any, hf_module: Any
) -> tuple[Any, list[str] | None]:
    """RETURNN's ``dataset_opts`` resolved to what is on this machine -> (the value for
    RETURNN's class, the Arrow files when it reads a list of them)."""
    if callable(value) and not isinstance(value, datasets.Dataset):
        value = value()
    from seqloader.returnn.paths import plain_value

    value = plain_value(value)
    if isinstance(value, datasets.Dataset):
        return value, None
    if isinstance(value, datasets.DatasetDict):
        raise OptionError(
            f"{where}: dataset_opts gives a DatasetDict ({sorted(value)}); RETURNN asserts one "
            "split: give the split's directory"
        )
    if isinstance(value, str):
        if not os.path.isdir(value):
            raise OptionError(
                f"{where}: dataset_opts {value!r} is not a local directory (RETURNN reads it with "
                f"datasets.load_from_disk); {LOCAL_FIX}"
            )
        if not use_file_cache:
            return value, None
        try:  # RETURNN's own reading of the directory's shard files (use_file_cache)
            value = hf_module.get_arrow_shard_files_from_hf_dataset_dir(value)
        except AssertionError as e:
            raise OptionError(f"{where}: dataset_opts: {e}") from e
    if isinstance(value, list | tuple):
        missing = [f for f in value if not isinstance(f, str) or not os.path.isfile(f)]
        if missing or not value:
            raise OptionError(
                f"{where}: dataset_opts lists {missing[:3] or value!r}: not local Arrow files; "
                f"{LOCAL_FIX}"
            )
        return list(value), list(value)
    if isinstance(value, dict):
        if value.get("streaming"):
            raise OptionError(
                f"{where}: dataset_opts streaming=True: an IterableDataset has no length or "
                f"random access, so no epoch can be planned; {LOCAL_FIX}"
            )
        path, files = value.get("path"), value.get("data_files")
        if isinstance(path, str) and os.path.isdir(path) and not files:
            return value, None
        if path in PACKAGED and files and all(glob.glob(f) for f in _file_names(files)):
            return value, None
        raise OptionError(
            f"{where}: dataset_opts {value!r} names {path!r}, which is not on this machine "
            f"(RETURNN would download it from the hub); {LOCAL_FIX}"
        )
    raise OptionError(f"{where}: dataset_opts {value!r}: not a local dataset; {LOCAL_FIX}")


def _native_rate(where: str, key: str, table: Any, datasets: Any) -> int:
    """The one rate of an ``Audio`` column that declares none (``datasets`` then decodes every file
    at its own rate), from the file headers."""
    import io

    sf = import_soundfile()
    raw = table.cast_column(key, datasets.Audio(decode=False)).with_format(None)[key]
    rates: dict[int, int] = {}
    for row, value in enumerate(raw):
        data = value.get("bytes")
        info = sf.info(io.BytesIO(data) if data else value["path"])
        rates.setdefault(int(info.samplerate), row)
    if len(rates) > 1:
        seen = ", ".join(f"{r} Hz (row {row})" for r, row in sorted(rates.items()))
        raise OptionError(
            f"{where}: column {key!r} declares no sampling rate and its files have several: "
            f"{seen}; RETURNN hands each out at its own rate, one source delivers one. Cast it "
            f"to one: cast_columns={{{key!r}: {{'_type': 'Audio', 'sampling_rate': 16000}}}} "
            "(datasets' field is 'sampling_rate'; an unknown 'sample_rate' is dropped)"
        )
    return next(iter(rates), 16000)


def _file_names(files: Any) -> list[str]:
    if isinstance(files, str | os.PathLike):
        return [os.fspath(files)]
    if isinstance(files, dict):
        return [f for v in files.values() for f in _file_names(v)]
    if isinstance(files, list | tuple):
        return [f for v in files for f in _file_names(v)]
    return [""]  # globs nothing: refused


def _encode(
    where: str, key: str, texts: list[str], tensor: Any, tags: Sequence[str]
) -> tuple[np.ndarray, np.ndarray, KeySpec]:
    """Token ids of every row's string by RETURNN's vocabulary (its ``get_seq``, as RETURNN
    encodes the column per read)."""
    dtype = np.dtype(tensor.dtype)
    pieces = []
    for i, text in enumerate(texts):
        try:
            pieces.append(np.asarray(tensor.vocab.get_seq(text), dtype=dtype))
        except KeyError as e:
            raise DataError(
                f"{where}: column {key!r} row {i} (tag {tags[i]!r}): label {e} is not in the "
                "vocabulary and it has no unknown label; add it, or set 'unknown_label'"
            ) from e
    offsets = np.zeros(len(pieces) + 1, dtype=np.int64)
    np.cumsum([len(p) for p in pieces], out=offsets[1:])
    flat = np.concatenate(pieces) if pieces else np.zeros(0, dtype)
    spec = KeySpec(dtype, (), True, int(tensor.vocab.num_labels))
    return flat.astype(dtype, copy=False), offsets, spec


def _sort_lengths(where: str, opts: dict[str, Any], plain: Any, table: Any) -> np.ndarray | None:
    """What RETURNN sorts by: ``sorting_seq_len_column``'s values (ranked: floats sort the same
    as their ranks, ties kept), else the length of ``sorting_seq_len_column_data``'s lists."""
    column = opts.get("sorting_seq_len_column")
    if column:
        values = np.asarray(plain[column])
        if values.ndim != 1 or values.dtype.kind not in "iuf":
            raise OptionError(
                f"{where}: sorting_seq_len_column {column!r} holds {values.dtype} of shape "
                f"{values.shape[1:]} per row; expected one number per row"
            )
        if values.dtype.kind == "f" and not np.isfinite(values).all():
            row = int(np.flatnonzero(~np.isfinite(values))[0])
            raise DataError(
                f"{where}: sorting_seq_len_column {column!r} is {values[row]} in row {row}; "
                "repair that row"
            )
        return np.unique(values, return_inverse=True)[1].astype(np.int64).reshape(-1)
    column = opts.get("sorting_seq_len_column_data")
    if column:
        pc = require("pyarrow.compute", "HuggingFaceDataset")
        pa = require("pyarrow", "HuggingFaceDataset")
        values = table.with_format("arrow")[column]
        if not pa.types.is_list(values.type) and not pa.types.is_large_list(values.type):
            raise OptionError(
                f"{where}: sorting_seq_len_column_data {column!r} holds {values.type}; RETURNN "
                "takes len() of each row: supported for list columns"
            )
        return np.asarray(pc.list_value_length(values).to_numpy(), dtype=np.int64)
    return None


def check_ordering(where: str, ordering: str, order_lengths: np.ndarray | None) -> None:
    """RETURNN's HuggingFaceDataset sorts by its sorting column only: without one it raises on a
    sorting ordering; ``sort_bin_shuffle`` reads the first length as ``int()`` in the first epoch
    only (then the column's values), which no fixed order reproduces."""
    kind = ordering.split(":")[0]
    if kind.startswith("sort_bin_shuffle"):
        raise OptionError(
            f"{where}: seq_ordering {ordering!r}: RETURNN's HuggingFaceDataset sorts the first "
            "sequence it asks about by int() of its length in the first epoch only; not "
            "planned: use 'laplace:.N' (the same idea: sorted bins, shuffled)"
        )
    if kind in SORTING and order_lengths is None:
        raise OptionError(
            f"{where}: seq_ordering {ordering!r} sorts by length, but neither "
            "sorting_seq_len_column nor sorting_seq_len_column_data is set (RETURNN raises): set "
            "one (e.g. 'sorting_seq_len_column': 'duration')"
        )
