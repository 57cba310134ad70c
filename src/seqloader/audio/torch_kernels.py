"""The filterbank kernels computed with torch on CPU; torch is imported inside each function.

- ``log_filterbank``: the log of a filterbank over the power STFT of one waveform (``LogMel``).
- ``kaldi_filterbank``: Kaldi-style features of a batch's frames (``KaldiFbank``).

Importing this module loads no torch (the audio layer stays torch-free until a feature is
computed); ``seqloader.audio.features`` and ``seqloader.audio.kaldi_fbank`` choose these kernels
where torch is installed (``KernelChoice``). They know options only through the
``FilterbankOptions`` / ``KaldiOptions`` protocols (both ``KernelOptions``). In DataLoader workers torch computes on one
thread (the DataLoader sets it), so the kernels do not oversubscribe the cores next to the other
workers.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING, Protocol

import numpy as np

if TYPE_CHECKING:
    import torch


class KernelOptions(Hashable, Protocol):
    """What both kernels read of their options: the FFT's size; hashable, as each kernel keeps
    its constants (window, filters) per options."""

    @property
    def fft_size(self) -> int: ...


class FilterbankOptions(KernelOptions, Protocol):
    """What ``log_filterbank`` reads from its options (``seqloader.audio.LogMel`` has all of it)."""

    @property
    def win(self) -> int: ...

    @property
    def hop(self) -> int: ...

    @property
    def log_floor(self) -> float: ...

    def mel_matrix(self) -> np.ndarray: ...


def log_filterbank(options: FilterbankOptions, x: np.ndarray) -> np.ndarray:
    """float32 ``[samples >= fft_size]`` -> float32 ``[frames, n_filters]``: ``log(max(F @ |STFT|^2,
    log_floor))`` with a periodic Hann window of ``win`` samples centred in ``fft_size``, no centre
    padding (frames lie inside the signal)."""
    import torch

    window, filters = log_mel_constants(options)
    with torch.no_grad():
        feats = stft_log_filterbank(options, torch.from_numpy(x), window, filters)
    return np.ascontiguousarray(feats.T.numpy())


def stft_log_filterbank(
    options: FilterbankOptions, x: torch.Tensor, window: torch.Tensor, filters: torch.Tensor
) -> torch.Tensor:
    """``log_filterbank``'s steps on a tensor of waveforms ``[..., samples]`` on any device ->
    ``[..., n_filters, frames]`` (``window``: ``win`` samples; ``filters``: ``[n_filters, bins]``);
    a padded batch at once for ``seqloader.audio.device_features``."""
    import torch

    spec = torch.stft(
        x,
        options.fft_size,
        hop_length=options.hop,
        win_length=options.win,
        window=window,
        center=False,
        return_complex=True,
    )  # [..., n_fft // 2 + 1, frames]
    power = spec.real.square() + spec.imag.square()
    return torch.log(torch.clamp(filters @ power, min=options.log_floor))


_CONSTANTS: dict[Hashable, tuple[torch.Tensor, torch.Tensor]] = {}


def log_mel_constants(options: FilterbankOptions) -> tuple[torch.Tensor, torch.Tensor]:
    """The window and the filterbank as float32 tensors, built once per process and options."""
    import torch

    if options not in _CONSTANTS:
        window = torch.hann_window(options.win, periodic=True, dtype=torch.float32)
        filters = torch.from_numpy(options.mel_matrix().astype(np.float32))
        _CONSTANTS[options] = (window, filters)
    return _CONSTANTS[options]


class KaldiOptions(KernelOptions, Protocol):
    """What ``kaldi_filterbank`` reads from its options (``seqloader.audio.KaldiFbank`` has it)."""

    @property
    def remove_dc_offset(self) -> bool: ...

    @property
    def preemph_coeff(self) -> float: ...

    def window(self) -> np.ndarray: ...

    def mel_banks(self) -> np.ndarray: ...


# filters in groups: (first filter, end, first bin, end bin, transposed weights [filters, bins])
Groups = list[tuple[int, int, int, int, "torch.Tensor"]]
_KALDI: dict[Hashable, tuple[torch.Tensor, Groups]] = {}
_FLOAT32_EPS = float(np.finfo(np.float32).eps)
# filters per matmul: the filters are triangles over a few bins each, so 16 neighbouring filters
# touch a narrow band of bins; 5 products over their bands instead of one over all bins (measured
# 2x less time than the dense product with 80 filters of a 512-point FFT)
FILTER_GROUP = 16


def kaldi_filterbank(options: KaldiOptions, frames: np.ndarray) -> np.ndarray:
    """float32 ``[m, win]`` frames (rows of a strided view of the signal, read only) -> float32
    ``[m, n_filters]``: DC offset removed, pre-emphasis, window, power spectrum of the frame
    zero-padded to ``fft_size``, filters, ``log(max(energy, float32 eps))``, in Kaldi's (and
    Lhotse's) order, for all frames of a batch at once.

    On one torch thread: where torch has several (a trainer process reading with
    ``num_workers=0``), it is set to one for the call and restored. Spreading these small steps
    over threads synchronises them at every step, which on busy cores costs more than the step
    (measured: 10x slower than one thread with other processes running); and the frames do not
    depend on torch's thread count (tested), so workers and the trainer compute the same bytes."""
    import torch

    threads = torch.get_num_threads()
    if threads == 1:
        return _kaldi_filterbank(options, frames)
    torch.set_num_threads(1)
    try:
        return _kaldi_filterbank(options, frames)
    finally:
        torch.set_num_threads(threads)


