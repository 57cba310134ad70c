"""Band-limited resampling by a rational factor, with torch on CPU (no scipy, no torchaudio).

Used when an audio file's rate differs from the features' rate, and by speed perturbation. The
output length is a closed formula (``resampled_length``), so planning can know it without decoding.

Method: windowed-sinc interpolation evaluated at the output instants, written as a polyphase filter
bank. Output ``m`` (rate ``new``) sits at input time ``m * orig / new``; with ``up = new / g`` and
``down = orig / g`` (``g = gcd``), output ``q * up + p`` is input time ``q * down + p * down / up``,
so phase ``p`` is one fixed filter applied with stride ``down``.

The sum runs tap by tap in a fixed order with numpy (not ``conv1d``, whose summation order depends
on torch's thread count): the result is bit-identical in the trainer (many threads) and in a
DataLoader worker (one thread), which worker independence (C3) needs for augmentation.
"""

from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache

import numpy as np

from seqloader.errors import OptionError

ZERO_CROSSINGS = 16  # sinc lobes on each side: longer filters, sharper cut-off
ROLLOFF = 0.945  # cut-off as a fraction of the lower Nyquist rate (room for the transition band)
KAISER_BETA = 8.6  # about 80 dB stop-band attenuation


def reduced_ratio(orig: int, new: int) -> tuple[int, int]:
    """(up, down) with ``new / orig == up / down`` in lowest terms."""
    if orig < 1 or new < 1:
        raise OptionError(f"resample: got rates orig={orig}, new={new}; expected ints >= 1")
    g = math.gcd(orig, new)
    return new // g, orig // g


def resampled_length(n: int | np.ndarray, orig: int, new: int) -> int | np.ndarray:
    """Samples after resampling ``n`` samples from ``orig`` to ``new`` Hz: ``ceil(n * new / orig)``
    (every output instant that falls inside the input)."""
    up, down = reduced_ratio(orig, new)
    return -(-n * up // down)


def speed_ratio(factor: float) -> tuple[int, int]:
    """Speed perturbation by ``factor`` as a resampling ratio (orig, new): a factor of 1.1 plays
    1.1x faster, i.e. ``n / 1.1`` samples. Factors are rounded to a fraction with denominator
    <= 100 (0.9 -> 9/10), which keeps the filter bank small; rounding is monotone, so the slowest
    factor still gives the longest output."""
    if not (0.1 <= factor <= 10.0):
        raise OptionError(f"speed factor: got {factor!r}, expected a float in [0.1, 10]")
    f = Fraction(factor).limit_denominator(100)
    return f.numerator, f.denominator  # n samples at "rate" numerator -> n * den / num


def speed_length(n: int | np.ndarray, factor: float) -> int | np.ndarray:
    """Length after speed perturbation by ``factor`` (exactly what ``speed_perturb`` returns)."""
    return resampled_length(n, *speed_ratio(factor))


def resample(wave: np.ndarray, orig: int, new: int) -> np.ndarray:
    """Resample a 1-D float waveform from ``orig`` to ``new`` Hz -> float32 ``[resampled_length]``."""
    x = np.ascontiguousarray(wave, dtype=np.float32)
    if x.ndim != 1:
        raise OptionError(f"resample: got a waveform of shape {x.shape}, expected 1-D [samples]")
    up, down = reduced_ratio(orig, new)
    if up == down:
        return x
    n_out = int(resampled_length(len(x), orig, new))
    if n_out == 0:
        return np.zeros(0, dtype=np.float32)
    kernel, first_tap = _filter_bank(up, down)  # [taps, up], offset of tap 0 in input samples
    taps = kernel.shape[0]
    steps = -(-n_out // up)  # output blocks of `up` samples
    left = -first_tap
    padded = np.zeros(left + max(len(x), (steps - 1) * down + taps - left), dtype=np.float32)
    padded[left : left + len(x)] = x
    out = np.zeros((up, steps), dtype=np.float32)  # out[p, q] = output q * up + p
    term = np.empty_like(out)
    span = (steps - 1) * down + 1
    for k in range(taps):  # fixed summation order: same bits in every process
        np.multiply(kernel[k, :, None], padded[None, k : k + span : down], out=term)
        out += term
    return out.T.reshape(-1)[:n_out]


@lru_cache(maxsize=64)
def _filter_bank(up: int, down: int) -> tuple[np.ndarray, int]:
    """Polyphase windowed-sinc filters ``[taps, up]`` and the input offset of tap 0 (<= 0).

    Phase ``p`` evaluates ``h(p * down / up - j)`` for input offsets ``j``, where
    ``h(t) = 2 fc sinc(2 fc t) kaiser(t / W)``, ``fc`` the cut-off in cycles per input sample and
    ``W`` the half width in input samples.
    """
    fc = 0.5 * min(1.0, up / down) * ROLLOFF
    half = ZERO_CROSSINGS / (2 * fc)
    first = math.floor(-half)
    last = math.ceil((up - 1) * down / up + half)
    j = np.arange(first, last + 1, dtype=np.float64)  # [taps]
    t = np.arange(up, dtype=np.float64)[:, None] * down / up - j[None, :]  # [up, taps]
    u = np.clip(t / half, -1.0, 1.0)
    window = np.i0(KAISER_BETA * np.sqrt(1.0 - u * u)) / np.i0(KAISER_BETA)
    window[np.abs(t) > half] = 0.0
    h = 2 * fc * np.sinc(2 * fc * t) * window
    return np.ascontiguousarray(h.T, dtype=np.float32), first
