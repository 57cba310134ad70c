"""Run ``train_ddp.main`` (or another script's ``main(argv)``) on N local ranks forked from this
process.

Like torchrun, but the ranks are forked after one import of torch: the tests need many short
launches on two shared cores. As torchrun's agent does, when one rank dies (e.g. SIGKILL) the others
are killed and the launcher exits non-zero. Deaths are seen with ``os.wait`` (not pipe sentinels as
in ``torch.multiprocessing``, which a rank's forked DataLoader workers keep open for seconds).

    python tests/dist/launch_fork.py NPROC [train_ddp.py arguments...]
    python tests/dist/launch_fork.py NPROC --script train_remote [train_remote.py arguments...]
"""

from __future__ import annotations

import os
import signal
import socket
import importlib
import sys
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


def main() -> int:
    world, argv = int(sys.argv[1]), sys.argv[2:]
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


if __name__ == "__main__":
    sys.exit(main())
