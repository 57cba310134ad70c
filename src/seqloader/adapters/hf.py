"""``HFSource``: a Hugging Face ``datasets.Dataset`` (Arrow tables, memory-mapped when loaded from
disk) as a seqloader source.

``keys`` maps seqloader keys to columns, e.g. ``{"data": "feat", "classes": "label"}``. What a
column may hold, by its Arrow type:

- a list of numbers per row -> ``[T]`` (integers are sparse labels; a ``ClassLabel`` gives the
  vocabulary size);
- a list of equal-length lists (or fixed-size lists, ``Array2D``) of numbers -> ``[T, D]``;
- a string -> its utf-8 bytes ``[T]`` (``text``), or token ids under ``vocab`` for ``classes``;
- audio (the ``Audio`` feature: bytes or path) -> decoded through seqloader's audio path (soundfile,
  mono, resampled): the waveform for ``audio``, ``LogMel`` frames for ``data`` (``features=``). A
  column cast with ``Audio(sampling_rate=R)`` is delivered at R Hz, as ``datasets`` decodes it;
  a ``sample_rate=`` (or ``LogMel`` rate) that disagrees with R is an error naming both.

Planning lengths come from the Arrow list offsets at open (no row is decoded; audio lengths from the
file headers, no sample decoded). Rows are read one sequence at a time in the worker that needs
them: the Arrow buffers are mapped per process (the source pickles as the dataset, which for a
dataset loaded from disk is its file paths). Row selections (``select``/``shuffle``/``filter``,
an indices mapping) are followed. Tags: the ``tags`` column, else the row number.
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, NoReturn

import numpy as np

from seqloader.audio.keyed_source import AudioOptionsSource
from seqloader.audio.keys import (
    AudioOptions,
    encode_texts,
    fail_read,
    fit_wave,
    key_spec,
    mono,
    planned_lengths,
    put_wave,
)
from seqloader.audio.manifest import StringTable, import_soundfile
from seqloader.audio.vocab import Vocabulary
from seqloader.errors import DataError, OptionError
from seqloader.extras import require
from seqloader.sources.base import KeySpec

KINDS = ("list", "frames", "string", "audio")


@dataclass(frozen=True)
class Column:
    """How one key reads its column: ``kind`` (one of ``KINDS``), value dtype, frame dim."""

    key: str
    name: str
    kind: str
    dtype: np.dtype
    dim: int = 0  # values per frame for "frames"


class HFSource(AudioOptionsSource):
    """Rows of a ``datasets.Dataset`` as sequences; see the module docstring.

    ``keys``: seqloader key -> column (default: every list column under its own name); ``tags``: a
    string or integer column naming each row (default: the row number); ``vocab`` encodes a string
    column given as ``classes``; audio options (``features=LogMel(...)``, ``sample_rate``, ...) as
    ``options=AudioOptions(...)`` or keywords, for audio columns.

    >>> import datasets
    >>> table = datasets.Dataset.from_dict({"feat": [[[0.0, 1.0]] * 3, [[1.0, 2.0]] * 5], "id": ["a", "b"]})
    >>> src = HFSource(table, keys={"data": "feat"}, tags="id")
    >>> len(src), src.tag(1), src.lengths("data").tolist()
    (2, 'b', [3, 5])
    """

    def __init__(
        self,
        dataset: Any,
        keys: Mapping[str, str] | None = None,
        tags: str | None = None,
        *,
        vocab: Vocabulary | None = None,
        options: AudioOptions | None = None,
        **option_kwargs: object,
    ) -> None:
        datasets = require("datasets", "HFSource")
        if not isinstance(dataset, datasets.Dataset):
            raise OptionError(
                f"HFSource: got {type(dataset).__name__}, expected a datasets.Dataset (for a "
                "DatasetDict pick a split: ds['train']; an IterableDataset has no random access)"
            )
        self._open_options("HFSource", options, option_kwargs, vocab)
        self._data = dataset.data  # datasets' Table: pickles as file paths when memory-mapped
        indices = dataset._indices  # a select/shuffle/filter: rows of the table, in order
        self._rows = (
            None
            if indices is None
            else np.asarray(indices.column("indices").to_numpy(), dtype=np.int64)
        )
        table = self._data.table
        self._name = f"HFSource({len(dataset)} rows of {_describe(dataset)})"
        mapping = dict(keys) if keys is not None else self._default_keys(table, tags)
        if not mapping:
            raise OptionError(f"{self._name}: keys is empty; expected {{key: column}}")
        self._columns = {
            k: self._column(table, k, c, dataset.features.get(c)) for k, c in mapping.items()
        }
        self.options = self._declared_rate(dataset.features)
        self._tags = self._read_tags(table, tags)
        self._lengths: dict[str, np.ndarray] = {}
        self._texts: dict[str, StringTable] = {}
        self._classes: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self._samples: dict[str, np.ndarray] = {}
        for key, col in list(self._columns.items()):
            self._lengths[key] = self._open_lengths(table, col)
        self._schema = {
            k: self._spec(c, dataset.features.get(c.name)) for k, c in self._columns.items()
        }
        self._fingerprint: str | None = None
        self._views: dict[str, _ChunkedColumn] = {}  # per process, built on first read

    # ---- open time ----
    def _default_keys(self, table: Any, tags: str | None) -> dict[str, str]:
        pa = require("pyarrow", "HFSource")
        found = {
            name: name
            for name, typ in zip(table.column_names, table.schema.types)
            if name != tags and _is_list(pa, _storage(pa, typ))
        }
        if not found:
            raise OptionError(
                f"{self._name}: no list column to read; columns: {_columns(table)}. Pass "
                "keys={'data': COLUMN, ...}"
            )
        return found

    def _column(self, table: Any, key: str, name: str, feature: Any) -> Column:
        pa = require("pyarrow", "HFSource")
        if name not in table.column_names:
            raise OptionError(
                f"{self._name}: keys[{key!r}] = {name!r} is not a column; columns: "
                f"{_columns(table)}"
            )
        typ = _storage(pa, table.schema.field(name).type)
        if _is_list(pa, typ):
            inner = typ.value_type
            if _is_number(pa, inner):
                return Column(key, name, "list", np.dtype(inner.to_pandas_dtype()))
            if _is_list(pa, inner) and _is_number(pa, inner.value_type):
                dim = inner.list_size if pa.types.is_fixed_size_list(inner) else -1
                return Column(
                    key, name, "frames", np.dtype(inner.value_type.to_pandas_dtype()), dim
                )
        if pa.types.is_string(typ) or pa.types.is_large_string(typ):
            if key == "classes" and self.vocab is None:
                raise OptionError(
                    f"{self._name}: keys['classes'] = {name!r} is a string column; token ids "
                    "need vocab=... (or name the key 'text' for its utf-8 bytes)"
                )
            return Column(key, name, "string", np.dtype(np.uint8))
        if pa.types.is_struct(typ) and {"bytes", "path"} <= {f.name for f in typ}:
            if key not in ("audio", "data"):
                raise OptionError(
                    f"{self._name}: keys[{key!r}] = {name!r} is an audio column; it can be read "
                    "as 'audio' (waveform) or 'data' (with features=LogMel(...))"
                )
            if key == "data" and self.options.features is None:
                raise OptionError(
                    f"{self._name}: keys['data'] = {name!r} is an audio column; its frames need "
                    "features=LogMel(...) (or read the waveform as key 'audio')"
                )
            return Column(key, name, "audio", np.dtype(np.float32))
        raise OptionError(
            f"{self._name}: column {name!r} (keys[{key!r}]) holds {typ} per row, not a sequence. "
            "Expected a list of numbers ([T]), a list of equal-length number lists ([T, D]), a "
            "string or audio; a single value per row (e.g. a class label) is not a sequence: "
            "store it as a one-element list"
        )

    def _declared_rate(self, features: Any) -> AudioOptions:
        """The options with the rate the audio columns declare (``Audio(sampling_rate=R)``): that
        cast means "decode at R Hz" in ``datasets``, so ignoring it would hand out the files' own
        rate while the dataset says otherwise."""
        declared = {
            c.name: getattr(features.get(c.name), "sampling_rate", None)
            for c in self._columns.values()
            if c.kind == "audio"
        }
        declared = {name: rate for name, rate in declared.items() if rate is not None}
        if not declared:
            return self.options
        if len(set(declared.values())) > 1:
            raise OptionError(
                f"{self._name}: the audio columns declare different rates "
                f"({', '.join(f'{n!r}: {r} Hz' for n, r in declared.items())}); one source "
                "delivers one rate. Fix: cast them to one, e.g. "
                "dataset.cast_column(NAME, Audio(sampling_rate=16000))"
            )
        (name, rate), o = next(iter(declared.items())), self.options
        if o.sample_rate is not None:
            given, how = o.sample_rate, f"sample_rate={o.sample_rate}"
        elif o.features is not None:
            given, how = (
                o.features.sample_rate,
                f"features=LogMel(sample_rate={o.features.sample_rate})",
            )
        else:
            return replace(o, sample_rate=rate)
        if given != rate:
            raise OptionError(
                f"{self._name}: column {name!r} is declared Audio(sampling_rate={rate}) but "
                f"{how} was given; they must agree. Fix: pass {rate} (or leave sample_rate out), "
                f"or cast the column to the rate you want: "
                f"dataset.cast_column({name!r}, Audio(sampling_rate={given}))"
            )
        return o

    def _read_tags(self, table: Any, tags: str | None) -> StringTable:
        n = table.num_rows if self._rows is None else len(self._rows)
        if tags is None:
            return StringTable(str(i) for i in range(n))
        pa = require("pyarrow", "HFSource")
        if tags not in table.column_names:
            raise OptionError(
                f"{self._name}: tags={tags!r} is not a column; columns: {_columns(table)}"
            )
        typ = table.schema.field(tags).type
        if not (
            pa.types.is_string(typ) or pa.types.is_large_string(typ) or pa.types.is_integer(typ)
        ):
            raise OptionError(
                f"{self._name}: tags column {tags!r} holds {typ}; expected strings or integers"
            )
        column = table.column(tags)
        if column.null_count:
            row = int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])
            raise DataError(f"{self._name}: tags column {tags!r} is empty (null) in row {row}")
        values = column.to_pylist()
        rows = range(len(values)) if self._rows is None else self._rows
        return StringTable(str(values[r]) for r in rows)

    def _open_lengths(self, table: Any, col: Column) -> np.ndarray:
        """Per-sequence lengths of ``col`` from the Arrow offsets (string: bytes; audio: file
        headers); also checks nulls and, for frames, equal frame sizes."""
        column = table.column(col.name)
        chunks = [_unwrap(c) for c in column.chunks]
        if column.null_count:
            nulls = np.concatenate([c.is_null().to_numpy(zero_copy_only=False) for c in chunks])
            self._fail_open(col, self._index_of(int(np.flatnonzero(nulls)[0])), "is empty (null)")
        if col.kind == "audio":
            return self._audio_lengths(col, chunks)
        lengths = np.concatenate(
            [_row_lengths(c, col.kind) for c in chunks] or [np.zeros(0)]
        ).astype(np.int64)  # [rows] of the table
        if col.kind in ("list", "frames"):
            self._check_values(col, chunks)
        if col.kind == "frames":
            self._columns[col.key] = replace(col, dim=self._frame_dim(col, chunks))
        lengths = lengths if self._rows is None else lengths[self._rows]
        if col.kind == "string" and col.key == "classes":
            assert self.vocab is not None
            texts = StringTable(self._row_values(col))
            self._classes[col.key] = encode_texts(self.vocab, texts, self.where)
            return np.diff(self._classes[col.key][1])
        return lengths

    def _check_values(self, col: Column, chunks: list) -> None:
        """No null number inside a row (it would read as NaN, or fail later)."""
        row0 = 0
        for c in chunks:
            values = c.values if col.kind == "list" else c.values.flatten()
            if values.null_count:
                at = int(np.flatnonzero(values.is_null().to_numpy(zero_copy_only=False))[0])
                if col.kind == "frames":
                    inner = _offsets(c.values)
                    at = int(np.searchsorted(inner, at, side="right")) - 1
                outer = _offsets(c)
                row = row0 + int(np.searchsorted(outer, at, side="right")) - 1
                self._fail_open(col, self._index_of(row), "holds a null value")
            row0 += len(c)

    def _index_of(self, row: int) -> int:
        """The sequence index of table row ``row`` (the row itself without a selection)."""
        if self._rows is None:
            return row
        hits = np.flatnonzero(self._rows == row)
        return int(hits[0]) if len(hits) else row

    def _frame_dim(self, col: Column, chunks: list) -> int:
        """The one frame size of a ``[T, D]`` column; a row with frames of other sizes fails."""
        if col.dim >= 0:
            return col.dim
        dims: set[int] = set()
        row0 = 0
        for c in chunks:
            outer = _offsets(c)  # [rows + 1] into c.values
            inner = _offsets(c.values)
            sizes = np.diff(inner[outer[0] : outer[-1] + 1])  # [frames of this chunk]
            if len(sizes):
                want = sizes[0] if not dims else next(iter(dims))
                bad = np.flatnonzero(sizes != want)
                if len(bad):
                    row = row0 + int(np.searchsorted(outer - outer[0], bad[0], side="right")) - 1
                    self._fail_open(
                        col,
                        self._index_of(row),
                        f"has frames of {sizes[bad[0]]} values where the column's frames have "
                        f"{want} (ragged inner dimension); a [T, D] column needs D equal in "
                        "every frame of every row",
                    )
                dims.add(int(want))
            row0 += len(c)
        if not dims:
            raise DataError(
                f"{self._name}: column {col.name!r} has no frame in any row, so its frame size "
                "is unknown"
            )
        return dims.pop()

    def _audio_lengths(self, col: Column, chunks: list) -> np.ndarray:
        """Planned samples of every row at the target rate, from the file headers."""
        sf = import_soundfile()
        rate = self.options.rate
        rows = range(sum(len(c) for c in chunks)) if self._rows is None else self._rows
        view = _ChunkedColumn(chunks)
        samples = np.zeros(len(rows), dtype=np.int64)
        for i, r in enumerate(rows):
            try:
                info = sf.info(_audio_file(view.row(int(r))))
            except Exception as e:  # soundfile / OS errors: the header is unreadable
                self._fail_open(col, i, f"has audio whose header cannot be read: {e}")
            samples[i] = round(info.frames * rate / info.samplerate)
        self._samples[col.key] = samples
        return planned_lengths(col.key, samples, self.options)

    def _row_values(self, col: Column) -> list[str]:
        values = self._data.table.column(col.name).to_pylist()
        rows = range(len(values)) if self._rows is None else self._rows
        return [values[r] for r in rows]

    def _spec(self, col: Column, feature: Any) -> KeySpec:
        if col.kind == "audio" or (col.kind == "string" and col.key == "classes"):
            return key_spec(col.key, self.options, self.vocab)
        if col.kind == "string":
            return KeySpec(np.dtype(np.uint8), (), True, 256)
        if col.kind == "frames":
            return KeySpec(col.dtype, (col.dim,))
        if col.dtype.kind in "iu":
            inner = getattr(feature, "feature", None)
            return KeySpec(col.dtype, (), True, getattr(inner, "num_classes", None))
        return KeySpec(col.dtype)

    def _fail_open(self, col: Column, index: int, what: str) -> NoReturn:
        raise DataError(
            f"{self._name}: column {col.name!r} (key {col.key!r}) {what} in {self.where(index)}. "
            "Fix: repair or drop that row (dataset.filter) before building the source"
        )

    # ---- Source protocol ----
    def where(self, index: int) -> str:
        row = index if self._rows is None else int(self._rows[index])
        return f"{self._name} row {row} (tag {self.tag(index)!r})"

    def read(self, index: int) -> dict[str, np.ndarray]:
        if not 0 <= index < len(self):
            raise IndexError(f"HFSource: sequence {index} out of range for {len(self)}")
        row = index if self._rows is None else int(self._rows[index])
        out: dict[str, np.ndarray] = {}
        for key, col in self._columns.items():
            if col.kind == "string" and key == "classes":
                flat, offsets = self._classes[key]
                out[key] = flat[offsets[index] : offsets[index + 1]].copy()
                continue
            value = self._view(col).row(row)
            if col.kind == "list":
                out[key] = _numbers(value.values).astype(col.dtype, copy=False)
            elif col.kind == "frames":
                frames = value.values  # [T] lists of dim numbers
                flat = _numbers(frames.flatten()).astype(col.dtype, copy=False)
                out[key] = flat.reshape(len(frames), col.dim)
            elif col.kind == "string":
                out[key] = np.frombuffer(value.as_buffer(), dtype=np.uint8).copy()
            else:
                self._read_audio(index, col, value, out)
        return out

    def _read_audio(self, index: int, col: Column, value: Any, out: dict) -> None:
        sf = import_soundfile()
        o = self.options
        try:
            wave, file_rate = sf.read(_audio_file(value), dtype="float32", always_2d=True)
        except Exception as e:  # soundfile and OS errors all mean "unreadable"
            self._fail(index, col, f"cannot decode the audio: {type(e).__name__}: {e}", e)
        want = int(self._samples[col.key][index])
        wave, problem = fit_wave(mono(wave, 1), int(file_rate), o.rate, want, o.length_tolerance_s)
        if problem is not None:
            self._fail(index, col, f"{problem} (from its header at open)", None)
        put_wave(out, wave, o, col.key == "audio", col.key == "data")

    def _fail(self, index: int, col: Column, what: str, cause: Exception | None) -> NoReturn:
        where = f"sequence {index}: {self.where(index)}, column {col.name!r}"
        fail_read(self.options, where, what, "repair the row", cause)

    def _view(self, col: Column) -> _ChunkedColumn:
        view = self._views.get(col.name)
        if view is None:
            view = _ChunkedColumn([_unwrap(c) for c in self._data.table.column(col.name).chunks])
            self._views[col.name] = view
        return view

    def fingerprint(self) -> str:
        if self._fingerprint is None:
            self._fingerprint = self._salted_fingerprint(
                f"{key}={col.name}:{col.kind}:{col.dtype}:{col.dim};"
                for key, col in self._columns.items()
            )
        return self._fingerprint

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_views"] = {}  # Arrow views are rebuilt in the process that reads
        return state

    def __repr__(self) -> str:
        keys = ", ".join(
            f"{k} <- {c.name}: {self._schema[k].describe()}" for k, c in self._columns.items()
        )
        return f"{self._name}; {keys}"


class _ChunkedColumn:
    """Row access into a column's chunks (``row(r)`` finds the chunk by binary search)."""

    def __init__(self, chunks: list) -> None:
        self.chunks = chunks
        self.starts = np.cumsum([0] + [len(c) for c in chunks], dtype=np.int64)  # [chunks + 1]

    def row(self, r: int) -> Any:
        """Row ``r`` as an Arrow scalar (its ``values`` are a zero-copy slice of the buffers)."""
        k = int(np.searchsorted(self.starts, r, side="right")) - 1
        return self.chunks[k][r - int(self.starts[k])]


