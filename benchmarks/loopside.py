"""What the training thread still does per batch, in µs: ``python -m benchmarks.loopside --data F``.

The loop asks for a batch, sleeps a simulated accelerator step, asks again (as
``benchmarks.looptime``). Each piece of the loader's per-batch work in the training thread is
wrapped in a timer (``time.perf_counter_ns`` around the call, ~0.1-0.3 µs of its own):

- ``take``: the iterator's ``next()`` (the dispatch thread's ready queue: one get, counters) and
  ``wait_ready``: how often the batch was not there yet (the worker behind the step);
- ``watch``: the worker-failure wrapper around it (``EpochWatch.next``, ``take`` included), in
  code that still has it; now ``run_epoch`` calls ``next()`` inside ``try`` and asks the watch
  (``EpochWatch.failure``) only when it raised, so the ``try`` and its checks are in ``rest``;
- ``checks``, ``count``, ``handed``, ``before_next``: the NaN/Inf policy and the report's
  bookkeeping (``BatchChecks.check``, ``EpochMeter``); ``count_handed`` is ``count`` and
  ``handed`` in one call, where the code has it;
- ``release``: handing the batches the loop is done with to the release thread (every
  ``EVERY``-th request, where the code batches them; else every request);
- ``rest``: the loop's own wait for ``next()`` minus the pieces (the generator's resume and the
  lines of ``run_epoch`` between them);
- ``epoch_start``: a later epoch's start as the loop waits for it (``loader.epoch()`` and the
  first ``next()``), median over the measured epochs;
- ``sleep_overrun``: how much longer than asked each step's ``time.sleep`` took with the loader's
  threads running (the training thread re-takes the GIL after the sleep, which a background
  thread running Python may hold for up to ``sys.getswitchinterval()``), beside
  ``sleep_overrun_alone``, the same sleeps after ``close()``; the loop's clock counts this as
  step time, so it is measured here;
- off the training thread, for comparison: ``unpickle`` (the receiving thread builds the
  ``Batch`` from a worker's message; ``ForkingPickler.loads``).

``--cpu`` times with the training thread's own CPU clock (``time.thread_time_ns``) instead of
the wall clock: what the loader's code costs that thread, robust to the machine's load (a
descheduled thread's wait is not counted); ``--bare`` wraps no piece and gives only the loop's
whole ``next()`` (each wrapper costs a few µs of its own). A piece called for fewer than 9 in 10
batches (``release``, every other; ``fold``; the first batch's ``count_handed``) is given as its
total over the batches.

Unpickling and pinning are not in the training thread (the receiving thread, or torch's
pin-memory thread with ``pin_memory=True``). Each configuration runs in a fresh process; medians
over batches, then the median over ``--reps`` interleaved repetitions.

``--ledger``: what a stalled request (a wait of ``--stall-ms`` or more) waited for. Each batch's
hand-offs are stamped on one clock (``perf_counter_ns``: CLOCK_MONOTONIC, shared by the
processes): its index drawn from the sampler (sent to a worker), the worker's build (begin, end,
and the build thread's CPU time), received in the trainer (unpickled by the receiving thread),
put in the ready queue by the dispatch thread, taken by the loop. A stall's wait is split over
those intervals (``LEDGER_PHASES``): the index not sent yet, the worker busy with an earlier
batch, the worker not running though it had the index (scheduling), building (split into the
build's CPU time and its wall time beyond it: descheduled or blocked), the way to the trainer,
the dispatch thread, the take. Beside it, what ran in the training process meanwhile
(``BACKGROUND``): the next epoch's planning (``PlanAhead``), the report's figures
(``InBackground``), the garbage collector, and the receiving thread unpickling other batches. The
stamps cost a few µs per batch in the threads they are in, so the µs figures of a ledger run are
not compared with those of a plain one.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict

from benchmarks.fresh import parse_or_run_child, run_child
from benchmarks.side_by_side import rotated


def _timed(store: list[int], fn, clock=time.perf_counter_ns):

    def wrapper(*args, **kwargs):
        t = clock()
        try:
            return fn(*args, **kwargs)
        finally:
            store.append(clock() - t)

    return wrapper


def _spread(ns: list[int]) -> dict[str, float]:
    """Median, mean and 99th percentile of ``ns``, in µs."""
    ordered = sorted(ns)
    return {
        "median": statistics.median(ordered) / 1e3,
        "mean": statistics.mean(ordered) / 1e3,
        "p99": ordered[int(0.99 * (len(ordered) - 1))] / 1e3,
    }


LEDGER_PHASES = (
    "index not sent",
    "worker busy with an earlier batch",
    "worker not running (scheduling)",
    "building: CPU",
    "building: beyond its CPU",
    "to the receiving thread (pipe, its wake)",
    "unpickling (receiving thread)",
    "dispatch thread: no room (the loop's signal, via the release thread)",
    "dispatch thread: had room, not running yet",
    "dispatch thread: torch's next() and its wake",
    "take",
)


BACKGROUND = ("planning ahead", "report figures", "garbage collection")


def _install_background(busy: dict[str, list[tuple[int, int]]]) -> None:
    """Record when the training process's own background work runs (``BACKGROUND``)."""
    import gc

    from seqloader.plan import ahead, state

    clock = time.perf_counter_ns

    def stamped(kind: str, fn):
        def call(*args, **kwargs):
            t = clock()
            try:
                return fn(*args, **kwargs)
            finally:
                busy[kind].append((t, clock()))

        return call

    state.LoaderState._epoch_plan = stamped("planning ahead", state.LoaderState._epoch_plan)  # type: ignore[method-assign]
    init = ahead.InBackground.__init__

    def init_stamped(self, compute, after=None):
        init(self, stamped("report figures", compute), after)

    ahead.InBackground.__init__ = init_stamped  # type: ignore[method-assign]
    started: list[int] = []

    def collected(phase: str, _info: dict) -> None:
        if phase == "start":
            started.append(clock())
        elif started:
            busy["garbage collection"].append((started.pop(), clock()))

    gc.callbacks.append(collected)


