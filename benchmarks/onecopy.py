"""From file to padded batch at 0 workers, side by side: ``python -m benchmarks.onecopy``.

Every configuration reads the same planned batches (``SeqLoader.plan``: random order, ``max_seqs``
sequences) of the reference corpus and pads both keys; each runs in a fresh process, the list is
repeated ``--reps`` times interleaved, rotated and reversed every other repetition (a rotation
alone runs each configuration right after the same one every time), and ratios are taken within a
repetition.

- ``memmap``: a plain numpy loop over a memory map of the contiguous file — ``np.zeros`` per key,
  one slice assignment per sequence (what a user can write in 15 lines);
- ``memcpy``: one ``np.copyto`` per batch of exactly the bytes its sequences hold, between two
  preallocated buffers (no padding, no file): the copy a perfect reader cannot avoid;
- ``seqloader``: ``HDFSource`` + ``SeqLoader(num_workers=0)`` on the contiguous and the chunked
  (RETURNN-written) file; ``seqloader@REV`` the same with the code of another checkout
  (``--base-src DIR``, e.g. a worktree of the previous main), imported through ``PYTHONPATH``;
  ``--no-screen`` adds seqloader with the NaN/Inf screen off (the memmap loop does not screen).

The NaN/Inf screen's verdicts are kept per node (``sources/screen_verdicts.py``), so where the
metadata and verdicts live decides what is measured: every seqloader run gets its own fresh index
folder (a file this node never screened: the first epoch screens every sequence), except
``seqloader/contiguous/verdict``, whose folder holds the verdict of one untimed process that read
a whole epoch before the repetitions (a later process on a file screened before: no screen);
with ``--base-src`` the code before reads the same kept verdict (``.../verdict@base``);
and ``seqloader/contiguous/prepared``, whose child first runs ``sl.prepare`` over the file with
its fresh folder, in a process of its own as ``seqloader prepare`` runs before a job (screening
every value and keeping the verdict; its CPU and wall time and the screen's part are recorded
beside the epoch), then measures the same first epoch.

``--alternate N``: beside the fresh-process runs, a steadier figure for warm epochs: in one
process (and, with ``--base-src``, one more with the code before), after one whole epoch of each,
N pairs of whole epochs, seqloader's epoch ``e`` and the memmap loop over the same planned
batches, in alternating order; CPU per batch of each (``process_time``), the ratio within each
pair. Both sides then share the process's allocator, page tables and the machine's load of the
moment, which on a loaded machine scatter fresh-process ratios by +-30%.

Each seqloader child records whether it copied rows with the compiled row kernel
(``sources/row_kernel.py``; a code before it records None), so a comparison with ``--base-src``
says which side had it.

Before timing, one untimed process checks that seqloader's tensors equal the memmap loop's, batch
for batch (both keys' padded data and lengths). Each loop holds the previous batch while building the next, as a training loop does.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

import numpy as np

from benchmarks.fresh import run_child


def _plan(path: str, max_seqs: int, seed: int, epoch: int, index: str) -> list[np.ndarray]:
    import seqloader as sl

    src = sl.HDFSource(path, index_dir=index)
    loader = sl.SeqLoader(src, ordering="random", max_seqs=max_seqs, seed=seed)
    return loader.plan(epoch)


def _starts(lengths: np.ndarray) -> np.ndarray:
    out = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=out[1:])
    return out


def memmap_loop(path: str, batches: list[np.ndarray]):
    """The plain numpy loop: memory-map the contiguous file, pad each planned batch."""
    import h5py
    import torch

    with h5py.File(path, "r") as f:
        lens = f["seqLengths"][...].astype(np.int64)
        keys = [f["inputs"], f["targets/data/classes"]]
        layout = [(d.id.get_offset(), d.shape, d.dtype) for d in keys]
    file_map = np.memmap(path, dtype=np.uint8, mode="r")
    arrays = [np.ndarray(s, t, buffer=file_map, offset=o) for o, s, t in layout]
    starts = [_starts(lens[:, 0]), _starts(lens[:, 1])]
    for seqs in batches:
        out = []
        for arr, st in zip(arrays, starts):
            a, b = st[seqs], st[seqs + 1]
            padded = np.zeros((len(seqs), int((b - a).max()), *arr.shape[1:]), arr.dtype)
            for j in range(len(seqs)):
                padded[j, : b[j] - a[j]] = arr[a[j] : b[j]]
            out += [torch.from_numpy(padded), torch.from_numpy(b - a)]
        yield out


def memcpy_loop(path: str, batches: list[np.ndarray], ring: int = 256 << 20):
    """Copy each batch's bytes (its sequences' data, unpadded) between two preallocated buffers,
    moving through a ``ring`` larger than the caches, as reads through a file do."""
    import h5py

    with h5py.File(path, "r") as f:
        lens = f["seqLengths"][...].astype(np.int64)
        per_seq = lens[:, 0] * f["inputs"].shape[1] * 4 + lens[:, 1] * 4
    sizes = [int(per_seq[s].sum()) for s in batches]
    # allocated and written here, before the caller's clock starts (a generator body would run
    # at the first next(), inside the timed loop, and time 512 MB of first-touch page faults)
    src = np.ones(max(ring, max(sizes)), dtype=np.uint8)
    dst = np.full_like(src, 2)

    def copies():
        pos = 0
        for n in sizes:
            if pos + n > len(src):
                pos = 0
            np.copyto(dst[pos : pos + n], src[pos : pos + n])
            pos += n
            yield n

    return copies()


def verify(path: str, max_seqs: int, seed: int, n_batches: int, index: str) -> int:
    """Untimed: seqloader's batches equal the memmap loop's, tensor for tensor (both keys' padded
    data and lengths), over the batches that are measured. Returns the batches compared."""
    import seqloader

    epoch = 2
    batches = _plan(path, max_seqs, seed, epoch, index)[:n_batches]
    loader = seqloader.SeqLoader(
        seqloader.HDFSource(path, index_dir=index), ordering="random", max_seqs=max_seqs, seed=seed
    )
    keys = ["data", "classes"]
    got = 0
    for ref, batch in zip(memmap_loop(path, batches), loader.epoch(epoch)):
        mine = []
        for key in keys:
            mine += [batch[key], batch.lengths[key]]
        if len(mine) != len(ref) or not all(a.equal(b) for a, b in zip(mine, ref)):
            raise AssertionError(f"batch {got} differs between seqloader and the memmap loop")
        got += 1
        if got == len(batches):
            break
    return got


def keep_verdict(path: str, max_seqs: int, seed: int, index: str) -> list[str]:
    """Untimed: one whole epoch read by seqloader with its metadata in ``index``, so the NaN/Inf
    screen's verdict of the file is kept there. Returns the verdict stores found."""
    import seqloader

    loader = seqloader.SeqLoader(
        seqloader.HDFSource(path, index_dir=index), ordering="random", max_seqs=max_seqs, seed=seed
    )
    for _ in loader.epoch(1):
        pass
    loader.close()
    return sorted(f for f in os.listdir(index) if f.startswith("screen-"))


