"""``ZipSource``: sources joined by sequence tag, with RETURNN ``MetaDataset`` semantics.

Features in one HDF file set and alignments in another: ``ZipSource({"feat": a, "align": b},
data_map={"data": ("feat", "data"), "classes": ("align", "data")}, control="feat")``. The control
source decides which sequences there are and their order (RETURNN's ``seq_order_control_dataset``;
default: the source of ``data``); every key is renamed by ``data_map`` and keeps the lengths of its
own source. Every other source must hold every control tag (RETURNN raises "Dataset ... is missing
seqs"); tags that only another source holds are not used. ``missing="intersect"`` keeps the
control tags all sources hold instead, and reports how many were left out, per source.

The join is vectorised (``tag_join``): no per-tag Python dict at open. Nothing is opened here
beyond what the sources opened themselves; each reads lazily in the process that reads.
"""

from __future__ import annotations

import hashlib
import warnings
from collections.abc import Mapping, Sequence

import numpy as np

from seqloader.errors import DataError, DataWarning, OptionError
from seqloader.sources.base import (
    KeySpec,
    Source,
    SourceBase,
    prepare_workers,
    read_batch,
    where,
)
from seqloader.sources.hdf_layout import PackedTags
from seqloader.sources.tag_join import DuplicateTagError, join, packed, take

MISSING_POLICIES = ("error", "intersect")
_EXAMPLES = 5


class ZipSource(SourceBase):
    """Sequences of ``sources`` joined by tag; see the module docstring.

    - ``data_map``: output key -> (source name, key in that source).
    - ``control``: the source whose tags (and order) are the sequences; default: the source of the
      ``data`` key, else the first source of ``data_map``.
    - ``missing``: ``"error"`` (a control tag that another source lacks is a ``DataError`` listing
      some and how many, per source) or ``"intersect"`` (keep the tags every source has; the
      count left out is in ``left_out`` and warned about once).

    >>> feats = sl.MemorySource({"data": [np.zeros((4, 2), "float32")] * 2}, tags=["u1", "u2"])
    >>> labels = sl.MemorySource({"classes": [np.array([3], "int32"), np.array([5], "int32")]}, tags=["u2", "u1"])
    >>> joined = ZipSource({"f": feats, "l": labels}, {"data": ("f", "data"), "classes": ("l", "classes")})
    >>> joined.read(0)["classes"].tolist()  # joined by tag: u1's label
    [5]
    """

    def __init__(
        self,
        sources: Mapping[str, Source],
        data_map: Mapping[str, tuple[str, str]],
        control: str | None = None,
        missing: str = "error",
    ) -> None:
        self._names, self._sources = named_sources(
            "ZipSource", "source", sources, "{'feat': HDFSource('feat.hdf'), 'align': ...}"
        )
        self._data_map = _checked_data_map(data_map, sources)
        if control is None:
            control = self._data_map["data"][0] if "data" in self._data_map else None
            control = control or next(iter(self._data_map.values()))[0]
        if control not in sources:
            raise OptionError(
                f"ZipSource control: got {control!r}, expected one of the sources {self._names}"
            )
        if missing not in MISSING_POLICIES:
            raise OptionError(
                f"ZipSource missing: got {missing!r}, expected one of {MISSING_POLICIES}"
            )
        self._control, self._missing = control, missing
        index = self._join(sources)  # source name -> int64 [n] its index of each sequence
        self._index = index
        self._schema: dict[str, KeySpec] = {
            out: sources[src].schema[key] for out, (src, key) in self._data_map.items()
        }
        self._lengths = {
            out: np.asarray(sources[src].lengths(key))[index[src]]  # one gather, no int64 copy
            for out, (src, key) in self._data_map.items()
        }
        self._used = tuple(dict.fromkeys(src for src, _ in self._data_map.values()))
        self._fingerprint: str | None = None

    def _join(self, sources: Mapping[str, Source]) -> dict[str, np.ndarray]:
        control_tags = packed(sources[self._control].tags)
        n = len(control_tags)
        found: dict[str, np.ndarray] = {self._control: np.arange(n, dtype=np.int64)}
        for name in self._names:
            if name == self._control:
                continue
            try:
                found[name] = join(control_tags, packed(sources[name].tags))  # [n], -1: lacks it
            except DuplicateTagError as e:
                raise DataError(
                    f"ZipSource: tag {e.tag!r} of control source {self._control!r} is in source "
                    f"{name!r} {len(e.indices)} times (sequences {e.indices[:4]} of "
                    f"{sources[name]!r}), so the join is ambiguous. Fix: remove the duplicates."
                ) from None
        lacking = {k: np.flatnonzero(v < 0) for k, v in found.items() if (v < 0).any()}
        self.left_out: dict[str, int] = {k: len(v) for k, v in lacking.items()}
        if lacking and self._missing == "error":
            raise DataError(
                "ZipSource: "
                + "; ".join(
                    f"source {name!r} lacks {len(idx)} of the {n} tags of control source "
                    f"{self._control!r} (e.g. {[control_tags[int(i)] for i in idx[:_EXAMPLES]]})"
                    for name, idx in lacking.items()
                )
                + ". Fix: complete the data, or pass missing='intersect' to keep only the tags "
                "every source has (the count left out is reported)."
            )
        keep = np.ones(n, dtype=bool)
        for idx in lacking.values():
            keep[idx] = False
        self.num_left_out = int(n - keep.sum())
        if self.num_left_out:
            if not keep.any():
                raise DataError(
                    f"ZipSource: no tag of control source {self._control!r} is in every source "
                    f"(lacking per source: {self.left_out}); the join is empty"
                )
            warnings.warn(
                f"ZipSource: left out {self.num_left_out} of {n} tags of control source "
                f"{self._control!r} (missing='intersect'); lacking per source: {self.left_out}",
                DataWarning,
                stacklevel=3,
            )
            kept = np.flatnonzero(keep)
            self._tags: PackedTags = take(control_tags, kept)
            return {k: v[kept] for k, v in found.items()}
        self._tags = control_tags
        return found

    # ---- what planning and reports need ----
    @property
    def sources(self) -> dict[str, Source]:
        return dict(zip(self._names, self._sources))

    @property
    def data_map(self) -> dict[str, tuple[str, str]]:
        return dict(self._data_map)

    def source_index(self, name: str) -> np.ndarray:
        """Index in source ``name`` of each joined sequence -> int64 ``[n]``."""
        return self._index[name]

    def where(self, index: int) -> str:
        src = self.sources[self._control]
        return f"{where(src, int(self._index[self._control][index]))} (control of a ZipSource)"

    # ---- reading ----
    def read(self, index: int) -> dict[str, np.ndarray]:
        index = int(index)
        if not 0 <= index < len(self):
            raise IndexError(f"sequence index {index} out of range for {self!r}")
        got = {name: self.sources[name].read(int(self._index[name][index])) for name in self._used}
        return self._pick(got)

    def read_many(self, indices: Sequence[int] | np.ndarray) -> list[dict[str, np.ndarray]]:
        """``[read(i) for i in indices]``, each source asked once (with its ``read_many``)."""
        idx = np.asarray(indices, dtype=np.int64).reshape(-1)
        for i in idx[(idx < 0) | (idx >= len(self))][:1].tolist():
            self.read(i)  # raises IndexError naming it
        per_source = {n: read_batch(self.sources[n], self._index[n][idx]) for n in self._used}
        return [self._pick({n: per_source[n][j] for n in self._used}) for j in range(len(idx))]

    def _pick(self, got: Mapping[str, Mapping[str, np.ndarray]]) -> dict[str, np.ndarray]:
        return {out: got[src][key] for out, (src, key) in self._data_map.items()}

    def prepare_workers(self) -> None:
        """Before DataLoader workers fork: let every source prepare (e.g. HDF chunk indexes)."""
        for name in self._used:
            prepare_workers(self.sources[name])

    def fingerprint(self) -> str:
        if self._fingerprint is None:
            h = hashlib.sha256(b"zip\0")
            for name, src in zip(self._names, self._sources):
                h.update(f"{name}\0{src.fingerprint()}\0".encode())
            h.update(repr(sorted(self._data_map.items())).encode())
            h.update(f"{self._control}\0{self._missing}\0{len(self)}".encode())
            self._fingerprint = h.hexdigest()[:32]
        return self._fingerprint

    def __repr__(self) -> str:
        keys = ", ".join(
            f"{out}: {self._schema[out].describe()} from {src}[{key!r}]"
            for out, (src, key) in self._data_map.items()
        )
        left = f", {self.num_left_out} left out" if self.num_left_out else ""
        return f"ZipSource(control={self._control!r}, {len(self)} seqs{left}; {keys})"