def _install_ledger(directory: str) -> dict[str, dict]:
    """Stamp each batch's hand-offs (module docstring); the workers' stamps go to one file per
    worker process under ``directory`` (read by ``_worker_stamps``). Returns the trainer-side
    stamps by name, then (epoch, step)."""
    import multiprocessing.reduction as mpr

    from seqloader.torch import dataset, receiving
    from seqloader.torch._compat import HookedIter
    from seqloader.trainer import release

    clock = time.perf_counter_ns
    rooms: list[int] = []  # when the release thread gave the dispatch thread room

    def signal_stamped(fn):
        def room() -> None:
            fn()
            rooms.append(clock())

        return release.signal(room)

    receiving.signal = signal_stamped  # type: ignore[attr-defined]
    marks: dict[str, dict] = {
        "drawn": {},
        "unpickling": {},
        "received": {},
        "asked": {},  # the dispatch thread asked torch for it (it had room)
        "ready": {},
        "rooms": rooms,  # type: ignore[dict-item]
    }
    specs = dataset._specs

    def drawn_specs(run):
        for spec in specs(run):  # drawn by torch right before it is put to a worker
            marks["drawn"][(spec.epoch, spec.step)] = clock()
            yield spec

    dataset._specs = drawn_specs  # type: ignore[assignment]
    loads = mpr.ForkingPickler.loads

    def loads_marked(*args, **kwargs):
        start = clock()
        out = loads(*args, **kwargs)
        data = out[1] if isinstance(out, tuple) and len(out) == 2 else None
        if getattr(data, "epoch", None) is not None:
            marks["received"][(data.epoch, data.step)] = clock()
            marks["unpickling"][(data.epoch, data.step)] = start
        return out

    mpr.ForkingPickler.loads = loads_marked  # type: ignore[method-assign]
    next_data = HookedIter.next_data

    def next_marked(self):
        asked = clock()
        item = next_data(self)
        if getattr(item, "epoch", None) is not None:
            marks["ready"][(item.epoch, item.step)] = clock()
            marks["asked"][(item.epoch, item.step)] = asked
        return item

    HookedIter.next_data = next_marked  # type: ignore[method-assign]
    build = dataset.PlannedBatches._build_in_worker

    def build_marked(self, spec):
        t0, c0 = clock(), time.thread_time_ns()
        try:
            return build(self, spec)
        finally:
            t1, c1 = clock(), time.thread_time_ns()
            with open(os.path.join(directory, f"w{os.getpid()}"), "a") as fh:
                fh.write(f"{spec.epoch} {spec.step} {t0} {t1} {c1 - c0}\n")

    dataset.PlannedBatches._build_in_worker = build_marked  # type: ignore[method-assign]
    return marks