def _warm(batches, n: int) -> None:
    """Take ``n`` warm-up batches and keep none: a ``for _ in ...`` loop here held the last one
    through the whole measurement (a batch no training loop keeps), which cost seqloader a third
    reused block, fresh pages in the measured window, for nothing the memmap loop pays."""
    for _ in itertools.islice(batches, n):
        pass


def alternate(path: str, max_seqs: int, seed: int, pairs: int, index: str) -> dict:
    """``--alternate``: seqloader's warm epochs against the memmap loop in this one process,
    whole epochs in alternating order -> the ratios (sequences per CPU-second) per pair."""
    import seqloader

    loader = seqloader.SeqLoader(
        seqloader.HDFSource(path, index_dir=index), ordering="random", max_seqs=max_seqs, seed=seed
    )
    _warm(loader.epoch(1), 10**9)  # file mapped, verdict kept, blocks allocated
    _warm(memmap_loop(path, loader.plan(1)), 10**9)
    ratios, cpu = [], {"seqloader": [], "memmap": []}
    for i in range(pairs):
        epoch = 2 + i
        batches = loader.plan(epoch)
        for name in ("seqloader", "memmap") if i % 2 == 0 else ("memmap", "seqloader"):
            it = loader.epoch(epoch) if name == "seqloader" else memmap_loop(path, batches)
            c0 = time.process_time()
            got = 0
            for _batch in it:  # holds the previous batch while the next is built, as a loop does
                got += 1
            cpu[name].append((time.process_time() - c0) / max(got, 1))
            del it
        ratios.append(cpu["memmap"][-1] / cpu["seqloader"][-1])
    return {
        "ratios": ratios,
        "cpu_per_batch_s": cpu,
        "module": seqloader.__file__,
        "kernel": _kernel_built(),
    }


def child(config: dict) -> dict:
    """One measurement in this (fresh) process."""
    name, path = config["name"], config["path"]
    max_seqs, seed, n_batches = config["max_seqs"], config["seed"], config["batches"]
    # a fresh index folder (no verdict kept: a file this node never screened) unless given one
    fresh = config.get("index") is None
    index = tempfile.mkdtemp(prefix="onecopy-index-") if fresh else config["index"]
    try:
        return _measure(config, name, path, max_seqs, seed, n_batches, index)
    finally:
        if fresh:
            shutil.rmtree(index, ignore_errors=True)


