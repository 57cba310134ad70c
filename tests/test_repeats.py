"""``Repeats`` finds the hash values seen more than once without one sort of all of them: for any
values (repeats across blocks and within one, values at the parts' edges), any block sizes and
any number of parts, it gives exactly the repeated values of one plain pass, ascending, each once."""

from __future__ import annotations

import collections

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqloader.sources import repeats
from seqloader.sources.repeats import Repeats

#: values near the parts' edges (top bits change) and the ends of the range
EDGES = [0, 1, 2**56 - 1, 2**56, 2**63 - 1, 2**63, 2**64 - 2, 2**64 - 1]
VALUE = st.one_of(st.sampled_from(EDGES), st.integers(0, 2**64 - 1), st.integers(0, 40))


@settings(max_examples=40, deadline=None)
@given(
    values=st.lists(VALUE, max_size=60),
    blocks=st.lists(st.integers(1, 9), min_size=1, max_size=12),
    empty=st.booleans(),
    part=st.sampled_from([1, 2, 5, 1 << 15]),
    table=st.sampled_from([1, 3, 20]),
    screen=st.sampled_from([0, 3, 256]),
)
def test_repeats_are_the_values_seen_more_than_once(
    values: list[int], blocks: list[int], empty: bool, part: int, table: int, screen: int
) -> None:
    """Property: any values, blocks, numbers of parts (``PART``: 1 gives up to 2^12 parts of a
    few values), count tables (``TABLE_BITS``: 1 puts most values in a shared slot) and sizes
    from which a part's candidates are counted a second time (``SCREEN``: 0 always)."""
    counts = collections.Counter(values)
    expected = sorted(v for v, c in counts.items() if c > 1)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(repeats, "PART", part)
        mp.setattr(repeats, "TABLE_BITS", table)
        mp.setattr(repeats, "SCREEN", screen)
        r = Repeats(expected=len(values))
        at, k = 0, 0
        while at < len(values):  # the values in blocks of the drawn sizes (cycled)
            size = blocks[k % len(blocks)]
            r.add(np.array(values[at : at + size], dtype=np.uint64))
            if empty:
                r.add(np.zeros(0, np.uint64))
            at, k = at + size, k + 1
        got = r.finish()
    assert got.dtype == np.uint64 and got.tolist() == expected
