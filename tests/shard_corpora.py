"""Shard corpora for the shard tests: written by ``write_shards`` (all three layouts), by Lhotse's
own ``SharWriter``, and by hand with ``tarfile`` (the broken ones)."""

from __future__ import annotations

import io
import os
import tarfile
from pathlib import Path

import numpy as np
from benchmarks.shard_peers import nemo_convert as nemo_convert  # also the benchmark's

import seqloader as sl
from conftest import index_corpus
from seqloader.shards import ShardSource, write_shards
from seqloader.synthetic.audio import write_audio_corpus


def audio_corpus(folder: Path, n: int = 7, shard_size: int = 3) -> dict[str, object]:
    """The same utterances as an AudioSource manifest and as the three shard layouts."""
    c = write_audio_corpus(folder, n, seconds=(0.3, 1.2), seed=5)
    src = sl.AudioSource(c.jsonl, keys=["audio", "text"])
    out: dict[str, object] = {"jsonl": c.jsonl, "source": src}
    for layout in ("shar", "nemo", "webdataset"):
        out[layout] = write_shards(src, folder / layout, layout, shard_size=shard_size)
    return out


def index_shar(
    folder: Path, n: int, seed: int = 0, shard_size: int = 5, offset: int = 0
) -> ShardSource:
    """An index corpus (sequence i: frames filled with ``i + offset``, 1..20 frames) as Shar numpy
    features, read back. Written once per folder and arguments."""
    whole = index_corpus(n, seed=seed, max_len=20, dim=1)
    data = [whole.read(i)["data"] + offset for i in range(n)]
    src = sl.MemorySource({"data": data}, tags=[f"utt-{i + offset}" for i in range(n)])
    out = folder / f"index-{n}-{seed}-{shard_size}-{offset}"
    if not out.exists():
        write_shards(src, out, "shar", shard_size=shard_size, feature_format="numpy")
    return ShardSource.lhotse_shar(out, index_dir=folder / "index")


def tar_of(path: Path, members: list[tuple[str, bytes]]) -> Path:
    with tarfile.open(path, "w") as tar:
        for name, data in members:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def wav(seconds: float = 0.2, rate: int = 16000, value: float = 0.1) -> bytes:
    import soundfile as sf

    buf = io.BytesIO()
    sf.write(buf, np.full(round(seconds * rate), value, np.float32), rate, format="WAV")
    return buf.getvalue()


def size_of(path: str | os.PathLike) -> int:
    return os.path.getsize(path)


def nemo_expand_sharded_filepaths(paths: object) -> list[str]:
    """NeMo's ``expand_sharded_filepaths`` (``nemo/collections/asr/data/audio_to_text.py``, as
    ``shard_strategy="replicate"``, one rank) re-implemented for the tests: in a string, ``(``,
    ``[``, ``<``, ``_OP_`` become ``{`` and ``)``, ``]``, ``>``, ``_CL_`` become ``}``, then
    ``braceexpand.braceexpand(..., escape=False)``; a list is returned as it is."""
    import braceexpand

    if isinstance(paths, str):
        for opening in ("(", "[", "<", "_OP_"):
            paths = paths.replace(opening, "{")
        for closing in (")", "]", ">", "_CL_"):
            paths = paths.replace(closing, "}")
        return list(braceexpand.braceexpand(paths, escape=False))
    return list(paths)  # type: ignore[call-overload]


def long_recordings(folder: Path, n: int, seconds: float = 3.0, rate: int = 16000) -> list[Path]:
    """``n`` wav recordings whose every sample says where it is (a ramp, a different one per
    recording), so a segment read from the wrong place shows."""
    import soundfile as sf

    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(n):
        t = np.arange(round(seconds * rate))
        path = folder / f"rec{i}.wav"
        sf.write(path, ((t % 997) / 997.0 - 0.5 + 0.01 * i).astype(np.float32), rate)
        out.append(path)
    return out