def _storage(pa: Any, typ: Any) -> Any:
    """The storage type of an extension type (``Array2D`` and friends), else the type itself."""
    return typ.storage_type if isinstance(typ, pa.ExtensionType) else typ


def _unwrap(chunk: Any) -> Any:
    return chunk.storage if hasattr(chunk, "storage") else chunk


def _is_list(pa: Any, typ: Any) -> bool:
    t = pa.types
    return t.is_list(typ) or t.is_large_list(typ) or t.is_fixed_size_list(typ)


def _is_number(pa: Any, typ: Any) -> bool:
    t = pa.types
    return t.is_integer(typ) or t.is_floating(typ) or t.is_boolean(typ)


def _row_lengths(chunk: Any, kind: str) -> np.ndarray:
    """Items per row from the Arrow offsets (bytes for strings, frames for lists)."""
    if kind == "string":
        pc = require("pyarrow.compute", "HFSource")
        return np.asarray(pc.binary_length(chunk).to_numpy(zero_copy_only=False), dtype=np.int64)
    return np.diff(_offsets(chunk))


def _offsets(array: Any) -> np.ndarray:
    """Row starts into ``array.values`` (int64 ``[rows + 1]``), also for fixed-size lists, whose
    ``values`` are not sliced by the array's own offset either."""
    size = getattr(array.type, "list_size", None)
    if size is None:
        return np.asarray(array.offsets, dtype=np.int64)
    return (np.arange(len(array) + 1, dtype=np.int64) + array.offset) * size


def _numbers(array: Any) -> np.ndarray:
    return np.asarray(array.to_numpy(zero_copy_only=False))


def _audio_file(value: Any) -> Any:
    """A file-like object or path soundfile can open, from an ``Audio`` struct value."""
    data = value["bytes"]
    if data.is_valid:
        return io.BytesIO(data.as_buffer())
    path = value["path"].as_py()
    if not path:
        raise DataError("the audio value has neither bytes nor a path")
    return os.fspath(path)


def _columns(table: Any) -> str:
    return ", ".join(f"{n} ({t})" for n, t in zip(table.column_names, table.schema.types))


def _describe(dataset: Any) -> str:
    files = [f.get("filename") for f in getattr(dataset, "cache_files", []) or []]
    return os.path.dirname(files[0]) if files and files[0] else "an in-memory dataset"
