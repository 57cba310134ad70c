"""The release thread's calls (``later``, ``signal``): in order after what was released before,
a failing call logged without ending the thread, and a forked child with a thread of its own."""

from __future__ import annotations

import logging
import multiprocessing as mp
import os
import threading
import weakref

import pytest

from seqloader.trainer import release as rel


class _Held:
    """Something whose freeing can be observed (a weak reference to it dies)."""


def test_later_runs_after_what_was_released_before() -> None:
    held = _Held()
    gone = weakref.ref(held)
    seen: list[bool] = []
    done = threading.Event()
    rel.release(held)
    del held

    def check() -> None:
        seen.append(gone() is None)  # freed before this call ran
        done.set()

    rel.later(check)
    assert done.wait(30)
    assert seen == [True]


def test_signal_calls_every_time_in_the_release_thread() -> None:
    names: list[str] = []
    count = threading.Semaphore(0)

    def note() -> None:
        names.append(threading.current_thread().name)
        count.release()

    send = rel.signal(note)
    for _ in range(5):
        send()
    for _ in range(5):
        assert count.acquire(timeout=30)
    assert names == ["seqloader-release"] * 5


def test_a_failing_call_is_logged_and_the_thread_goes_on(caplog: pytest.LogCaptureFixture) -> None:
    def boom() -> None:
        raise ValueError("boom")

    with caplog.at_level(logging.ERROR, logger="seqloader"):
        rel.later(boom)
        done = threading.Event()
        rel.later(done.set)
        assert done.wait(30)
    assert any("release thread failed" in r.getMessage() for r in caplog.records)


def _in_child(out) -> None:
    done = threading.Event()
    rel.later(done.set)
    out.put(done.wait(30))


def test_a_forked_child_starts_its_own_thread() -> None:
    done = threading.Event()
    rel.later(done.set)  # the parent's thread runs
    assert done.wait(30)
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    p = ctx.Process(target=_in_child, args=(out,))
    p.start()
    assert out.get(timeout=60) is True
    p.join(60)
    assert p.exitcode == 0


def _signal_in_child(send, calls, out) -> None:
    send()  # made by the parent before the fork
    rel.flush()  # this process's release thread has run what was put before
    out.put(list(calls))


def test_a_signal_made_before_a_fork_calls_in_the_childs_own_thread() -> None:
    """The signal's put is bound to the parent's queue when made; a forked child's copy of that
    queue has no thread: its call must run in the child's own release thread, not be lost
    there (the parent's thread is another process's and never sees it)."""
    calls: list[int] = []
    send = rel.signal(lambda: calls.append(os.getpid()))
    send()
    assert rel.flush()
    assert calls == [os.getpid()]  # the parent's thread ran the parent's call
    ctx = mp.get_context("fork")
    out = ctx.Queue()
    p = ctx.Process(target=_signal_in_child, args=(send, calls, out))
    p.start()
    in_child = out.get(timeout=60)
    p.join(60)
    assert p.exitcode == 0
    assert in_child == [os.getpid(), p.pid]  # the child's copy of the list, called in the child
    assert rel.flush()
    assert calls == [os.getpid()]  # nothing reached the parent
