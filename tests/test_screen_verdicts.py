"""The NaN/Inf screen's verdicts kept per node (``sources/screen_verdicts.py``): a float dataset
that one process screened whole and clean is not screened again by later processes on an
unchanged file -- and the screen still names exactly the sequences that hold NaN/Inf, with the
per-sequence path's messages, through any sequence of processes, partial and whole passes,
``sl.prepare`` runs, contiguous and chunked layouts, and changes of the file (same size with its
mtime restored, or another size). The file's times are read against an injected clock (the files
written here count as settled). No timing here."""

from __future__ import annotations

import itertools
import os
import tempfile
import time
import warnings
from pathlib import Path

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import seqloader as sl
from hdf_files import keep_outside
from seqloader.errors import DataWarning
from seqloader.loading.batch_spec import BatchSpec
from seqloader.loading.execute import WorkerSpec, execute
from seqloader.sources import padded_rows, row_kernel, screen_verdicts
from seqloader.sources.columns import write_store
from test_direct_batches import write_contiguous
from test_onecopy import garbage_alloc, identity


def settle_and_count(monkeypatch) -> list[int]:
    """The files written by a test count as written a minute ago (the clock they are read
    against runs 60 s ahead, plus the clock skew margin: a test folder on a network file system
    too) and as large enough, so they may get verdicts; returns the count of rows screened."""
    ahead = 60 + screen_verdicts.CLOCK_SKEW_S
    monkeypatch.setattr(screen_verdicts, "now", lambda: time.time() + ahead)
    monkeypatch.setattr(screen_verdicts, "MIN_BYTES", 0)  # the tiny files here get verdicts
    screened = [0]
    add, copy_rows = padded_rows.RowScreen.add, row_kernel.copy_rows

    def counted(self, j, values):
        screened[0] += 1
        add(self, j, values)

    def kernel_counted(*args):  # the compiled kernel's screened rows, where it takes the request
        found = copy_rows(*args)
        screen = args[-1]
        if found is not None and screen is not None:
            screened[0] += sum(map(bool, screen))
        return found

    monkeypatch.setattr(padded_rows.RowScreen, "add", counted)
    monkeypatch.setattr(row_kernel, "copy_rows", kernel_counted)
    return screened


@pytest.fixture
def settled(monkeypatch) -> list[int]:
    return settle_and_count(monkeypatch)


def one_pass(path: str, index: Path, batches: list[np.ndarray]) -> list[str]:
    """A later process: a fresh source reads ``batches`` as the 0-worker loader does (read
    straight into the padded batch, screened); returns the NaN/Inf messages, each checked
    against the per-sequence path's."""
    messages = []
    with sl.HDFSource(path, index_dir=index) as src:
        for step, seqs in enumerate(batches):
            spec = BatchSpec(1, step, seqs, np.ones(len(seqs), dtype=bool))
            got = execute(src, spec, WorkerSpec(0, screen=True), garbage_alloc)
            general = execute(src, spec, WorkerSpec(0, identity, screen=True))
            assert got.nonfinite == general.nonfinite  # same sequences, same messages
            messages += got.nonfinite
    return messages


def poke(path: str, row: int, value: float, keep_times: bool) -> None:
    """One value of ``inputs`` changed in place (same size); with ``keep_times`` the file's
    mtime is put back (only its ctime then says it changed)."""
    before = os.stat(path)
    with h5py.File(path, "r+") as f:
        f["inputs"][row, 0] = value
    if keep_times:
        os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_size, after.st_ctime_ns) != (before.st_size, before.st_ctime_ns), (
        "the file system did not record the change (same ctime): this test needs one that does"
    )


