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
import itertools
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
        memory = held_memory(loader) if cfg.get("memory") else None
    finally:
        loader.close()
    return {"config": cfg, "epochs": rows, "module": sl.__file__, "memory": memory}


def held_memory(loader) -> dict:
    """After the epochs, workers still up: private memory (USS, PSS; MiB) of the training process
    and of its workers, and the slots the training process has mapped (count, MiB): what more
    batches in flight cost."""
    import psutil

    from seqloader.torch import handover

    def mib(pids: list[int], field: str) -> float:
        total = 0
        for pid in pids:
            try:
                total += getattr(psutil.Process(pid).memory_full_info(), field)
            except psutil.Error:
                continue
        return total / 2**20

    workers = worker_pids()
    with handover._received_lock:
        slots = [whole.nbytes for per in handover._received.values() for _g, whole in per.values()]
    return {
        "trainer_uss": mib([os.getpid()], "uss"),
        "trainer_pss": mib([os.getpid()], "pss"),
        "workers_uss": mib(workers, "uss"),
        "workers_pss": mib(workers, "pss"),
        "slots": len(slots),
        "slots_mib": sum(slots) / 2**20,
    }


# ---- epoch 1's first batch, from a fresh process (``--first-batch``) ----

#: where each phase of the first batch begins, in the training process (T) or a worker (W):
#: (label, module, attribute, where). Wrapped only with ``--stamps`` (fork: the wrappers are
#: inherited by the workers; under spawn only the training process's are).
STAMPED = (
    ("ready", "seqloader.torch.dataloader", "Execution.ready", "T"),
    ("before_workers", "seqloader.torch.dataloader", "ReceivingDataLoader.before_workers", "T"),
    ("iter_init", "seqloader.torch.receiving", "ReceivingIter.__init__", "T"),
    ("worker_loop", "torch.utils.data._utils.worker", "_worker_loop", "W"),
    ("getitem", "seqloader.torch.dataset", "PlannedBatches.__getitem__", "W"),
    ("open", "seqloader.sources.hdf", "HDFSource._file", "W"),
    ("received", "seqloader.torch.receiving", "ReceivingIter.received", "T"),
)


def _stamp_calls(path: str) -> list[tuple[str, float, float]]:
    """Wrap each of ``STAMPED``: its first call's start and end (``time.perf_counter``, one
    clock for every process on Linux) go to the list returned (training process) or, in a worker,
    as a line to ``path``."""
    import functools
    import importlib

    here: list[tuple[str, float, float]] = []
    main_pid = os.getpid()
    for label, module, attr, _where in STAMPED:
        try:
            owner = importlib.import_module(module)
        except ImportError:
            continue
        *outer, name = attr.split(".")
        for part in outer:
            owner = getattr(owner, part, None)
        fn = getattr(owner, name, None) if owner is not None else None
        if fn is None:
            continue
        seen: set[int] = set()

        def wrapped(*args, _fn=fn, _label=label, _seen=seen, **kwargs):
            pid = os.getpid()
            if pid in _seen:
                return _fn(*args, **kwargs)
            _seen.add(pid)
            t = time.perf_counter()
            if pid != main_pid:  # the worker loop runs until shutdown: its start is the stamp
                with open(path, "a") as fh:
                    fh.write(f"{_label} {pid} {t!r} {t!r}\n")
            try:
                return _fn(*args, **kwargs)
            finally:
                if pid == main_pid:
                    here.append((_label, t, time.perf_counter()))
                elif _label != "worker_loop":
                    with open(path, "a") as fh:
                        fh.write(f"{_label}_end {pid} {t!r} {time.perf_counter()!r}\n")

        setattr(owner, name, functools.wraps(fn)(wrapped))
    return here


def _cpu_s(pids: list[int]) -> float:
    """CPU seconds of processes ``pids`` so far, all their threads (``/proc/PID/task/*/schedstat``,
    ns; 0 for one already gone)."""
    total = 0
    for pid in pids:
        try:
            tasks = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tasks:
            try:
                with open(f"/proc/{pid}/task/{tid}/schedstat") as fh:
                    total += int(fh.read().split()[0])
            except (OSError, ValueError, IndexError):
                continue
    return total / 1e9


def worker_pids() -> list[int]:
    """This process's DataLoader workers (its children but multiprocessing's resource
    tracker, which a spawn context starts)."""
    import psutil

    out = []
    for child in psutil.Process().children():
        try:
            if not any("resource_tracker" in part for part in child.cmdline()):
                out.append(child.pid)
        except psutil.Error:
            continue
    return out


