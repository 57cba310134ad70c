"""The ``Source`` protocol: random-access sequence stores.

A source tells everything planning needs at open time, cheaply (lengths, tags, schema), and reads one
sequence on demand (in a DataLoader worker). Sources must be picklable and must open files lazily in
the process that reads, so they survive fork and spawn.

Optional abilities are declared, each as a runtime-checkable protocol of its own (``ReadsMany``,
``ReadsInto``, ``ReadsIntoWhen``, ``PreparesWorkers``, ``Locates``, ``DeclaresNeeds``, ``HasFiles``; ``HashedTags`` and
``TakesTags`` for tag containers). Callers test
them with ``declares`` (``issubclass`` on the object's class, cached), never ``getattr``, and
``SourceBase`` gives the defaults, so a source written by a user is handled exactly like a
built-in one.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, cast, runtime_checkable

import numpy as np

from seqloader.errors import DataError, SeqLoaderError, SequenceSkipped
from seqloader.sources.scratch import Scratch

if TYPE_CHECKING:
    from seqloader.sources.remote import RemoteFiles


@dataclass(frozen=True)
class KeySpec:
    """What one key of a sequence looks like.

    ``feature_shape`` is the shape of one frame (``()`` for sparse/scalar frames); ``vocab_size`` is
    set for sparse (integer label) keys.

    >>> src = sl.MemorySource({"data": [np.ones((3, 2), "float32")]})
    >>> src.schema["data"] == KeySpec(np.dtype("float32"), (2,))
    True
    >>> KeySpec(np.dtype("int32"), sparse=True, vocab_size=1000).sparse
    True
    """

    dtype: np.dtype
    feature_shape: tuple[int, ...] = ()
    sparse: bool = False
    vocab_size: int | None = None

    def describe(self) -> str:
        shape = "[T" + "".join(f", {d}" for d in self.feature_shape) + "]"
        extra = f" sparse(vocab={self.vocab_size})" if self.sparse else ""
        return f"{np.dtype(self.dtype).name}{shape}{extra}"


Schema = Mapping[str, KeySpec]


@runtime_checkable
class Source(Protocol):
    """A random-access store of sequences; see the module docstring.

    >>> isinstance(sl.MemorySource({"data": [np.ones((3, 2), "float32")]}), Source)
    True
    """

    def __len__(self) -> int: ...

    @property
    def keys(self) -> tuple[str, ...]: ...

    @property
    def schema(self) -> Schema: ...

    def lengths(self, key: str) -> np.ndarray:
        """Per-sequence lengths of ``key`` (int ``[n]``: int64, or int32 where every length
        fits); known at open, no data read.

        The array may be a read-only view of memory-mapped metadata (``sources/columns.py``): one
        file per node shared by every rank and worker, so a source need not hold a private
        int64 copy of ``n`` lengths. Callers never write into it and accumulate in int64 (numpy's
        ``sum``/``cumsum`` do so for int32; products and ``out=`` arrays must say so)."""
        ...

    def tag(self, index: int) -> str: ...

    @property
    def tags(self) -> Sequence[str]: ...

    def read(self, index: int) -> dict[str, np.ndarray]:
        """Sequence ``index`` as ``{key: array [T_key, *feature_shape]}``."""
        ...

    def fingerprint(self) -> str:
        """A content hash: equal for the same data, different for other data."""
        ...


@runtime_checkable
class ReadsMany(Protocol):
    """Reads several sequences faster together than one by one (e.g. one pass over a file). The
    result equals ``[read(i) for i in indices]``. Errors need no care here: callers read through
    ``read_batch``, which reads a failed batch again with ``read``, so a skipped or broken sequence
    is counted and named exactly as without ``read_many``."""

    def read_many(self, indices: np.ndarray) -> list[dict[str, np.ndarray]]: ...


@runtime_checkable
class PreparesWorkers(Protocol):
    """Has work to do once in the trainer process just before DataLoader workers fork, which every
    worker then inherits (e.g. HDF chunk indexes)."""

    def prepare_workers(self) -> None: ...


@runtime_checkable
class Locates(Protocol):
    """Says where a sequence lives (file and local index, manifest line), for error messages."""

    def where(self, index: int) -> str: ...


@dataclass(frozen=True)
class LoaderNeeds:
    """What a source needs from the loader that runs it; the loader checks it generically.

    ``transform_keys``: keys the source plans but does not read, so a transform must produce them
    (with ``why`` and ``fix`` for the error when no transform is given). ``on_device``: for an
    audio source's deferred ``data``, what computes it from a collated batch of waveforms
    (``seqloader.audio.device_features.DeviceFeatures``), for the loader's ``features_on``."""

    transform_keys: tuple[str, ...] = ()
    why: str = ""
    fix: str = ""
    on_device: object = None


