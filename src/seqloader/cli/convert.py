"""``seqloader convert IN OUT``: rewrite data as an HDF file that ``HDFSource`` reads fastest, or
as tar shards for object storage.

- RETURNN HDF (chunked, as its writers make it) -> contiguous RETURNN HDF (memory-mappable, still
  readable by RETURNN);
- an audio manifest (.jsonl) or OggZip (.zip) -> RETURNN HDF with the features precomputed;
- ``--to shar|nemo|webdataset``: any of these (or a Lhotse cuts manifest, ``.jsonl.gz``) -> a
  folder OUT of tar shards (``seqloader.shards.write_shards``): audio when IN has audio, else
  (Shar only) feature frames.

The library's writers put everything into a temporary file next to OUT and rename it at the end,
so an interrupted convert never leaves a half-written file under OUT.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from seqloader.cli.config import HDF_SUFFIXES, load_data
from seqloader.cli.options import add_command, add_output_options
from seqloader.cli.output import human, print_json, progress_bar
from seqloader.errors import OptionError
from seqloader.sources.base import Source, read_batch
from seqloader.sources.forwarding import Forwarding

HELP = (
    "chunked RETURNN HDF -> contiguous HDF, audio manifest/OggZip -> HDF (atomic write), or any "
    "of them -> tar shards (--to shar|nemo|webdataset)"
)
SHARD_LAYOUTS = ("shar", "nemo", "webdataset")


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = add_command(sub, "convert", HELP)
    p.add_argument(
        "input",
        type=Path,
        metavar="IN",
        help="RETURNN HDF file, audio manifest (.jsonl), OggZip (.zip) or config",
    )
    p.add_argument(
        "output", type=Path, metavar="OUT", help="the HDF file (.hdf) or shard folder to write"
    )
    p.add_argument("--force", action="store_true", help="replace OUT if it exists")
    p.add_argument(
        "--to",
        choices=("hdf", *SHARD_LAYOUTS),
        default="hdf",
        help="hdf (default), or tar shards: Lhotse Shar, NeMo tarred audio, WebDataset",
    )
    p.add_argument(
        "--shard-size", type=int, default=1000, metavar="N", help="sequences per shard (1000)"
    )
    add_output_options(p)
    return p


def run(args: argparse.Namespace) -> int:
    if args.to in SHARD_LAYOUTS:
        return _to_shards(args)
    out: Path = args.output
    if out.suffix.lower() not in HDF_SUFFIXES:
        raise OptionError(
            f"OUT: got {str(out)!r}, expected an HDF file name ({', '.join(HDF_SUFFIXES)})"
        )
    if out.exists() and not args.force and out.resolve() != args.input.resolve():
        raise OptionError(f"OUT {str(out)!r} exists; pass --force to replace it")
    if not out.parent.is_dir():
        raise OptionError(f"OUT: folder {str(out.parent)!r} does not exist")
    config = load_data(args.input)
    show = not args.no_progress and not args.json
    t0 = time.perf_counter()
    if config.source.kind == "hdf":
        if len(config.source.paths) != 1:
            raise OptionError(
                f"IN names {len(config.source.paths)} HDF files; convert rewrites one file at a "
                "time (run it once per file)"
            )
        from seqloader.sources.hdf_write import convert_contiguous

        _with_spinner(
            show,
            f"rewriting {args.input.name} contiguously",
            lambda: convert_contiguous(config.source.paths[0], out),
        )
        what = "RETURNN HDF -> contiguous HDF"
    else:
        from seqloader.sources.hdf_write import write_hdf

        counting = CountingSource(config.open(), show, f"writing {out.name}")
        try:
            write_hdf(out, counting)
        finally:
            counting.close()
        what = f"{config.source.kind} -> HDF"
    from seqloader.sources.hdf import HDFSource

    result = HDFSource([out])
    info: dict[str, Any] = {
        "input": str(args.input),
        "output": str(out),
        "conversion": what,
        "sequences": len(result),
        "keys": {k: spec.describe() for k, spec in result.schema.items()},
        "bytes": os.path.getsize(out),
        "wall_s": round(time.perf_counter() - t0, 3),
    }
    _report(args, info, f"{what}: {info['sequences']} sequences", out)
    return 0


def _to_shards(args: argparse.Namespace) -> int:
    """IN -> a folder of ``args.to`` shards. Audio inputs keep their audio (no features)."""
    out: Path = args.output
    if out.exists() and any(out.iterdir()) and not args.force:
        raise OptionError(f"OUT {str(out)!r} is a non-empty folder; pass --force to write into it")
    if args.shard_size < 1:
        raise OptionError(f"--shard-size: got {args.shard_size}, expected >= 1")
    source: Any
    if str(args.input).endswith(".jsonl.gz"):  # a Lhotse cuts manifest
        from seqloader import LhotseSource

        try:
            source = LhotseSource(str(args.input), keys=["audio", "text"])
        except OptionError:  # no texts: audio only
            source = LhotseSource(str(args.input), keys=["audio"])
    else:
        config = load_data(args.input)
        if config.source.kind in ("manifest", "oggzip"):
            from seqloader.cli.config import open_audio

            opts = {**config.source.options, "features": False}
            source = open_audio(config.source.paths[0], opts)
        else:
            source = config.open()
    from seqloader.shards import write_shards

    show = not args.no_progress and not args.json
    t0 = time.perf_counter()
    counting = CountingSource(source, show, f"writing {args.to} shards")
    try:
        rate = getattr(getattr(source, "options", None), "rate", None)
        written = write_shards(
            counting,
            out,
            args.to,
            shard_size=args.shard_size,
            sample_rate=rate,
        )
    finally:
        counting.close()
    info: dict[str, Any] = {
        "input": str(args.input),
        "output": str(out),
        "conversion": f"-> {args.to} shards",
        "sequences": written.sequences,
        "shards": len(written.tars),
        "bytes": sum(os.path.getsize(p) for p in written.tars + written.listings),
        "wall_s": round(time.perf_counter() - t0, 3),
    }
    done = f"{args.to} shards: {info['sequences']} sequences in {info['shards']} shards"
    _report(args, info, done, out)
    return 0


def _with_spinner(show: bool, desc: str, work: Callable[[], None]) -> None:
    """The contiguous rewrite has no per-sequence hook: one bar for the file while it runs."""
    bar = progress_bar(show, desc, 1, "file")
    try:
        work()
        bar.update(1)
    finally:
        bar.close()


class CountingSource(Forwarding):
    """Passes a source through unchanged and advances a progress bar per sequence read."""

    def __init__(self, source: Source, show: bool, desc: str) -> None:
        self._inner = source
        self._bar = progress_bar(show, desc, len(source), "seq")

    def read(self, index: int) -> dict[str, np.ndarray]:
        out = self._inner.read(index)
        self._bar.update(1)
        return out

    def read_many(self, indices: np.ndarray) -> list[dict[str, np.ndarray]]:
        out = read_batch(self._inner, indices)
        self._bar.update(len(indices))
        return out

    def close(self) -> None:
        self._bar.close()

    def __repr__(self) -> str:
        return repr(self._inner)


def _report(args: argparse.Namespace, info: dict[str, Any], done: str, out: Path) -> None:
    """A conversion's result: ``info`` as JSON with ``--json``, else one line (``done``, then the
    bytes written to ``out`` and the time)."""
    if args.json:
        print_json(info)
    else:
        print(f"{done}, {human(info['bytes'])}B written to {out} in {info['wall_s']:.1f} s")
