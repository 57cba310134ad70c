"""Computation time as the training loop sees it: ``python -m benchmarks.looptime --data F.hdf``.

The loop asks for an epoch, then for batches, and sleeps a simulated accelerator step after each;
it times every request itself (``loader.epoch()`` and each ``next()``, including the last one that
finds the epoch over, and the assignment that drops the previous batch). Computation time % =
wall time outside those requests / wall time, per epoch: epoch 1 (start-up included) and later
epochs on persistent workers (steady state). Beside it, what ``loader.report()`` says for the same
epoch, so the two can be compared.

The step is a sleep by default (``--step-kind sleep``): on an accelerator the training thread spends
its step mostly waiting for the device with the GIL released, which a sleep models, and the
loader's background threads (receiving, dispatch, release) run during it for free. With
``--step-kind busy`` the step is a fixed amount of pure-Python work that holds the GIL (calibrated
to the step length in the child before the loader starts): the background threads then take the
GIL from the step (every ``sys.getswitchinterval()``, or when the step's own work yields it), so
the step itself gets longer. For that case the loop also reports ``useful_pct``: batches x the
calibrated step / wall time, which counts both the waits and the GIL taken from the step.

Variants, each in a fresh process, interleaved over ``--reps`` repetitions:
- ``seqloader``: ``HDFSource`` + ``SeqLoader`` with the given options and workers;
- ``seqloader@base``: the same with the code of another checkout (``--base-src DIR``);
- ``torch-floor``: torch's DataLoader with a worker that does nothing (returns its index): the
  cost of torch's machinery alone, the floor of any design that keeps it.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable

from benchmarks.fresh import run_child


def _spin(rounds: int) -> None:
    """Pure-Python work holding the GIL (a bytecode loop: the interpreter can hand the GIL over
    between rounds, as in a real Python-heavy step)."""
    x = 0
    for i in range(rounds):
        x += i * i
    del x


def busy_step(seconds: float) -> Callable[[], None]:
    """A step of ``seconds`` of pure-Python work, calibrated here (median of 7 timings)."""
    rounds = 20_000
    times = []
    for _ in range(7):
        t = time.perf_counter()
        _spin(rounds)
        times.append(time.perf_counter() - t)
    n = max(1, round(rounds * seconds / statistics.median(times)))
    return lambda: _spin(n)


def timed_epochs(
    make_epoch, epochs: list[tuple[int, float]], report=None, kind: str = "sleep"
) -> list[dict]:
    """Run ``make_epoch(e)`` for each (epoch, step seconds); the loop's own figures per epoch."""
    steps = {s: busy_step(s) for _e, s in epochs if s} if kind == "busy" else {}
    out = []
    for epoch, step in epochs:
        clock = time.perf_counter
        t0 = clock()
        it = make_epoch(epoch)
        waited = called = clock() - t0
        first = None
        waits = []
        batch = None
        while True:
            t = clock()
            batch = next(it, None)
            w = clock() - t
            waited += w
            if first is None:
                first = waited
            else:
                waits.append(w)
            if batch is None:
                break
            if step:
                if kind == "busy":
                    steps[step]()
                else:
                    time.sleep(step)
        wall = clock() - t0
        row = {
            "epoch": epoch,
            "step_ms": 1e3 * step,
            "batches": len(waits),
            "loop_pct": 100.0 * (wall - waited) / wall,
            "loop_first_s": first,
            "loop_epoch_call_s": called,  # of which ``loader.epoch()`` itself
            "loop_wait_median_ms": 1e3 * statistics.median(waits) if waits else None,
            "wall_s": wall,
            "step_kind": kind,
            "useful_pct": 100.0 * len(waits) * step / wall,
        }
        if report is not None:
            r = report()
            row["report_pct"] = r.computation_pct
            row["report_first_s"] = r.first_batch_s
        out.append(row)
        del batch
    return out


