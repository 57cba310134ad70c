"""Helpers for the reliability tests: small corpora whose frames hold their own sequence index, and
counters of the process's resources (child processes, open file descriptors, /dev/shm entries)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Sequence

import numpy as np
import psutil

import seqloader as sl


def corpus(
    n: int = 60, seed: int = 0, max_len: int = 30, tags: Sequence[str] | None = None
) -> sl.MemorySource:
    """``n`` float32 sequences ``[T, 2]`` filled with their index, so content is checkable."""
    lengths = np.random.default_rng(seed).integers(1, max_len + 1, size=n)
    data = [np.full((int(t), 2), i, dtype=np.float32) for i, t in enumerate(lengths)]
    return sl.MemorySource(
        {"data": data}, tags=list(tags) if tags else [f"utt-{i}" for i in range(n)]
    )


def summary(batches: Iterable[sl.Batch]) -> list[tuple[int, int, tuple[int, ...]]]:
    """(epoch, step, sequence indices) per batch, after checking each row's content."""
    out = []
    for b in batches:
        seqs = b.seq_indices.tolist()
        for row, i in enumerate(seqs):
            n = int(b.lengths["data"][row])
            assert bool((b["data"][row, :n] == i).all()), f"row {row} is not sequence {i}"
        out.append((b.epoch, b.step, tuple(seqs)))
    return out


# process-lifetime helpers of multiprocessing, started by whichever test first uses spawn: not ours
_HELPERS = ("multiprocessing.resource_tracker", "multiprocessing.forkserver")


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
