"""The filterbank kernels computed with torch on CPU; torch is imported inside each function.

- ``log_filterbank``: the log of a filterbank over the power STFT of one waveform (``LogMel``).
- ``kaldi_filterbank``: Kaldi-style frames of a batch of already cut frames (``KaldiFbank``).

Importing this module loads no torch (the audio layer stays torch-free until a feature is
computed); ``seqloader.audio.features`` and ``seqloader.audio.kaldi_fbank`` choose these kernels
where torch is installed (``KernelChoice``). They know options only through the
``FilterbankOptions`` / ``KaldiOptions`` protocols. In DataLoader workers torch computes on one
thread (the DataLoader sets it), so the kernels do not oversubscribe the cores next to the other
workers.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import TYPE_CHECKING, Protocol

import numpy as np

if TYPE_CHECKING:
    import torch


class FilterbankOptions(Hashable, Protocol):
    """What the kernel reads from its options (``seqloader.audio.LogMel`` has all of it)."""

    @property
    def win(self) -> int: ...

    @property
    def hop(self) -> int: ...

    @property
    def fft_size(self) -> int: ...

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


class KaldiOptions(Hashable, Protocol):
    """What ``kaldi_filterbank`` reads from its options (``seqloader.audio.KaldiFbank`` has it)."""

    @property
    def win(self) -> int: ...

    @property
    def remove_dc_offset(self) -> bool: ...

    @property
    def preemph_coeff(self) -> float: ...

    def window(self) -> np.ndarray: ...

    def mel_banks(self) -> np.ndarray: ...


_KALDI: dict[Hashable, tuple[torch.Tensor, torch.Tensor]] = {}
_FLOAT32_EPS = float(np.finfo(np.float32).eps)


def kaldi_filterbank(options: KaldiOptions, frames: np.ndarray) -> np.ndarray:
    """float32 ``[m, fft_size]`` frames (samples in the first ``win`` columns, zeros after; changed
    in place) -> float32 ``[m, n_filters]``: DC offset removed, pre-emphasis, window, power
    spectrum, filters, ``log(max(energy, float32 eps))``, in Kaldi's (and Lhotse's) order, for all
    frames of a batch at once.

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


def _kaldi_filterbank(options: KaldiOptions, frames: np.ndarray) -> np.ndarray:
    import torch

    if options not in _KALDI:
        _KALDI[options] = (
            torch.from_numpy(np.array(options.window(), dtype=np.float32)),
            torch.from_numpy(np.array(options.mel_banks(), dtype=np.float32)),
        )
    window, banks = _KALDI[options]
    with torch.no_grad():
        x = torch.from_numpy(frames)
        fr = x[:, : options.win]
        if options.remove_dc_offset:
            fr -= fr.mean(dim=1, keepdim=True)
        c = float(options.preemph_coeff)
        if c != 0.0:
            fr[:, 1:] -= c * fr[:, :-1]  # the right side is a new tensor: the old values are used
            fr[:, 0] -= c * fr[:, 0]
        fr *= window
        spec = torch.fft.rfft(x, dim=1)  # [m, fft_size // 2 + 1]
        power = spec.real.square() + spec.imag.square()
        feats = torch.matmul(power, banks).clamp_(min=_FLOAT32_EPS).log_()
    return feats.numpy()