def child(cfg: dict) -> dict:
    import torch  # noqa: F401  (imports before any clock)

    epochs = [(1, cfg["step_ms"][0] / 1e3)]
    e = 2
    for step in cfg["step_ms"]:
        for _ in range(cfg["epochs_per_step"]):
            epochs.append((e, step / 1e3))
            e += 1
    if cfg["variant"] == "torch-floor":
        from torch.utils.data import DataLoader, Dataset

        class Nothing(Dataset):
            def __len__(self) -> int:
                return cfg["floor_batches"]

            def __getitem__(self, i: int) -> int:
                return i

        dl = DataLoader(
            Nothing(), batch_size=None, num_workers=cfg["workers"], persistent_workers=True
        )
        rows = timed_epochs(lambda _e: iter(dl), epochs, kind=cfg["step_kind"])
        return {"config": cfg, "epochs": rows}
    import seqloader as sl

    if cfg.get("no_dispatch"):  # ablation: torch's next() logic back in the training thread
        from seqloader.torch import receiving

        receiving.DISPATCH_THREAD = False
    loader = sl.SeqLoader(
        sl.HDFSource(cfg["data"]),
        ordering=cfg["ordering"],
        max_seqs=cfg["max_seqs"],
        max_frames=cfg["max_frames"],
        num_workers=cfg["workers"],
        seed=1,
    )
    try:
        rows = timed_epochs(loader.epoch, epochs, loader.report, kind=cfg["step_kind"])
    finally:
        loader.close()
    return {"config": cfg, "epochs": rows, "module": sl.__file__}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.looptime", description=__doc__)
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--data", help="an HDF file")
    p.add_argument("--ordering", default="random")
    p.add_argument("--max-seqs", type=int, default=32)
    p.add_argument("--max-frames", type=int, default=None)
    p.add_argument("--workers", default="1", help="worker counts, e.g. 1,2 (each its own run)")
    p.add_argument("--step-ms", default="10,20")
    p.add_argument(
        "--step-kind",
        choices=("sleep", "busy"),
        default="sleep",
        help="sleep (device-bound step, GIL free) or busy (pure Python holding the GIL)",
    )
    p.add_argument("--epochs-per-step", type=int, default=1)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--base-src", help="src/ directory of the code to compare with")
    p.add_argument(
        "--also-src",
        action="append",
        default=[],
        metavar="NAME=DIR",
        help="another checkout's src/ measured beside (label seqloader@NAME); repeatable",
    )
    p.add_argument("--floor", action="store_true", help="also run torch-floor")
    p.add_argument(
        "--ablate", action="store_true", help="also run seqloader without its dispatch thread"
    )
    p.add_argument("--json", help="write all results here")
    a = p.parse_args(argv)
    if a.child:
        print(json.dumps(child(json.loads(a.child))))
        return 0
    common = {
        "data": a.data,
        "ordering": a.ordering,
        "max_seqs": a.max_seqs,
        "max_frames": a.max_frames,
        "step_ms": [float(x) for x in a.step_ms.split(",")],
        "epochs_per_step": a.epochs_per_step,
        "step_kind": a.step_kind,
    }
    configs = []
    for w in (int(x) for x in a.workers.split(",")):
        at = {**common, "workers": w}
        configs.append({**at, "variant": "seqloader", "label": f"seqloader/w{w}"})
        if a.base_src:
            configs.append(
                {**at, "variant": "seqloader", "code": "base", "label": f"seqloader@base/w{w}"}
            )
        for name, src in (x.split("=", 1) for x in a.also_src):
            label = f"seqloader@{name}/w{w}"
            configs.append(
                {**at, "variant": "seqloader", "code": "base", "src": src, "label": label}
            )
        if a.ablate:
            configs.append(
                {**at, "variant": "seqloader", "no_dispatch": True, "label": f"nodisp/w{w}"}
            )
    runs: list[dict] = []
    load = [os.getloadavg()]
    for rep in range(a.reps):
        k = rep % len(configs)
        for cfg in configs[k:] + configs[:k]:
            res = run_child("benchmarks.looptime", cfg, cfg.get("src", a.base_src), timeout=900)
            runs.append(res)
            mine = cfg["label"].startswith("seqloader/")
            if a.floor and mine:  # as many batches as seqloader's epochs, same workers
                floor_cfg = {
                    **cfg,
                    "variant": "torch-floor",
                    "label": f"torch-floor/w{cfg['workers']}",
                    "floor_batches": res["epochs"][1]["batches"],
                }
                runs.append(run_child("benchmarks.looptime", floor_cfg, a.base_src, timeout=900))
            for r in runs[-2 if a.floor and mine else -1 :]:
                shown = "  ".join(
                    f"e{row['epoch']}@{row['step_ms']:g}ms loop {row['loop_pct']:.2f}%"
                    + (f" report {row['report_pct']:.2f}%" if "report_pct" in row else "")
                    + (f" useful {row['useful_pct']:.2f}%" if a.step_kind == "busy" else "")
                    for row in r["epochs"]
                )
                print(f"rep {rep + 1} {r['config']['label']:16s} {shown}", flush=True)
    print(f"medians over {a.reps} repetitions (loop-side computation %; report's beside it):")
    labels = sorted({r["config"]["label"] for r in runs})
    for label in labels:
        rs = [r for r in runs if r["config"]["label"] == label]
        parts = []
        for i, row in enumerate(rs[0]["epochs"]):
            loop = statistics.median(r["epochs"][i]["loop_pct"] for r in rs)
            text = f"e{row['epoch']}@{row['step_ms']:g}ms {loop:.2f}%"
            if "report_pct" in row:
                rep_pct = statistics.median(r["epochs"][i]["report_pct"] for r in rs)
                text += f" (report {rep_pct:.2f}%)"
            if a.step_kind == "busy":
                useful = statistics.median(r["epochs"][i]["useful_pct"] for r in rs)
                text += f" [useful {useful:.2f}%]"
            parts.append(text)
        print(f"  {label:16s} " + "  ".join(parts))
    print("epoch 1's first batch (epoch() + first next()), ms: median (range); epoch() alone:")
    for label in labels:
        rs = [r for r in runs if r["config"]["label"] == label and "report_pct" in r["epochs"][0]]
        if rs:
            first = sorted(1e3 * r["epochs"][0]["loop_first_s"] for r in rs)
            called = [1e3 * r["epochs"][0].get("loop_epoch_call_s", 0.0) for r in rs]
            print(
                f"  {label:16s} {statistics.median(first):.0f} ({first[0]:.0f}-{first[-1]:.0f})"
                f"  epoch() {statistics.median(called):.1f}"
            )
    load.append(os.getloadavg())
    print(f"load average before/after: {[[round(x, 2) for x in v] for v in load]}")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"runs": runs, "load": load}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