def _worker_stamps(directory: str) -> dict[tuple[int, int], tuple[str, int, int, int, int]]:
    """(epoch, step) -> (worker, begin, end, CPU ns, end of that worker's previous build)."""
    out = {}
    for name in sorted(os.listdir(directory)):
        with open(os.path.join(directory, name)) as fh:
            rows = [tuple(int(x) for x in line.split()) for line in fh if line.strip()]
        rows.sort(key=lambda r: r[2])
        previous_end = 0
        for epoch, step, t0, t1, cpu in rows:
            out[(epoch, step)] = (name, t0, t1, cpu, previous_end)
            previous_end = t1
    return out


def _overlap(a: int | None, b: int | None, lo: int, hi: int) -> int:
    if a is None or b is None:
        return 0
    return max(0, min(b, hi) - max(a, lo))


def _stall_ledger(asks, marks, workers, stall_ns: int, busy=None) -> list[dict]:
    """Each stalled request's wait split over ``LEDGER_PHASES`` (µs; ``unaccounted``: what no
    stamp covers, e.g. a missing one); ``unpickling_others_us``: how much of its last three phases
    (the batch received, then ready, and not yet taken by the loop) the receiving thread spent
    unpickling other batches, which holds the GIL the dispatch thread and the loop need."""
    others = [
        (start, marks["received"][key], key)
        for key, start in marks["unpickling"].items()
        if key in marks["received"]
    ]
    stalls = []
    for key, asked, got in asks:
        if got - asked < stall_ns:
            continue
        drawn = marks["drawn"].get(key)
        received, ready = marks["received"].get(key), marks["ready"].get(key)
        unpickling = marks["unpickling"].get(key)
        room = running = marks["asked"].get(key)  # it had room and ran by then
        if room is not None and received is not None:
            room = running = max(room, received)
            # the last room given before it asked: no room until then (if after received)
            given = [t for t in marks["rooms"] if received < t <= running]
            if given:
                room = max(given)
        t0 = t1 = cpu = busy_until = split = None
        worker = workers.get(key)
        if worker is not None:
            _name, t0, t1, cpu, previous_end = worker
            split = min(t1, t0 + cpu)
            if drawn is not None:
                busy_until = min(max(previous_end, drawn), t0)
        spans = {
            "index not sent": (asked, drawn),
            "worker busy with an earlier batch": (drawn, busy_until),
            "worker not running (scheduling)": (busy_until, t0),
            "building: CPU": (t0, split),
            "building: beyond its CPU": (split, t1),
            "to the receiving thread (pipe, its wake)": (t1, unpickling),
            "unpickling (receiving thread)": (unpickling, received),
            "dispatch thread: no room (the loop's signal, via the release thread)": (
                received,
                room,
            ),
            "dispatch thread: had room, not running yet": (room, running),
            "dispatch thread: torch's next() and its wake": (running, ready),
            "take": (ready, got),
        }
        row = {name: _overlap(a, b, asked, got) / 1e3 for name, (a, b) in spans.items()}
        row["unaccounted"] = (got - asked) / 1e3 - sum(row.values())
        lo = max(asked, received) if received is not None else got
        unpickling_others = sum(_overlap(a, b, lo, got) for a, b, k in others if k != key)
        stalls.append(
            {
                "epoch": key[0],
                "step": key[1],
                "wait_us": (got - asked) / 1e3,
                "phases_us": row,
                "build_us": None if t0 is None or t1 is None else (t1 - t0) / 1e3,
                "build_cpu_us": None if cpu is None else cpu / 1e3,
                "unpickling_others_us": unpickling_others / 1e3,
                "background_us": {
                    kind: sum(_overlap(a, b, asked, got) for a, b in spans) / 1e3
                    for kind, spans in (busy or {}).items()
                },
            }
        )
    return stalls


