"""Mapping a contiguous dataset's cached pages ahead (``sources.map_ahead``): which runs of pages
are mapped, the per-process budget, and that a file's thread has ended before its map is closed.
The bytes read are those of h5py whatever the thread has done (``test_hdf_fast``); no timing
here."""

from __future__ import annotations

import gc
import threading

import h5py
import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import seqloader as sl
from seqloader.sources import map_ahead, screen_verdicts
from seqloader.sources.hdf_read import OpenFile


@given(st.lists(st.booleans(), max_size=200))
def test_cached_runs_are_the_long_runs_of_cached_pages(flags):
    cached = np.array(flags, dtype=np.uint8)
    runs = map_ahead.cached_runs(cached)
    covered = np.zeros(len(flags), dtype=bool)
    for a, b in runs:
        assert b - a >= map_ahead.MIN_RUN and cached[a:b].all()
        assert (a == 0 or not cached[a - 1]) and (b == len(flags) or not cached[b])
        covered[a:b] = True
    # every run of cached pages long enough is there, nothing else
    long_runs = [
        (a, b)
        for a in range(len(flags))
        for b in range(a + map_ahead.MIN_RUN, len(flags) + 1)
        if cached[a:b].all()
        and (a == 0 or not cached[a - 1])
        and (b == len(flags) or not cached[b])
    ]
    assert runs == long_runs


def _file(tmp_path, rows=5000):
    path = str(tmp_path / "c.hdf")
    data = np.arange(rows * 40, dtype=np.float32).reshape(rows, 40)
    with h5py.File(path, "w") as f:
        f.create_dataset("inputs", data=data)
    with open(path, "rb") as fh:  # in the page cache
        fh.read()
    return path, data


def test_an_open_file_maps_its_datasets_ahead_and_stops_before_closing(tmp_path, monkeypatch):
    monkeypatch.setattr(screen_verdicts, "shares_files", lambda: False)
    path, data = _file(tmp_path)
    opened = OpenFile(path, {"data": "inputs"}, use_mmap=True)
    ahead = opened._ahead
    if map_ahead._CALLS is None:  # not Linux: nothing mapped ahead, reads as before
        assert ahead is None
    else:
        assert ahead is not None and ahead.wait(timeout=60)
        assert ahead.mapped > 0
    np.testing.assert_array_equal(opened.readers["data"].rows(10, 20), data[10:20])
    left = map_ahead._left
    opened.close()
    assert opened._ahead is None
    if ahead is not None:
        assert ahead.wait(timeout=0) and map_ahead._left == left + data.nbytes


def test_workers_and_a_spent_budget_map_nothing_ahead(tmp_path, monkeypatch):
    path, _ = _file(tmp_path)
    monkeypatch.setattr(screen_verdicts, "shares_files", lambda: True)  # a DataLoader worker
    opened = OpenFile(path, {"data": "inputs"}, use_mmap=True)
    assert opened._ahead is None
    opened.close()
    monkeypatch.setattr(screen_verdicts, "shares_files", lambda: False)
    monkeypatch.setattr(map_ahead, "_left", 100)  # less than the dataset
    opened = OpenFile(path, {"data": "inputs"}, use_mmap=True)
    assert opened._ahead is None and map_ahead._left == 100
    opened.close()


def test_a_file_dropped_without_close_gives_its_budget_back(tmp_path, monkeypatch):
    """An open file collected without ``close`` (a source dropped unclosed) gives back its part
    of the process's budget with its map: else each one kept it, and after ``MAX_BYTES`` of them
    the process mapped nothing ahead again."""
    monkeypatch.setattr(screen_verdicts, "shares_files", lambda: False)
    path, data = _file(tmp_path)
    left = map_ahead._left
    opened = OpenFile(path, {"data": "inputs"}, use_mmap=True)
    ahead = opened._ahead
    if ahead is None:  # not Linux
        return
    assert ahead.wait(timeout=60) and map_ahead._left == left - data.nbytes
    del opened
    gc.collect()
    assert map_ahead._left == left
    ahead.stop()  # then closed as well: given back once
    assert map_ahead._left == left


def test_closing_while_the_thread_maps_ends_it_first(tmp_path, monkeypatch):
    """``close`` right after open (the thread mapping a page per call, most of the file left):
    the thread has ended when ``close`` returns, the map is closed, the budget is back."""
    monkeypatch.setattr(screen_verdicts, "shares_files", lambda: False)
    monkeypatch.setattr(map_ahead, "SPAN", map_ahead._PAGE)
    monkeypatch.setattr(map_ahead, "MIN_RUN", 1)
    path, _ = _file(tmp_path, rows=20_000)  # 3.2 MB: ~800 calls
    left = map_ahead._left
    for _ in range(3):
        opened = OpenFile(path, {"data": "inputs"}, use_mmap=True)
        ahead = opened._ahead
        opened.close()
        assert opened._mmap is None and map_ahead._left == left
        if ahead is not None:
            assert ahead.wait(timeout=0)


def test_workers_forked_while_the_thread_maps_read_the_same_batches(tmp_path, monkeypatch):
    """A loader's worker forked while the main process's thread is inside its first call (held
    there until the epoch ends): the same batches as without workers; the thread is stopped and
    the budget back once the source is closed."""
    rows, n = 4000, 100
    path = str(tmp_path / "f.hdf")
    with h5py.File(path, "w") as f:
        f.create_dataset("inputs", data=np.arange(rows * 40, dtype=np.float32).reshape(rows, 40))
        f.create_dataset("seqLengths", data=np.full((n, 1), rows // n, np.int32))
        f.create_dataset("seqTags", data=np.array([f"t{i}".encode() for i in range(n)], "S"))
        f.attrs["inputPattSize"] = 40
        f.create_group("targets/data")
        f.create_group("targets/size")
    with open(path, "rb") as fh:  # in the page cache
        fh.read()
    src = sl.HDFSource(path, index_dir=tmp_path / "index")
    left = map_ahead._left

    def batches(**workers) -> list:
        with sl.SeqLoader(src, max_seqs=30, seed=1, **workers) as loader:
            return [(b.seq_tags, b["data"].numpy().tobytes()) for b in loader.epoch(1)]

    want = batches()
    src.close()
    if map_ahead._CALLS is not None:
        gate = threading.Event()
        madvise, mincore = map_ahead._CALLS

        def held(at: int, size: int, advice: int) -> int:
            gate.wait(60)
            return madvise(at, size, advice)

        monkeypatch.setattr(map_ahead, "_CALLS", (held, mincore))
        monkeypatch.setattr(map_ahead, "MIN_RUN", 1)
    src.read(0)  # opened again in this process: its thread starts
    try:
        got = batches(num_workers=1, multiprocessing_context="fork")
    finally:
        if map_ahead._CALLS is not None:
            gate.set()
    assert got == want
    src.close()
    assert map_ahead._left == left
