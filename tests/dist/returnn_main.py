"""``python -m returnn CONFIG`` as the rank script of a ``launch_fork.py`` launch
(``launch_fork.py NPROC --script returnn_main CONFIG``), so that RETURNN's engine, torch and
seqloader's RETURNN hook are imported once per test session (the launch server imports this module
before it forks) instead of once per run (about 2.4 s of CPU each; ``test_returnn_engine`` makes a
dozen runs).

Each rank sees the environment the original launch gives it: with one rank, that of a plain
``python -m returnn CONFIG`` (no process group's variables); with N ranks, that of
``torchrun --standalone --nproc_per_node=N`` (one node: ``LOCAL_RANK`` is the rank).
"""

from __future__ import annotations

import os
import sys

import returnn.__main__ as returnn_entry
import returnn.torch.engine  # noqa: F401 (imported before the fork: the engine the config runs)
import torch._dynamo  # noqa: F401 (what torch's optimizer imports at its first step: a second)
from ddp_common import as_launched_by
from returnn.datasets.basic import get_dataset_class

import seqloader.returnn  # noqa: F401 (the hook a config's use_in_engine() installs)

get_dataset_class("HDFDataset")  # its first look-up imports every dataset module RETURNN has


def main(argv: list[str]) -> int:
    """``[--cwd DIR] CONFIG``: run RETURNN on ``CONFIG`` as this rank, in the working directory
    ``DIR`` (RETURNN's subprocesses leave empty ``faulthandler_dump.<pid>.log`` files there, which
    RETURNN removes at interpreter exit; a forked rank ends by ``os._exit``, without one). Its exit
    code: RETURNN exits non-zero by ``sys.exit`` on an error, which the launch reports."""
    if argv[:1] == ["--cwd"]:
        os.chdir(argv[1])
        argv = argv[2:]
    as_launched_by("python" if os.environ["WORLD_SIZE"] == "1" else "torchrun")
    sys.argv = [returnn_entry.__file__, *argv]
    returnn_entry.main(sys.argv)
    return 0
