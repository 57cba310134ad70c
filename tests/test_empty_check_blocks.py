"""The open-time empty-sequence check reads the admitted set as a mask, in blocks
(``trainer/checks.py``): the same findings as over the admitted index array, and under indexed
planning without ``planner.admission``'s index array of ``n``."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import seqloader as sl
from seqloader.errors import DataWarning
from seqloader.plan.indexed.planner import IndexedPlanner
from seqloader.trainer.checks import empty_admitted


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 3), max_size=60),
    st.one_of(st.none(), st.integers(0, 2**32 - 1)),
    st.integers(1, 7),
)
def test_blocks_find_the_admitted_empty_sequences(lengths, mask_seed, block) -> None:
    arr = np.asarray(lengths, np.int32)
    mask = None
    if mask_seed is not None:
        mask = np.random.default_rng(mask_seed).random(len(arr)) < 0.6
    admitted = np.arange(len(arr)) if mask is None else np.flatnonzero(mask)
    want = admitted[arr[admitted] == 0]  # the check over the admitted index array
    got = empty_admitted(arr, mask, block)
    np.testing.assert_array_equal(got, want)
    assert got.dtype == np.int64


@pytest.mark.parametrize("planning", ["global", "indexed"])
def test_empty_sequences_are_found_without_the_admitted_index_array(monkeypatch, planning):
    lengths = [3, 0, 4, 0, 2, 9]
    src = sl.MemorySource({"data": [np.zeros((n, 1), np.float32) for n in lengths]})

    def refuse(self):
        raise AssertionError("an index array of every admitted sequence was made")

    monkeypatch.setattr(IndexedPlanner, "admission", property(refuse))
    with pytest.warns(DataWarning, match=r"2 admitted sequence\(s\) have 0 frames of 'data'"):
        sl.SeqLoader(src, planning=planning, ordering="laplace", max_frames=20)
    with warnings.catch_warnings():  # filtered by the mask (counted), so nothing to warn about
        warnings.simplefilter("error")
        loader = sl.SeqLoader(
            src, planning=planning, ordering="laplace", max_frames=20, min_seq_length=1
        )
    assert sum(loader.planner.filtered(1).values()) == 2
