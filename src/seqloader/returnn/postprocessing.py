"""RETURNN's ``PostprocessingDataset`` with a ``map_seq`` that planning can know ahead.

RETURNN's torch engine batches what ``map_seq`` returns, and seqloader plans every batch before
reading, so a ``map_seq`` converts where its output lengths are known at conversion: the probe
(``pre_process.probed``) calls it as RETURNN does (a ``TensorDict`` of the inner dataset's keys
plus ``seq_idx`` / ``seq_tag`` / ``complete_frac``, and ``epoch=``, ``seq_idx=``, ``rng=``) on real
sequences with varied arguments. Each output key's length must be its own input length, another
input key's, or a constant; the output must not depend on ``rng``, ``epoch`` or the reading position
(RETURNN draws from one RandomState per epoch in reading order, which no worker-independent plan
reproduces). It then runs per sequence in the loader's workers, its lengths checked on every read.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from seqloader.errors import DataError, OptionError
from seqloader.returnn.pre_process import probed
from seqloader.returnn.view import ReturnnView
from seqloader.sources.base import KeySpec, Schema
from seqloader.validate import supported_options

OWN = (
    "class",
    "dataset",
    "map_seq",
    "map_seq_stream",
    "map_outputs",
    "map_seq_stream_preserves_num_seqs",
    "buf_size",
    "num_workers",
    "seq_ordering",
    "random_seed_offset",
    "name",
)
STREAM = (
    "map_seq_stream is a function over the stream of sequences: it may merge, split, drop or "
    "reorder them (Mixup, LaplaceOrdering, concatenation), so RETURNN knows the sequences of an "
    "epoch only while reading them, and seqloader plans every epoch ahead. Native equivalent: the "
    "inner 'dataset' here (its seq_ordering, e.g. 'laplace:.1000', gives the ordering) and a "
    "per-sequence transform (SeqLoader(..., transform=...), seqloader.transforms), which gets a "
    "per-sequence RNG, the same for any num_workers"
)
RNG = (
    "RETURNN draws from one RandomState per (sub-)epoch, in reading order (and per worker with "
    "its num_workers), so its values depend on how the epoch is read and no worker-independent "
    "plan reproduces them. Native equivalent: the inner 'dataset' here and the function as "
    "SeqLoader(..., transform=...) (seqloader.transforms), which gets a per-sequence RNG: the "
    "same values for any num_workers, resumable"
)
SAMPLES = 4  # sequences probed; each is called PROBES / SAMPLES times with other arguments


def postprocessing(name: str, opts: dict[str, Any], convert: Callable[..., Any]) -> Any:
    """``opts``: a ``PostprocessingDataset`` dict; ``convert``: ``datasets.convert_dataset``
    (for the inner dataset). Returns its ``Converted``, the inner order with ``map_seq`` applied.

    >>> convert = lambda *a: None
    >>> postprocessing("train", {"class": "PostprocessingDataset", "dataset": {}, "map_seq_stream": print}, convert)
    Traceback (most recent call last):
    ...
    seqloader.errors.OptionError: train dataset (PostprocessingDataset): map_seq_stream print is not supported: ...
    """
    where = f"{name} dataset (PostprocessingDataset)"
    supported_options(where, opts, OWN)
    stream = opts.get("map_seq_stream")
    if stream is not None:
        raise OptionError(f"{where}: map_seq_stream {_name(stream)} is not supported: {STREAM}")
    map_seq = opts.get("map_seq")
    if not callable(map_seq):
        raise OptionError(f"{where}: map_seq {map_seq!r}; RETURNN needs a function")
    if opts.get("seq_ordering", "default") != "default":
        raise OptionError(
            f"{where}: seq_ordering {opts['seq_ordering']!r}; RETURNN refuses it here too: set it "
            "on the inner 'dataset'"
        )
    inner = opts.get("dataset")
    if not isinstance(inner, dict):
        raise OptionError(f"{where}: 'dataset' {inner!r}; expected the inner dataset's dict")
    inner = dict(inner)
    if opts.get("random_seed_offset") is not None:  # RETURNN: inherited from the parent
        inner.setdefault("random_seed_offset", opts["random_seed_offset"])
    # RETURNN orders by the inner dataset, built with its own defaults ("default" order; for
    # dev / eval the wrapper itself must say seq_ordering "default", else RETURNN raises)
    c = convert(name, inner, "default")
    if c.source.file_pools() is not None:
        raise OptionError(
            f"{where}: around a {c.kind}: not supported (its per-sub-epoch file pools are not "
            "carried through map_seq); use the inner dataset alone and the function as "
            "SeqLoader(..., transform=...)"
        )
    source = MappedSource(where, c.source, map_seq, opts.get("map_outputs"))
    view = ReturnnView(
        source,
        order_lengths=c.source.order_lengths(),
        excluded=c.source.excluded(),
        selections=c.source.epoch_selections(),
    )
    workers = opts.get("num_workers") or None
    return type(c)(
        view,
        c.ordering,
        c.partition_epoch,
        c.random_seed_offset,
        "PostprocessingDataset",
        c.num_workers if c.num_workers is not None else workers,
        native=c.native,
    )


def _name(fn: Any) -> str:
    return str(getattr(fn, "__qualname__", None) or repr(fn))


def tensor_dict(inner_schema: Schema, seq: Mapping[str, np.ndarray], tag: str, pos: int) -> Any:
    """The ``TensorDict`` RETURNN's ``_iterate_dataset`` hands ``map_seq`` for one sequence."""
    from returnn.datasets.util.strings import str_to_numpy_array
    from returnn.tensor import Dim, Tensor, TensorDict

    data = {}
    for key, spec in inner_schema.items():
        dims = [Dim(None, name=f"{key}_frame")]
        dims += [Dim(d, name=f"{key}_dim{i + 1}") for i, d in enumerate(spec.feature_shape)]
        sparse = Dim(spec.vocab_size, name=f"{key}_sparse") if spec.vocab_size else None
        t = Tensor(key, dims=dims, dtype=np.dtype(spec.dtype).name, sparse_dim=sparse)
        t.raw_tensor = seq[key]
        data[key] = t
    data["complete_frac"] = Tensor("complete_frac", dims=(), dtype="float32")
    data["complete_frac"].raw_tensor = np.array(min(1.0, (pos + 1) / 1000), dtype=np.float32)
    data["seq_idx"] = Tensor("seq_idx", dims=(), dtype="int32")
    data["seq_idx"].raw_tensor = np.array(pos, dtype=np.int32)
    data["seq_tag"] = Tensor("seq_tag", dims=(), dtype="string")
    data["seq_tag"].raw_tensor = str_to_numpy_array(tag)
    return TensorDict(data)


