"""``ConcatSource``: named corpora as one source (RETURNN's ``CombinedDataset``, Lhotse's ``mux``
inputs), the ground that ``mix`` plans on.

Corpus after corpus in one index space: corpus c holds indices ``[bounds[c], bounds[c + 1])``
(``corpus_layout()``; planning wraps it in ``seqloader.plan.mix.Corpora``), so a sequence index says its corpus with one ``searchsorted``. Every corpus must
carry the keys used, with the same dtype, feature shape and sparse vocabulary — a batch pads
sequences of several corpora into one tensor. Nothing is opened here beyond what the corpora
opened themselves: each reads lazily in the process that reads.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence

import numpy as np

from seqloader.errors import DataError, OptionError
from seqloader.parts import by_part, scatter
from seqloader.sources.base import (
    KeySpec,
    Source,
    SourceBase,
    file_layout,
    prepare_workers,
    read_batch,
    where,
)
from seqloader.sources.columns import ColumnStore
from seqloader.sources.concat_store import concat_metadata, mapped
from seqloader.sources.joined import named_sources


def _same_spec(a: KeySpec, b: KeySpec) -> bool:
    return (
        np.dtype(a.dtype) == np.dtype(b.dtype)
        and tuple(a.feature_shape) == tuple(b.feature_shape)
        and a.sparse == b.sparse
        and a.vocab_size == b.vocab_size
    )


class ConcatSource(SourceBase):
    """``ConcatSource({"libri": src_a, "ted": src_b})``: the corpora in the given order.

    ``keys``: the keys to deliver (default: the first corpus' keys); every corpus must have them,
    with equal specs. Extra keys of a corpus are dropped. ``Batch.corpus`` names each sequence's
    corpus; ``SeqLoader(..., mix={...})`` mixes the corpora with exact per-corpus epochs.

    >>> a = sl.MemorySource({"x": [np.zeros((2, 1), "float32")] * 2}, tags=["a0", "a1"])
    >>> b = sl.MemorySource({"x": [np.zeros((3, 1), "float32")] * 3}, tags=["b0", "b1", "b2"])
    >>> both = ConcatSource({"a": a, "b": b})
    >>> len(both), both.tag(2), both.read(2)["x"].shape
    (5, 'b0', (3, 1))
    """

    def __init__(self, corpora: Mapping[str, Source], keys: Sequence[str] | None = None) -> None:
        self._names, self._sources = named_sources(
            "ConcatSource", "corpus", corpora, "{'libri': HDFSource(...), 'ted': HDFSource(...)}"
        )
        for name, src in zip(self._names, self._sources):
            if len(src) == 0:
                raise DataError(
                    f"ConcatSource: corpus {name!r} ({src!r}) has no sequences; leave it out, or "
                    "check its files"
                )
        first_name, first = self._names[0], self._sources[0]
        wanted = tuple(keys) if keys is not None else tuple(first.keys)
        if not wanted:
            raise OptionError("ConcatSource: no keys selected")
        schema: dict[str, KeySpec] = {}
        for key in wanted:
            for name, src in zip(self._names, self._sources):
                if key not in src.keys:
                    raise DataError(
                        f"ConcatSource: corpus {name!r} has no key {key!r} (its keys: "
                        f"{list(src.keys)}; {src!r}). Every corpus needs the keys used; pass "
                        "keys=[...] to use only keys all corpora have."
                    )
                spec = src.schema[key]
                if key not in schema:
                    schema[key], first_name = spec, name
                elif not _same_spec(schema[key], spec):
                    raise DataError(
                        f"ConcatSource: key {key!r} is {spec.describe()} in corpus {name!r} but "
                        f"{schema[key].describe()} in corpus {first_name!r}; every corpus must "
                        "agree on dtype, feature shape and sparse vocabulary (one batch pads "
                        "sequences of several corpora into one tensor)."
                    )
        self._schema = schema
        sizes = np.array([len(s) for s in self._sources], dtype=np.int64)
        self._bounds = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)  # [C + 1]
        # one index space: mapped from the node's store for large corpora, else one copy here
        meta = concat_metadata(self._names, self._sources, list(schema), origin=self._describe())
        self._lengths, self._tags, self._store = meta.lengths, meta.tags, meta.store
        self.index_built = meta.built  # whether this open built the node's store
        self._fingerprint: str | None = None

    @property
    def store(self) -> ColumnStore | None:
        """The node's store of the concatenated lengths and tags (None: held in memory)."""
        return self._store

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        if self._store is not None:  # the store pickles its path: a worker maps it again
            state.pop("_lengths", None)
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        if "_lengths" not in state:
            assert self._store is not None
            self._lengths = mapped(self._store, list(self._schema)).lengths

    def _describe(self) -> str:
        parts = ", ".join(f"{n}: {len(s)} seqs" for n, s in zip(self._names, self._sources))
        return f"ConcatSource({parts})"

    # ---- corpora ----
    def file_layout(self) -> np.ndarray:
        """The corpora's files one after another (``HasFiles``); a corpus that does not declare
        its files counts as one."""
        parts = [np.zeros(1, dtype=np.int64)]
        for c, src in enumerate(self._sources):
            own = file_layout(src)
            bounds = np.array([0, len(src)], dtype=np.int64) if own is None else own
            parts.append(bounds[1:] + self._bounds[c])
        return np.concatenate(parts)

    def corpus_layout(self) -> tuple[tuple[str, ...], np.ndarray]:
        """(corpus names, bounds int64 ``[C + 1]``): corpus c holds ``[bounds[c], bounds[c+1])``;
        what ``mix`` plans on and ``Batch.corpus`` reports."""
        return self._names, self._bounds

    @property
    def sources(self) -> dict[str, Source]:
        return dict(zip(self._names, self._sources))

    def locate_corpus(self, index: int) -> tuple[int, int]:
        """(corpus number, index within that corpus) of sequence ``index``."""
        index = int(index)
        if not 0 <= index < self._bounds[-1]:
            raise IndexError(f"sequence index {index} out of range for {self!r}")
        c = int(np.searchsorted(self._bounds, index, side="right")) - 1
        return c, index - int(self._bounds[c])

    def where(self, index: int) -> str:
        """Corpus and, as precisely as that corpus can say, where in it (file and local index)."""
        c, j = self.locate_corpus(index)
        return f"corpus {self._names[c]!r} sequence {j}: {where(self._sources[c], j)}"

    # ---- reading ----
    def read(self, index: int) -> dict[str, np.ndarray]:
        c, j = self.locate_corpus(index)
        seq = self._sources[c].read(j)
        return {k: seq[k] for k in self._schema}

    def read_many(self, indices: Sequence[int] | np.ndarray) -> list[dict[str, np.ndarray]]:
        """``[read(i) for i in indices]``, each corpus asked once (with its ``read_many``)."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        for i in idx[(idx < 0) | (idx >= self._bounds[-1])][:1].tolist():
            self.locate_corpus(i)  # raises IndexError naming it
        groups = []
        for c, pos, local in by_part(self._bounds, idx):
            seqs = read_batch(self._sources[c], local)
            groups.append((pos, [{k: seq[k] for k in self._schema} for seq in seqs]))
        return scatter(len(idx), groups)

    def prepare_workers(self) -> None:
        """Before DataLoader workers fork: let every corpus prepare (e.g. HDF chunk indexes)."""
        for src in self._sources:
            prepare_workers(src)

    def fingerprint(self) -> str:
        if self._fingerprint is None:
            h = hashlib.sha256(b"concat\0")
            for name, src in zip(self._names, self._sources):
                h.update(f"{name}\0{src.fingerprint()}\0".encode())
            h.update(",".join(self._schema).encode())
            self._fingerprint = h.hexdigest()[:32]
        return self._fingerprint

    def __repr__(self) -> str:
        parts = ", ".join(f"{n}: {len(s)} seqs" for n, s in zip(self._names, self._sources))
        keys = ", ".join(f"{k}: {s.describe()}" for k, s in self._schema.items())
        return f"ConcatSource({parts}; {keys})"
