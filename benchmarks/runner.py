"""The runner the planning benchmarks share (``scale``, ``mix_scale``, ``indexed_options``): each
script declares its cases and what one child measures; this runs the configurations compared in a
row in fresh processes, alternating between them every repetition, takes medians over the runs and
puts the ratios side by side in one row, from one run of the script.

A fresh process per measurement keeps one configuration's caches, imports and memory out of
another's figures; the order rotates every repetition so the load from other users of a shared
machine hits every configuration alike. Memory is measured in the child (``PrivateMemory``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from benchmarks.fresh import run_child
from benchmarks.side_by_side import append_run, rotated

MIN_REPS = 3  # medians of fewer runs are not reported as figures


def _status() -> dict[str, int]:
    """This process's peak and current resident set, anonymous and file pages, in bytes."""
    out = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            key, _, rest = line.partition(":")
            if key in ("VmHWM", "VmRSS", "RssAnon", "RssFile"):
                out[key] = int(rest.split()[0]) * 1024
    return out


def _uss() -> int:
    import psutil

    return int(psutil.Process().memory_full_info().uss)


class PrivateMemory:
    """Private memory of the measured part of a child, two ways, from where the user stands:

    - ``private_bytes``: the peak resident set less the file pages mapped (``VmHWM - RssFile``)
      less what the process held before (the peak is reset on entry): the most private memory
      planning needed;
    - ``uss_bytes``: the growth of psutil's unique set size (pages no other process shares) over
      the measured part, held at its end; it also counts pages of mapped files that only this
      process has touched, so for plans over mapped metadata it is an upper bound.

    >>> with PrivateMemory() as mem:
    ...     held = bytearray(1 << 20)
    >>> sorted(mem.fields())
    ['private_bytes', 'uss_bytes']
    """

    def __enter__(self) -> PrivateMemory:
        with open("/proc/self/clear_refs", "w") as fh:  # VmHWM := VmRSS: the setup's peak is not
            fh.write("5")  # the measured part's (a freed temporary of the setup would count)
        self._before, self._uss_before = _status(), _uss()
        return self

    def __exit__(self, *exc: object) -> None:
        after, before = _status(), self._before
        self.private = after["VmHWM"] - after["RssFile"] - (before["VmRSS"] - before["RssFile"])
        self.uss = _uss() - self._uss_before

    def fields(self) -> dict[str, int]:
        return {"private_bytes": self.private, "uss_bytes": self.uss}


@dataclass(frozen=True)
class FreshRuns:
    """How a script's children run: ``python -m module --child CONFIG``, ``reps`` times each,
    ``base_src`` for configurations with ``code="base"`` (an older checkout's ``src/``)."""

    module: str
    reps: int
    timeout: float
    base_src: str | None = None

    def side_by_side(self, configs: Mapping[str, dict]) -> dict[str, list[dict]]:
        """Every configuration once per repetition, in an order rotated every repetition ->
        name -> the children's results."""
        names = list(configs)
        runs: dict[str, list[dict]] = {name: [] for name in names}
        for rep in range(self.reps):
            for name in rotated(names, rep):
                got = run_child(self.module, configs[name], self.base_src, self.timeout)
                runs[name].append(got)
        return runs


def summary(got: list[dict], medians: Iterable[str], firsts: Iterable[str] = ()) -> dict:
    """One configuration's runs: the median of each timed or memory figure in ``medians``, the
    first run's ``firsts`` (the same in every run: steps, padding), every run's checks passed."""
    row = {k: statistics.median(r[k] for r in got) for k in medians}
    row.update({k: got[0][k] for k in firsts if k in got[0]})
    row["checks_ok"] = all(r["checks_ok"] for r in got)
    return row


def ratios(new: dict, old: dict, names: Mapping[str, str], suffix: str = "") -> dict[str, float]:
    """``{name + suffix: new[key] / old[key]}`` for ``names`` (name -> key), where both figures
    were measured (a missing or None figure gives no ratio; a zero ``old`` divides by 1)."""
    out = {}
    for name, key in names.items():
        a, b = new.get(key), old.get(key)
        if a is not None and b is not None:
            out[name + suffix] = a / (b or 1)
    return out


#: the ratios every planning benchmark reports: time and private memory, both measures
TIME_AND_MEMORY = {
    "time_ratio": "total_s",
    "memory_ratio": "private_bytes",
    "uss_ratio": "uss_bytes",
}


def parser(doc: str | None) -> argparse.ArgumentParser:
    """The command line the planning benchmarks share: ``--sizes``, ``--reps``, ``--data``,
    ``--timeout``, ``--out`` (and the hidden ``--child``)."""
    p = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--sizes", default="1e6,1e7")
    p.add_argument(
        "--reps", type=int, default=MIN_REPS, help=f"runs per configuration (>= {MIN_REPS})"
    )
    p.add_argument("--data", help="folder for the column stores (default: the temp folder)")
    p.add_argument("--timeout", type=float, default=1200)
    p.add_argument("--out")
    return p


def main(
    p: argparse.ArgumentParser,
    child: Callable[[dict], dict],
    measure: Callable[[argparse.Namespace], dict],
    results: str,
) -> None:
    """As a child, print ``child(config)``'s JSON; else measure and append the run to the
    results file (``--out``, default ``results``)."""
    args = p.parse_args()
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return
    if args.reps < MIN_REPS:
        p.error(f"--reps {args.reps}: medians need >= {MIN_REPS} runs per configuration")
    args.sizes = [int(float(s)) for s in args.sizes.split(",")]
    result = measure(args)
    out = args.out or results
    append_run(result, out)
    print(f"wrote {out}", file=sys.stderr)


def data_folder(args: argparse.Namespace, name: str = "seqloader-scale") -> str:
    """``--data``, else a folder of the temp directory (created)."""
    import tempfile

    folder = args.data or os.path.join(tempfile.gettempdir(), name)
    os.makedirs(folder, exist_ok=True)
    return folder
