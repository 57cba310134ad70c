"""Fuzzing the HDF reader with mutated files: flipped bytes, truncation, removed and resized datasets.

Each case must either raise a ``seqloader.errors.SeqLoaderError`` or return exactly the original
data wherever the mutation did not touch it — never crash the interpreter, hang, or return wrong
data silently. Cases run in a long-lived runner *subprocess* (one interpreter start for all cases):
a crash shows as the runner dying, a hang as no answer within the timeout; both fail the case, and
the runner is restarted for the next one. Hypothesis draws the mutations (and shrinks a failure).

Where a flipped byte lies decides what may change: inside the raw bytes of ``inputs`` or a target
(found with h5py: contiguous offsets, chunk offsets) only the sequence owning those rows; inside
``seqLengths`` / ``seqTags`` (or the global heap of variable-length tags) the lengths / tags; anywhere
else (superblock, object headers, B-trees, heaps) nothing may change silently.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import threading
import traceback
from dataclasses import dataclass

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

import seqloader as sl

TIMEOUT_S = 60  # per case, after the runner's start-up; a healthy case takes milliseconds
KEYS = {"data": "inputs", "classes": "targets/data/classes"}


# ---- the runner (in a subprocess) ----
def digest(a: np.ndarray) -> str:
    """Of the values in this machine's byte order: the reader hands a big-endian dataset out
    native (a flipped byte of a datatype message can make a dataset big-endian), HDF5's own
    reading keeps the file's order."""
    a = a.astype(a.dtype.newbyteorder("="), copy=False)
    return hashlib.sha1(f"{a.dtype.str}{a.shape}".encode() + a.tobytes()).hexdigest()[:16]


def read_all(path: str, use_mmap: bool) -> dict:
    """Everything a loader would see of the file; read() and read_many() must agree."""
    src = sl.HDFSource(path, use_mmap=use_mmap)
    try:
        one = [src.read(i) for i in range(len(src))]
        many = src.read_many(np.arange(len(src)))
        for i, (a, b) in enumerate(zip(one, many)):
            if a.keys() != b.keys() or any(digest(a[k]) != digest(b[k]) for k in a):
                raise AssertionError(f"read({i}) and read_many disagree")
        return {
            "tags": list(src.tags),
            "lengths": {k: src.lengths(k).tolist() for k in src.keys},
            "seqs": [{k: digest(v) for k, v in s.items()} for s in one],
        }
    finally:
        src.close()


def oracle(path: str, keys: list[str]) -> dict:
    """What the file says under HDF5's own reading, by the format's rules, with plain h5py (no
    mmap, no batching): seqLengths columns are ``data`` (if ``inputs``) then the sorted target keys."""
    with h5py.File(path, "r") as f:
        targets = set(f["targets/data"]) if "targets/data" in f else set()
        targets |= set(f["targets/size"].attrs) if "targets/size" in f else set()
        columns = (["data"] if "inputs" in f else []) + sorted(targets or {"classes"})
        lengths = np.asarray(f["seqLengths"][()]).reshape(len(f["seqLengths"]), -1)
        seqs: list[dict] = [{} for _ in range(len(lengths))]
        for key in keys:
            col = lengths[:, columns.index(key)].astype(np.int64)
            starts = np.concatenate([[0], np.cumsum(col)])
            arr = f["inputs" if key == "data" else f"targets/data/{key}"][()]
            for i in range(len(col)):
                seqs[i][key] = digest(arr[starts[i] : starts[i + 1]])
        raw = [t if isinstance(t, bytes) else str(t).encode() for t in f["seqTags"][()]]
        tags = [t.split(b"\0", 1)[0].decode("utf-8", "surrogateescape") for t in raw]
    return {"tags": tags, "seqs": seqs}


def runner_main() -> None:
    from seqloader.errors import SeqLoaderError

    print("ready", flush=True)  # imports done: the parent's per-case timeout starts after this
    for line in sys.stdin:
        req = json.loads(line)
        try:
            out = {"status": "ok", **read_all(req["path"], req["mmap"])}
            try:
                out["oracle"] = oracle(req["path"], list(out["lengths"]))
            except Exception as e:  # HDF5 itself cannot read what our reader returned
                out["oracle"] = {"error": f"{type(e).__name__}: {e}"}
        except SeqLoaderError as e:
            out = {"status": "error", "seqloader": True, "type": type(e).__name__, "msg": str(e)}
        except BaseException as e:
            tb = traceback.format_exc()[-3000:]
            out = {"status": "error", "seqloader": False, "type": type(e).__name__, "msg": tb}
        print(json.dumps(out), flush=True)


