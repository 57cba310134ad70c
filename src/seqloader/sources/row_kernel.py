"""The optional compiled row kernel: a padded batch's rows of a mapped dataset copied, their
padding zeroed and float rows tested for NaN/Inf in one C call per key and batch
(``_rowcopy.c``, this package's own code, built by ``pip install`` where a C compiler exists).

Without it (no compiler at install, or ``SEQLOADER_NO_KERNEL=1`` in the environment) the numpy
path of ``hdf_read.MappedRows`` runs: the same bytes, the same rows reported. The kernel's NaN/Inf
test is exact (a value's exponent bits all ones), so unlike the numpy screen's ``dot`` it raises
no false alarm for large finite values; either way the caller's exact per-sequence check writes
the messages.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from types import ModuleType

import numpy as np


def _load() -> ModuleType | None:
    if os.environ.get("SEQLOADER_NO_KERNEL", "") not in ("", "0"):
        return None
    try:
        import seqloader.sources._rowcopy as _rowcopy
    except ImportError:
        return None
    return _rowcopy


#: the compiled module, or None (the numpy path); tests switch it per case
KERNEL: ModuleType | None = _load()

_CHECKED = {2, 4, 8}  # the float itemsizes the kernel tests (float16, float32, float64)


def copy_rows(
    src: memoryview,
    frame: int,
    begin: np.ndarray,
    end: np.ndarray,
    out: np.ndarray,
    pos: Sequence[int],
    screen: Sequence[bool] | None,
) -> list[int] | None:
    """Rows ``[begin[j], end[j])`` of the dataset whose bytes are ``src`` (``frame`` bytes a row)
    into row ``pos[j]`` of ``out`` (C-contiguous, writable, the dataset's dtype and feature shape:
    the caller checks), zeros after each, the rows with ``screen[j]`` tested for NaN/Inf; returns
    the j whose rows hold some. None where the kernel cannot take the request (not built, a span
    that does not fit, a dtype it does not test: not float16/32/64, or not in this machine's byte
    order): nothing is written then, the caller's numpy path runs (and raises where a span does
    not fit)."""
    kernel = KERNEL
    if kernel is None or not out.ndim >= 2 or not out.shape[1]:
        return None
    check = 0
    if screen is not None:
        dtype = out.dtype
        # the C test reads each value's exponent bits in this machine's byte order: a big-endian
        # file's floats ('>f4', mapped as they lie) go to the numpy screen, which swaps them
        if dtype.kind != "f" or dtype.itemsize not in _CHECKED or not dtype.isnative:
            return None
        check = dtype.itemsize
    whole = isinstance(pos, range) and pos == range(len(out))
    at = None if whole else np.asarray(pos, dtype=np.int64)
    flags = None if screen is None else bytes(screen)
    return kernel.copy_rows(src, out, begin, end, at, frame, out.shape[1] * frame, check, flags)
