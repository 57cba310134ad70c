"""Test helpers: RETURNN HDF files written by hand with h5py, in the layouts of RETURNN's two writers,
so the reader is tested against the format itself and not against our own writer."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import h5py
import numpy as np


def write_datasetwriter_style(
    path: str,
    tags: Sequence[str],
    inputs: Sequence[np.ndarray] | None = None,
    targets: Mapping[str, Sequence[np.ndarray]] | None = None,
    sizes: Mapping[str, object] | None = None,
    labels: Mapping[str, Sequence[str]] | None = None,
    input_vocab: int | None = None,
    size_only_lengths: Mapping[str, Sequence[int]] | None = None,
) -> None:
    """Like RETURNN's ``HDFDatasetWriter``: fixed-size datasets, ``S<n>`` tags, int32 seqLengths
    with columns [inputs] + sorted(targets/data | targets/size), one attribute per target key."""
    targets = dict(targets or {})
    sizes = dict(sizes or {})
    size_only_lengths = dict(size_only_lengths or {})
    n = len(tags)
    target_keys = sorted(set(targets) | set(sizes))
    with h5py.File(path, "w") as f:
        width = max(len(t.encode()) for t in tags) + 1
        f.create_dataset("seqTags", shape=(n,), dtype=f"S{width}")
        for i, t in enumerate(tags):
            f["seqTags"][i] = np.array(t.encode(), dtype=f"S{width}")
        columns = []
        if inputs is not None:
            columns.append([len(a) for a in inputs])
        for k in target_keys:
            if k in targets:
                columns.append([len(a) for a in targets[k]])
            else:
                columns.append(list(size_only_lengths.get(k, [0] * n)))
        f.create_dataset("seqLengths", data=np.array(columns, dtype=np.int32).T.reshape(n, -1))
        f.create_group("targets/data")
        f.create_group("targets/size")
        f.create_group("targets/labels")
        if inputs is not None:
            f.create_dataset("inputs", data=np.concatenate(inputs))
        for k, seqs in targets.items():
            f["targets/data"].create_dataset(k, data=np.concatenate(seqs))
        for k, v in sizes.items():
            f["targets/size"].attrs[k] = v
        for k, labs in (labels or {}).items():
            enc = [s.encode() for s in labs]
            f["targets/labels"].create_dataset(
                k, data=np.array(enc, dtype=f"S{max(map(len, enc)) + 1}")
            )
        if input_vocab is not None:
            f.attrs["inputPattSize"] = input_vocab


def write_simplewriter_style(
    path: str,
    tags: Sequence[str],
    inputs: Sequence[np.ndarray],
    extras: Mapping[str, Sequence[np.ndarray]] | None = None,
    dim: int | None = None,
    extra_dims: Mapping[str, int] | None = None,
) -> None:
    """Like RETURNN's ``SimpleHDFWriter``: every dataset resizable and chunked, grown sequence by
    sequence; vlen utf-8 tags; root attributes; ``targets/size`` as ``[dim, ndim]``."""
    extras = dict(extras or {})
    extra_dims = dict(extra_dims or {})
    with h5py.File(path, "w") as f:
        f.attrs["numTimesteps"] = 0
        f.attrs["inputPattSize"] = dim or 1
        f.attrs["numDims"] = 1
        f.attrs["numLabels"] = dim or 1
        f.attrs["numSeqs"] = 0
        f.create_dataset("labels", (0,), dtype="S5")
        lengths = f.create_dataset("seqLengths", (0, 2), dtype="i", maxshape=(None, None))
        seq_tags = f.create_dataset("seqTags", (0,), dtype=h5py.string_dtype(), maxshape=(None,))
        order = sorted(extras)
        dsets: dict[str, h5py.Dataset] = {}
        if extras:
            for g in ("targets/data", "targets/size", "targets/labels"):
                f.create_group(g)
            for k in order:
                first = np.asarray(extras[k][0])
                string = first.dtype.kind in "OU"
                dtype = h5py.string_dtype() if string else first.dtype
                feat = first.shape[1:]
                dsets[k] = f["targets/data"].create_dataset(
                    k, shape=(0, *feat), dtype=dtype, maxshape=(None, *feat)
                )
                ndim = first.ndim
                kdim = extra_dims.get(k, first.shape[-1] if ndim > 1 else 1)
                f["targets/size"].attrs[k] = [kdim, ndim]
                f["targets/labels"].create_dataset(k, data=np.array([b"dummy-label"]))
            lengths.resize(1 + len(extras), axis=1)
        inp = None
        for i, tag in enumerate(tags):
            lengths.resize(i + 1, axis=0)
            seq_tags.resize(i + 1, axis=0)
            seq_tags[i] = tag
            x = np.asarray(inputs[i])
            lengths[i, 0] = len(x)
            if inp is None:
                inp = f.create_dataset("inputs", x.shape, x.dtype, maxshape=(None, *x.shape[1:]))
                inp[...] = x
            else:
                old = inp.shape[0]
                inp.resize(old + len(x), axis=0)
                inp[old:] = x
            f.attrs["numTimesteps"] += len(x)
            f.attrs["numSeqs"] += 1
            for c, k in enumerate(order, start=1):
                y = np.asarray(extras[k][i])
                d = dsets[k]
                old = d.shape[0]
                d.resize(old + len(y), axis=0)
                if len(y):
                    d[old:] = y
                lengths[i, c] = len(y)


def write_with_broken_sequence(path: str, inputs: Sequence[np.ndarray], broken: int) -> list[str]:
    """``HDFDatasetWriter``'s layout with ``inputs`` (all of one length) stored gzip-compressed, one
    chunk per sequence; then sequence ``broken``'s chunk is overwritten with bytes that do not
    inflate, as a bad disk block would leave it: that sequence fails to read, the others read
    fine. Returns the tags (``seq-<i>``)."""
    length = len(inputs[0])
    assert all(len(a) == length for a in inputs), "one chunk per sequence needs equal lengths"
    tags = [f"seq-{i}" for i in range(len(inputs))]
    write_datasetwriter_style(path, tags, inputs=inputs)
    with h5py.File(path, "r+") as f:
        del f["inputs"]
        data = np.concatenate(inputs)
        dset = f.create_dataset(
            "inputs", data=data, chunks=(length, *data.shape[1:]), compression="gzip"
        )
        chunk = dset.id.get_chunk_info_by_coord((broken * length,) + (0,) * (data.ndim - 1))
    with open(path, "r+b") as fh:
        fh.seek(chunk.byte_offset)
        fh.write(b"\xff" * chunk.size)
    return tags


def keep_outside(
    f: h5py.File, name: str, values: np.ndarray, other: str, how: str, extent: int | None = None
) -> None:
    """Dataset ``name`` of the open file ``f`` holds ``values`` kept in the file ``other``:
    ``how`` is ``"link"`` (an external link to its dataset ``x``), ``"virtual"`` (a virtual
    dataset over it) or ``"external"`` (raw storage, ``extent`` bytes, default the values')."""
    if how == "external":
        values.tofile(other)
        size = values.nbytes if extent is None else extent
        f.create_dataset(name, values.shape, values.dtype, external=[(other, 0, size)])
        return
    with h5py.File(other, "w") as v:
        v.create_dataset("x", data=values)
    if how == "link":
        f[name] = h5py.ExternalLink(other, "x")
    else:
        layout = h5py.VirtualLayout(values.shape, values.dtype)
        layout[:] = h5py.VirtualSource(other, "x", values.shape)
        f.create_virtual_dataset(name, layout)
