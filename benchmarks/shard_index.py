"""A shard corpus's first open (the member index) against one plain read of its shards:
``python -m benchmarks.shard_index --shar DIR [--base-src OLD/src] [--reps 3]``.

Each configuration runs in a fresh process (imports before the clock), interleaved and rotated
over ``--reps`` repetitions; the page cache is warm for all (every shard file is read once
before the first repetition), so the figure is CPU cost, not disk:

- ``read``: every shard file (tars and listings) read once in 1 MiB ``read()`` calls;
- ``open``: ``ShardSource.lhotse_shar(DIR, keys=["audio"])`` with an empty index directory
  (listings parsed, tar headers indexed, the index written);
- ``open@base``: the same with the code of another checkout.

Each configuration's wall seconds (the goal's clock) and CPU seconds (``process_time``: on a
loaded machine the wall clock mostly says how much of a core the process got).

Ratios (open / read) are taken within each repetition; medians and ranges are printed and
written with ``--json``.

``--make DIR`` writes the corpus the figures in ``docs/performance.md`` were measured on instead
(a Lhotse Shar folder ``DIR/shar``, about 1.18 GB): 40 speech-like FLAC utterances of 8-16 s,
repeated under new ids to ``--utterances`` (4,400), 40 per tar, ``write_shards``.
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
from pathlib import Path

from benchmarks.fresh import parse_or_run_child, run_child
from benchmarks.side_by_side import rotated


def _files(shar: str) -> list[Path]:
    root = Path(shar)
    return sorted(root.glob("*.tar")) + sorted(root.glob("cuts.*"))


def child(cfg: dict) -> dict:
    import numpy as np  # noqa: F401  (imports before the clock)

    from seqloader.shards import ShardSource

    if cfg["what"] == "read":
        start, cpu = time.perf_counter(), time.process_time()
        for p in _files(cfg["shar"]):
            with open(p, "rb") as fh:
                while fh.read(1 << 20):
                    pass
        return {
            "config": cfg,
            "seconds": time.perf_counter() - start,
            "cpu_s": time.process_time() - cpu,
        }
    index_dir = tempfile.mkdtemp(prefix="seqloader-index-bench-")
    start, cpu = time.perf_counter(), time.process_time()
    src = ShardSource.lhotse_shar(cfg["shar"], keys=["audio"], index_dir=index_dir)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    assert src.index_built
    shutil.rmtree(index_dir)  # ~2 MB per open: not left behind in the temp folder
    return {"config": cfg, "seconds": seconds, "cpu_s": cpu, "sequences": len(src)}


def make_corpus(root: Path, utterances: int) -> Path:
    """The ~1.18 GB Shar corpus of the docs' first-open figures (see the module) -> its folder."""
    import seqloader as sl
    from seqloader.shards import write_shards
    from seqloader.synthetic.audio import write_audio_corpus

    audio = write_audio_corpus(root, 40, seconds=(8.0, 16.0), seed=0)
    rows = [json.loads(line) for line in Path(audio.jsonl).read_text().splitlines()]
    listing = root / "repeated.jsonl"
    with open(listing, "w") as fh:
        for i in range(utterances):
            fh.write(json.dumps({**rows[i % len(rows)], "id": f"u{i:06d}"}) + "\n")
    source = sl.AudioSource(str(listing), keys=["audio", "text"])
    write_shards(source, root / "shar", "shar", shard_size=40)
    return root / "shar"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.shard_index", description=__doc__)
    p.add_argument("--shar", help="a Lhotse Shar folder")
    p.add_argument("--make", help="write the docs' corpus into this folder (then: --shar DIR/shar)")
    p.add_argument("--utterances", type=int, default=4400, help="with --make")
    a = parse_or_run_child(p, argv, child)
    if a is None:
        return 0
    if a.make:
        shar = make_corpus(Path(a.make), a.utterances)
        gb = sum(f.stat().st_size for f in _files(str(shar))) / 1e9
        print(f"{shar}: {gb:.3f} GB")
        return 0
    files = _files(a.shar)
    gb = sum(f.stat().st_size for f in files) / 1e9
    for f in files:  # page cache warm for every configuration
        f.read_bytes()
    configs = [{"what": "read", "label": "read"}, {"what": "open", "label": "open"}]
    if a.base_src:
        configs.append({"what": "open", "code": "base", "label": "open@base"})
    load = [os.getloadavg()]
    runs: list[dict] = []
    for rep in range(a.reps):
        for cfg in rotated(configs, rep):
            r = run_child("benchmarks.shard_index", {**cfg, "shar": a.shar}, a.base_src, 900)
            r["rep"] = rep
            runs.append(r)
            print(
                f"rep {rep + 1} {cfg['label']:10s} {r['seconds']:.3f} s, {r['cpu_s']:.3f} s CPU",
                flush=True,
            )
    load.append(os.getloadavg())

    def seconds(label: str, rep: int, field: str = "seconds") -> float:
        return next(r[field] for r in runs if r["rep"] == rep and r["config"]["label"] == label)

    def ratio(a_label: str, b_label: str, field: str) -> dict:
        per_rep = [seconds(a_label, r, field) / seconds(b_label, r, field) for r in range(a.reps)]
        return {
            "median": statistics.median(per_rep),
            "range": [min(per_rep), max(per_rep)],
            "per_rep": per_rep,
        }

    ratios = {}
    # wall seconds (the goal's clock), and CPU seconds (process_time: what the load scatters less)
    for field, prefix in (("seconds", ""), ("cpu_s", "cpu_")):
        for label in [c["label"] for c in configs[1:]]:
            ratios[f"{prefix}{label}_over_read"] = ratio(label, "read", field)
        if a.base_src:
            ratios[f"{prefix}open_over_open@base"] = ratio("open", "open@base", field)
    print(f"corpus: {gb:.3f} GB in {len(files)} files; load before/after {load}")
    for k, v in ratios.items():
        print(f"  {k}: {v['median']:.2f}x ({v['range'][0]:.2f}-{v['range'][1]:.2f})")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump(
                {"gb": gb, "files": len(files), "ratios": ratios, "runs": runs, "load": load},
                fh,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
