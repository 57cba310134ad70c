"""Chaos driver (``make chaos``; not part of ``make test``): random SIGKILLs of torchrun ranks at
random steps, each run resumed elastically from the last checkpoint on another world size with
0-2 DataLoader workers, until the training's epochs are done. Then checked from the ranks' own
logs of what they received: every sequence exactly once per full pass (0 duplicated, 0 lost),
equal steps on every rank of every run segment, and no hang (every launch has a hard timeout).

    python tests/dist/chaos.py [--kills 16] [--launcher torchrun|fork] [--seed S] [--out DIR]

The training is ``train_ddp.py`` (a tiny DDP model; rank 0 checkpoints model and loader state
after every step). Per segment the driver draws the world size (cycling 2, 3, 1, 4, ...), the
workers (0-2), the rank to kill and the batch it dies on, among the batches the segment will
really deliver (a probe loader loads the same checkpoint and lists them). Several loader set-ups
share the kills: ``laplace`` over 2 sub-epochs with ``split``, ``buckets:4`` over 2 sub-epochs,
``shard`` + ``pad``, ``files`` + ``pad`` over 8 RETURNN HDF files, ``mix=`` over two corpora
(rates 0.5 and 2.0: over 4 epochs each sequence of the first is used twice, of the second 8 times),
and two set-ups over the node's mapped stores (``--node-stores``: indexed planning over 8 HDF
files, and an indexed mix), where before every resumed segment the driver also changes one byte
of a random column of a random store of the node (``XDG_CACHE_HOME`` of the set-up): the ranks
must rebuild it (a ``DataWarning``) or refuse it (``DamagedStore``: the driver then does what the
message says, deletes the file, and resumes), never serve it; the exactly-once check would see a
changed tag or length.

Exit status 0 when every check holds; the figures go to ``DIR/chaos.json`` and stdout.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE))
from ddp_common import MIX_RATES, MIX_SPLIT, N_SEQS, build_corpus, hdf_api, kill_tree, read_log  # noqa: E402

import seqloader as sl  # noqa: E402

WORLDS = (2, 3, 1, 4)
TIMEOUT_S = 300  # per launch: beyond this it is a hang
NOTHING = {"epoch": 0, "steps": 0}  # the position before any checkpoint: nothing consumed


@dataclass(frozen=True)
class Setup:
    name: str
    args: tuple[str, ...]
    epochs: int
    partition_epoch: int = 1
    hdf_files: int = 0  # > 0: the corpus as that many HDF files
    mix: bool = False  # two corpora at MIX_RATES: each sequence epochs * rate times in all
    damage: bool = False  # change a byte of a node store before every resumed segment


SETUPS = (
    Setup("laplace partition_epoch=2 split", ("--uneven", "split"), 4, 2),
    Setup("buckets:4 partition_epoch=2 split", ("--ordering", "buckets:4"), 4, 2),
    Setup("shard pad", ("--uneven", "pad"), 3),
    Setup("files pad (8 HDF files)", ("--distribution", "files", "--uneven", "pad"), 3, 1, 8),
    Setup("mix a=0.5 b=2.0 pad", ("--mix", "--uneven", "pad"), 4, mix=True),
    Setup(
        "indexed node-stores damaged (8 HDF files)",
        ("--planning", "indexed", "--uneven", "pad", "--node-stores"),
        3,
        1,
        8,
        damage=True,
    ),
    Setup(
        "indexed-mix node-stores damaged",
        ("--planning", "indexed", "--mix", "--uneven", "pad", "--node-stores"),
        4,
        mix=True,
        damage=True,
    ),
)
#: what a rank prints when it refuses a damaged store, and when it rebuilt one
REFUSED, REBUILT = "DamagedStore", "rebuilt from the data"
STORE_PATH = re.compile(r"column store '([^']+)'")


@dataclass
class Segment:
    world: int
    workers: int
    kill: tuple[int, int, int] | None  # (rank, epoch, step)
    start: dict | None  # the checkpoint's loader state it resumed from
    end: dict | None = None  # the checkpoint's loader state after it (killed; None: the last)
    rc: int | None = None
    hang: bool = False
    seconds: float = 0.0
    damaged: str = ""  # "FILE:COLUMN" changed before it ran
    store: str = ""  # what the ranks did with it: rebuilt, refused (then deleted), unread


@dataclass
class Outcome:
    setup: str
    segments: list[Segment] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    duplicated: int = 0
    lost: int = 0
    unequal: int = 0
    hangs: int = 0
    refused_by_probe: int = 0  # damage the driver's probe loader met first (then deleted)

    def ledger(self) -> dict[str, object]:
        """The set-up's figures: kills, segments, damaged stores and what became of them,
        duplicated, lost, unequal steps, hangs."""
        segs = self.segments
        return {
            "kills": sum(1 for g in segs if g.kill is not None and g.rc not in (0, None)),
            "segments": len(segs),
            "world_sizes": [g.world for g in segs],
            "stores_damaged": sum(1 for g in segs if g.damaged),
            "rebuilt": sum(1 for g in segs if g.store == "rebuilt"),
            "refused": sum(1 for g in segs if g.store == "refused") + self.refused_by_probe,
            "duplicated": self.duplicated,
            "lost": self.lost,
            "unequal_step_segments": self.unequal,
            "hangs": self.hangs,
        }


def common_args(setup: Setup, hdf: list[Path], ckpt: Path) -> list[str]:
    args = [*setup.args, "--epochs", str(setup.epochs)]
    args += ["--partition-epoch", str(setup.partition_epoch), "--checkpoint", str(ckpt)]
    if hdf:
        args += ["--hdf", *map(str, hdf)]
    return args


def kill_points(args: list[str], world: int, state: dict | None) -> list[tuple[int, int]]:
    """(epoch, step) of every batch a run on ``world`` ranks resumed from ``state`` delivers
    (every rank the same steps): a probe loader of rank 0, without workers or process group."""
    import train_ddp

    parsed = train_ddp.parse_args(["--out", ".", *args, "--workers", "0"])
    loader = train_ddp.make_loader(parsed, 0, world_size=world)
    first = 1
    if state is not None:
        loader.load_state_dict(state)
        first = max(state["epoch"], 1)
    points = [(e, b.step) for e in range(first, parsed.epochs + 1) for b in loader.epoch(e)]
    loader.close()
    return points


def damage_a_store(cache: Path, rng: random.Random) -> str:
    """Change one byte of a random column of a random node store under ``cache``:
    "FILE:COLUMN", or "" when there is none yet."""
    from seqloader.sources.columns import ColumnStore, CorruptStore

    files = sorted(p for p in cache.rglob("*") if p.suffix in (".cols", ".seqcols"))
    if not files:
        return ""
    path = rng.choice(files)
    try:
        store = ColumnStore(path)
    except CorruptStore:  # damaged before and not read since: change another byte of it
        return damage_a_store(cache, rng) if len(files) > 1 else ""
    names = [c for c in store.names if store.byte_range(c)[1] > 0]
    column = rng.choice(names)
    offset, nbytes = store.byte_range(column)
    del store
    pos = offset + rng.randrange(nbytes)
    with open(path, "r+b") as fh:
        fh.seek(pos)
        byte = fh.read(1)[0]
        fh.seek(pos)
        fh.write(bytes([byte ^ (1 << rng.randrange(8))]))
    return f"{path.relative_to(cache)}:{column}"


def probed_points(args: list[str], world: int, state: dict | None, outcome: Outcome) -> list:
    """``kill_points``; a damaged store the probe meets first is deleted, as its message says."""
    from seqloader.sources.columns import DamagedStore

    while True:
        try:
            return kill_points(args, world, state)
        except DamagedStore as e:
            Path(e.path).unlink(missing_ok=True)
            outcome.refused_by_probe += 1


def launch(
    launcher: str, world: int, out: Path, phase: str, args: list[str]
) -> tuple[int | None, float]:
    """(exit code or None on a hang, seconds)."""
    script = HERE / "train_ddp.py"
    tail = ["--out", str(out), "--phase", phase, "--resume", *args]
    if launcher == "torchrun":
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
        cmd += [f"--nproc_per_node={world}", "--monitor-interval=0.1", str(script), *tail]
    else:
        cmd = [sys.executable, str(HERE / "launch_fork.py"), str(world), *tail]
        cmd += ["--grad-sync", "allreduce"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    start = time.perf_counter()
    with open(out / f"{phase}.console.txt", "w") as console:
        proc = subprocess.Popen(cmd, stdout=console, stderr=subprocess.STDOUT, env=env)
        try:
            rc: int | None = proc.wait(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            kill_tree(proc.pid)
            proc.wait()
            rc = None
    return rc, time.perf_counter() - start


def consumed(log: list[dict], state: dict | None) -> list[dict]:
    """The records a checkpoint's loader state counts as consumed (all, for ``None``)."""
    if state is None:
        return log
    epoch, steps = state["epoch"], state["steps"]
    return [e for e in log if e["epoch"] < epoch or (e["epoch"] == epoch and e["step"] < steps)]


