"""Features computed on the training process's device, after collation, for the whole batch.

With ``features=KaldiFbank()`` / ``LogMel()`` on a source, each DataLoader worker computes every
utterance's frames on its CPU: on the shard corpus of ``benchmarks/shards.py`` that is about half
of a worker's CPU per utterance (the other half decoding). ``DeviceFeatures`` moves that half to
the accelerator: read ``keys=["audio"]`` (padded float32 waveforms, ``lengths["audio"]`` in
samples), move the batch to the device, and compute the features there in one batched call —
frames gathered by index for all utterances at once, then the CPU kernel's own steps
(``torch_kernels.kaldi_steps``: one FFT, one product per group of filters). The values are those
of the CPU path (the same steps in the same order, float32; tested equal within
``TOLERANCE`` on the CPU device), frames past an utterance's end are zero.

Planning is unchanged: ``max_frames`` then counts audio samples (the source's lengths), so give
it in samples (e.g. 100 feature frames = ``100 * hop`` samples).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from seqloader.audio.features import LogMel
from seqloader.audio.kaldi_fbank import KaldiFbank
from seqloader.audio.torch_kernels import (
    Groups,
    kaldi_constants,
    kaldi_steps,
    log_mel_constants,
    stft_log_filterbank,
)
from seqloader.errors import OptionError

if TYPE_CHECKING:
    import torch

# largest absolute difference to the CPU path (log features) allowed by the tests, on the CPU
# device (measured: KaldiFbank 0, LogMel <= 2.4e-7 on 1-3 s noise); on an accelerator the FFT
# and the matmul round differently (not measured: no accelerator was available)
TOLERANCE = 1e-4


class DeviceFeatures:
    """``KaldiFbank`` or ``LogMel`` frames of a padded batch of waveforms, on their device.

    ``feats, frames = DeviceFeatures(KaldiFbank())(audio, lengths)``: ``audio`` float ``[B, T]``
    (padded), ``lengths`` int ``[B]`` samples -> float32 ``[B, F, n_mels]`` (zero past each
    utterance's frames) and int64 ``[B]`` frame counts (``num_frames`` of each length).

    >>> import torch
    >>> fb = DeviceFeatures(KaldiFbank(n_mels=40))
    >>> feats, frames = fb(torch.full((2, 16000), 0.1), torch.tensor([16000, 8000]))
    >>> feats.shape, frames.tolist()
    (torch.Size([2, 100, 40]), [100, 50])
    """

    def __init__(self, features: KaldiFbank | LogMel) -> None:
        if not isinstance(features, (KaldiFbank, LogMel)):
            raise OptionError(
                f"DeviceFeatures: got {features!r}, expected seqloader.KaldiFbank(...) or LogMel(...)"
            )
        self.features = features
        self._constants: dict[object, tuple[torch.Tensor, Any]] = {}

    def _on(self, device: torch.device) -> tuple[torch.Tensor, Any]:
        """(window, filters) on ``device``, the CPU kernel's own, moved once per device:
        ``KaldiFbank``'s filter groups (``kaldi_constants``), ``LogMel``'s matrix."""
        if device not in self._constants:
            f = self.features
            if isinstance(f, KaldiFbank):
                window, groups = kaldi_constants(f)
                moved = [(a, b, lo, hi, w.to(device)) for a, b, lo, hi, w in groups]
                self._constants[device] = (window.to(device), moved)
            else:  # a window of win samples, padded by torch.stft
                window, filters = log_mel_constants(f)
                self._constants[device] = (window.to(device), filters.to(device))
        return self._constants[device]

    def __call__(
        self, audio: torch.Tensor, lengths: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        import torch

        with torch.no_grad():
            return self._compute(audio, lengths)

    def _compute(
        self, audio: torch.Tensor, lengths: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        import torch

        if audio.ndim != 2 or lengths.ndim != 1 or lengths.shape[0] != audio.shape[0]:
            raise OptionError(
                f"DeviceFeatures: got audio {tuple(audio.shape)} and lengths "
                f"{tuple(lengths.shape)}, expected [B, T] and [B]"
            )
        f = self.features
        device = audio.device
        x = audio.to(torch.float32)
        n = lengths.to(device=device, dtype=torch.int64)
        frames = torch.as_tensor(
            np.asarray(f.num_frames(n.cpu().numpy()), np.int64), device=device
        ).reshape(-1)
        most = int(frames.max()) if len(frames) else 0
        window, filters = self._on(device)
        b = x.shape[0]
        if most == 0:
            return x.new_zeros((b, 0, f.n_mels)), frames
        valid = torch.arange(most, device=device)[None, :] < frames[:, None]  # [B, F]
        if isinstance(f, LogMel):  # torch.stft over the padded batch, as the CPU kernel per wave
            feats = stft_log_filterbank(f, x, window, filters).transpose(1, 2)[:, :most]
            return feats * valid[:, :, None], frames
        # Kaldi: every frame's sample indices at once, gathered from the padded batch
        start = torch.arange(most, device=device, dtype=torch.int64)[:, None] * f.hop
        idx = (start + torch.arange(f.win, device=device, dtype=torch.int64)[None, :])[None]
        if not f.snip_edges:  # reflected at each end of its own utterance (Kaldi's rule)
            idx = idx - (f.win - f.hop) // 2
            span = 2 * n.clamp(min=1)[:, None, None]
            idx = idx % span
            idx = torch.where(idx < span // 2, idx, span - 1 - idx)
        else:
            idx = idx.expand(b, -1, -1)
        idx = torch.where(valid[:, :, None], idx, 0).clamp_(max=max(x.shape[1] - 1, 0))
        fr = torch.gather(x, 1, idx.reshape(b, -1)).reshape(b, most, f.win)
        return self._kaldi(fr, window, filters) * valid[:, :, None], frames

    def _kaldi(self, fr: torch.Tensor, window: torch.Tensor, groups: Groups) -> torch.Tensor:
        """The CPU kernel's steps (``kaldi_steps``) on every frame of the batch ``[B, F, win]``."""
        f = self.features
        assert isinstance(f, KaldiFbank)
        b, most, win = fr.shape
        feats = kaldi_steps(f, fr.reshape(b * most, win), window, groups)
        return feats.reshape(b, most, f.n_mels)
