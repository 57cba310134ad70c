"""Run ``train_ddp.main`` (or another script's ``main(argv)``) on N local ranks forked from this
process.

Like torchrun, but the ranks are forked after one import of torch: the tests need many short
launches on two shared cores. As torchrun's agent does, when one rank dies (e.g. SIGKILL) the others
are killed and the launcher exits non-zero. Deaths are seen with ``os.wait`` (not pipe sentinels as
in ``torch.multiprocessing``, which a rank's forked DataLoader workers keep open for seconds).

    python tests/dist/launch_fork.py NPROC [train_ddp.py arguments...]
    python tests/dist/launch_fork.py NPROC --script train_remote [train_remote.py arguments...]
    python tests/dist/launch_fork.py NPROC --script returnn_main CONFIG   # python -m returnn
    python tests/dist/launch_fork.py --serve

``--serve`` runs launches on request, each forked from the serving process, so torch and the
scripts are imported once for all of a test session's launches (``serve``).
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import signal
import socket
import sys
import traceback
from collections.abc import Callable

import torch


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_rank(main: Callable[[list[str]], int], rank: int, world: int, argv: list[str]) -> int:
    # each rank looks like the only rank of its own node, as on a multi-node job: the loader must
    # use the global rank (from the process group), never LOCAL_RANK
    os.environ.update(RANK=str(rank), WORLD_SIZE=str(world), GROUP_RANK=str(rank))
    os.environ.update(LOCAL_RANK="0", LOCAL_WORLD_SIZE="1")
    try:
        return main(argv)
    except BaseException as e:
        print(f"rank {rank}: {type(e).__name__}: {e}", file=sys.stderr)
        return 1


def launch(args: list[str]) -> int:
    """``NPROC [--script NAME] ARGS...``: run NAME's ``main(ARGS)`` on NPROC forked ranks."""
    world, argv = int(args[0]), args[1:]
    script = "train_ddp"
    if argv[:1] == ["--script"]:
        script, argv = argv[1], argv[2:]
    entry = importlib.import_module(script).main  # imported once, before the ranks fork
    torch.set_num_threads(1)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    sys.stdout.flush()
    ranks: dict[int, int] = {}  # pid -> rank
    for rank in range(world):
        pid = os.fork()
        if pid == 0:
            rc = run_rank(entry, rank, world, argv)
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(rc)  # no interpreter teardown in the forked copy
        ranks[pid] = rank
    failed = None
    while ranks:
        pid, status = os.wait()
        if pid not in ranks:
            continue
        rank = ranks.pop(pid)
        code = os.waitstatus_to_exitcode(status)
        if code != 0 and failed is None:
            failed = f"rank {rank} exited with {code}" + (
                f" ({signal.Signals(-code).name})" if code < 0 else ""
            )
            for other in ranks:  # as torchrun does: one rank down stops the job
                os.kill(other, signal.SIGKILL)
    if failed:
        print(f"launch_fork: {failed}", file=sys.stderr)
        return 1
    return 0


def serve() -> int:
    """Launches on request, until stdin closes. A request is one JSON line on stdin, ``{"args":
    [NPROC, ...], "console": PATH, "environ": {NAME: VALUE}, "cwd": PATH, "env": {NAME: VALUE}}``
    (all but ``args`` and ``console`` optional: ``environ`` and ``cwd`` are the requester's, which
    the launch takes instead of this server's, as a subprocess started by the requester would;
    ``env`` is set on top); the answers are JSON lines on stdout: ``{"pid": PID}`` of
    the launch at once (to kill its tree on a hang), ``{"rc": CODE}`` when it has ended. Each
    launch is forked from this process, its output to the console file: the same ``launch`` as
    ``python launch_fork.py NPROC ...``, without a new interpreter importing torch. A rank script
    named by ``--script`` is imported here before the fork, so only its first launch pays for
    its imports (RETURNN's, for ``returnn_main``)."""
    for script in ("train_ddp", "train_remote"):
        importlib.import_module(script)
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # what an import here prints must not reach the protocol's pipe
    for line in sys.stdin:
        request = json.loads(line)
        args = request["args"]
        if args[1:2] == ["--script"]:  # another rank script: imported here once, for every launch
            with contextlib.suppress(Exception):  # if it fails, the launch's own import says why
                importlib.import_module(args[2])
        pid = os.fork()
        if pid == 0:
            os.close(replies.fileno())  # the launch answers nothing on the protocol's pipe
            console = os.open(request["console"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            os.dup2(console, 1)
            os.dup2(console, 2)
            if "environ" in request:  # the requester's environment now, not the server's at start
                os.environ.clear()
                os.environ.update(request["environ"])
            os.environ.update(request.get("env", {}))
            if "cwd" in request:
                os.chdir(request["cwd"])
            try:
                code = launch(args)
            except BaseException:
                traceback.print_exc()
                code = 1
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        replies.write(json.dumps({"pid": pid}) + "\n")
        _, status = os.waitpid(pid, 0)
        replies.write(json.dumps({"rc": os.waitstatus_to_exitcode(status)}) + "\n")
    return 0


def main() -> int:
    return serve() if sys.argv[1:] == ["--serve"] else launch(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
