"""FLAC decoded by dr_flac (the ``miniaudio`` package) when it is installed, soundfile otherwise.

Decoding was 61-62% of a shard-reading worker's CPU with libsndfile (libFLAC, then a per-sample
copy into the caller's array). dr_flac decodes the benchmark's FLAC in about half libsndfile's CPU
(``benchmarks/flac_decoders.py``), straight into the caller's float32 array, with the same samples
to the bit: both scale the left-aligned integer by a power of two (``x / 2**15`` for 16 bit,
``x / 2**23`` for 24 bit), exact in float32 (``tests/test_audio_flac.py``: 16 and 24 bit, 1-3
channels, 0-5000 samples).

Safety: dr_flac reads only the bytes it is given (a member's own bytes), and it skips a frame
whose checksum fails instead of raising; so every decode here runs to the stream's end and checks
that it produced exactly the sample count of the STREAMINFO header, else raises
``BrokenFlac`` (cut or damaged). Streams dr_flac is not used for (no FLAC magic, an unknown
length in the header, a bit depth other than 8/16/24, or miniaudio missing) go to soundfile.
``SEQLOADER_FLAC_DECODER=soundfile`` in the environment forces soundfile (DataLoader workers
inherit it), e.g. to compare the two.
"""

from __future__ import annotations

import io
import os
from functools import lru_cache
from typing import Any

import numpy as np

from seqloader.errors import MissingDependencyError
from seqloader.extras import require

_CHUNK = 1 << 14  # frames per read into a scratch array when samples are skipped or checked


class BrokenFlac(ValueError):
    """A FLAC stream that is cut or damaged (it decodes to fewer samples than its header says)."""


def import_soundfile():
    """soundfile is the ``audio`` extra: imported when audio is first decoded, not by seqloader."""
    return require("soundfile", "decoding audio")


@lru_cache(maxsize=1)
def _dr_flac() -> tuple[Any, Any] | None:
    """miniaudio's cffi (ffi, lib) with dr_flac inside, or None when it is missing or soundfile
    is asked for."""
    if os.environ.get("SEQLOADER_FLAC_DECODER", "").lower() == "soundfile":
        return None
    try:
        miniaudio = require("miniaudio", "decoding FLAC with dr_flac")
    except MissingDependencyError:
        return None
    return miniaudio.ffi, miniaudio.lib


def flac_decoder() -> str:
    """Which library decodes FLAC here: ``"miniaudio"`` (dr_flac) or ``"soundfile"``.

    >>> flac_decoder() in ("miniaudio", "soundfile")
    True
    """
    return "soundfile" if _dr_flac() is None else "miniaudio"


class _Flac:
    """An open dr_flac decoder over ``data`` (the stream's bytes, which dr_flac reads in place:
    kept referenced until ``close``)."""

    def __init__(self, data: Any, handle: Any, ffi: Any, lib: Any) -> None:
        self._data, self._h, self._ffi, self._lib = data, handle, ffi, lib
        self.channels = int(handle.channels)
        self.rate = int(handle.sampleRate)
        self.total = int(handle.totalPCMFrameCount)
        self.done = 0  # frames decoded so far

    def read(self, out: np.ndarray) -> int:
        """Decode the next ``len(out) // channels`` frames into float32 C-contiguous ``out``
        (interleaved) -> frames written."""
        if out.dtype != np.float32 or not out.flags.c_contiguous:  # dr_flac writes float32 raw
            raise ValueError(f"FLAC decoding needs float32 C-contiguous output, got {out.dtype}")
        frames = out.size // self.channels
        if frames == 0:
            return 0
        ptr = self._ffi.from_buffer("float[]", out, require_writable=True)
        got = int(self._lib.ma_dr_flac_read_pcm_frames_f32(self._h, frames, ptr))
        self.done += got
        return got

    def skip(self, frames: int) -> None:
        """Decode and drop up to ``frames`` frames (stops early at the stream's end)."""
        if frames <= 0:
            return
        scratch = np.empty(min(frames, _CHUNK) * self.channels, np.float32)
        while frames > 0:
            got = self.read(scratch[: min(frames, _CHUNK) * self.channels])
            if got == 0:
                return
            frames -= got

    def finish(self) -> None:
        """Decode what is left and check the stream held exactly its header's frames."""
        self.skip(self.total - self.done)
        if self.done != self.total:
            raise BrokenFlac(
                f"the FLAC stream ends after {self.done} of the {self.total} samples its header "
                f"says ({len(self._data)} bytes): it is cut or a frame is damaged"
            )

    def close(self) -> None:
        self._lib.ma_dr_flac_close(self._h)


def _open(blob: bytes | memoryview) -> _Flac | None:
    """``blob`` opened with dr_flac, or None where soundfile decodes it (see the module)."""
    dr = _dr_flac()
    if dr is None or blob[:4] != b"fLaC":
        return None
    ffi, lib = dr
    data = ffi.from_buffer(blob)  # a pointer into blob itself, alive as long as the decoder
    handle = lib.ma_dr_flac_open_memory(data, len(blob), ffi.NULL)
    if not handle:
        return None  # soundfile names what is wrong with the header
    flac = _Flac(data, handle, ffi, lib)
    if flac.total == 0 or int(handle.bitsPerSample) not in (8, 16, 24):
        flac.close()
        return None
    return flac


def read_audio(blob: bytes | memoryview) -> tuple[np.ndarray, int]:
    """A whole audio file's bytes -> (float32 ``[frames, channels]``, sample rate), as
    ``soundfile.read(..., dtype="float32", always_2d=True)`` gives them; FLAC by dr_flac where it
    can (``BrokenFlac`` for a cut or damaged stream), anything else by soundfile (its own errors).

    >>> import soundfile as sf
    >>> buf = io.BytesIO()
    >>> sf.write(buf, np.array([0.0, 0.5, -0.25], "float32"), 8000, format="FLAC")
    >>> wave, rate = read_audio(buf.getvalue())
    >>> wave[:, 0].tolist(), rate
    ([0.0, 0.5, -0.25], 8000)
    """
    flac = _open(blob)
    if flac is None:
        sf = import_soundfile()
        wave, rate = sf.read(io.BytesIO(blob), dtype="float32", always_2d=True)
        return wave, int(rate)
    try:
        out = np.empty((flac.total, flac.channels), np.float32)
        flac.read(out)
        flac.finish()
        return out, flac.rate
    finally:
        flac.close()


def flac_span_into(
    blob: bytes | memoryview, dst: np.ndarray, rate: int, start: int
) -> tuple[int, int] | None:
    """Mono FLAC ``blob`` at ``rate``: its samples ``[start, start + len(dst))`` decoded straight
    into float32 ``dst`` (C-contiguous), the whole stream decoded and its length checked
    (``BrokenFlac``) -> (samples written, the stream's samples); None where dr_flac is not used or
    the stream is not mono at ``rate`` (the caller decodes another way).

    >>> import soundfile as sf
    >>> buf = io.BytesIO()
    >>> sf.write(buf, np.arange(6, dtype="float32") / 8, 16000, format="FLAC")
    >>> dst = np.zeros(3, "float32")
    >>> got = flac_span_into(buf.getvalue(), dst, 16000, 2)
    >>> got is None or (got, dst.tolist()) == ((3, 6), [0.25, 0.375, 0.5])
    True
    """
    flac = _open(blob)
    if flac is None:
        return None
    try:
        if flac.channels != 1 or flac.rate != rate:
            return None
        flac.skip(start)
        n = flac.read(dst) if flac.done == start else 0
        flac.finish()
        return n, flac.total
    finally:
        flac.close()