def _measure(
    config: dict, name: str, path: str, max_seqs: int, seed: int, n_batches: int, index: str
) -> dict:
    import torch  # noqa: F401  (every configuration pays its imports before the clock)

    import seqloader

    epoch = 2
    batches = _plan(path, max_seqs, seed, epoch, index)[:n_batches]
    warm_batches = config.get("warm_batches", 3)  # of epoch 1, before the measured epoch 2
    if name == "memmap":
        first = _plan(path, max_seqs, seed, 1, index)
        _warm(memmap_loop(path, first), warm_batches)
        it = memmap_loop(path, batches)
    elif name == "memcpy":
        it = memcpy_loop(path, batches)
    else:
        prepared = _prepare_apart(path, index) if config.get("prepare") else {}
        checks = {}
        if config.get("screen") is False:  # NaN/Inf screen off: what the screen costs
            checks["checks"] = seqloader.CheckOptions(nonfinite="off")
        loader = seqloader.SeqLoader(
            seqloader.HDFSource(path, index_dir=index),
            ordering="random",
            max_seqs=max_seqs,
            seed=seed,
            **checks,
        )
        warm = loader.epoch(1)  # opens files, builds the chunk index, fills caches
        _warm(warm, warm_batches)
        warm.close()
        it = loader.epoch(epoch)
    seqs = sum(len(s) for s in batches)
    c0, t0 = time.process_time(), time.perf_counter()
    for got, _batch in enumerate(it, 1):  # holds the previous batch while the next is built
        if got == len(batches):
            break
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return {
        "config": config,
        "seqs": seqs,
        "wall_s": wall,
        "cpu_s": cpu,
        "seqs_per_s": seqs / wall,
        "seqs_per_cpu_s": seqs / cpu,
        "module": seqloader.__file__,
        "kernel": _kernel_built(),  # the compiled row kernel (code before it: None)
        **(prepared if name not in ("memmap", "memcpy") else {}),
    }


def _kernel_built() -> bool | None:
    """Whether this process's seqloader copies rows with its compiled kernel (None: a code
    without one)."""
    try:
        from seqloader.sources import row_kernel
    except ImportError:
        return None
    return row_kernel.KERNEL is not None


