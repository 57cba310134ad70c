"""``features_on``: an audio source's deferred ``data`` computed in the training process, on its
device, after collation.

A source opened with ``defer_features=True`` plans ``data`` in feature frames but reads
waveforms. With ``SeqLoader(..., features_on="cuda")`` the workers send those waveforms (and
``data``'s frame counts, a formula of the sample counts), and ``FeaturesOn`` moves each batch to the
device and computes ``data`` for the whole batch at once there (the source's
``seqloader.audio.device_features.DeviceFeatures``: the CPU kernel's steps, equal to the workers'
features within its ``TOLERANCE``). The batch the loop gets has the source's keys, ``data`` in
place of the waveforms, on the device; the plan, the report and the audit are those of the same
source read with features in the workers.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol, runtime_checkable

import torch

from seqloader.errors import OptionError
from seqloader.loading.worker_spec import FrameCounter
from seqloader.sources.base import LoaderNeeds, Source
from seqloader.torch.batch import Batch


@runtime_checkable
class BatchFeatures(Protocol):
    """Features of a padded batch of waveforms on its device (``DeviceFeatures``)."""

    features: FrameCounter

    def __call__(
        self, audio: torch.Tensor, lengths: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]: ...


class FeaturesOn:
    """The loader's last step for ``features_on``: a batch with waveforms as ``audio`` -> the same
    batch on ``device`` with ``data`` (``[B, frames, n_mels]``, zero past each utterance's frames)
    instead of them.

    >>> from seqloader.audio.device_features import DeviceFeatures
    >>> step = FeaturesOn(DeviceFeatures(sl.KaldiFbank(n_mels=40)), "cpu")
    >>> step.device.type, step.features.n_mels
    ('cpu', 40)
    """

    def __init__(self, compute: BatchFeatures, device: str) -> None:
        try:
            self.device = torch.device(device)
        except (RuntimeError, TypeError) as e:
            raise OptionError(
                f"features_on: {device!r} is not a torch device ({e}); expected e.g. 'cuda', "
                "'cuda:1' or 'cpu'"
            ) from e
        self._compute = compute
        self.features = compute.features  # the workers count data's frames with it

    @classmethod
    def of(cls, source: Source, needs: LoaderNeeds, device: str) -> FeaturesOn:
        """The step for ``source`` (its ``loader_needs``), or an error saying how to open it."""
        compute = needs.on_device
        if needs.transform_keys != ("data",) or not isinstance(compute, BatchFeatures):
            raise OptionError(
                f"features_on={device!r} computes an audio source's deferred features, but "
                f"{source!r} defers none. Fix: open it with features=KaldiFbank() (or LogMel()) "
                "and defer_features=True"
            )
        return cls(compute, device)

    def __call__(self, batch: Batch) -> Batch:
        moved = batch.to(self.device)
        data = dict(moved.data)
        lengths = dict(moved.lengths)
        audio, samples = data.pop("audio"), lengths.pop("audio")
        data["data"], _ = self._compute(audio, samples)
        counts = {k: v for k, v in moved.counts.items() if k != "audio"}
        return replace(moved, data=data, lengths=lengths, counts=counts)