def _wrap_pieces(times: dict[str, list[int]], not_ready: list[int], tclock) -> None:
    """Wrap each piece of the training thread's per-batch work in a timer (module docstring);
    a piece the code does not have (inlined, or named otherwise) is left out."""
    import multiprocessing.reduction as mpr

    from seqloader.torch import receiving, run
    from seqloader.torch.worker_errors import EpochWatch
    from seqloader.trainer.checks import BatchChecks
    from seqloader.trainer.report import EpochMeter

    # the epoch's batches: ``_Run`` (one per epoch, prepared ahead), before that ``_Dispatch``
    owner = getattr(receiving, "_Run", None) or receiving._Dispatch
    take = owner.take

    def take_counted(self, *args):
        not_ready.append(int(self.ready.empty()))
        return take(self, *args)

    owner.take = _timed(times["take"], take_counted, tclock)  # type: ignore[attr-defined]
    if hasattr(EpochWatch, "next"):  # the code before: a wrapper call per batch around the take
        EpochWatch.next = _timed(times["watch"], EpochWatch.next, tclock)  # type: ignore[attr-defined]
    BatchChecks.check = _timed(times["checks"], BatchChecks.check, tclock)  # type: ignore[method-assign]
    # ``count_handed``: ``count`` and ``handed`` in one call (the code before calls both)
    # (``handed`` alone where the code has no ``count_handed``, which calls it; ``fold``: the
    # batches counted later, every ``FOLD_EVERY`` batches: its time is spread over all batches)
    names = ["count", "count_handed", "before_next", "fold"]
    if not hasattr(EpochMeter, "count_handed"):
        names.append("handed")
    for name in names:
        if hasattr(EpochMeter, name):
            setattr(EpochMeter, name, _timed(times[name], getattr(EpochMeter, name), tclock))
    run.release = _timed(times["release"], run.release, tclock)  # type: ignore[attr-defined]
    if hasattr(run, "releaser"):  # (the per-batch releases: the queue's put, made per epoch)
        releaser = run.releaser
        run.releaser = lambda: _timed(times["release"], releaser(), tclock)  # type: ignore[attr-defined]
    mpr.ForkingPickler.loads = _timed(times["unpickle"], mpr.ForkingPickler.loads)  # type: ignore[method-assign]


