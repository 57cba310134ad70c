"""``SeqLoader``'s options: ``WorkerOptions``, the keyword options as typed dicts, and merging them.

A loader takes its options grouped (``plan=PlanOptions(...)``, ``workers=WorkerOptions(...)``,
``checks=CheckOptions(...)``) or as keywords of those classes (``max_frames=..., num_workers=...``).
The keywords are declared (``LoaderKeywords``) so IDEs and type checkers see them; at runtime an
unknown keyword still fails naming the valid ones, and ``tests/test_options.py`` keeps the typed
dicts equal to the dataclass fields.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from functools import partial
from typing import Literal, TypedDict

from seqloader.errors import OptionError
from seqloader.plan.options import (
    ChunkingOption,
    Distribution,
    EpochFilterOption,
    MixOption,
    Planning,
    PlanOptions,
    Seeding,
    Uneven,
)
from seqloader.trainer.audit import audit_policy
from seqloader.trainer.checks import CheckOptions
from seqloader.validate import (
    Policy,
    bool_option,
    choice_option,
    choices,
    int_option,
    optional_int_option,
    seconds_option,
)

StartMethod = Literal["fork", "spawn", "forkserver"]
Layout = Literal["padded", "packed"]


@dataclass(frozen=True)
class WorkerOptions:
    """How batches are executed; never *which* batches (that is the plan).

    ``features_on``: a device (``"cuda"``, ``"cpu"``, ...) for the features of an audio source
    opened with ``defer_features=True``: workers send the waveforms, and the training process
    computes ``data`` on that device after collation, for the whole batch at once
    (``seqloader.audio.device_features.DeviceFeatures``); the batch arrives on that device.

    ``layout``: ``padded`` (each key ``[B, T_max, ...]`` with zeros after each end) or ``packed``
    (each key's sequences concatenated along time, ``[sum T_i, ...]``, no padding, with the
    offsets ``cu_seqlens`` int32 ``[B + 1]`` that variable-length attention kernels take).

    >>> src = sl.MemorySource({"data": [np.ones((3, 2), "float32")] * 4})
    >>> loader = sl.SeqLoader(src, max_seqs=2, workers=WorkerOptions(num_workers=0))
    >>> loader.worker_options.num_workers, loader.steps(1)  # workers never change the plan
    (0, 2)
    """

    num_workers: int = 0
    prefetch_factor: int | None = None
    pin_memory: bool = False
    multiprocessing_context: StartMethod | None = None
    persistent_workers: bool = True
    timeout: float = 0
    layout: Layout = "padded"
    features_on: str | None = None

    def __post_init__(self) -> None:
        set_ = partial(object.__setattr__, self)
        set_("num_workers", int_option("num_workers", self.num_workers, 0))
        set_("prefetch_factor", optional_int_option("prefetch_factor", self.prefetch_factor, 1))
        set_("pin_memory", bool_option("pin_memory", self.pin_memory))
        set_("persistent_workers", bool_option("persistent_workers", self.persistent_workers))
        set_("timeout", seconds_option("timeout", self.timeout, zero="0: none"))
        contexts = (None, *choices(StartMethod))
        expected = "None, 'fork', 'spawn' or 'forkserver'"
        choice_option(
            "multiprocessing_context", self.multiprocessing_context, contexts, expected=expected
        )
        choice_option("layout", self.layout, choices(Layout))
        if self.features_on is not None and not isinstance(self.features_on, str):
            raise OptionError(
                f"features_on: got {self.features_on!r}, expected None or a device name such as "
                "'cuda', 'cuda:1' or 'cpu'"
            )
        if self.features_on is not None and self.layout != "padded":
            raise OptionError("features_on needs layout='padded' (features of a padded batch)")


class PlanKeywords(TypedDict, total=False):
    """``PlanOptions`` fields as ``SeqLoader`` keywords (see ``PlanOptions`` for their meaning)."""

    ordering: str
    max_seqs: int | None
    max_frames: int | Mapping[str, int] | None
    max_seq_length: int | Mapping[str, int] | None
    min_seq_length: int | Mapping[str, int]
    partition_epoch: int
    distribution: Distribution
    uneven: Uneven
    seed: int
    length_key: str | None
    seeding: Seeding
    mix: MixOption
    batch_cost: str
    max_packed_frames: int | Mapping[str, int] | None
    chunking: ChunkingOption
    min_chunk_size: int | Mapping[str, int]
    fixed_random_subset: int | float | None
    fixed_random_subset_seed: int
    fixed_random_seed: int | None
    epoch_wise_filter: EpochFilterOption
    planning: Planning


class WorkerKeywords(TypedDict, total=False):
    """``WorkerOptions`` fields as ``SeqLoader`` keywords."""

    num_workers: int
    prefetch_factor: int | None
    pin_memory: bool
    multiprocessing_context: StartMethod | None
    persistent_workers: bool
    timeout: float
    layout: Layout
    features_on: str | None


class LoaderKeywords(PlanKeywords, WorkerKeywords, total=False):
    """Every keyword option of ``SeqLoader`` (``**options: Unpack[LoaderKeywords]``)."""


PLAN_FIELDS = tuple(f.name for f in fields(PlanOptions) if f.init)
WORKER_FIELDS = tuple(f.name for f in fields(WorkerOptions) if f.init)


@dataclass(frozen=True)
class LoaderOptions:
    """All of a loader's options, merged and validated."""

    plan: PlanOptions
    workers: WorkerOptions
    checks: CheckOptions


def merge_options(
    plan: PlanOptions | None,
    workers: WorkerOptions | None,
    checks: CheckOptions | None,
    audit: bool | Policy | None,
    keywords: Mapping[str, object],
) -> LoaderOptions:
    """The grouped options, or ones built from ``keywords``; each group comes one way only.
    ``audit`` is the shorthand of ``CheckOptions.audit`` (True: "error", False: "off")."""
    unknown = set(keywords) - set(PLAN_FIELDS) - set(WORKER_FIELDS)
    if unknown:
        raise OptionError(
            f"SeqLoader: unknown option(s) {sorted(unknown)}; expected options of PlanOptions "
            f"{sorted(PLAN_FIELDS)} or WorkerOptions {sorted(WORKER_FIELDS)}"
        )
    plan_kw = {k: v for k, v in keywords.items() if k in PLAN_FIELDS}
    worker_kw = {k: v for k, v in keywords.items() if k in WORKER_FIELDS}
    if plan is not None and plan_kw:
        raise OptionError(f"give plan options either as plan= or as keywords, not both: {plan_kw}")
    if workers is not None and worker_kw:
        raise OptionError(f"give worker options either as workers= or as keywords: {worker_kw}")
    checks = checks or CheckOptions()
    if audit is not None:
        policy = audit_policy(audit)
        if checks.audit not in ("off", policy):
            raise OptionError(
                f"audit: got {audit!r}, but checks=CheckOptions(audit={checks.audit!r}) says "
                "otherwise; give the audit policy one way"
            )
        checks = replace(checks, audit=policy)
    return LoaderOptions(
        plan or PlanOptions(**plan_kw),  # type: ignore[arg-type]
        workers or WorkerOptions(**worker_kw),  # type: ignore[arg-type]
        checks,
    )
