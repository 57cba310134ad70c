"""Writing any source as tar shards: Lhotse Shar, NeMo tarred audio or WebDataset.

The layouts as their own readers expect them (``CutSet.from_shar`` reads the Shar output; NeMo's
tarred-audio reader the NeMo output, written after NeMo's documented manifest schema:
``audio_filepath`` naming the member, ``duration`` in seconds, ``text``, ``shard_id``). A source
with an ``audio`` key (float32 waveform) gives audio members in ``audio_format``; a source with
float ``data`` frames (and no audio) gives Shar ``features`` members (lilcom or numpy, as Lhotse's
``ArrayTarWriter`` writes them). A ``text`` key (utf-8 bytes) gives the texts. Every shard file is
written under a temporary name and renamed when complete.
"""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
import re
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from seqloader.audio.manifest import import_soundfile
from seqloader.errors import OptionError
from seqloader.extras import require
from seqloader.sources.base import Source

LAYOUTS = ("shar", "nemo", "webdataset")
AUDIO_FORMATS = {"flac": "PCM_16", "wav": "PCM_16"}
FEATURE_FORMATS = ("lilcom", "numpy")


@dataclass(frozen=True)
class Written:
    """What a writer wrote: the tars and listings, per shard, and how many sequences."""

    tars: list[str]
    listings: list[str]
    sequences: int


