"""Shared test helpers, importable as ``from conftest import ...`` (pytest puts ``tests/`` on the
path): index corpora, whose frames hold their own sequence index so any batch's content can be
checked; what a rank receives, as comparable records; the orderings every property test draws
from; counters of the process's resources (child processes, file descriptors, shared memory)."""

from __future__ import annotations

import contextlib
import gc
import os
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from typing import NamedTuple

import numpy as np
import psutil
import pytest
from hypothesis import settings

import seqloader as sl

# `make test` draws the same examples on every run, so a red run is the code's and reproducible,
# never the luck of the draw; `make explore` (HYPOTHESIS_PROFILE=explore) draws new ones on every
# run to find what the fixed ones miss (docs/reliability.md). Neither has hypothesis' per-example
# deadline: it is a wall-clock limit (200 ms), which a busy machine exceeds by its load alone, and
# tests never assert on timing.
settings.register_profile("repeatable", derandomize=True, deadline=None)
settings.register_profile("explore", derandomize=False, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))


#: the run's cache folder ($XDG_CACHE_HOME), set before the test modules are imported
RUN_CACHE = ""
#: the value it had before (restored when the run ends: a pytest.main() inside another program)
_USER_CACHE: str | None = None


def pytest_configure(config: pytest.Config) -> None:
    """The caches every test writes (seqloader's node stores under ``$XDG_CACHE_HOME/seqloader``,
    and those of libraries that read it as they are imported, as Hugging Face datasets does) go
    to a folder of this run, never the user's ``~/.cache``; processes the tests start (torchrun,
    spawned workers, CLI runs) inherit it. A test of the default location sets it itself."""
    global RUN_CACHE, _USER_CACHE
    _USER_CACHE = os.environ.get("XDG_CACHE_HOME")
    RUN_CACHE = tempfile.mkdtemp(prefix="seqloader-tests-cache-")
    os.environ["XDG_CACHE_HOME"] = RUN_CACHE


def pytest_unconfigure(config: pytest.Config) -> None:
    shutil.rmtree(RUN_CACHE, ignore_errors=True)
    if _USER_CACHE is None:
        os.environ.pop("XDG_CACHE_HOME", None)
    else:
        os.environ["XDG_CACHE_HOME"] = _USER_CACHE


def pytest_collection_finish(session: pytest.Session) -> None:
    """Move what collection imported (torch, lightning, h5py, the test modules: some 450,000
    objects that live to the end) out of the garbage collector's reach, so each full collection
    walks only what the tests allocate instead of re-walking those (``gc.freeze``); a loader a
    test drops is still collected, as before."""
    gc.collect()
    gc.freeze()


#: Every ordering family (with and without RETURNN's ``:K``) for the property tests of planning
#: (test_plan_properties), resume (test_resume_plan, test_resume) and the epoch audit
#: (test_audit). A new ordering is one line here; bins are small enough that corpora of a few
#: dozen sequences get several.
ORDERINGS = [
    "default",
    "reverse",
    "random",
    "random:2",
    "sorted",
    "sorted_reverse",
    "laplace:3",
    "laplace:.4",
    "laplace:.25",
    "laplace:.25:3",
    "sort_bin_shuffle:.5",
    "sort_bin_shuffle:.20",
    "sort_bin_shuffle_x2:.20",
    "buckets:1",
    "buckets:3",
    "buckets:30",
    "buckets:6:2",
]
#: The orderings a ``mix`` takes (``buckets:N`` is refused with a mix, with the reason).
MIX_ORDERINGS = [o for o in ORDERINGS if not o.startswith("buckets")]


# ---- corpora ----


def index_corpus(
    n: int = 60,
    seed: int = 0,
    max_len: int = 30,
    dim: int = 2,
    tags: Sequence[str] | None = None,
) -> sl.MemorySource:
    """``n`` float32 sequences ``[T, dim]`` filled with their own index (T uniform in
    ``1..max_len``, drawn from ``seed``), tagged ``utt-<i>`` unless ``tags`` are given."""
    lengths = np.random.default_rng(seed).integers(1, max_len + 1, size=n)
    data = [np.full((int(t), dim), i, dtype=np.float32) for i, t in enumerate(lengths)]
    return sl.MemorySource(
        {"data": data}, tags=list(tags) if tags else [f"utt-{i}" for i in range(n)]
    )


@pytest.fixture(scope="module")
def index_source() -> sl.MemorySource:
    """An index corpus of 40 sequences for a module's tests (read-only: sources are shared)."""
    return index_corpus(40)


# ---- what a rank receives ----


class BatchRecord(NamedTuple):
    """Everything a rank receives in one batch, as comparable values (tensor bytes included)."""

    epoch: int
    step: int
    seqs: tuple[int, ...]
    tags: tuple[str, ...]
    mask: tuple[bool, ...]
    lengths: tuple[tuple[str, tuple[int, ...]], ...]
    tensors: tuple[tuple[str, str, tuple[int, ...], bytes], ...]  # key, dtype, shape, bytes

    def tensor_bytes(self, key: str) -> bytes:
        return next(raw for k, _, _, raw in self.tensors if k == key)


def batch_record(batch: sl.Batch) -> BatchRecord:
    tensors = tuple(
        (key, str(batch[key].dtype), tuple(batch[key].shape), batch[key].numpy().tobytes())
        for key in sorted(batch)
    )
    return BatchRecord(
        batch.epoch,
        batch.step,
        tuple(batch.seq_indices.tolist()),
        tuple(batch.seq_tags),
        tuple(batch.mask.tolist()),
        tuple((k, tuple(v.tolist())) for k, v in sorted(batch.lengths.items())),
        tensors,
    )