@st.composite
def histories(draw):
    n = draw(st.integers(2, 9))
    lens = draw(st.lists(st.integers(0, 12), min_size=n, max_size=n))
    lens[0] = max(lens[0], 1)  # an empty dataset is not mapped
    kind = st.sampled_from(["nan", "inf", "-inf", "huge"])
    pokes = draw(st.lists(st.tuples(st.integers(0, n - 1), st.just("last"), st.just(0), kind)))
    event = st.one_of(
        st.tuples(st.just("pass"), st.integers(1, 4), st.integers(0, 2**16)),
        st.tuples(st.just("part"), st.integers(1, 4), st.integers(0, 2**16)),
        st.tuples(st.just("change"), st.integers(0, n - 1), kind, st.booleans()),
        st.tuples(st.just("resize"), st.integers(0, n - 1), kind, st.integers(0, 2**16)),
        st.tuples(st.just("prepare")),  # ``sl.prepare``: the whole dataset screened ahead
    )
    events = draw(st.lists(event, min_size=1, max_size=5))
    shares = draw(st.booleans())  # each pass as a DataLoader worker (keeping parts) or not
    # contiguous (mapped), or chunked: whole chunk rows screened from the map, the rest copied
    chunks = draw(st.one_of(st.none(), st.tuples(st.integers(1, 5), st.integers(1, 2))))
    first = draw(st.sampled_from([("pass", 1, 0), ("prepare",)]))  # often a verdict to be tested
    return lens, pokes[:2], [first, *events], (shares, chunks)


VALUES = {"nan": np.nan, "inf": np.inf, "-inf": -np.inf, "huge": 1.5e38, "clean": 0.25}