def run_setup(
    setup: Setup, kills: int, launcher: str, rng: random.Random, root: Path, turn: list[int]
) -> Outcome:
    out = root / setup.name.split()[0].replace(":", "")
    out.mkdir(parents=True)
    hdf: list[Path] = []
    if setup.hdf_files:
        _, write_hdf = hdf_api()
        corpus, n = build_corpus(), N_SEQS
        for f in range(setup.hdf_files):
            part = range(f * n // setup.hdf_files, (f + 1) * n // setup.hdf_files)
            src = sl.MemorySource(
                {"data": [corpus.read(i)["data"] for i in part]}, [corpus.tag(i) for i in part]
            )
            hdf.append(out / f"part{f}.hdf")
            write_hdf(str(hdf[-1]), src)
    ckpt = out / "ckpt.json"
    args = common_args(setup, hdf, ckpt)
    outcome = Outcome(setup.name)
    state: dict | None = None
    cache = out / "cache"
    os.environ["XDG_CACHE_HOME"] = str(cache)  # the node's stores: the probe's and the ranks'
    while True:
        world = WORLDS[turn[0] % len(WORLDS)]
        turn[0] += 1
        workers = rng.randrange(3)
        points = probed_points(args, world, state, outcome)
        kill = None
        left = kills - len(outcome.segments)
        if left > 0 and points:  # within the next 1/left of what remains: kills spread out
            epoch, step = rng.choice(points[: -(-len(points) // left)])
            kill = (rng.randrange(world), epoch, step)
        seg = Segment(world, workers, kill, state)
        outcome.segments.append(seg)
        phase = f"s{len(outcome.segments) - 1}"
        if setup.damage and state is not None:
            seg.damaged = damage_a_store(cache, rng)
        extra = ["--workers", str(workers)]
        if kill is not None:
            extra += ["--kill-rank", str(kill[0]), "--kill-at", f"{kill[1]}:{kill[2]}"]
        seg.rc, seg.seconds = launch(launcher, world, out, phase, [*args, *extra])
        seg.hang = seg.rc is None
        where = f"{setup.name} segment {phase} (world {world}, {workers} workers, kill {kill})"
        if seg.hang:
            outcome.hangs += 1
            outcome.problems.append(f"{where}: no exit in {TIMEOUT_S}s (a hang)")
            return outcome
        console = (out / f"{phase}.console.txt").read_text(errors="replace")
        if seg.damaged:
            seg.store = "refused" if REFUSED in console else "rebuilt" if REBUILT in console else ""
            seg.store = seg.store or "unread"
        if seg.rc != 0 and REFUSED in console:  # the fix the message names: delete, resume
            for path in set(STORE_PATH.findall(console)):
                Path(path).unlink(missing_ok=True)
            seg.store = "refused"
            state = json.loads(ckpt.read_text())["loader"] if ckpt.exists() else None
            seg.end = state if state is not None else NOTHING
            if kill is not None:  # the kill did not come: it is drawn again
                kills += 1
            continue
        if kill is None:
            if seg.rc != 0:
                outcome.problems.append(f"{where}: exit {seg.rc} without a kill")
                return outcome
            break
        if seg.rc == 0:
            outcome.problems.append(f"{where}: not killed (exit 0)")
            return outcome
        state = json.loads(ckpt.read_text())["loader"] if ckpt.exists() else None
        seg.end = state if state is not None else NOTHING  # killed before the first checkpoint
    check(outcome, out, setup)
    return outcome


def check(outcome: Outcome, out: Path, setup: Setup) -> None:
    """Exactly once per full pass and equal steps per segment, from the ranks' logs."""
    tags = sorted(build_corpus().tags)
    by_pass: dict[int, collections.Counter] = collections.defaultdict(collections.Counter)
    for i, seg in enumerate(outcome.segments):
        logs = [consumed(read_log(out, f"s{i}", r), seg.end) for r in range(seg.world)]
        steps = [[(e["epoch"], e["step"]) for e in log] for log in logs]
        if any(s != steps[0] for s in steps):
            outcome.unequal += 1
            outcome.problems.append(f"s{i}: ranks consumed different steps")
        for log in logs:
            for e in log:
                by_pass[(e["epoch"] - 1) // setup.partition_epoch].update(e["tags"])
    if setup.mix:  # over the whole training: corpus c's sequences epochs * rate times each
        seen = sum(by_pass.values(), collections.Counter())
        for i, tag in enumerate(build_corpus().tags):  # corpus order: a, then b
            want = round(setup.epochs * MIX_RATES["a" if i < MIX_SPLIT else "b"])
            outcome.duplicated += max(seen[tag] - want, 0)
            outcome.lost += max(want - seen[tag], 0)
            if seen[tag] != want:
                outcome.problems.append(f"{tag}: used {seen[tag]} times, expected {want}")
        return
    passes = setup.epochs // setup.partition_epoch
    for p in range(passes):
        seen = by_pass.get(p, collections.Counter())
        dup = sum(c - 1 for c in seen.values() if c > 1)
        lost = sum(1 for t in tags if t not in seen)
        extra = sum(1 for t in seen if t not in set(tags))
        outcome.duplicated += dup
        outcome.lost += lost
        if dup or lost or extra:
            outcome.problems.append(f"pass {p + 1}: {dup} duplicated, {lost} lost, {extra} unknown")


def describe(s: Segment) -> str:
    kill = "" if s.kill is None else f" kill r{s.kill[0]}@{s.kill[1]}:{s.kill[2]}"
    damage = f" damaged {s.damaged} -> {s.store}" if s.damaged else ""
    return f"W{s.world}/w{s.workers}{kill}{damage}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="tests/dist/chaos.py", description=__doc__.split("\n")[0])
    p.add_argument("--kills", type=int, default=16, help="SIGKILLs in all, spread over set-ups")
    p.add_argument("--launcher", choices=["torchrun", "fork"], default="torchrun")
    p.add_argument("--seed", type=int, default=None, help="default: drawn (and printed)")
    p.add_argument("--out", type=Path, default=None, help="default: a temporary directory")
    p.add_argument("--only", help="run only the set-ups whose name contains this")
    a = p.parse_args(argv)
    setups = [s for s in SETUPS if a.only is None or a.only in s.name]
    seed = a.seed if a.seed is not None else random.SystemRandom().randrange(2**31)
    rng = random.Random(seed)
    root = a.out or Path(tempfile.mkdtemp(prefix="seqloader-chaos-"))
    root.mkdir(parents=True, exist_ok=True)
    print(f"chaos: seed {seed}, {a.kills} kills over {len(setups)} set-ups, out {root}", flush=True)
    started = time.perf_counter()
    turn = [0]
    outcomes = []
    for i, setup in enumerate(setups):
        kills = a.kills // len(setups) + (1 if i < a.kills % len(setups) else 0)
        o = run_setup(setup, kills, a.launcher, rng, root, turn)
        outcomes.append(o)
        segs = ", ".join(describe(s) for s in o.segments)
        print(f"  {setup.name}: {segs} -> {o.problems or 'ok'}", flush=True)
        print(f"    ledger: {json.dumps(o.ledger())}", flush=True)
    segments = [s for o in outcomes for s in o.segments]
    summary = {
        "seed": seed,
        "launcher": a.launcher,
        "set_ups": [o.setup for o in outcomes],
        "segments": len(segments),
        "kills": sum(1 for s in segments if s.kill is not None and s.rc not in (0, None)),
        "world_sizes": sorted({s.world for s in segments}),
        "workers": sorted({s.workers for s in segments}),
        "duplicated": sum(o.duplicated for o in outcomes),
        "lost": sum(o.lost for o in outcomes),
        "unequal_step_segments": sum(o.unequal for o in outcomes),
        "hangs": sum(o.hangs for o in outcomes),
        "problems": [f"{o.setup}: {q}" for o in outcomes for q in o.problems],
        "ledger": {o.setup: o.ledger() for o in outcomes},
        "wall_s": round(time.perf_counter() - started, 1),
    }
    (root / "chaos.json").write_text(json.dumps(summary, indent=2))
    print(json.dumps(summary, indent=2))
    return 1 if summary["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
