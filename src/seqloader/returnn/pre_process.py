"""A RETURNN ``audio`` option's ``pre_process`` that changes the waveform's length (the common
``speed_pert``: resample by a random factor) is found at conversion, not at the first sequence it
lengthens mid-epoch: seqloader plans every batch from lengths known before decoding, and RETURNN's
torch engine batches after ``pre_process``, so no plan can give RETURNN's batches."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from seqloader.errors import OptionError

PROBES = 32  # random states tried: a function changing the length on 1 call in 3 escapes 3e-16
NATIVE = (
    "seqloader's native speed perturbation: remove pre_process from the config and read the "
    "corpus with seqloader.AudioSource(..., min_speed=speed.min_factor) and the transform "
    "seqloader.transforms.SpeedPerturb(factors) (docs/audio.md, 'Planning with length-changing transforms')"
)


def refuse_length_changing_pre_process(where: str, features: Any) -> None:
    """``features`` (a ``ReturnnFeatures`` or None): its ``pre_process`` called as RETURNN calls it
    (``audio=``, ``sample_rate=``, ``random_state=``) on one second of noise with ``PROBES``
    random states; a result of another length or shape, or an exception, is an ``OptionError``
    naming the function, why, and the native equivalent.

    >>> from seqloader.audio.returnn_features import ReturnnFeatures
    >>> def speed_pert(audio, sample_rate, random_state):
    ...     return audio[:: random_state.randint(1, 3)]
    >>> refuse_length_changing_pre_process("train", ReturnnFeatures(features="raw", pre_process=speed_pert))
    Traceback (most recent call last):
    ...
    seqloader.errors.OptionError: train: audio option pre_process speed_pert returns 8000 samples ...
    """
    fn = getattr(features, "pre_process", None)
    if fn is None:
        return
    name = getattr(fn, "__qualname__", None) or repr(fn)
    rate = int(features.sample_rate)
    wave = np.random.RandomState(0).uniform(-0.5, 0.5, rate)  # float64, as RETURNN passes it
    for seed, out in probed(
        where,
        f"audio option pre_process {name}",
        lambda seed: fn(
            audio=wave.copy(), sample_rate=rate, random_state=np.random.RandomState(seed)
        ),
        lambda seed: f"one second of noise at {rate} Hz, random_state=RandomState({seed})",
    ):
        shape = getattr(out, "shape", None)
        if shape != wave.shape:
            got = f"{shape[0]} samples" if shape is not None and len(shape) == 1 else repr(shape)
            raise OptionError(
                f"{where}: audio option pre_process {name} returns {got} for {len(wave)} "
                f"(random_state=RandomState({seed})): it changes the waveform's length (e.g. a "
                "speed perturbation). seqloader plans every batch from lengths known before "
                "decoding, while RETURNN batches after pre_process, so RETURNN's batches cannot "
                f"be planned. Use {NATIVE}"
            )


def probed(
    where: str, what: str, call: Callable[[int], Any], how: Callable[[int], str]
) -> Iterator[tuple[int, Any]]:
    """``(seed, call(seed))`` for ``PROBES`` seeds: a user function of a RETURNN config called at
    conversion as RETURNN will call it while training; an exception is an ``OptionError`` naming
    ``what`` raised it and ``how`` it was called, since training would fail the same way."""
    for seed in range(PROBES):
        try:
            out = call(seed)
        except Exception as e:
            first = (str(e).splitlines() or [""])[0]  # e.g. lazily reported imports: 1st line
            raise OptionError(
                f"{where}: {what} raised {type(e).__name__}: {first} when called as RETURNN calls "
                f"it ({how(seed)}); it would fail the same way while training: fix the function "
                "(or install what it imports)"
            ) from e
        yield seed, out
