"""The log-mel STFT kernel, computed with torch on CPU, for the audio layer (which imports no torch).

``log_filterbank`` is the log of a filterbank over the power STFT: log-mel with a mel matrix.
``seqloader.audio.features`` looks it up by name when features are first computed
(``default_kernel``); it knows options only through the ``FilterbankOptions`` protocol, so the
torch glue knows nothing about audio sources.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Protocol

import numpy as np
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
    window, filters = _constants(options)
    with torch.no_grad():
        spec = torch.stft(
            torch.from_numpy(x),
            options.fft_size,
            hop_length=options.hop,
            win_length=options.win,
            window=window,
            center=False,
            return_complex=True,
        )  # [n_fft // 2 + 1, frames]
        power = spec.real.square() + spec.imag.square()
        feats = torch.log(
            torch.clamp(filters @ power, min=options.log_floor)
        )  # [n_filters, frames]
    return np.ascontiguousarray(feats.T.numpy())


_CONSTANTS: dict[Hashable, tuple[torch.Tensor, torch.Tensor]] = {}


def _constants(options: FilterbankOptions) -> tuple[torch.Tensor, torch.Tensor]:
    """The window and the filterbank as float32 tensors, built once per process and options."""
    if options not in _CONSTANTS:
        window = torch.hann_window(options.win, periodic=True, dtype=torch.float32)
        filters = torch.from_numpy(options.mel_matrix().astype(np.float32))
        _CONSTANTS[options] = (window, filters)
    return _CONSTANTS[options]