@runtime_checkable
class DeclaresNeeds(Protocol):
    def loader_needs(self) -> LoaderNeeds: ...


@runtime_checkable
class ReadsInto(Protocol):
    """Writes sequences straight into a padded batch: ``out[key][j]`` gets sequence
    ``indices[j]``'s rows followed by zeros, for every key of ``out`` (arrays ``[B, T, *feat]``
    with T at least the longest length), so no sequence is materialised on the way
    (``seqloader.loading.direct``; used when no transform needs each sequence on its own). With
    ``screen``, float data is screened for NaN/Inf as it is copied; returns the rows ``j`` that may
    hold some (the loader checks them exactly and names them). Errors name the sequence."""

    def read_into(
        self, indices: np.ndarray, out: Mapping[str, np.ndarray], screen: bool = False
    ) -> list[int]: ...


@runtime_checkable
class ReadsIntoWhen(Protocol):
    """A ``ReadsInto`` source whose reads have exactly the planned lengths only in some
    configurations (audio planned for speed perturbation: the planned lengths are a bound):
    ``can_read_into`` says whether this one does; the loader reads it the general way if not."""

    def can_read_into(self) -> bool: ...


@runtime_checkable
class TakesTags(Protocol):
    """A tag container that returns the tags of one batch in one call."""

    def take(self, indices: np.ndarray) -> list[str]: ...


@runtime_checkable
class HashedTags(Protocol):
    """A tag container that hashes all its tags at once (int64 ``[n]``), so duplicate checks
    decode and compare only tags whose hashes collide."""

    def hashes(self) -> np.ndarray: ...


@runtime_checkable
class PlanHints(Protocol):
    """Planning inputs besides lengths, for RETURNN's exact order (``seqloader.returnn``'s
    ``ReturnnView``): the lengths sorting orderings sort by (None: the length key's), and
    sequences left out like filtered ones (reason -> bool mask ``[n]``)."""

    def order_lengths(self) -> np.ndarray | None: ...

    def excluded(self) -> Mapping[str, np.ndarray]: ...


@runtime_checkable
class NamesCorpora(Protocol):
    """Is made of named corpora laid out one after another (``ConcatSource``): corpus c holds the
    indices ``[bounds[c], bounds[c + 1])``. Planning mixes them (``mix``) and every batch names each
    sequence's corpus (``Batch.corpus``). Plain values: sources sit below planning."""

    def corpus_layout(self) -> tuple[tuple[str, ...], np.ndarray]: ...


@runtime_checkable
class HasFiles(Protocol):
    """Says which sequences each of its files holds: int64 bounds ``[F + 1]``, file f holds the
    indices ``[bounds[f], bounds[f + 1])``. ``distribution="files"`` gives ranks whole files, and a
    file cache fetches whole files. ``SourceBase``'s default is one file holding everything."""

    def file_layout(self) -> np.ndarray: ...


@runtime_checkable
class HasLengthVariants(Protocol):
    """Reads each sequence in one of ``F`` variants of known lengths (planned speed perturbation:
    one per factor). ``length_variants``: (the variants' names ``[F]``, key -> int64 ``[F, n]``
    for the keys whose length varies), or None when the source has none; ``lengths(key)`` is then
    the longest variant's. Planning draws a variant per sequence and full epoch
    (``seqloader.plan.variants``) and the loader reads it with ``read_variant``; every key of the
    result must have the planned variant's length. Plain values: sources sit below planning.
    ``fingerprint`` must change where any variant's lengths change (``fingerprint_of`` over the
    longest lengths does not see a shorter variant's: salt it, e.g. ``extra=`` the factors); the
    node's variant classes store hashes the table itself (``variants_digest``)."""

    def length_variants(self) -> tuple[tuple[str, ...], Mapping[str, np.ndarray]] | None: ...

    def read_variant(self, index: int, variant: int) -> dict[str, np.ndarray]: ...


