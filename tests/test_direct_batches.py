"""The 0-worker batches of a memory-mapped (contiguous) RETURNN HDF file, as the training loop gets
them: byte for byte the padded rows plain h5py reads, the same bytes and lengths as the
per-sequence path (a transform forces it), the report's counts equal to their definition, and the
NaN/Inf screen (one reduction per batch, exact per row only where it flags) naming exactly the
sequences that hold NaN/Inf with the per-sequence path's messages -- wherever the values sit
(first or last frame, next to the padding), and never a sequence whose finite values only
overflow the screen's sum -- for any lengths (empty sequences included), feature sizes and
dtypes. No timing here."""

from __future__ import annotations

import itertools
import warnings

import h5py
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import seqloader as sl
from seqloader.errors import DataWarning
from seqloader.loading.batch_spec import BatchSpec
from seqloader.loading.counts import KeyCounts, count_key
from seqloader.loading.execute import WorkerSpec, execute
from test_hdf_fast import same_bytes
from test_onecopy import garbage_alloc, identity, reference_batch

DTYPES = ["<f4", "<f8", "<f2", "i1", "<i4", "<i8", "u1", "<u2"]


# values put into float features: NaN/Inf the screen must find; finite ones so large that the
# screen's sum of squares overflows (its false alarm), which must not be reported
POKES = {"nan": np.nan, "inf": np.inf, "-inf": -np.inf, "huge": None}


def write_contiguous(path: str, lens, lens2, dim: int, dtype: str, seed: int, pokes=()) -> set[int]:
    """``inputs`` [T, dim] of ``dtype`` and sparse int32 ``classes``, contiguous (mappable);
    ``pokes`` (sequence, frame 'first'/'last', feature, kind of ``POKES``) put into float data.
    Returns the sequences that hold NaN/Inf."""
    rng = np.random.default_rng(seed)
    starts = np.concatenate([[0], np.cumsum(lens)])
    data = (rng.standard_normal((sum(lens), dim)) * 50).astype(np.dtype(dtype))
    for i, frame, feature, kind in pokes if data.dtype.kind == "f" else ():
        if lens[i]:
            row = starts[i] if frame == "first" else starts[i + 1] - 1
            value = POKES[kind]
            data[row, feature % dim] = np.finfo(data.dtype).max / 2 if value is None else value
    finite = [np.isfinite(data[a:b]).all() for a, b in itertools.pairwise(starts)]
    with h5py.File(path, "w") as f:
        f.create_dataset("inputs", data=data)
        f.create_dataset("targets/data/classes", data=rng.integers(0, 999, sum(lens2), np.int32))
        f.create_group("targets/size").attrs["classes"] = [1000, 1]
        f.create_group("targets/labels")
        f.create_dataset("seqLengths", data=np.stack([lens, lens2], axis=1).astype(np.int32))
        f.create_dataset("seqTags", data=np.array([f"s{i}".encode() for i in range(len(lens))]))
    return {i for i, ok in enumerate(finite) if not ok}


def counts_by_definition(lengths: np.ndarray, real: np.ndarray) -> KeyCounts:
    """The report's counts of one key, spelled out with numpy (what ``count_key`` must equal)."""
    n_real = int(real.sum())
    if not len(lengths):
        return KeyCounts(n_real, len(real) - n_real, 0, 0)
    return KeyCounts(
        n_real,
        len(real) - n_real,
        int(lengths[real].sum()),
        int(len(lengths) * lengths.max()),
    )


@st.composite
def files(draw):
    n = draw(st.integers(1, 14))
    lens = draw(st.lists(st.integers(0, 30), min_size=n, max_size=n))
    lens2 = draw(st.lists(st.integers(0, 9), min_size=n, max_size=n))
    lens[0], lens2[-1] = max(lens[0], 1), max(lens2[-1], 1)  # an empty dataset is not mapped
    dim = draw(st.integers(1, 9))
    dtype = draw(st.sampled_from(DTYPES))
    max_seqs = draw(st.integers(1, 5))
    seed = draw(st.integers(0, 2**16))
    poke = st.tuples(
        st.integers(0, n - 1),
        st.sampled_from(["first", "last"]),
        st.integers(0, 8),
        st.sampled_from(list(POKES)),
    )
    pokes = draw(st.lists(poke, max_size=3))
    return lens, lens2, dim, dtype, max_seqs, seed, pokes


@settings(max_examples=30, deadline=None)
@given(files())
def test_loader_batches_equal_h5py_and_the_per_sequence_path(tmp_path_factory, case):
    lens, lens2, dim, dtype, max_seqs, seed, pokes = case
    path = str(tmp_path_factory.mktemp("direct") / "c.hdf")
    nonfinite = write_contiguous(path, lens, lens2, dim, dtype, seed, pokes)
    src = sl.HDFSource(path)
    assert src._file(0).mapped_keys == ("data", "classes")  # the memory-mapped path is tested
    loader = sl.SeqLoader(
        src,
        ordering="random",
        max_seqs=max_seqs,
        seed=seed,
        num_workers=0,
        checks=sl.CheckOptions(empty="off"),  # empty sequences are intended here
    )
    seen, flagged = [], []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)  # NaN/Inf reported, batches delivered
        batches = list(loader.epoch(1))
    for batch in batches:
        seqs = batch.seq_indices.numpy()
        want = reference_batch(path, ("data", "classes"), seqs)
        real = batch.mask.numpy()
        spec = BatchSpec(batch.epoch, batch.step, seqs, real)  # messages name the step
        general = execute(src, spec, WorkerSpec(0, identity, screen=True), garbage_alloc)
        for key in want:
            assert same_bytes(batch[key].numpy(), want[key]), (seqs, key)
            assert same_bytes(batch[key].numpy(), general.data[key]), (seqs, key)
            lengths = batch.lengths[key].numpy()
            assert lengths.dtype == np.int64
            np.testing.assert_array_equal(lengths, general.lengths[key])
            assert batch.counts[key] == counts_by_definition(lengths, real)
        assert batch.seq_tags == [f"s{i}" for i in seqs]
        assert batch.nonfinite == general.nonfinite  # same sequences, same messages
        flagged += [int(m.split()[1]) for m in batch.nonfinite]
        seen += seqs[real].tolist()
    assert sorted(seen) == list(range(len(lens)))  # every sequence once, none dropped
    assert set(flagged) == nonfinite
    loader.close()


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 2**40), max_size=40).flatmap(
        lambda lens: st.tuples(
            st.just(lens),
            st.lists(st.booleans(), min_size=len(lens), max_size=len(lens)),
            st.sampled_from([np.int64, np.int32, np.uint16]),
        )
    )
)
def test_count_key_equals_its_definition(case):
    lens, real, dtype = case
    lengths = np.array(lens, dtype=np.int64).astype(dtype) if lens else np.zeros(0, dtype)
    mask = np.array(real, dtype=bool)
    assert count_key(lengths, mask) == counts_by_definition(lengths.astype(np.int64), mask)