def write_shards(
    source: Source,
    out_dir: str | os.PathLike,
    layout: str,
    *,
    shard_size: int = 1000,
    sample_rate: int | None = None,
    audio_format: str = "flac",
    feature_format: str = "lilcom",
    frame_shift_s: float = 0.01,
) -> Written:
    """Write ``source`` into ``out_dir`` as ``layout`` shards of ``shard_size`` sequences.

    ``sample_rate``: the rate of the source's ``audio`` key (default: the source's own
    ``options.rate``, as audio sources have). ``frame_shift_s``: the frame shift recorded for Shar
    features.

    >>> import tempfile, numpy as np, seqloader as sl
    >>> src = sl.MemorySource({"data": [np.ones((3, 2), "float32")]}, tags=["a"])
    >>> out = tempfile.mkdtemp()
    >>> write_shards(src, out, "shar", feature_format="numpy").sequences
    1
    >>> sorted(os.listdir(out))
    ['cuts.000000.jsonl.gz', 'features.000000.tar']
    """
    if layout not in LAYOUTS:
        raise OptionError(f"write_shards: layout {layout!r}, expected one of {LAYOUTS}")
    if isinstance(shard_size, bool) or not isinstance(shard_size, int) or shard_size < 1:
        raise OptionError(f"write_shards: shard_size {shard_size!r}, expected an int >= 1")
    if audio_format not in AUDIO_FORMATS:
        raise OptionError(f"audio_format {audio_format!r}, expected one of {sorted(AUDIO_FORMATS)}")
    if feature_format not in FEATURE_FORMATS:
        raise OptionError(f"feature_format {feature_format!r}, expected one of {FEATURE_FORMATS}")
    keys = set(source.keys)
    kind = "audio" if "audio" in keys else "data" if "data" in keys else None
    if kind is None:
        raise OptionError(
            f"write_shards: {source!r} has neither 'audio' nor 'data'; shards hold audio (or, "
            "for Shar, feature frames)"
        )
    if kind == "data" and layout != "shar":
        raise OptionError(
            f"write_shards: {layout} shards hold audio, but {source!r} has only 'data' frames; "
            "write Shar (features), or open the source with keys=['audio', ...]"
        )
    rate = sample_rate or getattr(getattr(source, "options", None), "rate", None)
    if kind == "audio" and not rate:
        raise OptionError("write_shards: the source's audio rate is unknown; pass sample_rate=...")
    out = os.fspath(out_dir)
    os.makedirs(out, exist_ok=True)
    writer = _Writer(out, layout, kind, int(rate or 0), audio_format, feature_format, frame_shift_s)
    has_text = "text" in keys
    with contextlib.ExitStack() as stack:
        for i in range(len(source)):
            if i % shard_size == 0:
                stack.close()
                stack.enter_context(writer.shard(i // shard_size))
            seq = source.read(i)
            text = (
                bytes(np.asarray(seq["text"], dtype=np.uint8)).decode("utf-8") if has_text else None
            )
            writer.add(source.tag(i), np.asarray(seq[kind]), text)
    return Written(writer.tars, writer.listings, len(source))


class _Writer:
    def __init__(
        self,
        out: str,
        layout: str,
        kind: str,
        rate: int,
        audio_format: str,
        feature_format: str,
        frame_shift_s: float,
    ) -> None:
        self.out, self.layout, self.kind, self.rate = out, layout, kind, rate
        self.audio_format, self.feature_format = audio_format, feature_format
        self.frame_shift_s = frame_shift_s
        self.tars: list[str] = []
        self.listings: list[str] = []
        self._tar: tarfile.TarFile | None = None
        self._lines: list[dict[str, Any]] = []
        self._shard = 0
        self._all: list[dict[str, Any]] = []  # NeMo: every entry, for the one-file manifest

    @contextlib.contextmanager
    def shard(self, number: int) -> Iterator[None]:
        self._shard = number
        tar_path, listing = self._names(number)
        tmp = f"{tar_path}.tmp"
        self._lines = []
        with tarfile.open(tmp, "w", format=tarfile.PAX_FORMAT) as tar:
            self._tar = tar
            yield
        self._tar = None
        os.replace(tmp, tar_path)
        self.tars.append(tar_path)
        if listing is not None:
            _write_lines(listing, self._lines)
            self.listings.append(listing)
        if self.layout == "nemo":
            self._all += self._lines
            _write_lines(os.path.join(self.out, "tarred_audio_manifest.json"), self._all)

    def _names(self, n: int) -> tuple[str, str | None]:
        if self.layout == "shar":
            field = "recording" if self.kind == "audio" else "features"
            return (
                os.path.join(self.out, f"{field}.{n:06d}.tar"),
                os.path.join(self.out, f"cuts.{n:06d}.jsonl.gz"),
            )
        if self.layout == "nemo":
            folder = os.path.join(self.out, "sharded_manifests")
            os.makedirs(folder, exist_ok=True)
            return os.path.join(self.out, f"audio_{n}.tar"), os.path.join(
                folder, f"manifest_{n}.json"
            )
        return os.path.join(self.out, f"shard-{n:06d}.tar"), None

    def _member(self, name: str, data: bytes) -> None:
        assert self._tar is not None
        info = tarfile.TarInfo(name)
        info.size = len(data)
        info.mode = 0o644
        self._tar.addfile(info, io.BytesIO(data))

    def add(self, tag: str, array: np.ndarray, text: str | None) -> None:
        if self.kind == "audio":
            wave = np.asarray(array, dtype=np.float32).reshape(-1)
            buf = io.BytesIO()
            fmt = self.audio_format
            import_soundfile().write(
                buf, wave, self.rate, format=fmt.upper(), subtype=AUDIO_FORMATS[fmt]
            )
            data, ext, samples = buf.getvalue(), fmt, len(wave)
            duration = samples / self.rate
        else:
            feats = np.ascontiguousarray(array, dtype=np.float32)
            if feats.ndim != 2:
                raise OptionError(
                    f"write_shards: 'data' of {tag!r} has shape {feats.shape}, expected [T, F]"
                )
            if self.feature_format == "lilcom":
                data, ext = require("lilcom", "writing lilcom features").compress(feats), "llc"
            else:
                buf = io.BytesIO()
                np.save(buf, feats, allow_pickle=False)
                data, ext = buf.getvalue(), "npy"
            duration = len(feats) * self.frame_shift_s
        getattr(self, f"_add_{self.layout}")(tag, data, ext, duration, text, array)

    def _add_shar(
        self, tag: str, data: bytes, ext: str, duration: float, text: str | None, array: np.ndarray
    ) -> None:
        cut: dict[str, Any] = {"id": tag, "start": 0, "duration": duration, "channel": 0}
        sups = [] if text is None else [{
            "id": tag, "recording_id": tag, "start": 0.0, "duration": duration, "channel": 0,
            "text": text,
        }]  # fmt: skip
        cut["supervisions"] = sups
        if self.kind == "audio":
            manifest: dict[str, Any] = {
                "id": tag,
                "sources": [{"type": "shar", "channels": [0], "source": ""}],
                "sampling_rate": self.rate,
                "num_samples": int(np.asarray(array).size),
                "duration": duration,
                "channel_ids": [0],
            }
            cut["recording"] = manifest
        else:
            frames, dim = np.asarray(array).shape
            manifest = {
                "type": "seqloader", "num_frames": int(frames), "num_features": int(dim),
                "frame_shift": self.frame_shift_s, "sampling_rate": self.rate or 16000,
                "start": 0, "duration": duration, "storage_type": "shar", "storage_path": "",
                "storage_key": "",
            }  # fmt: skip
            cut["features"] = manifest
        cut["type"] = "MonoCut"
        self._member(f"{tag}.{ext}", data)
        self._member(f"{tag}.json", (json.dumps(manifest) + "\n").encode())
        self._lines.append(cut)

    def _add_nemo(
        self, tag: str, data: bytes, ext: str, duration: float, text: str | None, array: np.ndarray
    ) -> None:
        name = f"{_safe(tag, '/')}.{ext}"
        self._member(name, data)
        entry: dict[str, Any] = {"audio_filepath": name, "duration": duration}
        entry["text"] = text if text is not None else ""
        entry["shard_id"] = self._shard
        self._lines.append(entry)

    def _add_webdataset(
        self, tag: str, data: bytes, ext: str, duration: float, text: str | None, array: np.ndarray
    ) -> None:
        key = _safe(tag, "/.")
        self._member(f"{key}.{ext}", data)
        info: dict[str, Any] = {"duration": duration, "sampling_rate": self.rate}
        if text is not None:
            info["text"] = text
        self._member(f"{key}.json", json.dumps(info).encode())
        if text is not None:
            self._member(f"{key}.txt", text.encode())


def _safe(tag: str, bad: str) -> str:
    return re.sub("[" + re.escape(bad) + "]", "_", tag)


def _write_lines(path: str, lines: list[dict[str, Any]]) -> None:
    tmp = f"{path}.tmp"
    text = "".join(json.dumps(line) + "\n" for line in lines).encode()
    with open(tmp, "wb") as fh:
        fh.write(gzip.compress(text, mtime=0) if path.endswith(".gz") else text)
    os.replace(tmp, path)