def named_sources(
    owner: str, what: str, sources: object, example: str
) -> tuple[tuple[str, ...], tuple[Source, ...]]:
    """``sources`` checked as a non-empty mapping of non-empty names to sources -> (names,
    sources); ``owner``/``what``/``example`` word the errors ("ConcatSource", "corpus", ...)."""
    if not isinstance(sources, Mapping) or not sources:
        raise OptionError(
            f"{owner}: got {type(sources).__name__}, expected a non-empty mapping of {what} name "
            f"to source, e.g. {example}"
        )
    for name, src in sources.items():
        if not isinstance(name, str) or not name:
            raise OptionError(f"{owner}: {what} name {name!r}, expected a non-empty string")
        if not isinstance(src, Source):
            raise OptionError(
                f"{owner}: {what} {name!r} is a {type(src).__name__}, expected a source "
                "(HDFSource, MemorySource, ZipSource, ...)"
            )
    return tuple(sources), tuple(sources.values())


def _checked_data_map(
    data_map: object, sources: Mapping[str, Source]
) -> dict[str, tuple[str, str]]:
    if not isinstance(data_map, Mapping) or not data_map:
        raise OptionError(
            f"ZipSource data_map: got {data_map!r}, expected a non-empty mapping of output key to "
            "(source name, key), e.g. {'data': ('feat', 'data'), 'classes': ('align', 'data')}"
        )
    out: dict[str, tuple[str, str]] = {}
    for key, target in data_map.items():
        if not isinstance(key, str) or not key:
            raise OptionError(f"ZipSource data_map: key {key!r}, expected a non-empty string")
        if not (isinstance(target, Sequence) and not isinstance(target, str) and len(target) == 2):
            raise OptionError(
                f"ZipSource data_map[{key!r}]: got {target!r}, expected (source name, key)"
            )
        src, src_key = target
        if src not in sources:
            raise OptionError(
                f"ZipSource data_map[{key!r}]: source {src!r} is not one of {list(sources)}"
            )
        if src_key not in sources[src].keys:
            raise DataError(
                f"ZipSource data_map[{key!r}]: source {src!r} has no key {src_key!r} (its keys: "
                f"{list(sources[src].keys)}; {sources[src]!r})"
            )
        out[key] = (src, src_key)
    return out