class MappedSource:
    """``inner`` with ``map_seq`` applied on read; keys and lengths as the probe found them.

    Runs in the loader's workers. ``map_seq`` is called with RETURNN's keyword arguments; ``epoch``
    and ``seq_idx`` are fixed values its output was probed not to depend on, and its ``rng`` is a
    ``RandomState`` that it must not draw from (checked on every read: a draw the probe did not
    see is a ``DataError`` naming the sequence)."""

    def __init__(
        self, where: str, inner: ReturnnView, map_seq: Callable[..., Any], outputs: Any
    ) -> None:
        self._where, self._inner, self._map_seq = where, inner, map_seq
        self._fn = _name(map_seq)
        keys = list(outputs) if outputs is not None else list(inner.keys)
        if outputs is not None and not isinstance(outputs, Mapping):
            raise OptionError(f"{where}: map_outputs {outputs!r}; expected a dict of keys")
        self._keys = tuple(keys)
        self._rule, self._schema = self._probe(outputs)

    # ---- probing at conversion ----
    def _call(
        self, seq: Mapping[str, np.ndarray], index: int, rng: Any, epoch: int, pos: int
    ) -> Any:
        from returnn.util.basic import get_fwd_compat_kwargs

        td = tensor_dict(self._inner.schema, seq, self._inner.tag(index), pos)
        return self._map_seq(td, epoch=epoch, seq_idx=pos, rng=rng, **get_fwd_compat_kwargs())

    def _probe(self, outputs: Any) -> tuple[dict[str, tuple[str, int]], dict[str, KeySpec]]:
        where, fn, inner = self._where, self._fn, self._inner
        n = min(SAMPLES, len(inner))
        if n == 0:
            raise OptionError(f"{where}: the inner dataset has no sequence to probe map_seq on")
        seqs = [inner.read(i) for i in range(n)]
        first: dict[int, dict[str, np.ndarray]] = {}
        for seed, (out, drew) in probed(
            where,
            f"map_seq {fn}",
            lambda seed: self._drawn(seqs[seed % n], seed % n, seed, 1 + seed % 3, seed),
            lambda seed: (
                f"on sequence {inner.tag(seed % n)!r}, epoch={1 + seed % 3}, "
                f"seq_idx={seed}, rng=RandomState({seed})"
            ),
        ):
            i = seed % n
            if drew:
                raise OptionError(
                    f"{where}: map_seq {fn} draws from its rng (on sequence {inner.tag(i)!r}): "
                    f"not supported: {RNG}"
                )
            got = self._arrays(out, inner.tag(i))
            if i not in first:
                first[i] = got
            elif any(not np.array_equal(first[i][k], got[k]) for k in self._keys):
                raise OptionError(
                    f"{where}: map_seq {fn} returns other values for sequence {inner.tag(i)!r} "
                    "when called with another epoch / seq_idx / rng: its output depends on where "
                    f"RETURNN reads the sequence, not supported: {RNG}"
                )
        rule = {k: self._length_rule(k, [first[i][k] for i in range(n)], seqs) for k in self._keys}
        schema = {}
        for k in self._keys:
            a = first[0][k]
            spec = inner.schema.get(k)
            if spec is not None and spec.dtype == a.dtype and spec.feature_shape == a.shape[1:]:
                schema[k] = spec
            else:
                schema[k] = KeySpec(a.dtype, tuple(a.shape[1:]))
            declared = (outputs or {}).get(k, {}).get("dtype")
            if declared is not None and np.dtype(declared) != a.dtype:
                raise OptionError(
                    f"{where}: map_seq {fn} returns {k!r} as {a.dtype}, map_outputs declares "
                    f"{declared} (RETURNN asserts they agree)"
                )
        return rule, schema

    def _drawn(
        self, seq: Mapping[str, np.ndarray], index: int, seed: int, epoch: int, pos: int
    ) -> tuple[Any, bool]:
        rng = np.random.RandomState(seed)
        before = rng.get_state(legacy=False)["state"]
        out = self._call(seq, index, rng, epoch, pos)
        after = rng.get_state(legacy=False)["state"]
        drew = before["pos"] != after["pos"] or not np.array_equal(before["key"], after["key"])
        return out, drew

    def _arrays(self, out: Any, tag: str) -> dict[str, np.ndarray]:
        data = getattr(out, "data", None)
        if not isinstance(data, Mapping):
            raise OptionError(
                f"{self._where}: map_seq {self._fn} returns {type(out).__name__} for {tag!r}; "
                "RETURNN needs a TensorDict"
            )
        missing = [k for k in self._keys if k not in data]
        if missing:
            raise OptionError(
                f"{self._where}: map_seq {self._fn} returns no {missing} for {tag!r}; the "
                f"dataset's keys are {list(self._keys)} (map_outputs, else the inner dataset's)"
            )
        arrays = {k: np.asarray(data[k].raw_tensor) for k in self._keys}
        for k, a in arrays.items():
            if a.ndim == 0:
                raise OptionError(
                    f"{self._where}: map_seq {self._fn} returns {k!r} as a scalar; give it a "
                    "time axis (length 1)"
                )
        return arrays

    def _length_rule(
        self, key: str, outs: Sequence[np.ndarray], seqs: Sequence[Mapping[str, np.ndarray]]
    ) -> tuple[str, int]:
        """("key", 0): the length of that input key; ("const", n): always n."""
        got = [len(a) for a in outs]
        names = [key] if key in self._inner.keys else []
        names += [k for k in self._inner.keys if k != key]
        for k in names:
            if got == [len(s[k]) for s in seqs]:
                return k, 0
        if len(set(got)) == 1:
            return "", got[0]
        shown = ", ".join(f"{self._inner.tag(i)!r}: {g}" for i, g in enumerate(got))
        raise OptionError(
            f"{self._where}: map_seq {self._fn} changes the length of {key!r} in a way not known "
            f"at conversion ({shown}; no input key has these lengths). RETURNN batches after "
            "map_seq and seqloader plans batches before reading: do the mapping when writing the "
            "data (e.g. an HDF with the mapped features), or use seqloader's native length-mapped "
            "transforms (docs/audio.md, 'Planning with length-changing transforms')"
        )

    # ---- Source protocol ----
    def __len__(self) -> int:
        return len(self._inner)

    @property
    def keys(self) -> tuple[str, ...]:
        return self._keys

    @property
    def schema(self) -> Schema:
        return self._schema

    def lengths(self, key: str) -> np.ndarray:
        source, const = self._rule[key]
        if source:
            return self._inner.lengths(source)
        return np.full(len(self._inner), const, dtype=np.int64)

    @property
    def tags(self) -> Sequence[str]:
        return self._inner.tags

    def tag(self, index: int) -> str:
        return self._inner.tag(index)

    def read(self, index: int) -> dict[str, np.ndarray]:
        seq = self._inner.read(index)
        tag = self._inner.tag(index)
        out, drew = self._drawn(seq, index, 0, 1, index)
        if drew:
            raise DataError(
                f"{self._where}: map_seq {self._fn} drew from its rng on sequence {tag!r}, which "
                f"the conversion's probe did not see: not supported: {RNG}"
            )
        arrays = {k: np.ascontiguousarray(a) for k, a in self._arrays(out, tag).items()}
        for k, a in arrays.items():
            source, const = self._rule[k]
            want = len(seq[source]) if source else const
            if len(a) != want:
                raise DataError(
                    f"{self._where}: map_seq {self._fn} returned {k!r} of length {len(a)} for "
                    f"sequence {tag!r}; the conversion's probe found "
                    f"{'the length of ' + repr(source) if source else 'the constant'} {want}, "
                    "which the plan used: make its lengths follow one rule"
                )
        return arrays

    def fingerprint(self) -> str:
        import hashlib

        h = hashlib.sha256(self._inner.fingerprint().encode())
        h.update(f"{self._fn}\0{self._keys}".encode())
        return h.hexdigest()[:32]

    def close(self) -> None:
        self._inner.close()

    def __repr__(self) -> str:
        return f"MappedSource({self._inner!r}, map_seq={self._fn})"
