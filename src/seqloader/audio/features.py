"""Log-mel filterbank features: options, the frame formula and the mel matrix (numpy).

The computation is a kernel ``fn(options, wave) -> [frames, n_mels]``. This module's own is numpy
(``numpy_log_mel``); where torch is installed, torch's
(``seqloader.audio.torch_kernels.log_filterbank``, ``torch.stft``: 2-5x faster than numpy's FFT on
CPU, measured on 1-15 s utterances), which imports torch inside the function, so importing audio
I/O loads no torch and features lose no speed. ``use_kernel`` sets another one.

The frame count is a closed formula of the sample count (``LogMel.num_frames``), so a source can
plan in feature frames from the manifest's durations without decoding anything:

    frames = 1 + (samples - n_fft) // hop   if samples >= n_fft, else 0

(no centre padding: the first frame starts at sample 0 and every frame lies inside the signal).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from seqloader.audio.kernel_choice import KernelChoice
from seqloader.audio.torch_kernels import log_filterbank
from seqloader.errors import OptionError


@dataclass(frozen=True)
class LogMel:
    """Options of the log-mel filterbank.

    - ``window_s`` / ``hop_s``: window and hop in seconds (rounded to samples at ``sample_rate``).
    - ``n_fft``: FFT size in samples; default the window length (the window is centred in it
      when larger). The frame formula uses ``n_fft``.
    - ``fmin`` / ``fmax``: band covered by the filters (``fmax`` default: Nyquist).
    - Mel scale: HTK (``2595 log10(1 + f / 700)``); triangular filters of peak 1 on the power
      spectrum of a periodic Hann window; ``log(max(mel, log_floor))``.

    >>> LogMel(n_mels=40)(np.zeros(16000, "float32")).shape  # 1 s at 16 kHz: 25 ms windows, 10 ms hop
    (98, 40)
    >>> LogMel().num_frames(16000)
    98
    """

    sample_rate: int = 16000
    n_mels: int = 80
    window_s: float = 0.025
    hop_s: float = 0.010
    n_fft: int | None = None
    fmin: float = 0.0
    fmax: float | None = None
    log_floor: float = 1e-10

    def __post_init__(self) -> None:
        if not isinstance(self.sample_rate, int) or self.sample_rate < 1:
            raise OptionError(f"LogMel.sample_rate: got {self.sample_rate!r}, expected an int >= 1")
        if not isinstance(self.n_mels, int) or self.n_mels < 1:
            raise OptionError(f"LogMel.n_mels: got {self.n_mels!r}, expected an int >= 1")
        if self.win < 2 or self.hop < 1:
            raise OptionError(
                f"LogMel: window_s={self.window_s}, hop_s={self.hop_s} give {self.win} / "
                f"{self.hop} samples at {self.sample_rate} Hz; expected a window >= 2 and hop >= 1"
            )
        if self.n_fft is not None and self.n_fft < self.win:
            raise OptionError(
                f"LogMel.n_fft: got {self.n_fft}, expected >= the window ({self.win} samples)"
            )
        top = self.sample_rate / 2 if self.fmax is None else self.fmax
        if not (0.0 <= self.fmin < top <= self.sample_rate / 2):
            raise OptionError(
                f"LogMel: got fmin={self.fmin}, fmax={self.fmax}; expected "
                f"0 <= fmin < fmax <= {self.sample_rate / 2} (Nyquist)"
            )
        if self.log_floor <= 0:
            raise OptionError(f"LogMel.log_floor: got {self.log_floor!r}, expected > 0")

    @property
    def win(self) -> int:
        return round(self.window_s * self.sample_rate)

    @property
    def hop(self) -> int:
        return round(self.hop_s * self.sample_rate)

    @property
    def fft_size(self) -> int:
        return self.n_fft or self.win

    def num_frames(self, samples: int | np.ndarray) -> int | np.ndarray:
        """Frames for ``samples`` samples (the module docstring's formula; works on arrays)."""
        n = np.asarray(samples, dtype=np.int64)
        frames = np.where(n >= self.fft_size, 1 + (n - self.fft_size) // self.hop, 0)
        return int(frames) if frames.ndim == 0 else frames

    def mel_matrix(self) -> np.ndarray:
        """Filterbank ``[n_mels, n_fft // 2 + 1]`` (float64)."""
        return _mel_matrix(
            self.sample_rate,
            self.fft_size,
            self.n_mels,
            self.fmin,
            self.fmax or self.sample_rate / 2,
        )

    def __call__(self, wave: np.ndarray) -> np.ndarray:
        """Features of a 1-D waveform at ``sample_rate`` -> float32 ``[num_frames, n_mels]``."""
        x = np.ascontiguousarray(wave, dtype=np.float32)
        if x.ndim != 1:
            raise OptionError(f"LogMel: got a waveform of shape {x.shape}, expected 1-D [samples]")
        if self.num_frames(len(x)) == 0:
            return np.zeros((0, self.n_mels), dtype=np.float32)
        return _KERNEL_CHOICE.get()(self, x)


def hz_to_mel(f: np.ndarray | float) -> np.ndarray:
    return 2595.0 * np.log10(1.0 + np.asarray(f, dtype=np.float64) / 700.0)


def mel_to_hz(m: np.ndarray | float) -> np.ndarray:
    return 700.0 * (10.0 ** (np.asarray(m, dtype=np.float64) / 2595.0) - 1.0)


@lru_cache(maxsize=16)
def _mel_matrix(sr: int, n_fft: int, n_mels: int, fmin: float, fmax: float) -> np.ndarray:
    """Triangles between ``n_mels + 2`` points equally spaced in mel, evaluated at the FFT bins."""
    edges = mel_to_hz(np.linspace(hz_to_mel(fmin), hz_to_mel(fmax), n_mels + 2))  # [n_mels + 2]
    bins = np.arange(n_fft // 2 + 1) * sr / n_fft  # [F] bin frequencies in Hz
    lo, mid, hi = edges[:-2, None], edges[1:-1, None], edges[2:, None]  # [n_mels, 1] each
    rising = (bins[None, :] - lo) / (mid - lo)
    falling = (hi - bins[None, :]) / (hi - mid)
    return np.maximum(0.0, np.minimum(rising, falling))  # [n_mels, F]


def hann_window(options: LogMel) -> np.ndarray:
    """Periodic Hann window of ``win`` samples, centred in ``n_fft`` (as ``torch.stft`` pads a
    shorter window) -> float32 ``[n_fft]``."""
    return _hann_window(options.win, options.fft_size)


@lru_cache(maxsize=16)
def _hann_window(win: int, n_fft: int) -> np.ndarray:
    w = np.zeros(n_fft, dtype=np.float32)
    left = (n_fft - win) // 2
    w[left : left + win] = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(win) / win)
    return w


def numpy_log_mel(options: LogMel, x: np.ndarray) -> np.ndarray:
    """The numpy kernel: float32 ``[samples >= n_fft]`` -> float32 ``[frames, n_mels]``."""
    frames = np.lib.stride_tricks.sliding_window_view(x, options.fft_size)[:: options.hop]
    spec = np.fft.rfft(frames * hann_window(options), axis=-1)  # [frames, n_fft // 2 + 1]
    power = spec.real * spec.real + spec.imag * spec.imag
    mel = power @ options.mel_matrix().T.astype(np.float32)  # [frames, n_mels]
    np.maximum(mel, np.float32(options.log_floor), out=mel)
    return np.log(mel, out=mel)


Kernel = Callable[[LogMel, np.ndarray], np.ndarray]
_KERNEL_CHOICE: KernelChoice[Kernel] = KernelChoice(numpy_log_mel, log_filterbank)


def default_kernel() -> Kernel:
    """torch's kernel where torch is installed, else numpy's; chosen once per process, when
    features are first computed (torch is imported by the kernel, not by this layer)."""
    return _KERNEL_CHOICE.get()


def use_kernel(kernel: Kernel) -> Kernel:
    """Compute log-mel features with ``kernel`` in this process from now on (``LogMel.__call__``
    checks the input; the kernel gets float32 ``[samples >= n_fft]``); returns the previous one
    (``default_kernel()`` if none was chosen yet)."""
    return _KERNEL_CHOICE.use(kernel)