# the fixture holds for every input: a clock offset and a counter each pass resets
@settings(
    max_examples=10, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(histories())
def test_the_screen_names_exactly_the_nonfinite_sequences_across_processes(
    tmp_path_factory, settled, monkeypatch, case
):
    lens, pokes, events, (shares, chunks) = case
    monkeypatch.setattr(screen_verdicts, "shares_files", lambda: shares)  # a worker's, or not
    folder = tmp_path_factory.mktemp("verdicts")
    path, index = str(folder / "c.hdf"), folder / "idx"
    _write(path, lens, 0, pokes, chunks)
    verdicts: set[tuple] = set()  # file states a whole pass found without a suspect row
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)  # the NaN/Inf found are reported
        for event in events:
            n = len(lens)
            if event[0] in ("pass", "part"):
                _, size, seed = event
                order = np.random.default_rng(seed).permutation(n)
                batches = np.array_split(order, max(1, n // size))
                if event[0] == "part":
                    batches = batches[: max(1, len(batches) // 2)]
                read = {int(i) for b in batches for i in b}
                state, (bad, suspect) = _state(path), _truth(path, lens)
                settled[0] = 0
                flagged = {int(m.split()[1]) for m in one_pass(path, index, batches)}
                assert flagged == bad & read  # never a NaN/Inf missed, whatever was kept
                if state in verdicts:  # a kept verdict: nothing screened
                    assert settled[0] == 0
                if settled[0] == 0:  # skipped only where every sequence read is clean
                    assert not suspect & read or state in verdicts
                if len(read) == n and not suspect:  # a whole pass, every row clean at once
                    verdicts.add(state)
            elif event[0] == "prepare":  # a verdict kept (or found) exactly where all is finite
                state, (bad, _) = _state(path), _truth(path, lens)
                report = sl.prepare(sl.HDFSource(path, index_dir=index))
                (entry,) = [e for e in report.stores if e.kind.startswith(screen_verdicts.KIND)]
                assert (entry.path is not None) == (not bad), (entry, bad)
                if not bad:
                    verdicts.add(state)
            else:  # the file changes: one value of the last frame of a non-empty sequence
                _, i, kind, how = event
                if lens[i] == 0:
                    continue
                if event[0] == "resize":  # rewritten with one more sequence (another size)
                    lens = [*lens, 3]
                    _write(path, lens, how, pokes, chunks)
                else:
                    poke(path, int(np.sum(lens[: i + 1])) - 1, VALUES[kind], keep_times=how)


def _write(path: str, lens: list[int], seed: int, pokes: list, chunks: tuple | None) -> None:
    """``write_contiguous``'s file; with ``chunks``, its ``inputs`` rewritten chunked (partial
    chunk rows and columns at its edges when the chunks do not divide its shape)."""
    write_contiguous(path, lens, [1] * len(lens), 2, "<f4", seed, pokes)
    if chunks is not None:
        with h5py.File(path, "r+") as f:
            values = f["inputs"][...]
            del f["inputs"]
            f.create_dataset("inputs", data=values, chunks=chunks, maxshape=(None, 2))


def _state(path: str) -> tuple:
    st_ = os.stat(path)
    return (st_.st_ino, st_.st_size, st_.st_mtime_ns, st_.st_ctime_ns)


def _truth(path: str, lens: list[int]) -> tuple[set[int], set[int]]:
    """(sequences with NaN/Inf, sequences the screen's sum flags: those and the ones whose
    squares overflow) of the file as it is now."""
    with h5py.File(path, "r") as f:
        data = f["inputs"][...]
    starts = np.concatenate([[0], np.cumsum(lens)])
    bad, suspect = set(), set()
    with np.errstate(over="ignore", invalid="ignore"):
        for i, (a, b) in enumerate(itertools.pairwise(starts)):
            rows = data[a:b].reshape(-1)
            if not np.isfinite(rows).all():
                bad.add(i)
            if not np.isfinite(rows.dot(rows)):
                suspect.add(i)
    return bad, suspect


def _clean_file(path: Path, n: int = 12) -> None:
    lens = [3 + i % 5 for i in range(n)]
    assert not write_contiguous(str(path), lens, [1] * n, 4, "<f4", 1)


def test_a_whole_epoch_leaves_a_verdict_the_next_process_trusts(tmp_path, settled) -> None:
    """The real loader at 0 workers: the verdict is written by the epoch that screened the last
    sequence (not before), found by a later source, and then its epochs screen nothing."""
    path, index = tmp_path / "c.hdf", tmp_path / "idx"
    _clean_file(path)
    with sl.SeqLoader(sl.HDFSource(path, index_dir=index), max_seqs=4, ordering="random") as lo:
        first = lo.epoch(1)
        for _ in range(2):  # 8 of 12 sequences: past two quarters
            next(first)
        assert not list(index.glob("screen-*.cols"))  # a part of a pass: no verdict
        assert not list(index.glob("screenparts-*/*.cols"))  # and, not a worker, no parts
        first.close()
        list(lo.epoch(2))
        assert settled[0] > 0 and len(list(index.glob("screen-*.cols"))) == 1
    settled[0] = 0
    src = sl.HDFSource(path, index_dir=index)
    with sl.SeqLoader(src, max_seqs=4, ordering="random") as lo:
        assert sum(len(b.seq_tags) for b in lo.epoch(1)) == 12
    assert settled[0] == 0


@pytest.mark.parametrize("keep_times", [True, False])
def test_a_file_changed_since_its_verdict_is_screened_again(tmp_path, settled, keep_times) -> None:
    """A NaN written into a file with a verdict, the file's size kept and (``keep_times``) its
    mtime put back: the metadata store's identity (path, size, mtime) is the same, the verdict's
    (with the inode's ctime) is not, so the next process screens the file and names the NaN."""
    path, index = tmp_path / "c.hdf", tmp_path / "idx"
    _clean_file(path)
    whole = [np.arange(12)]
    assert one_pass(str(path), index, whole) == [] and settled[0] == 12
    settled[0] = 0
    assert one_pass(str(path), index, whole) == [] and settled[0] == 0  # the verdict, trusted
    poke(str(path), 3 + 4 - 1, np.nan, keep_times)  # the last frame of sequence 1
    (message,) = one_pass(str(path), index, whole)
    assert message.startswith("sequence 1 (tag 's1')") and settled[0] == 12


def _values_elsewhere(folder: Path, how: str, values: np.ndarray) -> tuple[Path, Path]:
    """A file ``c.hdf`` whose ``inputs`` are ``values`` kept outside it (``how``: an external
    link, a virtual dataset, external raw storage); returns (the file, where the values are)."""
    lens = [3 + i % 5 for i in range(12)]
    path, other = folder / "c.hdf", folder / ("v.raw" if how == "external" else "v.hdf")
    write_contiguous(str(path), lens, [1] * 12, 4, "<f4", 1)
    with h5py.File(path, "r+") as f:
        del f["inputs"]
        keep_outside(f, "inputs", values, str(other), how, extent=2**32)
    return path, other


@pytest.mark.parametrize("how", ["link", "virtual", "external"])
def test_values_kept_outside_the_file_get_no_verdict(tmp_path, settled, how) -> None:
    """The verdict's identity is the file's (path, inode, times): it cannot see a change of
    values that live in another file (a dataset reached through an external link, a virtual
    dataset's sources, external raw storage). Such a dataset gets no verdict, so a NaN written
    there later is still named; and a linked dataset's bytes are read from its own file, not
    mapped from this one at its offset in the other."""
    values = np.arange(sum(3 + i % 5 for i in range(12)) * 4, dtype="<f4").reshape(-1, 4)
    path, other = _values_elsewhere(tmp_path, how, values)
    index, whole = tmp_path / "idx", [np.arange(12)]
    with sl.HDFSource(path, index_dir=index) as src:  # the padded path, as the loader reads it
        spec = BatchSpec(1, 0, whole[0], np.ones(12, dtype=bool))
        batch = execute(src, spec, WorkerSpec(0, screen=True), garbage_alloc)
        assert batch.data["data"][1, :4].tolist() == values[3:7].tolist()
    assert one_pass(str(path), index, whole) == [] and settled[0] > 0
    assert not list(index.glob("screen-*.cols"))
    values[4, 2] = np.nan  # sequence 1, in the other file only: this file's identity is the same
    if how == "external":
        values.tofile(other)
    else:
        with h5py.File(other, "r+") as v:
            v["x"][...] = values
    (message,) = one_pass(str(path), index, whole)
    assert message.startswith("sequence 1 (tag 's1')")


def test_processes_that_each_screen_a_share_make_the_verdict_together(
    tmp_path, settled, monkeypatch
) -> None:
    """Each worker keeps the sequences it found clean as its part whenever it found another
    quarter of the file clean, and takes in the parts of the others: two workers that each read
    half of a file make the verdict, and the second screens only its own half."""
    monkeypatch.setattr(screen_verdicts, "shares_files", lambda: True)  # as in a worker
    path, index = tmp_path / "c.hdf", tmp_path / "idx"
    _clean_file(path)
    seqs = np.arange(12)
    one_pass(str(path), index, [seqs[0:3], seqs[3:6]])  # keeps its part twice: 3, then 6
    assert settled[0] == 6 and len(list(index.glob("screenparts-*/*.cols"))) == 1
    assert not list(index.glob("screen-*.cols"))
    settled[0] = 0
    one_pass(str(path), index, [seqs[6:9], seqs[9:12]])  # takes in the first half after 3
    assert settled[0] == 6 and len(list(index.glob("screen-*.cols"))) == 1
    assert not list(index.glob("screenparts-*/*.cols"))  # the verdict kept: its parts are dropped
    settled[0] = 0
    assert one_pass(str(path), index, [seqs]) == [] and settled[0] == 0


def test_a_verdicts_parts_are_found_without_listing_the_nodes_folder(
    tmp_path, settled, monkeypatch
) -> None:
    """A worker's first screened read of a file looks for the parts of its verdict in their own
    folder: it never lists the node's folder, whose other stores (tens of thousands on a shared
    node) would make each file's first read in each worker slower. When the verdict is kept, its
    parts go with their folder."""
    monkeypatch.setattr(screen_verdicts, "shares_files", lambda: True)  # as in a worker
    path, index = tmp_path / "c.hdf", tmp_path / "idx"
    _clean_file(path)
    listed: list[str] = []
    for name in ("listdir", "scandir"):
        real = getattr(os, name)
        monkeypatch.setattr(os, name, lambda p=".", real=real: listed.append(str(p)) or real(p))
    seqs = np.arange(12)
    one_pass(str(path), index, [seqs[0:3], seqs[3:6]])
    one_pass(str(path), index, [seqs[6:9], seqs[9:12]])
    assert str(index) not in listed and any("screenparts-" in p for p in listed), listed
    assert len(list(index.glob("screen-*.cols"))) == 1
    assert not list(index.glob("screenparts-*"))  # the folder of parts went with them


def test_parts_of_the_earlier_layout_are_not_read(tmp_path, settled) -> None:
    """A part written beside the verdicts by an earlier seqloader (``screenpart-*.cols``, that
    layout's format) is not looked for: its sequences are screened again, the verdict made."""
    path, index = tmp_path / "c.hdf", tmp_path / "idx"
    _clean_file(path)
    verdicts = screen_verdicts.FileVerdicts.settled(str(index), str(path))
    with h5py.File(path) as f:
        dtype, shape = f["inputs"].dtype, f["inputs"].shape
    store, identity = verdicts.store_path("inputs", dtype, shape)
    name = os.path.basename(store)[len("screen-") : -len(".cols")]
    index.mkdir(exist_ok=True)
    earlier = index / f"screenpart-{name}-1-0a1b2c3d.cols"
    meta = {"dataset": "inputs", "file": str(path)}
    clean = {"clean": np.ones(12, dtype=np.uint8)}
    write_store(earlier, identity + "/part", clean, meta, format=screen_verdicts.FORMAT)
    assert one_pass(str(path), index, [np.arange(12)]) == [] and settled[0] == 12


@pytest.mark.parametrize("column", ["clean", "header"])
def test_a_damaged_part_is_not_trusted(tmp_path, settled, monkeypatch, column) -> None:
    """A part with one changed byte is named in a warning and left out of the union: the
    sequences only it named are not taken as clean, so no verdict is made from it."""
    from test_store_damage import flip

    monkeypatch.setattr(screen_verdicts, "shares_files", lambda: True)  # as in a worker
    path, index = tmp_path / "c.hdf", tmp_path / "idx"
    _clean_file(path)
    seqs = np.arange(12)
    one_pass(str(path), index, [seqs[0:3], seqs[3:6]])
    (part,) = index.glob("screenparts-*/*.cols")
    flip(part, column, at=0.0)  # the first sequences' flags (or the header)
    with pytest.warns(DataWarning, match=rf"{part}.*not trusted.*rebuilt from the data"):
        one_pass(str(path), index, [seqs[6:9], seqs[9:12]])
    assert not list(index.glob("screen-*.cols"))  # the union lacks the first half


def test_dataloader_workers_make_the_verdict(tmp_path, settled) -> None:
    """Real DataLoader workers: each screens only the batches it builds and keeps them as its
    parts (every batch here is more than a quarter of the file), so the parts' union is whole
    after epoch 1; whichever worker finds that (in epoch 1, or at the latest when epoch 2's
    workers start from the union) keeps the verdict; then a process on its own screens nothing."""
    path, index = tmp_path / "c.hdf", tmp_path / "idx"
    _clean_file(path)
    src = sl.HDFSource(path, index_dir=index)
    with sl.SeqLoader(src, max_seqs=4, ordering="random", num_workers=2) as loader:
        for epoch in (1, 2):
            assert sum(len(b.seq_tags) for b in loader.epoch(epoch)) == 12
    assert len(list(index.glob("screen-*.cols"))) == 1
    settled[0] = 0
    assert one_pass(str(path), index, [np.arange(12)]) == [] and settled[0] == 0


def test_a_young_file_gets_no_verdict(tmp_path, monkeypatch) -> None:
    """A file modified within ``SETTLE_S`` of its opening (a change in the same tick of the file
    system's clock could keep its times) is screened, and no verdict is kept for it."""
    path, index = tmp_path / "c.hdf", tmp_path / "idx"
    _clean_file(path)
    monkeypatch.setattr(screen_verdicts, "now", lambda: os.stat(path).st_ctime_ns / 1e9 + 1.0)
    batches = [np.arange(12)]
    one_pass(str(path), index, batches)
    assert not list(index.glob("screen-*.cols"))


def test_a_network_file_system_trusts_a_file_older_than_the_clock_skew_margin(
    tmp_path, monkeypatch
) -> None:
    """A network file system's file times are its server's clock, which may lag the reader's.
    Its folder cannot be written here (a shared read-only corpus) and nothing is written there. A file counts as settled where its times lie ``SETTLE_S + CLOCK_SKEW_S`` before the
    reader's clock: one whose ``mtime`` was restored an hour back (``os.utime``, as tar or rsync
    -a do) but whose ``ctime`` is within the margin is screened, with no verdict; once the
    reader's clock is past the margin it gets its verdict, and the next pass screens nothing."""
    screened = settle_and_count(monkeypatch)
    monkeypatch.setattr(screen_verdicts, "local_clock", lambda path: False)  # a network one
    monkeypatch.setattr(screen_verdicts, "_LOCAL", {})
    data, index = tmp_path / "data", tmp_path / "idx"
    data.mkdir()
    path = data / "c.hdf"
    _clean_file(path)
    os.utime(path, (time.time() - 3600, time.time() - 3600))
    mkstemp = tempfile.mkstemp

    def read_only(*args, dir=None, **kwargs):  # the data's folder cannot be written (as root too)
        if dir is not None and Path(dir).resolve() == data.resolve():
            raise PermissionError(dir)
        return mkstemp(*args, dir=dir, **kwargs)

    monkeypatch.setattr(tempfile, "mkstemp", read_only)
    changed = os.stat(path).st_ctime_ns / 1e9
    margin = screen_verdicts.SETTLE_S + screen_verdicts.CLOCK_SKEW_S
    whole = [np.arange(12)]
    for ahead, rows in ((margin - 1, 12), (margin + 1, 12), (margin + 1, 0)):
        monkeypatch.setattr(screen_verdicts, "now", lambda ahead=ahead: changed + ahead)
        screened[0] = 0
        assert one_pass(str(path), index, whole) == [] and screened[0] == rows
        assert len(list(index.glob("screen-*.cols"))) == (ahead > margin)
    assert sorted(os.listdir(data)) == ["c.hdf"]


def test_a_small_dataset_gets_no_verdict(tmp_path, monkeypatch) -> None:
    """Below ``MIN_BYTES`` the screen costs less than writing a verdict: none is written or
    looked up, and every process screens the file."""
    screened = settle_and_count(monkeypatch)
    monkeypatch.setattr(
        screen_verdicts, "MIN_BYTES", 57 * 4 * 4 + 1
    )  # 57 rows of 4 float32: 1 byte short
    path, index = tmp_path / "c.hdf", tmp_path / "idx"
    _clean_file(path)
    for _ in range(2):
        screened[0] = 0
        assert one_pass(str(path), index, [np.arange(12)]) == [] and screened[0] == 12
    assert not list(index.glob("screen-*.cols"))


def test_no_verdict_where_the_folder_cannot_be_written(tmp_path, settled) -> None:
    """The verdict is this node's cache: where it cannot be written the file is screened in
    every process, with the same messages (the metadata store's warning names the folder)."""
    path, blocker = tmp_path / "c.hdf", tmp_path / "not-a-directory"
    _clean_file(path)
    blocker.write_text("")
    verdicts = screen_verdicts.FileVerdicts.settled(str(blocker), str(path))
    assert verdicts is not None and not verdicts.record("inputs", np.dtype("<f4"), (60, 4))
    for _ in range(2):
        settled[0] = 0
        with pytest.warns(DataWarning, match="cannot write the metadata index"):
            assert one_pass(str(path), blocker / "idx", [np.arange(12)]) == []
        assert settled[0] == 12


@pytest.mark.parametrize("layout", ["contiguous", "chunked"])
def test_prepare_keeps_the_verdicts_so_that_no_epoch_screens(tmp_path, settled, layout) -> None:
    """``sl.prepare`` screens every float dataset whole and keeps the node's verdict (values
    whose squares overflow are finite: a verdict too); the loader's first epoch then screens no
    row, and a second prepare finds the verdict."""
    path, index = tmp_path / "c.hdf", tmp_path / "idx"
    lens = [3 + i % 5 for i in range(12)]
    write_contiguous(str(path), lens, [1] * 12, 4, "<f4", 1, [(4, "last", 1, "huge")])
    if layout == "chunked":  # rewritten with small chunks: read through the chunk reader
        with h5py.File(path, "r+") as f:
            values = f["inputs"][...]
            del f["inputs"]
            f.create_dataset("inputs", data=values, chunks=(5, 4), maxshape=(None, 4))
    report = sl.prepare(sl.HDFSource(path, index_dir=index))
    (entry,) = [s for s in report.stores if s.kind.startswith(screen_verdicts.KIND)]
    assert entry.built and entry.path in {str(p) for p in index.glob("screen-*.cols")}
    assert f"'data' of {path}" in entry.kind
    with sl.SeqLoader(sl.HDFSource(path, index_dir=index), max_seqs=4) as loader:
        assert sum(len(b.seq_tags) for b in loader.epoch(1)) == 12
    assert settled[0] == 0
    again = sl.prepare(sl.HDFSource(path, index_dir=index))
    (entry,) = [s for s in again.stores if s.kind.startswith(screen_verdicts.KIND)]
    assert entry.path is not None and not entry.built and again.built == ()


def test_prepare_keeps_no_verdict_for_nonfinite_data_and_the_loader_names_it(
    tmp_path, settled
) -> None:
    path, index = tmp_path / "c.hdf", tmp_path / "idx"
    lens = [3 + i % 5 for i in range(12)]
    write_contiguous(str(path), lens, [1] * 12, 4, "<f4", 1, [(6, "first", 2, "nan")])
    report = sl.prepare(sl.HDFSource(path, index_dir=index))
    (entry,) = [s for s in report.stores if s.kind.startswith(screen_verdicts.KIND)]
    assert entry.path is None and "NaN/Inf" in entry.note and not list(index.glob("screen-*"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)
        (message,) = one_pass(str(path), index, [np.arange(12)])
    assert message.startswith("sequence 6 (tag 's6')")


def test_prepare_screens_nothing_when_asked_or_when_the_checks_are_off(tmp_path, settled) -> None:
    path, index = tmp_path / "c.hdf", tmp_path / "idx"
    _clean_file(path)
    off = sl.prepare(sl.HDFSource(path, index_dir=index), checks=sl.CheckOptions(nonfinite="off"))
    (entry,) = [s for s in off.stores if s.kind.startswith(screen_verdicts.KIND)]
    assert entry.path is None and entry.note == "not used: off"
    skipped = sl.prepare(sl.HDFSource(path, index_dir=index), screen=False)
    assert not [s for s in skipped.stores if s.kind.startswith(screen_verdicts.KIND)]
    assert not list(index.glob("screen-*"))


@settings(max_examples=30, deadline=None)
@given(
    rows=st.integers(1, 40),
    width=st.integers(1, 6),
    chunks=st.tuples(st.integers(1, 7), st.integers(1, 6)),
    poke=st.one_of(
        st.none(), st.tuples(st.integers(0, 39), st.integers(0, 5), st.sampled_from(sorted(VALUES)))
    ),
)
def test_prepares_screen_reads_every_value_of_a_chunked_dataset(
    tmp_path_factory, rows, width, chunks, poke
) -> None:
    """``all_finite`` over a chunked dataset (whole chunk rows straight from the map, the rest
    through ``rows``) says exactly whether every value is finite: a NaN/Inf in any chunk, edge
    chunks included, is seen; a huge finite value is not taken for one; and values outside the
    dataset's extent in its edge chunks are never read."""
    from seqloader.sources.hdf_chunks import ChunkedRows
    from seqloader.sources.hdf_read import OpenFile
    from seqloader.sources.padded_rows import all_finite

    values = np.random.default_rng(rows).standard_normal((rows, width)).astype(np.float32)
    if poke is not None:
        values[poke[0] % rows, poke[1] % width] = VALUES[poke[2]]
    path = str(tmp_path_factory.mktemp("chunked") / "c.hdf")
    chunk = (min(chunks[0], rows), min(chunks[1], width))
    with h5py.File(path, "w") as f:
        # written larger with NaN first, then shrunk: the edge chunks keep NaN outside the extent
        d = f.create_dataset(
            "x",
            data=np.full((rows + 7, width + 5), np.nan, np.float32),
            chunks=chunk,
            maxshape=(None, None),
        )
        d.resize((rows, width))
        d[...] = values
    opened = OpenFile(path, {"x": "x"}, use_mmap=True)
    try:
        reader = opened.readers["x"]
        if isinstance(reader, ChunkedRows):  # the runs hold exactly the dataset's values
            got = [
                v if v is not None else reader.rows(a, b).reshape(-1)
                for a, b, v in reader.value_runs()
            ]
            np.testing.assert_array_equal(np.sort(np.concatenate(got)), np.sort(values.reshape(-1)))
        assert all_finite(reader) == bool(np.isfinite(values).all())
    finally:
        opened.close()


def _two_chunked(path: str, lens: list[int], inputs_first: bool, nan_row: int | None) -> None:
    """A RETURNN file whose ``inputs`` is chunked, beside a finite chunked dataset of the same
    size: created first or second, so that two such files have the same size and other chunk
    offsets (``inputs`` where the other one's chunks lie in the other file)."""
    rows = sum(lens)
    values = np.random.default_rng(0).standard_normal((rows, 4)).astype(np.float32)
    if nan_row is not None:
        values[nan_row, 2] = np.nan
    names = ["inputs", "other"] if inputs_first else ["other", "inputs"]
    with h5py.File(path, "w") as f:
        made = {
            n: f.create_dataset(n, (rows, 4), "f4", chunks=(3, 4), maxshape=(None, 4))
            for n in names
        }
        made["inputs"][...] = values
        made[names[1] if inputs_first else names[0]][...] = 1.0
        f.create_dataset("seqLengths", data=np.stack([lens, lens], axis=1).astype(np.int32))
        f.create_dataset("seqTags", data=np.array([f"s{i}".encode() for i in range(len(lens))]))
        f.create_dataset("targets/data/classes", data=np.zeros(rows, np.int32))
        f.create_group("targets/size").attrs["classes"] = [1000, 1]
        f.create_group("targets/labels")


def test_a_file_rewritten_with_its_mtime_kept_is_not_read_through_an_old_chunk_index(
    tmp_path, settled
) -> None:
    """A chunked file rewritten in place with its size and mtime kept (only its ctime moves) in
    a process that indexed its chunks before: the screen (and the batches) read the new file's
    chunks, not the old offsets, so a NaN in it gets no "clean" verdict that a later process
    (indexing afresh) would trust while serving the NaN."""
    from seqloader.sources import hdf_chunks

    path, index, lens = tmp_path / "c.hdf", tmp_path / "idx", [5, 7, 4, 8]
    _two_chunked(str(path), lens, True, None)
    _two_chunked(str(tmp_path / "new.hdf"), lens, False, 10)  # a NaN in sequence 1 (rows 5-11)
    assert path.stat().st_size == (tmp_path / "new.hdf").stat().st_size
    assert sl.prepare(sl.HDFSource(path, index_dir=index)).built  # clean: a verdict
    before = path.stat()
    path.write_bytes((tmp_path / "new.hdf").read_bytes())  # in place: same inode, same size
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    again = sl.prepare(sl.HDFSource(path, index_dir=index))
    (entry,) = [s for s in again.stores if s.kind.startswith(screen_verdicts.KIND)]
    assert entry.path is None and "NaN/Inf" in entry.note
    hdf_chunks._INDEXES.clear()  # a later process: indexes the file's chunks afresh
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataWarning)
        (message,) = one_pass(str(path), index, [np.arange(4)])
    assert message.startswith("sequence 1 (tag 's1')")