def first_child(cfg: dict) -> dict:
    """Epoch 1's first batch from a fresh process: the imports, ``HDFSource``, ``SeqLoader()``,
    ``epoch(1)`` and the first ``next()``, each timed (wall; the training process's CPU; the
    workers' CPU once the batch is held); with ``stamps``, the phases inside."""
    clock, cpu = time.perf_counter, time.process_time
    marks = [("start", clock(), cpu())]
    import torch  # noqa: F401

    marks.append(("import_torch", clock(), cpu()))
    import seqloader as sl

    sl.SeqLoader, sl.HDFSource  # noqa: B018  (the lazy face: what a user's first use imports)
    marks.append(("import_seqloader", clock(), cpu()))
    stamped = None
    stamp_file = None
    if cfg.get("stamps"):
        stamp_file = f"{cfg['stamp_dir']}/stamps-{os.getpid()}"
        stamped = _stamp_calls(stamp_file)
    marks.append(("patched", clock(), cpu()))
    source = sl.HDFSource(cfg["data"])
    marks.append(("source", clock(), cpu()))
    loader = sl.SeqLoader(
        source,
        ordering=cfg["ordering"],
        max_seqs=cfg["max_seqs"],
        max_frames=cfg["max_frames"],
        num_workers=cfg["workers"],
        multiprocessing_context=cfg["context"],
        seed=1,
    )
    marks.append(("seqloader", clock(), cpu()))
    it = loader.epoch(1)
    marks.append(("epoch_call", clock(), cpu()))
    batch = next(it)
    marks.append(("first_batch", clock(), cpu()))
    worker_cpu = _cpu_s(worker_pids())
    shape = tuple(batch["data"].shape)
    first_tags = [int(x) for x in batch.seq_indices[:8]]
    try:
        for _ in range(cfg.get("more_batches", 0)):
            next(it)
    finally:
        del batch, it
        loader.close()
    t0 = marks[0][1]
    phases = {
        name: {"wall_ms": 1e3 * (t - pt), "cpu_ms": 1e3 * (c - pc)}
        for (_p, pt, pc), (name, t, c) in itertools.pairwise(marks)
    }
    out = {
        "config": cfg,
        "module": sl.__file__,
        "phases": phases,
        "ctor_to_first_ms": 1e3 * (marks[-1][1] - marks[4][1]),
        "epoch_to_first_ms": 1e3 * (marks[-1][1] - marks[6][1]),
        "ctor_to_first_cpu_ms": 1e3 * (marks[-1][2] - marks[4][2]),
        "workers_cpu_ms": 1e3 * worker_cpu,
        "start_to_first_ms": 1e3 * (marks[-1][1] - t0),
        "batch_shape": shape,
        "first_indices": first_tags,
    }
    if stamped is not None:
        rows = [(label, "T", a - t0, b - t0) for label, a, b in stamped]
        if stamp_file and os.path.exists(stamp_file):
            with open(stamp_file) as fh:
                for line in fh:
                    label, pid, a, b = line.split()
                    rows.append((label, f"W{pid}", float(a) - t0, float(b) - t0))
            os.unlink(stamp_file)
        out["stamps_ms"] = sorted(
            ((label, who, 1e3 * a, 1e3 * b) for label, who, a, b in rows), key=lambda r: r[2]
        )
        out["marks_ms"] = [(name, 1e3 * (t - t0)) for name, t, _c in marks]
    return out