def _prepare_apart(path: str, index: str) -> dict:
    """``_prepare`` in a process of its own (``seqloader prepare`` is a command run before the
    job), with this process's code."""
    import subprocess

    config = json.dumps({"name": "prepare", "path": path, "index": index})
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.onecopy", "--child", config],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _prepare(path: str, index: str) -> dict:
    """``sl.prepare`` over ``path`` with its stores in ``index`` (the NaN/Inf verdict kept):
    its CPU and wall time, the screen's part (its entries' seconds) and their outcomes."""
    import seqloader

    c0, t0 = time.process_time(), time.perf_counter()
    report = seqloader.prepare(seqloader.HDFSource(path, index_dir=index))
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    screens = [s for s in report.stores if s.kind.startswith("NaN/Inf screen verdict")]
    if not any(s.built for s in screens):
        raise RuntimeError(f"prepare kept no NaN/Inf verdict for {path!r}: {report.lines()}")
    return {
        "prepare_cpu_s": cpu,
        "prepare_wall_s": wall,
        "prepare_screen_s": sum(s.seconds for s in screens),
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--child", help=argparse.SUPPRESS)
    p.add_argument("--contiguous", required=False)
    p.add_argument("--chunked", action="append", default=[])
    p.add_argument("--base-src", help="src/ directory of the code to compare with")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--batches", type=int, default=300)
    p.add_argument("--max-seqs", type=int, default=32)
    p.add_argument(
        "--steady",
        action="store_true",
        help="also measure after one whole warm-up epoch (file pages mapped, NaN screen cached)",
    )
    p.add_argument(
        "--no-screen",
        action="store_true",
        help="also measure seqloader on the contiguous file with the NaN/Inf screen off",
    )
    p.add_argument(
        "--alternate",
        type=int,
        default=0,
        metavar="N",
        help="also N pairs of whole warm epochs, seqloader and the memmap loop alternating in "
        "one process (per code)",
    )
    p.add_argument("--out")
    a = p.parse_args(argv)
    if a.child:
        config = json.loads(a.child)
        if config["name"] == "verify":
            args = (config["path"], config["max_seqs"], config["seed"])
            n = verify(*args, config["batches"], config["index"])
            print(json.dumps({"verified_batches": n}))
        elif config["name"] == "alternate":
            args = (config["path"], config["max_seqs"], config["seed"], config["pairs"])
            print(json.dumps(alternate(*args, config["index"])))
        elif config["name"] == "prepare":
            print(json.dumps(_prepare(config["path"], config["index"])))
        elif config["name"] == "keep_verdict":
            args = (config["path"], config["max_seqs"], config["seed"])
            print(json.dumps({"verdicts": keep_verdict(*args, config["index"])}))
        else:
            print(json.dumps(child(config)))
        return 0
    common = {"max_seqs": a.max_seqs, "seed": 1, "batches": a.batches}
    configs = []
    if a.contiguous:
        configs += [
            {"name": "memmap", "path": a.contiguous, "label": "memmap/contiguous"},
            {"name": "memcpy", "path": a.contiguous, "label": "memcpy"},
            {"name": "seqloader", "path": a.contiguous, "label": "seqloader/contiguous"},
        ]
    for i, c in enumerate(a.chunked):
        configs.append({"name": "seqloader", "path": c, "label": f"seqloader/chunked{i}"})
    if a.base_src:
        configs += [
            {**c, "code": "base", "label": c["label"] + "@base"}
            for c in configs
            if c["name"] == "seqloader"
        ]
    if a.contiguous and a.no_screen:
        configs.append(
            {
                "name": "seqloader",
                "path": a.contiguous,
                "label": "seqloader/contiguous/noscreen",
                "screen": False,
            }
        )
    if a.steady:
        configs += [
            {**c, "warm_batches": 10**9, "label": c["label"] + "+steady"}
            for c in configs
            if c["name"] in ("memmap", "seqloader")
            and "chunked" not in c["label"]
            and c.get("screen") is not False
        ]
    if a.contiguous:  # a file screened by ``seqloader prepare`` before the job
        label = "seqloader/contiguous/prepared"
        configs.append({"name": "seqloader", "path": a.contiguous, "label": label, "prepare": True})
    scratch = tempfile.mkdtemp(prefix="onecopy-")
    kept = os.path.join(scratch, "kept")  # the verdict of a whole epoch read before: kept here
    if a.contiguous:  # a later process on a file screened before
        label = "seqloader/contiguous/verdict"
        verdict = {"name": "seqloader", "path": a.contiguous, "label": label, "index": kept}
        configs.append(verdict)
        if a.base_src:  # the same kept verdict read by the code before (the store is unchanged)
            configs.append({**verdict, "code": "base", "label": label + "@base"})
    configs = [{**c, **common} for c in configs]
    try:
        return _run(a, configs, common, scratch, kept)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _run(a: argparse.Namespace, configs: list[dict], common: dict, scratch: str, kept: str) -> int:
    if a.contiguous:  # the baseline must build the same tensors: checked before timing
        index = os.path.join(scratch, "verify")
        ok = run_child(
            "benchmarks.onecopy",
            {"name": "verify", "path": a.contiguous, "index": index, **common},
            a.base_src,
            timeout=600,
        )
        print(f"seqloader == memmap loop on {ok['verified_batches']} batches", flush=True)
        made = run_child(
            "benchmarks.onecopy",
            {"name": "keep_verdict", "path": a.contiguous, "index": kept, **common},
            a.base_src,
            timeout=600,
        )
        if not made["verdicts"]:
            raise RuntimeError(
                f"no NaN/Inf screen verdict kept for {a.contiguous!r} after a whole epoch: the "
                "file holds NaN/Inf, or was modified less than 2 s ago"
            )
        print(f"verdicts kept after one whole epoch: {made['verdicts']}", flush=True)
    from benchmarks.machine import describe_machine, load_average

    loads = [load_average()]
    runs: list[dict[str, dict]] = []
    for rep in range(a.reps):
        k = rep % len(configs)
        order = configs[k:] + configs[:k]
        if rep % 2:  # each configuration runs after one neighbour, then after the other
            order.reverse()
        results = {}
        for c in order:
            r = run_child("benchmarks.onecopy", c, a.base_src, timeout=600)
            results[c["label"]] = r
            print(
                f"rep {rep + 1} {c['label']:32s} {r['seqs_per_s']:10,.0f} seq/s "
                f"{r['seqs_per_cpu_s']:10,.0f} seq/cpu-s",
                flush=True,
            )
        runs.append(results)
        loads.append(load_average())
    ratios = _ratios(runs)
    alternated = _alternate(a, common, scratch) if a.alternate and a.contiguous else {}
    print("medians over", a.reps, "repetitions:")
    for label in runs[0]:
        med = statistics.median(r[label]["seqs_per_s"] for r in runs)
        cpu = statistics.median(r[label]["seqs_per_cpu_s"] for r in runs)
        print(f"  {label:32s} {med:10,.0f} seq/s {cpu:10,.0f} seq/cpu-s")
    for name, values in ratios.items():
        shown = ", ".join(f"{v:.2f}" for v in values)
        print(f"  {name:64s} {statistics.median(values):.2f}x  ({shown})")
    if a.out:  # ratios only (absolute speeds of a shared machine say little), with the load
        with open(a.out, "w") as fh:
            json.dump(
                {
                    "what": "benchmarks.onecopy: file -> padded batch at 0 workers",
                    "settings": {
                        **common,
                        "reps": a.reps,
                        "configs": [c["label"] for c in configs],
                    },
                    "machine": describe_machine(),
                    "load_average_1_5_15min": {"before": loads[0], "after_each_rep": loads[1:]},
                    "ratios": {
                        k: {"median": statistics.median(v), "per_rep": v} for k, v in ratios.items()
                    },
                    "alternate": alternated,
                    # whether each configuration's seqloader ran the compiled row kernel
                    "kernel": {k: r.get("kernel") for k, r in runs[0].items()},
                },
                fh,
                indent=1,
            )
    return 0


def _alternate(a: argparse.Namespace, common: dict, scratch: str) -> dict[str, dict]:
    """``--alternate``: two processes per code (this one, and the code before with
    ``--base-src``), interleaved; each ``a.alternate`` pairs of whole warm epochs."""
    codes = ["this", "base"] if a.base_src else ["this"]
    per_code: dict[str, list[float]] = {c: [] for c in codes}
    for k, code in enumerate(codes * 2):
        config = {
            "name": "alternate",
            "path": a.contiguous,
            "index": os.path.join(scratch, f"alternate-{k}"),
            "pairs": a.alternate,
            **({"code": "base"} if code == "base" else {}),
            **common,
        }
        r = run_child("benchmarks.onecopy", config, a.base_src, timeout=1200)
        per_code[code] += r["ratios"]
        shown = ", ".join(f"{v:.2f}" for v in r["ratios"])
        print(f"alternate ({code}): warm seqloader / memmap loop, per pair: {shown}", flush=True)
    out = {}
    for code, values in per_code.items():
        label = (
            "seqloader" + ("@base" if code == "base" else "") + " warm / memmap loop, one process"
        )
        out[label] = {"median": statistics.median(values), "per_pair": values}
        print(f"  {label:64s} {statistics.median(values):.2f}x", flush=True)
    return out


def _ratios(runs: list[dict]) -> dict[str, list[float]]:
    pairs = [
        ("seqloader/contiguous", "memmap/contiguous"),
        ("seqloader/contiguous", "memcpy"),
        ("seqloader/contiguous@base", "memmap/contiguous"),
        ("seqloader/contiguous/noscreen", "memmap/contiguous"),
        ("seqloader/contiguous", "seqloader/contiguous/noscreen"),
        ("seqloader/contiguous/verdict", "memmap/contiguous"),
        ("seqloader/contiguous/verdict", "seqloader/contiguous"),
        ("seqloader/contiguous/verdict", "seqloader/contiguous@base"),
        ("seqloader/contiguous/verdict@base", "memmap/contiguous"),
        ("seqloader/contiguous/prepared", "memmap/contiguous"),
        ("seqloader/contiguous/prepared", "seqloader/contiguous"),
    ]
    labels = runs[0].keys()
    pairs += [(lab, lab + "@base") for lab in labels if lab + "@base" in labels]
    pairs += [
        ("seqloader/contiguous+steady", "memmap/contiguous+steady"),
        ("seqloader/contiguous@base+steady", "memmap/contiguous+steady"),
    ]
    out = {}
    for x, y in pairs:
        if x in labels and y in labels:
            for unit in ("seqs_per_s", "seqs_per_cpu_s"):
                out[f"{x} / {y} ({unit})"] = [r[x][unit] / r[y][unit] for r in runs]
    prepared, memmap = "seqloader/contiguous/prepared", "memmap/contiguous"
    if prepared in labels and memmap in labels:  # what prepare's screen costs, in loop epochs
        for mine, theirs in (("prepare_screen_s", "wall_s"), ("prepare_cpu_s", "cpu_s")):
            out[f"{prepared} {mine} / {memmap} {theirs}"] = [
                r[prepared][mine] / r[memmap][theirs] for r in runs
            ]
    return out


if __name__ == "__main__":
    sys.exit(main())