def child(cfg: dict) -> dict:
    import torch  # noqa: F401  (imported before any clock)

    import seqloader as sl

    times: dict[str, list[int]] = defaultdict(list)
    not_ready: list[int] = []
    # --cpu: the training thread's own CPU time (``time.thread_time_ns``), robust to the
    # machine's load; --bare: no piece wrapped, only the loop's whole next()
    tclock = time.thread_time_ns if cfg.get("cpu") else time.perf_counter_ns
    if not cfg.get("bare"):
        _wrap_pieces(times, not_ready, tclock)
    ledger_dir = tempfile.mkdtemp(prefix="seqloader-ledger-") if cfg.get("ledger") else None
    marks = None if ledger_dir is None else _install_ledger(ledger_dir)
    busy: dict[str, list[tuple[int, int]]] = {kind: [] for kind in BACKGROUND}
    if ledger_dir is not None:
        _install_background(busy)
    asks: list[tuple[tuple[int, int], int, int]] = []  # (epoch, step), asked, got

    loader = sl.SeqLoader(
        sl.HDFSource(cfg["data"]),
        ordering="random",
        max_seqs=cfg["max_seqs"],
        num_workers=cfg["workers"],
        seed=1,
    )
    step = cfg["step_ms"] / 1e3
    waits: list[int] = []
    overrun: list[int] = []  # how much longer than asked each step's sleep took
    step_ns = round(step * 1e9)
    starts: list[int] = []  # a later epoch's start: loader.epoch() and the first next()
    clock = time.perf_counter_ns
    try:
        for epoch in (1, 2, 3):
            measured = epoch > 1  # epoch 1 starts the workers: not the steady state
            if measured:
                for v in times.values():
                    v.clear()
                not_ready.clear()
            t = clock()
            it = loader.epoch(epoch)
            batch = next(it, None)
            if measured:
                starts.append(clock() - t)
            while batch is not None:
                s = clock()
                time.sleep(step)
                t = clock()
                if measured:  # the GIL hand-back: the sleep's overrun, the loader's threads on
                    overrun.append(t - s - step_ns)
                c = tclock()
                batch = next(it, None)
                if measured and batch is not None:
                    used = tclock() - c
                    got = clock()
                    waits.append(used if cfg.get("cpu") else got - t)
                    asks.append(((batch.epoch, batch.step), t, got))
    finally:
        loader.close()
    stalls: list[dict] = []
    if ledger_dir is not None and marks is not None:
        stall_ns = round(cfg["stall_ms"] * 1e6)
        stalls = _stall_ledger(asks, marks, _worker_stamps(ledger_dir), stall_ns, busy)
        shutil.rmtree(ledger_dir, ignore_errors=True)
    alone: list[int] = []  # the same sleeps with no loader thread left in the process
    for _ in range(len(overrun)):
        s = clock()
        time.sleep(step)
        alone.append(clock() - s - step_ns)
    n = len(waits)
    # a piece called for fewer than 9 in 10 batches (``release`` every other, ``fold``, the
    # first batch's ``count_handed``): its total spread over the batches measured
    med = {
        k: (sum(v) / max(n, 1) if len(v) < 0.9 * n else statistics.median(v)) / 1e3
        for k, v in times.items()
        if v
    }
    # without the wrapper (``run_epoch`` calls ``next()`` inside ``try``) the take is a piece itself
    first = "watch" if "watch" in med else "take"
    pieces = (first, "checks", "count", "handed", "count_handed", "before_next", "fold", "release")
    rest = statistics.median(waits) / 1e3 - sum(med.get(k, 0.0) for k in pieces)
    return {
        "config": cfg,
        "batches": n,
        "median_us": med,
        "loop_wait_median_us": statistics.median(waits) / 1e3,
        "loop_wait_mean_us": statistics.mean(waits) / 1e3,
        "epoch_start_us": [x / 1e3 for x in starts],
        "sleep_overrun_us": _spread(overrun),
        "sleep_overrun_alone_us": _spread(alone),
        "rest_us": rest,
        "not_ready_share": sum(not_ready) / max(1, len(not_ready)),
        "stalls": stalls,
        "background": {  # count, total ms, longest ms (the whole run, epoch 1 included)
            kind: [
                len(v),
                sum(b - a for a, b in v) / 1e6,
                max((b - a for a, b in v), default=0) / 1e6,
            ]
            for kind, v in busy.items()
        },
        "requests": len(waits),
        "waited_us": sum(waits) / 1e3,
        "module": sl.__file__,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.loopside", description=__doc__)
    p.add_argument("--data", help="an HDF file")
    p.add_argument("--max-seqs", type=int, default=32)
    p.add_argument("--workers", default="1,2")
    p.add_argument("--step-ms", type=float, default=10.0)
    p.add_argument("--ledger", action="store_true", help="what stalled requests waited for")
    p.add_argument("--stall-ms", type=float, default=1.0, help="a stall: a wait at least this")
    p.add_argument(
        "--cpu",
        action="store_true",
        help="the training thread's own CPU time (time.thread_time_ns) instead of the wall clock",
    )
    p.add_argument("--bare", action="store_true", help="no piece timed: only the whole next()")
    a = parse_or_run_child(p, argv, child)
    if a is None:
        return 0
    configs = []
    for w in (int(x) for x in a.workers.split(",")):
        common = {
            "data": a.data,
            "max_seqs": a.max_seqs,
            "workers": w,
            "step_ms": a.step_ms,
            "ledger": a.ledger,
            "stall_ms": a.stall_ms,
            "cpu": a.cpu,
            "bare": a.bare,
        }
        configs.append({**common, "label": f"seqloader/w{w}"})
        if a.base_src:
            configs.append({**common, "code": "base", "label": f"seqloader@base/w{w}"})
    runs: list[dict] = []
    load = [os.getloadavg()]
    for rep in range(a.reps):
        for cfg in rotated(configs, rep):
            runs.append(run_child("benchmarks.loopside", cfg, a.base_src, timeout=900))
            r = runs[-1]
            print(
                f"rep {rep + 1} {cfg['label']:18s} wait {r['loop_wait_median_us']:.1f} us  "
                + " ".join(f"{k} {v:.1f}" for k, v in r["median_us"].items())
                + f" rest {r['rest_us']:.1f}  not ready {100 * r['not_ready_share']:.0f}%"
                + f"  epoch starts {', '.join(f'{x:.0f}' for x in r['epoch_start_us'])} us",
                flush=True,
            )
    load.append(os.getloadavg())
    print(f"medians over {a.reps} repetitions, µs per batch at a {a.step_ms:g} ms step:")
    summary = {}
    for cfg in configs:
        rs = [r for r in runs if r["config"]["label"] == cfg["label"]]
        keys = rs[0]["median_us"].keys()
        row = {k: statistics.median(r["median_us"][k] for r in rs) for k in keys}
        row["rest"] = statistics.median(r["rest_us"] for r in rs)
        row["loop_wait"] = statistics.median(r["loop_wait_median_us"] for r in rs)
        row["not_ready_share"] = statistics.median(r["not_ready_share"] for r in rs)
        row["loop_wait_mean"] = statistics.median(r["loop_wait_mean_us"] for r in rs)
        row["epoch_start"] = statistics.median(x for r in rs for x in r["epoch_start_us"])
        for k in ("sleep_overrun", "sleep_overrun_alone"):
            row[k] = statistics.median(r[f"{k}_us"]["median"] for r in rs)
            row[f"{k}_mean"] = statistics.median(r[f"{k}_us"]["mean"] for r in rs)
        summary[cfg["label"]] = row
        print(f"  {cfg['label']:18s} " + " ".join(f"{k} {v:.1f}" for k, v in row.items()))
    if a.ledger:
        _print_ledger(configs, runs, a.stall_ms)
    print(f"load average before/after: {load}")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"runs": runs, "summary": summary, "load": load}, fh, indent=1)
    return 0


