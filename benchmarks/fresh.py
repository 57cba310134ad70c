"""Run a benchmark module's ``--child`` in a fresh process and read the JSON line it prints last.

A fresh process per measured configuration keeps one configuration's caches, imports and memory out
of another's figures. ``config["code"] == "base"`` runs the code under ``base_src`` (an old
checkout's ``src/``) instead of this checkout's, for before/after ratios measured in one run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def run_child(module: str, config: dict, base_src: str | None, timeout: float) -> dict:
    """``python -m <module> --child <config>``'s result; raises naming the config on failure."""
    env = dict(os.environ)
    code = base_src if config.get("code") == "base" else os.path.join(REPO, "src")
    if code is None:
        raise ValueError(f"{config}: code='base' needs --base-src")
    env["PYTHONPATH"] = os.pathsep.join([code, REPO, env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, "-m", module, "--child", json.dumps(config)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode:
        raise RuntimeError(f"{config.get('label', config)}: {proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def parse_or_run_child(
    p: argparse.ArgumentParser, argv: list[str] | None, child: Callable[[dict], dict]
) -> argparse.Namespace | None:
    """Add the options every fresh-process benchmark has (``--reps``, ``--base-src``, ``--json``
    and the hidden ``--child``) and parse; as a child, run ``child(config)``, print its JSON and
    return None."""
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--base-src", help="src/ directory of another checkout, measured beside")
    p.add_argument("--json", help="write all results here")
    a = p.parse_args(argv)
    if a.child:
        print(json.dumps(child(json.loads(a.child))))
        return None
    return a