class Runner:
    """The parent's handle on the runner subprocess; restarts it after a crash or hang."""

    def __init__(self, timeout_s: float = TIMEOUT_S) -> None:
        self.proc: subprocess.Popen | None = None
        self.timeout_s = timeout_s

    def _start(self) -> subprocess.Popen:
        code = (
            f"import sys; sys.path.insert(0, {os.path.dirname(__file__)!r}); "
            "import test_fuzz_hdf; test_fuzz_hdf.runner_main()"
        )
        return subprocess.Popen(
            [sys.executable, "-u", "-c", code],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env={**os.environ, "OMP_NUM_THREADS": "1"},
        )

    def ask(self, path: str, use_mmap: bool) -> dict:
        if self.proc is None or self.proc.poll() is not None:
            self.proc = self._start()
            # start-up (imports) is waited for as an event, outside the per-case timeout, so a
            # loaded machine's slow start is never taken for a hang
            ready = self.proc.stdout.readline()
            assert ready == "ready\n", f"the runner did not start: {ready!r}"
        proc = self.proc
        proc.stdin.write(json.dumps({"path": path, "mmap": use_mmap}) + "\n")
        proc.stdin.flush()
        result: list[str] = []
        reader = _Reader(proc, result)
        reader.start()
        reader.join(self.timeout_s)
        if reader.is_alive():
            proc.kill()
            proc.wait()
            self.proc = None
            return {"status": "hang"}
        if not result or not result[0]:
            code = proc.wait()
            self.proc = None
            return {"status": "crash", "returncode": code}
        return json.loads(result[0])

    def close(self) -> None:
        if self.proc is not None:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
            self.proc = None


class _Reader(threading.Thread):
    def __init__(self, proc: subprocess.Popen, out: list[str]) -> None:
        super().__init__(daemon=True)
        self.proc, self.out = proc, out

    def run(self) -> None:
        self.out.append(self.proc.stdout.readline())


# ---- originals and what each byte of them holds ----
@dataclass(frozen=True)
class Original:
    path: str
    size: int
    truth: dict  # read_all of the unmodified file
    regions: list[tuple[int, int, str, np.ndarray | None]]  # (start, end, what, row starts)
    starts: dict[str, np.ndarray]  # key -> int64 [n + 1] row offsets
    row_bytes: dict[str, int]


def raw_regions(path: str) -> tuple[list, dict[str, int]]:
    """Byte ranges of raw data: (start, end, what, first row of the range or None)."""
    regions, row_bytes = [], {}
    with h5py.File(path, "r") as f:
        for what in ("inputs", "targets/data/classes", "seqLengths", "seqTags"):
            d = f[what]
            rb = int(np.prod(d.shape[1:], dtype=np.int64)) * d.dtype.itemsize
            row_bytes[what] = rb
            if d.chunks is None:
                regions.append(
                    (d.id.get_offset(), d.id.get_offset() + d.id.get_storage_size(), what, 0)
                )
            else:
                for i in range(d.id.get_num_chunks()):
                    info = d.id.get_chunk_info(i)
                    regions.append(
                        (info.byte_offset, info.byte_offset + info.size, what, info.chunk_offset[0])
                    )
    with open(path, "rb") as fh:  # global heap collections of variable-length tags
        data = fh.read()
    pos = data.find(b"GCOL")
    while pos >= 0:
        size = int.from_bytes(data[pos + 8 : pos + 16], "little")
        regions.append((pos, pos + size, "seqTags", None))
        pos = data.find(b"GCOL", pos + 4)
    return regions, row_bytes