def kaldi_constants(options: KaldiOptions) -> tuple[torch.Tensor, Groups]:
    """The window, and the filters in groups of ``FILTER_GROUP``: (first filter, end, first bin,
    end bin, transposed weights ``[filters, bins]`` of the band), made once per options."""
    import torch

    if options not in _KALDI:
        banks = np.array(options.mel_banks(), dtype=np.float32)  # [bins, n_filters]
        groups = []
        for a in range(0, banks.shape[1], FILTER_GROUP):
            b = min(a + FILTER_GROUP, banks.shape[1])
            used = np.flatnonzero(banks[:, a:b].any(axis=1))
            lo, hi = (int(used[0]), int(used[-1]) + 1) if len(used) else (0, 1)
            weights = torch.from_numpy(np.ascontiguousarray(banks[lo:hi, a:b].T))
            groups.append((a, b, lo, hi, weights))
        window = torch.from_numpy(np.array(options.window(), dtype=np.float32))
        _KALDI[options] = (window, groups)
    return _KALDI[options]


def _kaldi_filterbank(options: KaldiOptions, frames: np.ndarray) -> np.ndarray:
    import torch

    window, groups = kaldi_constants(options)
    with torch.no_grad():
        feats = kaldi_steps(options, torch.from_numpy(frames), window, groups)
    return feats.numpy()


def kaldi_steps(
    options: KaldiOptions, x: torch.Tensor, window: torch.Tensor, groups: Groups
) -> torch.Tensor:
    """``kaldi_filterbank``'s steps on a tensor of frames ``[m, win]`` (rows may overlap: only
    read) on any device, with ``window`` and the filter ``groups`` of ``kaldi_constants`` there
    -> ``[m, n_filters]``, C-contiguous (each group's product is written into its columns, so the
    caller's copy of a block into the batch is a plain one, not a transposing gather: measured
    ~10% of the kernel); also ``seqloader.audio.device_features``'s."""
    import torch

    c = float(options.preemph_coeff)
    if c != 0.0:  # (x[t] - mean) - c (x[t-1] - mean) = x[t] - c x[t-1] - (1 - c) mean
        y = torch.empty(x.shape, dtype=torch.float32, device=x.device)
        torch.sub(x[:, 1:], x[:, :-1], alpha=c, out=y[:, 1:])
        torch.mul(x[:, :1], 1.0 - c, out=y[:, :1])
        if options.remove_dc_offset:
            y -= x.mean(dim=1, keepdim=True) * (1.0 - c)
    elif options.remove_dc_offset:
        y = x - x.mean(dim=1, keepdim=True)
    else:
        y = x.clone(memory_format=torch.contiguous_format)
    y *= window
    spec = torch.fft.rfft(y, n=options.fft_size, dim=1)  # [m, fft_size // 2 + 1]
    parts = torch.view_as_real(spec)  # [m, bins, 2]: re, im
    torch.mul(parts, parts, out=parts)  # re^2, im^2 (mul in place: measured faster than square_)
    power = parts[..., 0] + parts[..., 1]
    mel = torch.empty((len(x), groups[-1][1]), dtype=torch.float32, device=x.device)
    for a, b, lo, hi, weights in groups:  # [m, n_filters], each group over its band of bins
        torch.mm(power[:, lo:hi], weights.T, out=mel[:, a:b])
    return mel.clamp_(min=_FLOAT32_EPS).log_()
