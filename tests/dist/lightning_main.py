"""``train_lightning.py`` on ranks started as ``torchrun --standalone --nproc_per_node=N`` starts
them, as the rank script of a ``launch_fork.py`` launch (``launch_fork.py N --script
lightning_main ARGS``): Lightning, torch and seqloader's data module are imported once per test
session (the launch server imports this module before it forks) instead of in each rank of each
run (about 4.5 s of CPU per process). Lightning sees torchrun's environment and starts no process
of its own; ``tests/test_lightning.py`` keeps runs where Lightning's own launcher starts rank 1.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import lightning.pytorch  # noqa: F401 (imported before the fork)
from ddp_common import as_launched_by

import seqloader.lightning  # noqa: F401 (imported before the fork)

SCRIPT = Path(__file__).with_name("train_lightning.py")


def main(argv: list[str]) -> int:
    """``python train_lightning.py ARGS`` as this torchrun rank: the script runs as ``__main__``
    (it picks its Lightning package from ``--package`` when it is run)."""
    as_launched_by("torchrun")
    sys.argv = [str(SCRIPT), *argv]
    runpy.run_path(str(SCRIPT), run_name="__main__")
    return 0
