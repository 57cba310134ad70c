"""Shared by ``train_ddp.py`` (run by torchrun) and the tests that launch it: the corpus, the
checkpoint file, the per-rank logs."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

import numpy as np

import seqloader as sl

N_SEQS = 101  # prime: divides by no batch size or world size
FEATURES = 3
#: the loader options of train_ddp.py (the tests plan with them too)
LOADER_OPTIONS = {"ordering": "laplace:.10", "max_seqs": 4, "max_frames": 90, "seed": 3}


#: what ``launch_fork.run_rank`` sets for a rank: a process group, each rank alone on its node
_LAUNCH_FORK_ENV = ("RANK", "WORLD_SIZE", "GROUP_RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE")


def as_launched_by(launcher: str) -> None:
    """Give a rank forked by ``launch_fork.py`` the environment another launcher gives its
    processes: ``"python"``, a plain one-process run (no process group's variables); ``"torchrun"``,
    ``torchrun --standalone`` (one node: ``LOCAL_RANK`` is the rank; ``TORCHELASTIC_RUN_ID``, by
    which torch and Lightning tell that torchrun started the process)."""
    world = int(os.environ["WORLD_SIZE"])
    if launcher == "python":
        assert world == 1, f"a plain run has one process, not {world}"
        for name in (*_LAUNCH_FORK_ENV, "MASTER_ADDR", "MASTER_PORT"):
            os.environ.pop(name, None)
    elif launcher == "torchrun":
        os.environ.update(
            LOCAL_RANK=os.environ["RANK"],
            LOCAL_WORLD_SIZE=str(world),
            GROUP_RANK="0",
            TORCHELASTIC_RUN_ID="none",
        )
    else:
        raise ValueError(f"launcher {launcher!r}: 'python' or 'torchrun'")


def build_corpus(n: int = N_SEQS, seed: int = 7) -> sl.MemorySource:
    """The same sequences in every process: built from the seed alone."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 41, size=n)
    data = [rng.standard_normal((int(t), FEATURES)).astype(np.float32) for t in lengths]
    return sl.MemorySource({"data": data}, tags=[f"utt-{i:04d}" for i in range(n)])


#: ``--mix``: the corpus as two named corpora (its first MIX_SPLIT sequences and the rest) mixed at
#: these rates; over E epochs corpus c's sequences are each used exactly E * rate times
MIX_SPLIT = 60
MIX_RATES = {"a": 0.5, "b": 2.0}


def mix_corpus(files: bool = False) -> sl.ConcatSource:
    """``build_corpus()`` cut into the corpora ``a`` and ``b`` (same sequences and tags);
    ``files``: each corpus as files of 10 sequences (the last one shorter), for
    ``distribution="files"``."""
    return cut_corpus({"a": range(MIX_SPLIT), "b": range(MIX_SPLIT, N_SEQS)}, 10 if files else 0)


def files_corpus(files: int = 8) -> sl.ConcatSource:
    """``build_corpus()`` cut into ``files`` corpora of about equal size, each one file for
    ``distribution="files"`` (same sequences and tags)."""
    n = N_SEQS
    return cut_corpus({f"f{k}": range(k * n // files, (k + 1) * n // files) for k in range(files)})


def cut_corpus(parts: dict[str, range], file_size: int = 0) -> sl.ConcatSource:
    """``build_corpus()`` as the named corpora ``parts`` (consecutive ranges: same order and tags);
    ``file_size`` > 0: each part as files of that many sequences (the last one shorter)."""
    corpus = build_corpus()

    def files(n: int) -> list[int] | None:
        return [*range(0, n, file_size), n] if file_size else None

    return sl.ConcatSource(
        {
            name: sl.MemorySource(
                {"data": [corpus.read(i)["data"] for i in idx]},
                [corpus.tag(i) for i in idx],
                file_bounds=files(len(idx)),
            )
            for name, idx in parts.items()
        }
    )


def hdf_api():
    """(HDFSource, write_hdf) if the HDF source exists in this checkout, else None."""
    try:
        from seqloader.sources.hdf import HDFSource
        from seqloader.sources.hdf_write import write_hdf
    except ImportError:
        return None
    return HDFSource, write_hdf


def write_json_atomic(path: Path, obj: object) -> None:
    """Write, flush, fsync, rename: a reader (or a resumed run) sees the old or the new file,
    never half of one, even if the writer is killed mid-way."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        json.dump(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def finish_rank(out: Path, phase: str, rank: int, result: dict) -> int:
    """A rank's end: its result file written, then every rank waits for the others (the launcher
    stops them all as soon as one exits) and the process group closes -> exit code 0."""
    import torch.distributed as dist  # only the ranks need it

    write_json_atomic(result_path(out, phase, rank), result)
    dist.barrier()
    dist.destroy_process_group()
    return 0


def log_path(out: Path, phase: str, rank: int) -> Path:
    return out / f"{phase}.rank{rank}.jsonl"


def result_path(out: Path, phase: str, rank: int) -> Path:
    return out / f"{phase}.rank{rank}.result.json"


def read_log(out: Path, phase: str, rank: int) -> list[dict]:
    """One record per batch the rank received: epoch, step, real tags, filler count."""
    path = log_path(out, phase, rank)
    if not path.exists():
        return []
    lines = path.read_text().splitlines()
    return [json.loads(line) for line in lines if line.endswith("}")]  # a killed write is partial


def kill_tree(pid: int) -> None:
    """SIGKILL a launcher we started and everything below it (ranks, their workers)."""
    import psutil  # only the launching side needs it

    try:
        root = psutil.Process(pid)
        procs = [*root.children(recursive=True), root]
    except psutil.NoSuchProcess:
        return
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
