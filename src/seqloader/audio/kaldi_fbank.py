"""Kaldi-style log mel filterbank frames (Lhotse's ``Fbank``, ``torchaudio.compliance.kaldi.fbank``)
for models trained on them.

Per frame of ``frame_length_s``: remove the DC offset, pre-emphasise (``x[t] - 0.97 x[t-1]``, the
first sample repeated), Povey window (a symmetric Hann window to the power 0.85), zero-pad to the
next power of two (512 at 16 kHz), power spectrum, triangular filters on Kaldi's mel scale
(``1127 ln(1 + f / 700)``) between ``low_freq`` and ``high_freq`` (negative: below Nyquist), then
``log(max(energy, float32 eps))``. The defaults are Lhotse's ``FbankConfig``; torchaudio's
``kaldi.fbank`` defaults are ``snip_edges=True, high_freq=0.0, n_mels=23``.

The frame count is a closed formula of the sample count, so sources plan in frames from durations:

- ``snip_edges=True``: ``1 + (samples - win) // hop`` (0 below one window);
- ``snip_edges=False`` (Lhotse): ``(samples + hop // 2) // hop``, the signal reflected at its ends.

A batch's waveforms are computed together (``KaldiFbank.many``, which ``ShardSource.read_many``
uses; ``many_into`` writes into a padded batch): each waveform's frame span, reflected at its ends,
goes once into one buffer (``kaldi_signal``), every frame of the batch is a row of one strided
view of it (``frame_view``: no frame is copied), and a kernel computes the rest in blocks of
``BLOCK_FRAMES`` rows: torch's (``seqloader.audio.torch_kernels``, which imports torch when frames
are first computed, on one torch thread) where torch is installed, else numpy's.

Dither (random noise) is not offered: it would make a sequence's frames depend on when it is read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from seqloader.audio.kernel_choice import KernelChoice
from seqloader.audio.torch_kernels import kaldi_filterbank
from seqloader.errors import OptionError

_EPS = float(np.finfo(np.float32).eps)
# frames per kernel call: ~1 MB at 512-point FFTs, so each step's array stays in the CPU cache
# (measured: 2.4x faster per frame than one call on a batch's 16k frames, 1.2x than 128 frames)
BLOCK_FRAMES = 512


@dataclass(frozen=True)
class KaldiFbank:
    """Options of Kaldi-style filterbank frames (see the module docstring).

    >>> import numpy as np
    >>> fb = KaldiFbank(n_mels=40)
    >>> fb(np.zeros(16000, "float32") + 0.01).shape, fb.num_frames(16000)
    ((100, 40), 100)
    """

    sample_rate: int = 16000
    n_mels: int = 80
    frame_length_s: float = 0.025
    frame_shift_s: float = 0.01
    preemph_coeff: float = 0.97
    remove_dc_offset: bool = True
    low_freq: float = 20.0
    high_freq: float = -400.0
    snip_edges: bool = False
    round_to_power_of_two: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.sample_rate, int) or self.sample_rate < 1:
            raise OptionError(f"KaldiFbank.sample_rate: got {self.sample_rate!r}, expected >= 1")
        if not isinstance(self.n_mels, int) or self.n_mels < 4:
            raise OptionError(f"KaldiFbank.n_mels: got {self.n_mels!r}, expected an int >= 4")
        if self.win < 2 or self.hop < 1:
            raise OptionError(
                f"KaldiFbank: frame_length_s={self.frame_length_s}, frame_shift_s="
                f"{self.frame_shift_s} give {self.win} / {self.hop} samples; expected >= 2 / >= 1"
            )
        nyquist = self.sample_rate / 2
        high = self.high_freq + nyquist if self.high_freq <= 0 else self.high_freq
        if not (0.0 <= self.low_freq < high <= nyquist):
            raise OptionError(
                f"KaldiFbank: low_freq={self.low_freq}, high_freq={self.high_freq} give the band "
                f"[{self.low_freq}, {high}] Hz; expected 0 <= low < high <= {nyquist} (Nyquist)"
            )

    @property
    def win(self) -> int:
        return int(self.frame_length_s * self.sample_rate)

    @property
    def hop(self) -> int:
        return int(self.frame_shift_s * self.sample_rate)

    @property
    def fft_size(self) -> int:
        return 1 << (self.win - 1).bit_length() if self.round_to_power_of_two else self.win

    def num_frames(self, samples: int | np.ndarray) -> int | np.ndarray:
        """Frames for ``samples`` samples (the module docstring's formula; works on arrays)."""
        n = np.asarray(samples, dtype=np.int64)
        if self.snip_edges:
            frames = np.where(n >= self.win, 1 + (n - self.win) // self.hop, 0)
        else:
            frames = (n + self.hop // 2) // self.hop
        return int(frames) if frames.ndim == 0 else frames

    def __call__(self, wave: np.ndarray) -> np.ndarray:
        """Frames of a 1-D waveform at ``sample_rate`` -> float32 ``[num_frames, n_mels]``."""
        return self.many([wave])[0]

    def many(self, waves: Sequence[np.ndarray]) -> list[np.ndarray]:
        """Frames of several 1-D waveforms, computed together (a batch's): all their frames go
        into one array, so the FFT, the filters and the log run once for the batch rather than
        once per waveform. Equal to ``[self(w) for w in waves]`` with the numpy kernel (each
        result a view of one array); torch's kernel rounds a frame's products by the batch's
        shape, so a waveform's values may differ in the last bits (~1e-7) with its batch's others:
        a planned batch's bytes are still the same in every run, whatever the workers.

        >>> fb = KaldiFbank()
        >>> [f.shape for f in fb.many([np.full(16000, 0.1, "float32"), np.zeros(100, "float32")])]
        [(100, 80), (1, 80)]
        """
        counts, rows, blocks = self._blocks(waves)
        total = int((rows + counts).max(initial=0))
        feats = np.empty((total, self.n_mels), np.float32)
        for a, block in blocks:
            feats[a : a + len(block)] = block[: total - a]
        return [feats[r : r + m] for r, m in zip(rows.tolist(), counts.tolist())]

    def many_into(self, waves: Sequence[np.ndarray], out: np.ndarray) -> None:
        """``many``'s frames written into a padded batch: ``out[j, :frames_j]`` (float32
        ``[B, >= max frames, n_mels]``) gets those of ``waves[j]``, zeros after. Each block of the
        kernel goes straight to its rows (no per-waveform arrays, no padding copy); the same blocks
        as ``many``, so the same bytes.

        >>> fb = KaldiFbank(n_mels=40)
        >>> out = np.full((2, 100, 40), np.nan, "float32")
        >>> fb.many_into([np.full(16000, 0.1, "float32"), np.zeros(100, "float32")], out)
        >>> bool(np.isnan(out).any()), bool((out[1, 1:] == 0).all())
        (False, True)
        """
        counts, rows, blocks = self._blocks(waves)
        starts = rows.tolist()
        ends_list = (rows + counts).tolist()
        j = 0
        for a, block in blocks:  # blocks come in order: waveforms advance with them
            b = a + len(block)
            while j < len(ends_list) and ends_list[j] <= a:
                j += 1
            k = j
            while k < len(ends_list) and starts[k] < b:
                lo, hi = max(a, starts[k]), min(b, ends_list[k])
                out[k, lo - starts[k] : hi - starts[k]] = block[lo - a : hi - a]
                k += 1
        for row, m in enumerate(counts.tolist()):
            out[row, m:] = 0.0

    def _blocks(
        self, waves: Sequence[np.ndarray]
    ) -> tuple[np.ndarray, np.ndarray, Iterator[tuple[int, np.ndarray]]]:
        """(frames per waveform int64 ``[B]``, the row of each waveform's first frame int64
        ``[B]``, the kernel's results ``(first row, [m, n_mels])`` over all rows of the batch's
        ``frame_view``, in blocks of ``BLOCK_FRAMES``)."""
        xs = [np.ascontiguousarray(w, dtype=np.float32) for w in waves]
        for x in xs:
            if x.ndim != 1:
                raise OptionError(f"KaldiFbank: got a waveform of shape {x.shape}, expected 1-D")
        counts = np.asarray(self.num_frames(np.array([len(x) for x in xs], np.int64)), np.int64)
        signal, rows = kaldi_signal(self, xs, counts)
        frames = frame_view(self, signal)
        kernel = _KERNEL_CHOICE.get()
        blocks = (
            (a, kernel(self, frames[a : a + BLOCK_FRAMES]))
            for a in range(0, len(frames), BLOCK_FRAMES)
        )
        return counts, rows, blocks

    def frame_indices(self, samples: int) -> np.ndarray:
        """Sample index of every frame position, int64 ``[num_frames, win]`` (reflected at the
        ends without ``snip_edges``)."""
        return _frame_indices(
            samples, self.win, self.hop, int(self.num_frames(samples)), self.snip_edges
        )

    def mel_banks(self) -> np.ndarray:
        """The filters, float32 ``[fft_size // 2 + 1, n_mels]``."""
        return _mel_banks(
            self.n_mels, self.fft_size, self.sample_rate, self.low_freq, self.high_freq
        )

    def window(self) -> np.ndarray:
        """The Povey window, float32 ``[win]``."""
        return _povey(self.win)


def kaldi_signal(
    options: KaldiFbank, xs: Sequence[np.ndarray], counts: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Every waveform's frame span one after another in one float32 buffer: waveform ``j``
    (``counts[j]`` frames) as the ``(counts[j] - 1) * hop + win`` samples its frames cover, taken
    from ``xs[j]`` reflected at its ends without ``snip_edges`` (Kaldi's rule), starting at a
    multiple of ``hop``. Returns (buffer, the row of each waveform's first frame in
    ``frame_view(buffer)``, int64 ``[B]``); the rows between two waveforms' frames (at most
    ``ceil((win - hop) / hop)``) straddle both and are not frames of either."""
    win, hop = options.win, options.hop
    sizes = np.where(counts > 0, (counts - 1) * hop + win, 0)
    steps = -(-sizes // hop)  # rows each waveform takes, its straddling rows included
    rows = np.concatenate([[0], np.cumsum(steps)[:-1]]).astype(np.int64)
    end = int((rows * hop + sizes).max(initial=0))
    buffer = np.empty(end, np.float32)
    for x, r, size, step in zip(xs, rows.tolist(), sizes.tolist(), steps.tolist()):
        if size:
            _span_into(x, buffer[r * hop : r * hop + size], options)
        buffer[r * hop + size : (r + step) * hop] = 0.0  # up to the next span: no stale memory
    return buffer, rows


def frame_view(options: KaldiFbank, signal: np.ndarray) -> np.ndarray:
    """Row ``f`` = ``signal[f * hop : f * hop + win]``: float32 ``[rows, win]``, a strided view
    (rows overlap: never write to it)."""
    win, hop = options.win, options.hop
    rows = (len(signal) - win) // hop + 1 if len(signal) >= win else 0
    step = signal.strides[0]
    return np.lib.stride_tricks.as_strided(signal, (rows, win), (hop * step, step))


def _span_into(x: np.ndarray, dst: np.ndarray, options: KaldiFbank) -> None:
    """The samples ``x``'s frames cover, ``dst`` long (from ``(win - hop) // 2`` before its start
    without ``snip_edges``, samples outside reflected: ``-1 -> 0``, ``n -> n - 1``): one copy of
    the signal, or a gather by index when it is shorter than the reflection."""
    n, size = len(x), len(dst)
    left = 0 if options.snip_edges else (options.win - options.hop) // 2
    body = min(n, size - left)
    right = size - left - body
    if left > n or right > n:  # reflected more than once: Kaldi's rule by index
        idx = (np.arange(size, dtype=np.int64) - left) % (2 * n)
        dst[:] = x[np.where(idx < n, idx, 2 * n - 1 - idx)]
        return
    dst[:left] = x[:left][::-1]
    dst[left : left + body] = x[:body]
    if right:
        dst[left + body :] = x[n - right :][::-1]


def prepare_frames(options: KaldiFbank, frames: np.ndarray) -> None:
    """Remove the DC offset, pre-emphasise and window the first ``win`` columns of ``frames``, in
    place (Kaldi's order of the steps)."""
    fr = frames[:, : options.win]
    if options.remove_dc_offset:
        fr -= fr.mean(axis=1, keepdims=True, dtype=np.float32)
    if options.preemph_coeff != 0.0:
        c = np.float32(options.preemph_coeff)
        fr[:, 1:] -= c * fr[:, :-1]  # the right side is a new array: the old values are used
        fr[:, 0] -= c * fr[:, 0]
    fr *= options.window()


def numpy_kaldi_fbank(options: KaldiFbank, frames: np.ndarray) -> np.ndarray:
    """The numpy kernel: rows of a ``frame_view`` (float32 ``[m, win]``, read only) -> float32
    ``[m, n_mels]``. The filters are (bin, weight) runs summed with reduceat: no BLAS call, whose
    threads would oversubscribe the cores next to DataLoader workers."""
    padded = np.zeros((len(frames), options.fft_size), np.float32)
    padded[:, : options.win] = frames
    frames = padded
    prepare_frames(options, frames)
    spec = np.fft.rfft(frames, axis=1)  # [m, fft/2 + 1] complex64
    power = spec.real * spec.real + spec.imag * spec.imag  # [m, fft/2 + 1]
    bins, weights, starts = _sparse_banks(
        options.n_mels, options.fft_size, options.sample_rate, options.low_freq, options.high_freq
    )
    mel = np.add.reduceat(power[:, bins] * weights, starts, axis=1)  # [m, n_mels]
    np.maximum(mel, np.float32(_EPS), out=mel)
    return np.log(mel, out=mel)


Kernel = Callable[[KaldiFbank, np.ndarray], np.ndarray]
_KERNEL_CHOICE: KernelChoice[Kernel] = KernelChoice(numpy_kaldi_fbank, kaldi_filterbank)


def default_kernel() -> Kernel:
    """torch's kernel (``seqloader.audio.torch_kernels.kaldi_filterbank``: its FFT measured 3-4x
    numpy's on blocks of frames) where torch is installed, else numpy's; chosen once per process when
    frames are first computed (torch is imported by the kernel, not by this layer)."""
    return _KERNEL_CHOICE.get()


def use_kernel(kernel: Kernel) -> Kernel:
    """Compute ``KaldiFbank`` frames with ``kernel`` in this process from now on (it gets rows of
    a ``frame_view``, float32 ``[m, win]``, which it must not change); returns the previous
    one."""
    return _KERNEL_CHOICE.use(kernel)


def _frame_indices(n: int, win: int, hop: int, m: int, snip_edges: bool) -> np.ndarray:
    """Frame f covers samples ``f * hop + [0, win)``, or without ``snip_edges`` from ``f * hop -
    (win - hop) // 2``, samples outside the signal reflected (``-1 -> 0``, ``n -> n - 1``, as
    Kaldi's ``ExtractWindow``; also for signals shorter than a window)."""
    start = np.arange(m, dtype=np.int64)[:, None] * hop
    idx = start + np.arange(win, dtype=np.int64)[None, :]  # [m, win]
    if not snip_edges:
        idx -= (win - hop) // 2
        idx %= 2 * n
        idx = np.where(idx < n, idx, 2 * n - 1 - idx)
    return idx


@lru_cache(maxsize=8)
def _povey(win: int) -> np.ndarray:
    n = np.arange(win)
    w = ((0.5 - 0.5 * np.cos(2 * np.pi * n / (win - 1))) ** 0.85).astype(np.float32)
    w.flags.writeable = False
    return w


@lru_cache(maxsize=8)
def _mel_banks(n_mels: int, fft: int, rate: int, low: float, high: float) -> np.ndarray:
    """Kaldi's triangular filters, float32 ``[fft // 2 + 1, n_mels]`` (the Nyquist bin gets none),
    computed in float32 step by step as torchaudio and Lhotse compute them, so the weights agree
    to the last bit or two rather than to float64's."""
    nyquist = 0.5 * rate
    if high <= 0.0:
        high += nyquist
    f32 = np.float32
    lo, hi = 1127.0 * np.log(1 + low / 700), 1127.0 * np.log(1 + high / 700)
    delta = f32((hi - lo) / (n_mels + 1))
    k = np.arange(n_mels, dtype=f32)[:, None]
    left = f32(lo) + k * delta
    center = f32(lo) + (k + f32(1.0)) * delta
    right = f32(lo) + (k + f32(2.0)) * delta
    freqs = f32(rate / fft) * np.arange(fft // 2, dtype=f32)
    bins = (f32(1127.0) * np.log(f32(1.0) + freqs / f32(700.0)))[None, :]  # [1, fft / 2]
    up = (bins - left) / (center - left)
    down = (right - bins) / (right - center)
    banks = np.maximum(f32(0.0), np.minimum(up, down))  # [n_mels, fft / 2]
    out = np.ascontiguousarray(np.concatenate([banks, np.zeros((n_mels, 1), f32)], axis=1).T)
    out.flags.writeable = False
    return out


@lru_cache(maxsize=8)
def _sparse_banks(
    n_mels: int, fft: int, rate: int, low: float, high: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The filters' nonzero weights: FFT bins int64 ``[nnz]``, weights float32 ``[nnz]`` filter
    after filter, and where each filter's run starts int64 ``[n_mels]``."""
    banks = _mel_banks(n_mels, fft, rate, low, high)  # [bins, n_mels]
    cols = [np.flatnonzero(banks[:, k]) for k in range(n_mels)]
    for k, c in enumerate(cols):
        if len(c) == 0:
            raise OptionError(
                f"KaldiFbank: filter {k} of {n_mels} covers no FFT bin at {rate} Hz with a "
                f"{fft}-point FFT; use fewer n_mels or a wider band"
            )
    bins = np.concatenate(cols)
    weights = np.concatenate([banks[c, k] for k, c in enumerate(cols)]).astype(np.float32)
    starts = np.cumsum([0] + [len(c) for c in cols[:-1]]).astype(np.int64)
    return bins, weights, starts
