"""Decoding an audio file's planned span straight into its row of a padded batch.

The general read (``sf.read`` of the whole file as ``[frames, channels]``, then mono, the segment,
the fit to the plan, then padding into the batch) copies every sample three to four times around
the decode. A mono file already at the planned rate needs none of that: its planned span is
decoded by libsndfile into the destination row itself (``SoundFile.read(out=...)``), after a
seek to the span's start, and only as many frames as the plan holds. The values are the general
read's exactly: libsndfile's float conversion is per sample, whatever is read around it.

FLAC is decoded by dr_flac where ``audio.flac`` can (straight into the row, the whole stream
decoded to check its length: see there), else by libsndfile as above.

``span_into`` says when it cannot do that (another rate or channel count, an MP3 file, an
unreadable file, a span or length the plan does not describe): the caller then reads the general way, which names
any error as before.
"""

from __future__ import annotations

import io

import numpy as np

from seqloader.audio.flac import BrokenFlac, flac_span_into
from seqloader.audio.keys import length_problem
from seqloader.audio.manifest import import_soundfile


def span_into(
    blob: bytes | memoryview,
    dst: np.ndarray,
    rate: int,
    tolerance_s: float,
    segment: tuple[int, int] | None = None,
) -> int | None:
    """Decode mono ``blob`` (a whole audio file) at ``rate`` into ``dst`` (float32 ``[want]``, C-
    contiguous; ``want`` = the planned samples): samples ``[start, start + count)`` of the file for
    ``segment = (start, count)`` (a NeMo segment), else the whole file, cropped to ``want``.
    Returns how many samples were written (the rest of ``dst`` is untouched), or None when the
    general read must do it (``dst`` may then hold anything): not mono at ``rate``, MP3 (libsndfile's MP3 seek is not sample-exact:
    the bit reservoir before the seek point is missing; values differ up to ~1e-2), not decodable, a segment past the file's end, or
    a length more than ``tolerance_s`` off the plan (the general read names those).

    >>> import soundfile as sf
    >>> buf = io.BytesIO()
    >>> sf.write(buf, np.arange(8, dtype="float32") / 8, 16000, format="WAV", subtype="FLOAT")
    >>> dst = np.zeros(4, "float32")
    >>> span_into(buf.getvalue(), dst, 16000, 0.01, segment=(2, 4)), dst.tolist()
    (4, [0.25, 0.375, 0.5, 0.625])
    """
    want = len(dst)
    flac = _flac_into(blob, dst, rate, tolerance_s, segment)
    if flac != -1:
        return flac
    sf = import_soundfile()
    try:
        with sf.SoundFile(io.BytesIO(blob)) as snd:
            if snd.channels != 1 or snd.samplerate != rate or snd.format == "MP3":
                return None
            total = snd.frames
            start, count = (0, total) if segment is None else segment
            if start + count > total + tolerance_s * rate:
                return None
            held = max(0, min(count, total - start))  # what slicing the whole decode would hold
            if length_problem(held, rate, want, tolerance_s) is not None:
                return None
            n = min(held, want)
            if n == 0:
                return 0
            if start:
                snd.seek(start)
            got = snd.read(n, dtype="float32", out=dst[:n])
            return n if len(got) == n else None
    except Exception:  # soundfile raises several kinds; the general read names the error
        return None


def _flac_into(
    blob: bytes | memoryview,
    dst: np.ndarray,
    rate: int,
    tolerance_s: float,
    segment: tuple[int, int] | None,
) -> int | None:
    """``span_into`` by dr_flac (``audio.flac``), with the same answers; -1 where dr_flac is not
    used (soundfile then decides). A cut or damaged stream -> None: the general read names it."""
    if segment is not None:  # dr_flac checks a stream by decoding all of it: a segment of a long
        return -1  # recording (NeMo's long-form manifests) costs only its span through a seek
    want = len(dst)
    try:
        got = flac_span_into(blob, dst, rate, 0)
    except BrokenFlac:
        return None
    if got is None:
        return -1
    n, held = got
    if length_problem(held, rate, want, tolerance_s) is not None:
        return None
    return n
