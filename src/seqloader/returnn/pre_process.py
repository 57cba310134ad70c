"""A RETURNN ``audio`` option's ``pre_process`` that changes the waveform's length (the common
``speed_pert``: resample by a random factor) is found at conversion, not at the first sequence it
lengthens mid-epoch: seqloader plans every batch from lengths known before decoding, and RETURNN's
torch engine batches after ``pre_process``, so no plan can give RETURNN's batches.

One such function is recognised: a speed perturbation (each output is the input resampled by one
of a few factors). With the converter's opt-in, ``native_speed_perturb=True``, it becomes
seqloader's planned speed perturbation (``AudioSource(speed=SpeedPerturb(factors))``: the same
factors, drawn per utterance at planning time, not RETURNN's draws); without it, it is refused
naming that option."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from fractions import Fraction
from typing import Any

import numpy as np

from seqloader.audio.transforms import SpeedPerturb, perturb
from seqloader.errors import OptionError

PROBES = 32  # random states tried: a function changing the length on 1 call in 3 escapes 3e-16
FEW = PROBES // 4  # more distinct factors than this in PROBES calls: drawn from a range
OPT_IN = "native_speed_perturb=True"
NATIVE = (
    "seqloader's native speed perturbation: remove pre_process from the config and read the "
    "corpus with seqloader.AudioSource(..., speed=seqloader.transforms.SpeedPerturb(factors)), "
    "which draws each factor at planning time and plans the exact lengths (docs/audio.md, "
    "'Speed perturbation with exact planned lengths')"
)
#: a recognised speed perturbation matches our resampling of it this closely (correlation of the
#: outputs away from the edges; resamplers differ only near Nyquist, far above the probe tones)
MATCH = 0.99
PROBE_TONES_HZ = (220.0, 530.0, 1170.0)

#: set while converting with ``native_speed_perturb=True``: the datasets converted so (``where``)
_NATIVE: ContextVar[list[str] | None] = ContextVar("native_speed_perturb", default=None)


@contextlib.contextmanager
def speed_conversion(on: bool) -> Iterator[list[str]]:
    """Within it, a recognised speed perturbation converts (``pre_process_speed``) when ``on``;
    yields the list of the datasets that did (their ``where``)."""
    done: list[str] = []
    token = _NATIVE.set(done if on else None)
    try:
        yield done
    finally:
        _NATIVE.reset(token)


def pre_process_speed(where: str, features: Any) -> tuple[Any, SpeedPerturb | None]:
    """``features`` (a ``ReturnnFeatures`` or None) and the speed perturbation its ``pre_process``
    is: ``(features without pre_process, SpeedPerturb(factors))`` when the converter was asked
    for it (``native_speed_perturb``), else an ``OptionError`` naming that option; any other
    length-changing ``pre_process`` is refused (``refuse_length_changing_pre_process``), and one
    that keeps lengths stays as it is: ``(features, None)``."""
    fn = getattr(features, "pre_process", None)
    if fn is None:
        return features, None
    speed = recognised_speed(where, fn, int(features.sample_rate))
    if speed is None:
        refuse_length_changing_pre_process(where, features)
        return features, None
    name = getattr(fn, "__qualname__", None) or repr(fn)
    done = _NATIVE.get()
    factors = ", ".join(f"{f:.4g}" for f in speed.factors)
    if done is None:
        raise OptionError(
            f"{where}: audio option pre_process {name} is a speed perturbation (factors "
            f"{factors}): RETURNN draws each factor while reading and batches after it, which "
            "no plan made before decoding can reproduce. Convert with "
            f"from_returnn_config(..., {OPT_IN}) to read it as {NATIVE} (the same factors, "
            "drawn per utterance by seqloader, not RETURNN's draws); or remove pre_process"
        )
    done.append(where)
    return dataclasses.replace(features, pre_process=None), speed


def recognised_speed(where: str, fn: Callable[..., Any], rate: int) -> SpeedPerturb | None:
    """The ``SpeedPerturb`` that ``fn`` is, if it is one: called as RETURNN calls it on one second
    of low tones with ``PROBES`` random states, every output must be the input resampled by a
    factor (length within a sample of ``speed_length``, ``MATCH`` correlation with our resampling
    by it), and some output must change the length. None otherwise (not a speed perturbation);
    an ``OptionError`` when the calls give more than ``FEW`` factors (a range, not a set)."""
    t = np.arange(rate) / rate
    wave = np.mean([np.sin(2 * np.pi * f * t) for f in PROBE_TONES_HZ], axis=0)
    factors: set[Fraction] = set()
    for _, out in probed(
        where,
        "audio option pre_process " + (getattr(fn, "__qualname__", None) or repr(fn)),
        lambda seed: fn(
            audio=wave.copy(), sample_rate=rate, random_state=np.random.RandomState(seed)
        ),
        lambda seed: f"one second of tones at {rate} Hz, random_state=RandomState({seed})",
    ):
        got = np.asarray(out, dtype=np.float64) if isinstance(out, np.ndarray) else None
        if got is None or got.ndim != 1 or not len(got):
            return None
        factor = Fraction(len(wave), len(got)).limit_denominator(100)
        if not 0.5 <= factor <= 2 or not _resampled(wave, got, float(factor)):
            return None
        factors.add(factor)
    if factors <= {Fraction(1)}:
        return None
    if len(factors) > FEW:
        name = getattr(fn, "__qualname__", None) or repr(fn)
        raise OptionError(
            f"{where}: audio option pre_process {name} draws its speed from a range "
            f"({len(factors)} distinct factors in {PROBES} calls): seqloader plans a fixed set "
            "of factors, and converting it would plan the ones these calls happened to draw. "
            f"Use {NATIVE}, with the factors written out"
        )
    return SpeedPerturb(tuple(float(f) for f in sorted(factors)))


def _resampled(wave: np.ndarray, got: np.ndarray, factor: float) -> bool:
    """Whether ``got`` is ``wave`` played ``factor`` times faster (compared with our own
    resampling, away from the edges where the resamplers' windows differ)."""
    ours = perturb(wave.astype(np.float32), factor).astype(np.float64)
    if abs(len(ours) - len(got)) > 1:
        return False
    n = min(len(ours), len(got))
    edge = n // 20
    a, b = ours[edge : n - edge], got[edge : n - edge]
    denom = float(np.linalg.norm(a) * np.linalg.norm(b))
    return denom > 0 and float(a @ b) / denom >= MATCH


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
