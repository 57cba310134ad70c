"""The optional compiled row kernel (``sources/row_kernel.py``, ``_rowcopy.c``) against the numpy
path it replaces: the same bytes in every row and every padding position (into destinations full
of garbage), the same rows reported as holding NaN/Inf (exactly those; the numpy screen may add
false alarms its exact check drops), and nothing written where a span does not fit. The loader's
messages on both paths are compared in ``test_onecopy.py`` (``row_path``). No timing here."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqloader.sources import row_kernel
from seqloader.sources.hdf_read import MappedRows
from seqloader.sources.padded_rows import SpanRequest

BUILT = row_kernel._load()
needs_kernel = pytest.mark.skipif(BUILT is None, reason="the compiled row kernel is not built here")

# big-endian: an HDF file's dtype as it lies in the map (h5py keeps '>f4'), copied raw
DTYPES = ["<f4", "<f2", "<f8", "<i4", "u1", "<i8", "?", ">f4", ">f2", ">f8", ">i2"]


@pytest.fixture(params=["numpy", "kernel"])
def row_path(request, monkeypatch):
    """Runs a test once on each path: the numpy rows and, where it is built, the kernel."""
    if request.param == "kernel" and BUILT is None:
        pytest.skip("the compiled row kernel is not built here")
    monkeypatch.setattr(row_kernel, "KERNEL", BUILT if request.param == "kernel" else None)
    return request.param


def spans_into(kernel, reader: MappedRows, request: SpanRequest) -> list[int]:
    saved = row_kernel.KERNEL
    row_kernel.KERNEL = kernel
    try:
        with np.errstate(over="ignore", invalid="ignore"):  # the numpy screen's false alarms
            return reader.spans_into(request)
    finally:
        row_kernel.KERNEL = saved


@st.composite
def batches(draw):
    dtype = np.dtype(draw(st.sampled_from(DTYPES)))
    feat = draw(st.sampled_from([(), (1,), (3,), (2, 5)]))
    lens = draw(st.lists(st.integers(0, 9), min_size=1, max_size=7))
    pad = draw(st.integers(0, 3))  # frames beyond the longest sequence
    order = draw(st.permutations(range(len(lens))))
    spread = draw(st.booleans())  # rows of the batch in another order, some left out
    bad = draw(
        st.lists(
            st.tuples(
                st.integers(0, 6),
                st.sampled_from(["first", "last", "any"]),
                st.sampled_from(["nan", "inf", "-inf", "max"]),  # max: finite, huge
            ),
            max_size=4,
        )
    )
    screen = draw(st.one_of(st.none(), st.lists(st.booleans(), min_size=7, max_size=7)))
    return dtype, feat, lens, pad, order, spread, bad, screen


@needs_kernel
@settings(max_examples=120, deadline=None)
@given(batches())
def test_kernel_writes_and_reports_what_the_numpy_path_does(case):
    dtype, feat, lens, pad, order, spread, bad, screen = case
    rng = np.random.default_rng(len(lens) * 7 + pad)
    starts = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
    # one row more than the sequences hold (a mapped dataset is never empty)
    data = (rng.standard_normal((int(starts[-1]) + 1, *feat)) * 50).astype(dtype)
    floats = dtype.kind == "f"
    if floats:
        special = {"nan": np.nan, "inf": np.inf, "-inf": -np.inf, "max": np.finfo(dtype).max}
        for i, where, kind in bad:
            n = lens[i % len(lens)]
            if n:
                t = {"first": 0, "last": n - 1, "any": (i * 5) % n}[where]
                flat = data[starts[i % len(lens)] + t].reshape(-1)
                flat[(i * 3) % flat.size] = special[kind]
    reader = MappedRows(data)
    seqs = np.array(order, dtype=np.int64)
    begin, end = starts[seqs], starts[seqs + 1]
    t_max = max(lens) + pad
    rows = len(seqs) + (2 if spread else 0)
    pos = list(range(rows - 1, rows - 1 - len(seqs), -1)) if spread else range(len(seqs))
    screened = None if screen is None or not floats else screen[: len(seqs)]
    garbage = rng.integers(0, 256, rows * t_max * reader.frame_bytes, dtype=np.uint8)
    got = {}
    for name, kernel in (("numpy", None), ("kernel", BUILT)):
        out = garbage.copy().view(dtype).reshape(rows, t_max, *feat)
        found = spans_into(kernel, reader, SpanRequest(begin, end, out, pos, screened))
        got[name] = out, found
    (a, found_numpy), (b, found_kernel) = got["numpy"], got["kernel"]
    assert a.tobytes() == b.tobytes()  # rows no sequence was read into included: left as they were
    for j, i in enumerate(seqs.tolist()):  # values, then zeros, in every row written
        assert a[pos[j], : lens[i]].tobytes() == data[starts[i] : starts[i + 1]].tobytes()
        assert not a[pos[j], lens[i] :].view(np.uint8).any()
    nonfinite = [
        j
        for j, i in enumerate(seqs.tolist())
        if floats
        and (screened is None or screened[j])
        and not np.isfinite(data[starts[i] : starts[i + 1]]).all()
    ]
    if screened is None:
        assert found_numpy == found_kernel == []
    else:
        assert set(found_kernel) >= set(nonfinite) and set(found_numpy) >= set(nonfinite)
        if dtype.isnative:
            assert found_kernel == nonfinite  # exact: no false alarm for large finite values
        else:  # a big-endian file's floats: the numpy screen on either path (it swaps them)
            assert found_kernel == found_numpy


@pytest.mark.parametrize("dtype", [">f2", ">f4", ">f8"])
def test_big_endian_floats_are_screened_on_either_path(row_path, dtype):
    """A big-endian HDF file's floats are mapped and copied as they lie ('>f4' batches): their
    NaN/Inf are found on both paths (the kernel's exponent test reads native bytes only)."""
    data = np.ones((9, 2), dtype)
    data[4, 1], data[7, 0] = np.nan, -np.inf
    out = np.full((3, 4, 2), 7, dtype)
    begin, end = np.array([0, 3, 6]), np.array([3, 6, 9])
    with np.errstate(over="ignore", invalid="ignore"):
        found = MappedRows(data).spans_into(SpanRequest(begin, end, out, range(3), [True] * 3))
    assert found == [1, 2]
    assert out[:, :3].tobytes() == data.tobytes() and not out[:, 3:].view(np.uint8).any()


@needs_kernel
def test_kernel_refuses_what_does_not_fit_and_writes_nothing():
    data = np.arange(30, dtype=np.float32).reshape(10, 3)
    out = np.full((2, 4, 3), 7, dtype=np.float32)
    frame, row = 12, 4 * 12
    ok = (np.array([0, 6]), np.array([4, 10]))
    cases = [
        (np.array([0, 6]), np.array([5, 10]), None),  # 5 frames into rows of 4
        (np.array([0, 8]), np.array([4, 11]), None),  # past the dataset's end
        (np.array([-1, 6]), np.array([3, 10]), None),  # before its start
        (np.array([3, 6]), np.array([2, 10]), None),  # end before begin
        (*ok, np.array([0, 2])),  # a row past the batch
        (np.array([0, 1, 2]), np.array([1, 2, 3]), None),  # more rows than the batch has
        (np.array([0, 6], dtype=np.int32), np.array([4, 10], dtype=np.int32), None),  # not int64
    ]
    for begin, end, pos in cases:
        got = BUILT.copy_rows(data.data.cast("B"), out, begin, end, pos, frame, row, 4, None)
        assert got is None
        assert (out == 7).all()
    assert BUILT.copy_rows(data.data.cast("B"), out, *ok, None, frame, row, 4, None) == []
    assert (out[0, :4] == data[:4]).all() and (out[1] == data[6:]).all()


def test_no_kernel_in_the_environment_means_the_numpy_path(monkeypatch):
    monkeypatch.setenv("SEQLOADER_NO_KERNEL", "1")
    assert row_kernel._load() is None
