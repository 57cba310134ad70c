"""The first open's listing parse, the fast listing reader against the careful one:
``python -m benchmarks.listing_readers [--lines 200000] [--per-tar 2000] [--reps 7]``.

Generated listings, the same lines for both readers: NeMo manifests (one per tar, and one
manifest for all tars) and Lhotse Shar cuts (one per tar). WebDataset has no listing (its
``KEY.json`` members are read one ``json.loads`` each), so neither reader is used there.

Readers: ``fast`` (``json_lines``: 1 MiB pieces, parsed in groups of ``GROUP`` characters),
``careful`` (line by line) and ``whole_pieces`` (the fast reader parsing each whole 1 MiB piece
in one call, as it did before groups).

Each repetition reads every listing once with each reader, the order rotated, and
builds its entries as the first open does (``nemo_entry`` / ``shar_entry``). CPU seconds
(``process_time``) per reader; the ratio fast / careful is taken within each repetition and its
median and range printed (below 1.0: the reader pays against the careful one).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator

from benchmarks.side_by_side import rotated

WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "while",
    "seven",
    "bright",
    "stars",
    "shine",
]


def _text(i: int) -> str:
    return " ".join(WORDS[(i * 7 + k) % len(WORDS)] for k in range(8 + i % 17))


def nemo_line(i: int, shard: int) -> dict:
    return {
        "audio_filepath": f"utt_{i:08d}.flac",
        "duration": round(1.0 + (i * 37 % 1500) / 100, 2),
        "text": _text(i),
        "shard_id": shard,
    }


def shar_line(i: int, shard: int) -> dict:
    dur = round(1.0 + (i * 37 % 1500) / 100, 2)
    rid = f"rec_{i:08d}"
    return {
        "id": rid,
        "start": 0.0,
        "duration": dur,
        "channel": 0,
        "supervisions": [
            {"id": rid, "recording_id": rid, "start": 0.0, "duration": dur, "channel": 0,
             "text": _text(i), "language": "en", "speaker": f"spk{i % 300}"}
        ],
        "recording": {"id": rid, "sources": [{"type": "shar", "channels": [0], "source": ""}],
                      "sampling_rate": 16000, "num_samples": int(dur * 16000), "duration": dur,
                      "channel_ids": [0]},
        "type": "MonoCut",
    }  # fmt: skip


def write(folder: str, name: str, make: Callable[[int, int], dict], n: int, per: int) -> list[str]:
    paths = []
    for s, first in enumerate(range(0, n, per)):
        path = os.path.join(folder, f"{name}-{s:05d}.jsonl")
        with open(path, "w") as fh:
            fh.writelines(json.dumps(make(i, s)) + "\n" for i in range(first, min(n, first + per)))
        paths.append(path)
    return paths


def _readers() -> dict[str, Callable[[str], Iterator[tuple[int, dict]]]]:
    from seqloader.shards import listing

    def whole_pieces(path: str) -> Iterator[tuple[int, dict]]:
        group, listing.GROUP = listing.GROUP, 1 << 40  # one decoder call per 1 MiB piece
        try:
            yield from listing.json_lines(path)
        finally:
            listing.GROUP = group

    return {
        "fast": listing.json_lines,
        "careful": lambda p: listing._checked_lines(p, p, None),
        "whole_pieces": whole_pieces,
    }


def cpu(paths: list[str], read: Callable[[str], Iterator[tuple[int, dict]]], kind: str) -> float:
    from seqloader.shards.layouts import nemo_entry, shar_entry

    start = time.process_time()
    for p in paths:
        if kind == "shar":
            for line, item in read(p):
                shar_entry(line, item, p, "recording")
        else:
            for line, item in read(p):
                nemo_entry(line, item, p)
    return time.process_time() - start


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.listing_readers", description=__doc__)
    p.add_argument("--lines", type=int, default=200_000)
    p.add_argument("--per-tar", type=int, default=2000)
    p.add_argument("--reps", type=int, default=7)
    p.add_argument("--json", help="write the results here")
    a = p.parse_args(argv)
    readers = _readers()
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="seqloader-listings-") as folder:
        sets = {
            "nemo, one manifest per tar": ("nemo", nemo_line, a.per_tar),
            "nemo, one manifest for all tars": ("nemo", nemo_line, a.lines),
            "shar, cuts per tar": ("shar", shar_line, a.per_tar),
            "shar, 40 cuts per tar": ("shar", shar_line, 40),
        }
        load = [os.getloadavg()[0]]
        for label, (kind, make, per) in sets.items():
            paths = write(folder, kind + str(per), make, a.lines, per)
            assert list(readers["fast"](paths[0])) == list(readers["careful"](paths[0]))
            times: dict[str, list[float]] = {name: [] for name in readers}
            for rep in range(a.reps):
                for name in rotated(list(readers), rep):
                    times[name].append(cpu(paths, readers[name], kind))
            ratios = [f / c for f, c in zip(times["fast"], times["careful"])]
            whole = [f / c for f, c in zip(times["whole_pieces"], times["careful"])]
            results[label] = {
                "files": len(paths),
                "lines": a.lines,
                "fast_cpu_s": statistics.median(times["fast"]),
                "careful_cpu_s": statistics.median(times["careful"]),
                "ratio_median": statistics.median(ratios),
                "ratio_range": [min(ratios), max(ratios)],
                "ratios": ratios,
                "whole_pieces_cpu_s": statistics.median(times["whole_pieces"]),
                "whole_pieces_ratio_median": statistics.median(whole),
                "whole_pieces_ratio_range": [min(whole), max(whole)],
            }
            r = results[label]
            print(
                f"{label}: fast {r['fast_cpu_s']:.3f} s, careful {r['careful_cpu_s']:.3f} s, "
                f"fast/careful {r['ratio_median']:.2f}x ({min(ratios):.2f}-{max(ratios):.2f}); "
                f"whole 1 MiB pieces/careful {r['whole_pieces_ratio_median']:.2f}x "
                f"({min(whole):.2f}-{max(whole):.2f})"
            )
            for f in paths:
                os.remove(f)
        load.append(os.getloadavg()[0])
    print(f"load {load[0]:.1f} -> {load[1]:.1f}")
    if a.json:
        with open(a.json, "w") as fh:
            json.dump({"results": results, "load": load, "reps": a.reps}, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
