"""FLAC decoders side by side on the shard benchmark's members: CPU per audio second over
libsndfile's (``soundfile.read``), and whether the samples equal libsndfile's to the bit.

    python -m benchmarks.flac_decoders [--utterances 240] [--repeats 5]

The decoders: libsndfile (``soundfile.read``; ``SoundFile.read(out=...)`` into a given array),
dr_flac as seqloader uses it (``seqloader.audio.flac.read_audio``: float32 straight into the array,
the stream's length checked) and through ``miniaudio.flac_read_s16`` then ``/ 32768``, and
ffmpeg's FLAC decoder through PyAV (``av``; measured only where it is installed: it is not a
seqloader dependency). Every pass decodes every member once in this process; the passes of all
decoders are interleaved, ``--repeats`` times, and each ratio is the median of its per-repetition
ratios. Results: ``benchmarks/results/flac_decoders.json``.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from benchmarks.shards import corpus
from seqloader.audio import flac

HERE = Path(__file__).resolve().parent


def decoders() -> dict[str, Callable[[bytes], np.ndarray]]:
    """name -> decode(blob) -> float32 ``[frames, channels]``."""
    import soundfile as sf

    def sf_read(blob: bytes) -> np.ndarray:
        return sf.read(io.BytesIO(blob), dtype="float32", always_2d=True)[0]

    def sf_into(blob: bytes) -> np.ndarray:
        with sf.SoundFile(io.BytesIO(blob)) as snd:
            out = np.empty((snd.frames, snd.channels), np.float32)
            snd.read(out=out)
            return out

    found = {"libsndfile read": sf_read, "libsndfile read(out=)": sf_into}
    if flac.flac_decoder() == "miniaudio":
        import miniaudio

        def ma_s16(blob: bytes) -> np.ndarray:
            got = miniaudio.flac_read_s16(blob)
            ints = np.frombuffer(got.samples, np.int16).reshape(-1, got.nchannels)
            return ints.astype(np.float32) / 32768.0

        found["dr_flac (seqloader.audio.flac)"] = lambda blob: flac.read_audio(blob)[0]
        found["dr_flac int16 / 32768"] = ma_s16
    if importlib.util.find_spec("av") is not None:
        import av

        def pyav(blob: bytes) -> np.ndarray:
            with av.open(io.BytesIO(blob), format="flac") as box:
                parts = [f.to_ndarray() for f in box.decode(audio=0)]  # int16 [channels, n]
            return (np.concatenate(parts, axis=1).T / 32768.0).astype(np.float32)

        found[f"ffmpeg (av {av.__version__})"] = pyav
    return found


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--utterances", type=int, default=240)
    p.add_argument("--repeats", type=int, default=5)
    args = p.parse_args(argv)
    shar = corpus(args.utterances)
    blobs = [f.read_bytes() for f in sorted((shar.parent / "corpus").rglob("*.flac"))]
    found = decoders()
    reference = [found["libsndfile read"](b) for b in blobs]
    seconds = sum(len(r) for r in reference) / 16000
    identical = {}
    for name, decode in found.items():
        identical[name] = all(np.array_equal(decode(b), r) for b, r in zip(blobs, reference))
    runs: dict[str, list[float]] = {name: [] for name in found}
    load = os.getloadavg()
    for r in range(args.repeats):
        for name in found if r % 2 == 0 else list(found)[::-1]:
            start = time.process_time()
            for b in blobs:
                found[name](b)
            runs[name].append((time.process_time() - start) / seconds)
    base = runs["libsndfile read"]
    result = {
        "members": len(blobs),
        "audio_seconds": seconds,
        "repeats": args.repeats,
        "cpu_over_libsndfile_read": {
            n: float(statistics.median(a / b for a, b in zip(v, base))) for n, v in runs.items()
        },
        "samples_identical_to_libsndfile": identical,
        "load_average_before_after": [load, os.getloadavg()],
    }
    out = HERE / "results" / "flac_decoders.json"
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