def make_original(folder: str, chunked: bool) -> Original:
    rng = np.random.default_rng(7)
    lengths = rng.integers(1, 40, size=12)
    data = [rng.standard_normal((int(t), 3)).astype(np.float32) for t in lengths]
    classes = [rng.integers(0, 50, size=max(int(t) // 4, 1)).astype(np.int32) for t in lengths]
    src = sl.MemorySource(
        {"data": data, "classes": classes},
        tags=[f"corpus/rec{i}/{i:04d}" for i in range(12)],
        vocab_sizes={"classes": 50},
    )
    path = os.path.join(folder, f"original_{'chunked' if chunked else 'contiguous'}.hdf")
    sl.write_hdf(path, src, chunked=chunked)
    regions, row_bytes = raw_regions(path)
    starts = {}
    for key, h5 in KEYS.items():
        lens = np.asarray(src.lengths(key), dtype=np.int64)
        starts[h5] = np.concatenate([[0], np.cumsum(lens)])
    return Original(path, os.path.getsize(path), read_all(path, True), regions, starts, row_bytes)


@pytest.fixture(scope="module")
def originals(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("fuzz"))
    return {c: make_original(folder, c) for c in (False, True)}, folder


@pytest.fixture(scope="module")
def runner():
    r = Runner()
    yield r
    r.close()


def test_originals_read_back_through_the_runner(originals, runner):
    origs, _ = originals
    for orig in origs.values():
        result = runner.ask(orig.path, False)
        oracle = result.pop("oracle")
        assert result == {"status": "ok", **orig.truth}
        assert oracle == {"tags": orig.truth["tags"], "seqs": orig.truth["seqs"]}
        assert len(orig.truth["seqs"]) == 12 and orig.truth["tags"][3] == "corpus/rec3/0003"


# ---- mutations ----
def touched(orig: Original, offsets: list[int]) -> tuple[set, bool, bool]:
    """(sequences whose data may change, as (h5 path, index); lengths may change; tags may
    change). A byte outside every raw-data region changes nothing that may change silently."""
    seqs: set[tuple[str, int]] = set()
    lengths = tags = False
    for o in offsets:
        for start, end, what, first_row in orig.regions:
            if not start <= o < end:
                continue
            if what == "seqLengths":
                lengths = True
            elif what == "seqTags":
                tags = True
            else:
                row = first_row + (o - start) // orig.row_bytes[what]
                s = int(np.searchsorted(orig.starts[what], row, side="right") - 1)
                seqs.add((what, s))
    return seqs, lengths, tags


def check_case(
    result: dict, orig: Original, seqs: set, lengths: bool, tags: bool, *, metadata: bool
) -> str:
    """The verdict on one mutated file:

    - never a crash, a hang or a foreign exception: failures are seqloader errors;
    - what the reader returns is what the file says under HDF5's own plain reading (the oracle):
      the reader adds no error of its own (mmap offsets, merged reads, tag decoding); the one
      exception is a damaged chunk B-tree that hides a chunk from HDF5's lookup, where the reader
      may return that chunk's original rows instead of HDF5's fill values;
    - when every mutated byte lies in raw data (``metadata`` False), everything the mutation could
      not reach equals the original file's data: keys, lengths, tags and sequences.
    """
    assert result["status"] not in ("crash", "hang"), f"reader {result['status']}: {result}"
    if result["status"] == "error":
        assert result["seqloader"], f"not a seqloader error: {result['type']}: {result['msg']}"
        return "error"
    oracle = result["oracle"]
    assert "error" not in oracle, f"read fine, but HDF5 itself fails: {oracle['error']}"
    assert result["tags"] == oracle["tags"], "tags differ from HDF5's reading of the file"
    for i, (got, says) in enumerate(zip(result["seqs"], oracle["seqs"])):
        for key in [k for k, d in got.items() if d != says.get(k)]:
            # One legitimate difference: a flipped key in a chunk B-tree makes HDF5's lookup miss
            # an allocated chunk (it then returns fill values), while the direct chunk reader
            # (mmap, chunks enumerated once) still finds the chunk's bytes. Those are the
            # original rows, never something else.
            assert metadata and got[key] == orig.truth["seqs"][i][key], (
                f"sequence {i} key {key} differs from HDF5's reading of the file and from the "
                "original"
            )
    assert len(result["seqs"]) == len(oracle["seqs"])
    if metadata or lengths:
        return "ok-as-file-says"
    truth = orig.truth
    assert list(result["lengths"]) == list(truth["lengths"]), "keys changed"
    assert result["lengths"] == truth["lengths"], "lengths changed silently"
    if not tags:
        assert result["tags"] == truth["tags"], "tags changed silently"
    for i, (got, want) in enumerate(zip(result["seqs"], truth["seqs"])):
        for key, d in got.items():
            if (KEYS[key], i) not in seqs:
                assert d == want[key], f"sequence {i} key {key} changed silently"
    return "ok"


FLIPS = st.lists(
    st.tuples(st.integers(0, 2**31), st.integers(1, 255), st.booleans()), min_size=1, max_size=4
)


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(chunked=st.booleans(), flips=FLIPS, use_mmap=st.booleans())
# a float type's normalisation (48) or bit fields (3) damaged: HDF5 refuses or converts, so the
# mapped reader must not read the raw bytes as numpy's float32
@example(chunked=False, flips=[(22499409, 48, True)], use_mmap=True)
@example(chunked=False, flips=[(22499409, 3, True)], use_mmap=True)
# the superblock's base address (byte 24) moved by one: HDF5 reads every address one byte on
# and fails on the last chunk; the mapped reader must not read the bytes where they were
@example(chunked=True, flips=[(24, 1, False)], use_mmap=True)
def test_flipped_bytes(originals, runner, chunked, flips, use_mmap):
    """Flip 1-4 bytes; half of them aimed at metadata (outside every raw-data region)."""
    origs, folder = originals
    orig = origs[chunked]
    raw = np.zeros(orig.size, dtype=bool)
    for start, end, _, _ in orig.regions:
        raw[start:end] = True
    meta_bytes = np.flatnonzero(~raw)
    with open(orig.path, "rb") as fh:
        data = bytearray(fh.read())
    offsets = []
    for where, xor, at_meta in flips:
        o = int(meta_bytes[where % len(meta_bytes)]) if at_meta else where % orig.size
        data[o] ^= xor
        offsets.append(o)
    path = os.path.join(folder, "flipped.hdf")
    with open(path, "wb") as fh:
        fh.write(data)
    result = runner.ask(path, use_mmap)
    in_metadata = any(not raw[o] for o in offsets)
    check_case(result, orig, *touched(orig, offsets), metadata=in_metadata)


@settings(
    max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(chunked=st.booleans(), keep=st.floats(0.0, 0.999))
def test_truncated(originals, runner, chunked, keep):
    origs, folder = originals
    orig = origs[chunked]
    path = os.path.join(folder, "truncated.hdf")
    with open(orig.path, "rb") as fh, open(path, "wb") as out:
        out.write(fh.read()[: int(orig.size * keep)])
    result = runner.ask(path, True)
    assert check_case(result, orig, set(), False, False, metadata=True) == "error"


DATASETS = ["inputs", "targets/data/classes", "seqLengths", "seqTags", "targets/size", "targets"]


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    chunked=st.booleans(),
    name=st.sampled_from(DATASETS[:4]),
    action=st.sampled_from(["remove", "resize"]),
    delta=st.integers(-30, 30).filter(bool),
)
def test_removed_or_resized_dataset(originals, runner, chunked, name, action, delta):
    """A dataset removed, or with rows added/cut (as a partial or botched write leaves it)."""
    origs, folder = originals
    orig = origs[chunked]
    path = os.path.join(folder, "structural.hdf")
    shutil.copyfile(orig.path, path)
    with h5py.File(path, "r+") as f:
        old = f[name][()]
        del f[name]
        if action == "resize":
            n = max(len(old) + delta, 0)
            reps = -(-n // max(len(old), 1)) or 1
            f.create_dataset(name, data=np.concatenate([old] * reps)[:n] if n else old[:0])
    result = runner.ask(path, True)
    check_case(result, orig, set(), False, False, metadata=True)
    if (action, name) == ("remove", "targets/data/classes") and result["status"] == "ok":
        # RETURNN files may name a key in targets/size without data: the key is left out
        # (HDFSource.skipped_keys), loudly absent from every batch; the rest must be intact
        assert list(result["lengths"]) == ["data"]
        assert [s["data"] for s in result["seqs"]] == [s["data"] for s in orig.truth["seqs"]]
    else:  # lengths no longer add up, a seqLengths column lost its data, or a tag count is off
        assert result["status"] == "error", f"{action} {name}: read without error"
        assert "structural.hdf" in result["msg"], result["msg"]  # and the error names the file


@pytest.mark.parametrize("name", ["targets/size", "targets/labels", "targets"])
def test_removed_groups(originals, runner, name):
    origs, folder = originals
    orig = origs[False]
    path = os.path.join(folder, "nogroup.hdf")
    shutil.copyfile(orig.path, path)
    with h5py.File(path, "r+") as f:
        del f[name]
    result = runner.ask(path, True)
    verdict = check_case(result, orig, set(), False, False, metadata=True)
    if result["status"] == "ok":  # whatever keys remain must hold the original data
        for got, want in zip(result["seqs"], orig.truth["seqs"]):
            assert all(got[k] == want[k] for k in got)
    assert verdict in ("error", "ok-as-file-says")


def test_runner_reports_crashes_and_hangs():
    """The harness itself: a runner that dies or stalls is reported, not waited on forever."""

    def fake(code: str):
        return lambda: subprocess.Popen(
            [sys.executable, "-c", code],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )

    r = Runner(timeout_s=1)
    r._start = fake("import os, sys; print('ready', flush=True); sys.stdin.readline(); os.abort()")  # type: ignore[method-assign]
    assert r.ask("x", True)["status"] == "crash"
    r._start = fake("import time; print('ready', flush=True); time.sleep(60)")  # type: ignore[method-assign]
    assert r.ask("x", True)["status"] == "hang" and r.proc is None  # killed, not waited on
