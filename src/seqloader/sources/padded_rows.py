"""Writing sequences into a padded batch, shared by the HDF row readers (``hdf_read``,
``hdf_chunks``): each row of the batch is filled front to back (the sequence's rows, then zeros)
and, when asked, screened for NaN/Inf while its bytes are still in cache."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np


def looks_finite(a: np.ndarray) -> bool:
    """A fast NaN/Inf screen for float arrays, meant for bytes that were just copied (still in
    cache): ``dot(a, a)`` is finite when every value is, and NaN/Inf when some value is not — or
    when a square overflows (|x| > ~1e19 in float32), a false alarm the caller's exact check
    settles. One pass, no temporaries (``isfinite(a).all()`` writes a bool array first)."""
    v = a.reshape(-1)
    return bool(np.isfinite(np.dot(v, v)))


def into_each(
    into: Callable[[int, int, np.ndarray], None],
    begin: np.ndarray,
    end: np.ndarray,
    out: np.ndarray,
    pos: Sequence[int],
    screen: bool,
) -> list[int]:
    """``RowReader.spans_into`` for a reader with ``into(a, b, dst)``: per span, the copy, the
    zeros after it, and the screen (``screen``); returns the ``pos`` that may hold NaN/Inf."""
    suspects = []
    t_max = out.shape[1]
    for p, a, b in zip(pos, begin.tolist(), end.tolist()):
        n = b - a
        if n > 0:
            dst = out[p, :n]
            into(a, b, dst)
            if screen and not looks_finite(dst):
                suspects.append(p)
        if n < t_max:
            out[p, max(n, 0) :] = 0
    return suspects