@runtime_checkable
class FetchesRemote(Protocol):
    """Reads remote files through a local ``FileCache`` (``HDFSource`` over URLs): the loader
    fetches each rank's files ahead of its plan and evicts the rest (``seqloader.trainer.prefetch``).
    None: the files are local after all."""

    def remote_files(self) -> RemoteFiles | None: ...


class SourceBase:
    """Base class for sources: the metadata half of the ``Source`` protocol for sources that keep
    it in attributes set at open (``_schema``, whose key order is ``keys``; ``_lengths``: key ->
    int64 ``[n]``; ``_tags``), and the defaults of the optional abilities. One implementation, so
    every source answers planning's questions the same way. ``read_many`` has no default: without
    it ``read_batch`` reads one by one."""

    _schema: Schema
    _lengths: Mapping[str, np.ndarray]
    _tags: Sequence[str]

    def __len__(self) -> int:
        return len(self._tags)

    @property
    def keys(self) -> tuple[str, ...]:
        return tuple(self._schema)

    @property
    def schema(self) -> Schema:
        return self._schema

    def lengths(self, key: str) -> np.ndarray:
        if key not in self._lengths:
            raise KeyError(f"key {key!r} is not in {self!r}; keys: {list(self._schema)}")
        return self._lengths[key]

    @property
    def tags(self) -> Sequence[str]:
        return self._tags

    def tag(self, index: int) -> str:
        return self._tags[index]

    # ---- defaults of the optional abilities ----
    def where(self, index: int) -> str:
        """Where sequence ``index`` lives: by default, the source itself."""
        return repr(self)

    def tags_at(self, indices: np.ndarray) -> list[str]:
        """The tags of one batch's sequences (valid indices), in one call."""
        if declares(self._tags, TakesTags):
            return cast(TakesTags, self._tags).take(indices)
        return [self._tags[i] for i in np.asarray(indices).tolist()]

    def prepare_workers(self) -> None:
        """Nothing to prepare before workers fork."""

    def loader_needs(self) -> LoaderNeeds:
        """Nothing beyond reading."""
        return LoaderNeeds()

    def file_layout(self) -> np.ndarray:
        """One file holding all sequences (``HasFiles``); sources of several files override it."""
        return np.array([0, len(self)], dtype=np.int64)


_DECLARED: dict[tuple[type, type], bool] = {}


def declares(obj: object, ability: type) -> bool:
    """Whether ``obj`` has ``ability`` (a runtime-checkable protocol of methods). Decided by its
    class and cached: ``isinstance`` on a protocol costs ~50 us in Python 3.11 (measured), too much
    for a check per batch."""
    key = (type(obj), ability)
    found = _DECLARED.get(key)
    if found is None:
        found = _DECLARED[key] = issubclass(key[0], ability)
    return found


def where(source: Source, index: int) -> str:
    """Where sequence ``index`` lives, as precisely as the source can say (``Locates``)."""
    if declares(source, Locates):
        try:
            return cast(Locates, source).where(int(index))
        except Exception:  # a broken source should not hide the original finding
            pass
    return repr(source)


def tags_at(source: Source, indices: np.ndarray) -> list[str]:
    """The tags of one batch's sequences: in one call for sources built on ``SourceBase``."""
    if isinstance(source, SourceBase):
        return source.tags_at(indices)
    return [source.tag(int(i)) for i in indices]


def corpus_layout(source: Source) -> tuple[tuple[str, ...], np.ndarray] | None:
    """(corpus names, bounds ``[C + 1]``) of a source of named corpora (``NamesCorpora``), else
    None."""
    return cast(NamesCorpora, source).corpus_layout() if declares(source, NamesCorpora) else None