def check_rows(batch: sl.Batch, key: str = "data") -> None:
    """Each row of an index corpus batch holds the sequence the batch names for it."""
    for row, i in enumerate(batch.seq_indices.tolist()):
        n = int(batch.lengths[key][row])
        assert bool((batch[key][row, :n] == i).all()), f"row {row} is not sequence {i}"


def summary(batches: Iterable[sl.Batch]) -> list[tuple[int, int, tuple[int, ...]]]:
    """(epoch, step, sequence indices) per batch of an index corpus, after ``check_rows``."""
    out = []
    for b in batches:
        check_rows(b)
        out.append((b.epoch, b.step, tuple(b.seq_indices.tolist())))
    return out


# ---- processes and their resources ----


def free_port() -> int:
    """A TCP port on localhost that nothing listens on (for a process group's rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# process-lifetime helpers of multiprocessing, started by whichever test first uses spawn, and the
# session's server of forked launches (fork_launches.py), started by the first distributed test,
# and moto's S3 server (remote_s3.py), started by the first remote test: not ours
_HELPERS = (
    "multiprocessing.resource_tracker",
    "multiprocessing.forkserver",
    "launch_fork.py --serve",
    "-m moto.server",
)


def children() -> list[psutil.Process]:
    """Live (not zombie) child processes of this process, without multiprocessing's helpers."""
    out = []
    for c in psutil.Process().children(recursive=True):
        try:
            if c.status() == psutil.STATUS_ZOMBIE:
                continue
            if any(h in " ".join(c.cmdline()) for h in _HELPERS):
                continue
            out.append(c)
        except psutil.NoSuchProcess:
            pass
    return out


def open_fds() -> set[str]:
    """Open file descriptors with what they point to (shared-memory segments of torch's
    file_descriptor strategy show up here as deleted /dev/shm or memfd files)."""
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the fd of the listdir itself is closed by now
            out.add(f"{fd}->{os.readlink(f'/proc/self/fd/{fd}')}")
    return out


def shm_entries() -> set[str]:
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


def _foreign(entry: str, ours: set[int]) -> bool:
    """Whether a /dev/shm entry is another program's, seen in the instant it exists. /dev/shm is
    shared by every process on the machine: torch names its segments ``torch_<creator pid>_...``
    and unlinks them at once (file-descriptor sharing), multiprocessing unlinks its semaphores
    (``sem.mp-*``) right after creating them. A live creator outside this process tree is
    another program's; a name whose creator has exited, or any other name, stays a leak."""
    if entry.startswith("sem.mp-"):
        return True
    if entry.startswith("torch_"):
        pid = entry.split("_")[1]
        return pid.isdigit() and int(pid) not in ours and psutil.pid_exists(int(pid))
    return False


def new_shm_entries(before: set[str]) -> set[str]:
    """/dev/shm entries new since ``before`` that are not another program's (``_foreign``):
    decided by who created them, not by waiting to see whether they go away."""
    me = psutil.Process()
    ours = {me.pid, *(p.pid for p in me.children(recursive=True))}
    return {e for e in shm_entries() - before if not _foreign(e, ours)}


def shm_mappings() -> list[str]:
    """Shared-memory mappings of this process (torch's segments and multiprocessing's semaphores
    are unlinked from /dev/shm at once, so they only show up here and as fds)."""
    with open("/proc/self/maps") as f:
        return sorted(line.split(None, 5)[-1].strip() for line in f if "/dev/shm/" in line)


def resources() -> dict[str, object]:
    """Everything a closed loader must give back: child processes, fds, shm names and mappings."""
    return {
        "children": sorted(p.pid for p in children()),
        "fds": open_fds(),
        "shm": shm_entries(),
        "shm_mappings": shm_mappings(),
    }


def queue_feeders() -> set[threading.Thread]:
    """multiprocessing's queue feeder threads alive now."""
    return {t for t in threading.enumerate() if t.name == "QueueFeederThread"}


def queue_feeders_done(before: set[threading.Thread]) -> None:
    """Wait until the queue feeder threads started since ``before`` have exited: a closed queue's
    feeder closes its pipe's write end when it finishes, after ``close()`` returned. An event to
    wait on, so a later look at the open fds is exact."""
    for thread in queue_feeders() - before:
        thread.join()


def describe(processes: list[psutil.Process]) -> str:
    """Who the given processes are (pid, parent, status, age, command line): the message of a
    failed look at ``children()``, so a process left behind is named, not only counted."""
    now = time.time()
    lines = []
    for p in processes:
        try:
            with p.oneshot():
                lines.append(
                    f"pid {p.pid} (parent {p.ppid()}, {p.status()}, "
                    f"{now - p.create_time():.1f} s old): {' '.join(p.cmdline())[:200]}"
                )
        except psutil.NoSuchProcess:
            lines.append(f"pid {p.pid}: exited meanwhile")
    return "; ".join(lines) or "no processes"


def children_since(before: set[int]) -> list[psutil.Process]:
    """``children()`` not in ``before`` (pids from ``settled_children()`` at a test's start)."""
    return [p for p in children() if p.pid not in before]


def settled_children() -> set[int]:
    """The pids of ``children()`` after a garbage collection: loaders that earlier code dropped
    without ``close()`` (a docs snippet, a CLI run in-process) stop their workers when collected,
    so a test's count of its own workers does not depend on when the collector last ran."""
    gc.collect()
    return {p.pid for p in children()}
