"""Launches of ``tests/dist/launch_fork.py`` (ranks forked after one torch import) through one
serving process per test session (``launch_fork.py --serve``): each launch is forked from it
instead of starting an interpreter that imports torch, seqloader and the rank scripts again (about
2 s of CPU each; the distributed tests make dozens). The launch itself is unchanged: the same
``launch`` forks the ranks, which meet over gloo; a hang is killed after a bound."""

from __future__ import annotations

import atexit
import json
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "dist"))
from ddp_common import kill_tree

LAUNCH_FORK = Path(__file__).parent / "dist" / "launch_fork.py"


class ForkServer:
    """``launch_fork.py --serve`` and a thread that queues its answers (so a wait can be bounded)."""

    def __init__(self) -> None:
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, str(LAUNCH_FORK), "--serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            text=True,
        )
        self.answers: queue.Queue[dict | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True, name="fork-server-answers").start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.answers.put(json.loads(line))
        self.answers.put(None)  # the server is gone

    def answer(self, key: str, timeout_s: float) -> int | None:
        """The next answer's ``key``; None if none came within ``timeout_s``."""
        try:
            got = self.answers.get(timeout=timeout_s)
        except queue.Empty:
            return None
        if got is None:
            pytest.fail(f"launch_fork.py --serve exited with {self.proc.wait()}")
        return int(got[key])

    def run(
        self, args: list[str], console: Path, timeout_s: float, env: dict[str, str]
    ) -> int | None:
        """Exit code of the launch ``args`` (``env`` set in it), or None if it had not ended after
        ``timeout_s`` (its process tree is killed then)."""
        assert self.proc.stdin is not None
        request = {
            "args": args,
            "console": str(console),
            "environ": dict(os.environ),
            "cwd": os.getcwd(),
            "env": env,
        }
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        pid = self.answer("pid", timeout_s)
        assert pid is not None, "launch_fork.py --serve did not fork"
        rc = self.answer("rc", timeout_s)
        if rc is None:
            kill_tree(pid)
            self.answer("rc", timeout_s)  # the server has reaped it
        return rc

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()  # the server ends when its requests do
        self.proc.wait()


_server: ForkServer | None = None


def run_forked(
    args: list[str], console: Path, timeout_s: float, env: dict[str, str] | None = None
) -> int:
    """``python launch_fork.py ARGS`` (output to ``console``, ``env`` added to its environment) as
    a launch forked from the session's server: its exit code. The launch runs in this process's
    environment and working directory as they are now (as a subprocess started here would), not in
    the server's from when it started: a fixture's variables (``SEQLOADER_RETURNN_DATA``) reach it
    whichever test started the server; a launch not ended after
    ``timeout_s`` is killed and fails the test."""
    global _server
    if _server is None or _server.proc.poll() is not None:
        _server = ForkServer()
        atexit.register(_server.close)
    try:
        rc = _server.run(args, console, timeout_s, env or {})
    except BaseException:  # interrupted mid-launch: its answers must not reach the next launch
        kill_tree(_server.proc.pid)
        _server.proc.wait()
        _server = None
        raise
    if rc is None:
        text = console.read_text(errors="replace")[-4000:]
        pytest.fail(f"{console.name}: no exit after {timeout_s}s (a hang?)\n{text}")
    return rc