def file_layout(source: Source) -> np.ndarray | None:
    """File bounds int64 ``[F + 1]`` of a source that declares them (``HasFiles``), else None."""
    if not declares(source, HasFiles):
        return None
    return np.asarray(cast(HasFiles, source).file_layout(), dtype=np.int64)


def length_variants(source: Source) -> tuple[tuple[str, ...], Mapping[str, np.ndarray]] | None:
    """The length variants of a source that reads sequences in variants (``HasLengthVariants``),
    else None."""
    if not declares(source, HasLengthVariants):
        return None
    return cast(HasLengthVariants, source).length_variants()


def remote_files(source: Source) -> RemoteFiles | None:
    """The remote files of a source that reads through a cache (``FetchesRemote``), else None."""
    return cast(FetchesRemote, source).remote_files() if declares(source, FetchesRemote) else None


def prepare_workers(source: Source) -> None:
    """The source's work before DataLoader workers fork, if it declares any (``PreparesWorkers``)."""
    if declares(source, PreparesWorkers):
        cast(PreparesWorkers, source).prepare_workers()


def loader_needs(source: Source) -> LoaderNeeds:
    """What ``source`` needs from its loader (``DeclaresNeeds``; nothing by default)."""
    if declares(source, DeclaresNeeds):
        return cast(DeclaresNeeds, source).loader_needs()
    return LoaderNeeds()


def read_batch(
    source: Source, indices: np.ndarray, skipped: list[tuple[int, str]] | None = None
) -> list[dict[str, np.ndarray]]:
    """Sequences ``indices``, with the source's ``read_many`` when it has one (``ReadsMany``).

    The one fallback for batched reads, used by the loader, writers and wrapping sources alike:
    when ``read_many`` raises, the batch is read again with ``read``, so a broken sequence is named
    (index, tag and where it lives) and a skipped one counted exactly as for a source without
    ``read_many``; if every sequence reads fine alone, the fault is ``read_many``'s own and its
    error propagates. With ``skipped`` given, a sequence whose ``read`` raises ``SequenceSkipped``
    is left out of the result and ``(position in indices, message)`` is appended; without it, the
    error propagates.
    """
    if not declares(source, ReadsMany):
        return read_each(source, indices, skipped)
    try:
        many = cast(ReadsMany, source).read_many(indices)
    except Exception:
        before = len(skipped) if skipped is not None else 0
        out = read_each(source, indices, skipped)  # raises the named error of a broken sequence
        if skipped is not None and len(skipped) > before:
            return out
        raise
    if len(many) != len(indices):
        raise DataError(
            f"{source!r}: read_many returned {len(many)} sequences for {len(indices)} indices; "
            "expected one per index, in order"
        )
    return list(many)


def read_each(
    source: Source,
    indices: np.ndarray,
    skipped: list[tuple[int, str]] | None = None,
    variants: np.ndarray | None = None,
) -> list[dict[str, np.ndarray]]:
    """``read`` one sequence at a time (``read_batch`` without ``read_many``); an error that is
    not seqloader's own is named (index, tag, where) with the original as its cause.
    ``variants``: read sequence ``indices[j]`` in variant ``variants[j]`` (``HasLengthVariants``)."""
    out = []
    picks = None if variants is None else np.asarray(variants).tolist()
    for pos, i in enumerate(np.asarray(indices).tolist()):
        try:
            if picks is None:
                out.append(source.read(i))
            else:
                out.append(cast(HasLengthVariants, source).read_variant(i, picks[pos]))
        except SequenceSkipped as e:
            if skipped is None:
                raise
            skipped.append((pos, str(e)))
        except SeqLoaderError:
            raise
        except Exception as e:
            raise DataError(
                f"reading sequence {i} (tag {source.tag(i)!r}) from {where(source, i)} "
                f"failed: {type(e).__name__}: {e}"
            ) from e
    return out


