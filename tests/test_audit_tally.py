"""The audit's counts over the sequences a stream names (``trainer/audit.py``'s ``Tally``): the
same verdict and examples as counting over all ``n`` sequences, without arrays of ``n`` (a rank's
share of a 10^8-sequence corpus)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from seqloader.trainer.audit import Stream, verify


@st.composite
def streams(draw: st.DrawFn) -> tuple[int, list[Stream]]:
    n = draw(st.integers(1, 60))
    out = []
    for _ in range(draw(st.integers(1, 3))):
        ids = st.integers(0, n - 1)
        order = np.asarray(draw(st.lists(ids, max_size=40)), np.int64)  # repeats: a mix's uses
        start = draw(st.integers(0, len(order)))
        dropped = draw(st.integers(0, len(order) - start))
        delivered = np.asarray(draw(st.lists(ids, max_size=40)), np.int32)
        skipped = np.asarray(draw(st.lists(ids, max_size=5)), np.int64)
        out.append(Stream(order, start, dropped, delivered, skipped))
    return n, out


@settings(max_examples=200, deadline=None)
@given(streams())
def test_counting_the_named_sequences_gives_the_dense_verdict(case) -> None:
    n, ss = case
    tag = lambda i: f"t{i}"  # noqa: E731
    assert verify(ss, n, tag, dense=False) == verify(ss, n, tag, dense=True)


def test_a_share_of_a_huge_corpus_is_audited_without_arrays_of_n() -> None:
    """10^12 sequences (a dense count would need 8 TB): a share's findings, by sequence."""
    n = 10**12
    order = np.array([5, 10**11, 7, n - 1], np.int64)
    delivered = np.array([5, 7, 7, 3], np.int64)  # 10^11 and n-1 missing, 7 twice, 3 unplanned
    got = verify([Stream(order, 0, 0, delivered, order[:0])], n, lambda i: f"t{i}")
    assert (got["missing"], got["repeated"], got["unplanned"]) == (2, 1, 1)
    assert got["examples"][0] == "missing: sequence 100000000000 (tag 't100000000000')"
    assert "repeated: sequence 7 (tag 't7') (2 times)" in got["examples"]