def _print_ledger(configs: list[dict], runs: list[dict], stall_ms: float) -> None:
    """Per configuration, all repetitions together: the stalls, their wait, and how it splits."""
    print(
        f"stalls (a wait of {stall_ms:g} ms or more), all repetitions; ms of their wait by phase:"
    )
    for cfg in configs:
        rs = [r for r in runs if r["config"]["label"] == cfg["label"]]
        stalls = [s for r in rs for s in r["stalls"]]
        waited = sum(s["wait_us"] for s in stalls) / 1e3
        total = sum(r["waited_us"] for r in rs) / 1e3
        print(
            f"  {cfg['label']:18s} {len(stalls)} stalls of {sum(r['requests'] for r in rs)} "
            f"requests, {waited:.1f} ms of {total:.1f} ms waited in all"
        )
        for name in (*LEDGER_PHASES, "unaccounted"):
            ms = sum(s["phases_us"][name] for s in stalls) / 1e3
            if abs(ms) >= 0.05:
                print(f"      {name:68s} {ms:8.1f} ms")
        ms = sum(s["unpickling_others_us"] for s in stalls) / 1e3
        print(f"      {'(of the last three: unpickling others)':68s} {ms:8.1f} ms")
        for kind in BACKGROUND:
            ms = sum(s["background_us"].get(kind, 0.0) for s in stalls) / 1e3
            hit = sum(1 for s in stalls if s["background_us"].get(kind, 0.0) > 0)
            n = sum(r["background"][kind][0] for r in rs)
            longest = max(r["background"][kind][2] for r in rs)
            print(
                f"      meanwhile: {kind:57s} {ms:8.1f} ms in {hit} stalls"
                f" (in all: {n} runs, the longest {longest:.1f} ms)"
            )


if __name__ == "__main__":
    sys.exit(main())