def fingerprint_of(
    tags: Sequence[str], lengths: Mapping[str, np.ndarray], schema: Schema, extra: str = ""
) -> str:
    """Hash tags, lengths and schema: cheap (no data read) and catches the usual mismatches
    (other file list, other order, other feature dim) between ranks or between runs.

    The bytes hashed are each tag's utf-8 bytes and a NUL, then every key's lengths as int64,
    whatever the container and dtype: packed tags and int32 columns are hashed in blocks
    (no Python object per tag, no int64 copy of ``n``) to the same digest."""
    h = hashlib.sha256()
    h.update(str(len(tags)).encode())
    if declares(tags, PacksTags):
        hash_packed(h, *cast(PacksTags, tags).buffers())
    else:
        for t in tags:
            h.update(t.encode("utf-8", "surrogateescape"))
            h.update(b"\0")
    for key in sorted(lengths):
        spec = schema[key]
        h.update(f"{key}:{spec.describe()}".encode())
        values = lengths[key]
        for a in range(0, len(values), _HASH_BLOCK):
            h.update(np.ascontiguousarray(values[a : a + _HASH_BLOCK], dtype=np.int64).tobytes())
    h.update(extra.encode())
    return h.hexdigest()[:32]


#: rows per block when hashing columns: bounds the temporary copies (8 MB of int64)
_HASH_BLOCK = 1 << 20


@runtime_checkable
class PacksTags(Protocol):
    """A tag container kept as one utf-8 buffer and int64 offsets ``[n + 1]`` (``PackedTags``)."""

    def buffers(self) -> tuple[np.ndarray, np.ndarray]: ...


def hash_packed(
    h: hashlib._Hash, data: np.ndarray, offsets: np.ndarray, scratch: Scratch | None = None
) -> None:
    """Feed ``h`` each tag's bytes followed by a NUL, a block of tags at a time (what
    ``fingerprint_of`` hashes of packed tags; a store written block by block feeds its blocks,
    its temporaries kept in ``scratch``)."""
    n = len(offsets) - 1
    for a in range(0, n, _HASH_BLOCK):
        b = min(n, a + _HASH_BLOCK)
        h.update(_with_nuls(data, offsets[a : b + 1], scratch).data)


#: a block's tags are copied run by run where its runs of tags of one length are this long on
#: average (ids of a fixed width: a 2-D copy each), else through one byte mask
_RUN_ROWS = 64


def _with_nuls(data: np.ndarray, offsets: np.ndarray, scratch: Scratch | None = None) -> np.ndarray:
    """The tags ``data[offsets[j] : offsets[j + 1]]`` one after another, each followed by a NUL
    -> uint8 ``[bytes + tags]``; no int64 per byte (two byte-sized temporaries at the most).

    >>> _with_nuls(np.frombuffer(b"abcde", np.uint8), np.array([0, 2, 2, 5])).tobytes()
    b'ab\\x00\\x00cde\\x00'
    """
    rows = len(offsets) - 1
    lo, hi = int(offsets[0]), int(offsets[-1])
    lengths = (
        np.empty(rows, np.int64) if scratch is None else scratch.take("widths", rows, np.int64)
    )
    np.subtract(offsets[1:], offsets[:-1], out=lengths)
    first = np.flatnonzero(np.concatenate([[True], lengths[1:] != lengths[:-1]]))
    if rows and len(first) * _RUN_ROWS <= rows:  # long runs of one length: [rows, L + 1] each
        size = hi - lo + rows
        out = np.empty(size, np.uint8) if scratch is None else scratch.take("nuls", size, np.uint8)
        ends = np.append(first[1:], rows).tolist()
        widths, starts = lengths[first].tolist(), offsets[first].tolist()
        for f, e, width, src in zip(first.tolist(), ends, widths, starts, strict=True):
            at = src - lo + f  # tag f's bytes follow the f NULs before it
            block = out[at : at + (e - f) * (width + 1)].reshape(e - f, width + 1)
            if width:  # each tag one item of ``width`` bytes: copied whole, not byte by byte
                item = np.dtype((np.void, width))
                tags = np.ndarray((e - f,), item, out, at, (width + 1,))
                tags[...] = data[src : src + (e - f) * width].view(item)
            block[:, width] = 0
        return out
    out = np.zeros(hi - lo + rows, dtype=np.uint8)
    # tag j's NUL follows its last byte, j NULs further on; the bytes fill the rest in order
    keep = np.ones(len(out), dtype=bool)
    keep[offsets[1:] - lo + np.arange(rows, dtype=np.int64)] = False
    out[keep] = data[lo:hi]
    return out