def alternating(configs: list[dict], reps: int, base_src: str | None):
    """``(repetition, config, result)`` of every config in a fresh process, ``reps`` times, the
    order rotated by one config per repetition (no variant always first or last)."""
    for rep in range(reps):
        k = rep % len(configs)
        for cfg in configs[k:] + configs[:k]:
            yield rep, cfg, run_child("benchmarks.looptime", cfg, cfg.get("src", base_src), 900)


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
    p.add_argument(
        "--first-batch",
        action="store_true",
        help="only epoch 1's first batch, from a fresh process (imports, SeqLoader(), epoch(1), "
        "first next()), per start method (--contexts)",
    )
    p.add_argument("--contexts", default="fork", help="start methods for --first-batch: fork,spawn")
    p.add_argument("--stamps", action="store_true", help="--first-batch: time its phases too")
    p.add_argument(
        "--memory", action="store_true", help="private memory and slots held after the epochs"
    )
    a = p.parse_args(argv)
    if a.child:
        cfg = json.loads(a.child)
        run = first_child if cfg["variant"] == "first" else child
        print(json.dumps(run(cfg)))
        return 0
    if a.first_batch:
        return first_main(a)
    common = {
        "data": a.data,
        "ordering": a.ordering,
        "max_seqs": a.max_seqs,
        "max_frames": a.max_frames,
        "step_ms": [float(x) for x in a.step_ms.split(",")],
        "epochs_per_step": a.epochs_per_step,
        "step_kind": a.step_kind,
        "memory": a.memory,
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
    for rep, cfg, res in alternating(configs, a.reps, a.base_src):
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
    if a.memory:
        print("after the epochs, median (range): MiB private memory, slots the trainer maps")
        for label in labels:
            ms = [r["memory"] for r in runs if r["config"]["label"] == label and r.get("memory")]
            if ms:
                print(f"  {label:16s} " + "  ".join(_spread(ms, k) for k in ms[0]))
    load.append(os.getloadavg())
    print(f"load average before/after: {[[round(x, 2) for x in v] for v in load]}")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"runs": runs, "load": load}, fh, indent=1)
    return 0


def _spread(rows: list[dict], key: str) -> str:
    xs = sorted(r[key] for r in rows)
    return f"{key} {statistics.median(xs):.1f} ({xs[0]:.1f}-{xs[-1]:.1f})"


FIGURES = (  # (result key, shown as)
    ("ctor_to_first_ms", "SeqLoader()->batch"),
    ("epoch_to_first_ms", "epoch(1)->batch"),
    ("ctor_to_first_cpu_ms", "trainer CPU"),
    ("workers_cpu_ms", "workers CPU"),
)


def first_main(a: argparse.Namespace) -> int:
    """``--first-batch``: every variant in a fresh process, repetitions alternating (rotated);
    medians, ranges, and per-repetition ratios against ``--base-src``."""
    import tempfile

    stamp_dir = tempfile.mkdtemp(prefix="looptime-stamps-")
    common = {
        "variant": "first",
        "data": a.data,
        "ordering": a.ordering,
        "max_seqs": a.max_seqs,
        "max_frames": a.max_frames,
        "stamps": a.stamps,
        "stamp_dir": stamp_dir,
    }
    codes: list[tuple[str, dict]] = [("now", {})]
    if a.base_src:
        codes.append(("base", {"code": "base"}))
    for name, src in (x.split("=", 1) for x in a.also_src):
        codes.append((name, {"code": "base", "src": src}))
    configs = [
        {**common, **extra, "workers": w, "context": ctx, "label": f"{name}/{ctx}/w{w}"}
        for ctx in a.contexts.split(",")
        for w in (int(x) for x in a.workers.split(","))
        for name, extra in codes
    ]
    runs: list[dict] = []
    load = [os.getloadavg()]
    for rep, cfg, res in alternating(configs, a.reps, a.base_src):
        res["rep"] = rep
        runs.append(res)
        shown = "  ".join(f"{text} {res[key]:.0f}" for key, text in FIGURES)
        print(f"rep {rep + 1} {cfg['label']:18s} {shown} ms", flush=True)
    load.append(os.getloadavg())
    print(f"medians over {a.reps} repetitions, ms (range):")
    labels = [c["label"] for c in configs]
    for label in labels:
        rs = [r for r in runs if r["config"]["label"] == label]
        parts = []
        for key, text in FIGURES:
            xs = sorted(r[key] for r in rs)
            parts.append(f"{text} {statistics.median(xs):.0f} ({xs[0]:.0f}-{xs[-1]:.0f})")
        print(f"  {label:18s} " + "  ".join(parts))
    print("this checkout against each other code, per-repetition ratios, median (range):")
    for other_name, _extra in codes[1:]:
        for label in labels:
            name, rest = label.split("/", 1)
            if name != "now":
                continue
            other = f"{other_name}/{rest}"
            mine = {r["rep"]: r for r in runs if r["config"]["label"] == label}
            base = {r["rep"]: r for r in runs if r["config"]["label"] == other}
            parts = []
            for key, text in FIGURES:
                ratios = sorted(mine[k][key] / base[k][key] for k in mine if k in base)
                parts.append(
                    f"{text} {statistics.median(ratios):.2f}x ({ratios[0]:.2f}-{ratios[-1]:.2f})"
                )
            print(f"  {label:18s} / {other:18s} " + "  ".join(parts))
    print(f"load average before/after: {[[round(x, 2) for x in v] for v in load]}")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"runs": runs, "load": load}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
