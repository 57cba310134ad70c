"""``SeqLoader``: the plan, executed by torch's DataLoader, with resume state and per-epoch reports."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from dataclasses import dataclass, fields

import numpy as np
from torch.utils.data import DataLoader

from seqloader.errors import OptionError, ResumeError
from seqloader.loading.execute import Transform
from seqloader.plan.distribute import GlobalPlan
from seqloader.plan.options import PlanOptions
from seqloader.plan.planner import Planner
from seqloader.plan.position import Position, continue_plan
from seqloader.plan.topology import Topology
from seqloader.sources.base import Source
from seqloader.torch.batch import Batch
from seqloader.torch.dataset import PlannedBatches, PlanSampler
from seqloader.torch.distributed import check_same_plan
from seqloader.torch.report import EpochMeter, EpochReport
from seqloader.torch.topology import detect

log = logging.getLogger("seqloader")

STATE_FORMAT = "seqloader.loader_state"
STATE_VERSION = 1


@dataclass(frozen=True)
class WorkerOptions:
    """How batches are executed; never *which* batches (that is the plan)."""

    num_workers: int = 0
    prefetch_factor: int | None = None
    pin_memory: bool = False
    multiprocessing_context: str | None = None
    persistent_workers: bool = True
    timeout: float = 0

    def __post_init__(self) -> None:
        if not isinstance(self.num_workers, int) or self.num_workers < 0:
            raise OptionError(f"num_workers: got {self.num_workers!r}, expected an int >= 0")
        if self.prefetch_factor is not None and (
            not isinstance(self.prefetch_factor, int) or self.prefetch_factor < 1
        ):
            raise OptionError(
                f"prefetch_factor: got {self.prefetch_factor!r}, expected an int >= 1 or None"
            )
        if self.multiprocessing_context not in (None, "fork", "spawn", "forkserver"):
            raise OptionError(
                f"multiprocessing_context: got {self.multiprocessing_context!r}, "
                "expected None, 'fork', 'spawn' or 'forkserver'"
            )


_PLAN_FIELDS = {f.name for f in fields(PlanOptions) if f.init}
_WORKER_FIELDS = {f.name for f in fields(WorkerOptions)}


class SeqLoader:
    """Feeds a training loop with planned batches.

    Options come either grouped (``plan=PlanOptions(...)``, ``workers=WorkerOptions(...)``) or as
    keyword arguments of those two classes (``ordering=..., max_frames=..., num_workers=...``).
    Rank and world size come from the arguments, else ``torch.distributed``, else
    ``RANK``/``WORLD_SIZE``.
    """

    def __init__(
        self,
        source: Source,
        *,
        plan: PlanOptions | None = None,
        workers: WorkerOptions | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        transform: Transform | None = None,
        **options: object,
    ) -> None:
        unknown = set(options) - _PLAN_FIELDS - _WORKER_FIELDS
        if unknown:
            raise OptionError(
                f"SeqLoader: unknown option(s) {sorted(unknown)}; expected options of PlanOptions "
                f"{sorted(_PLAN_FIELDS)} or WorkerOptions {sorted(_WORKER_FIELDS)}"
            )
        plan_kw = {k: v for k, v in options.items() if k in _PLAN_FIELDS}
        worker_kw = {k: v for k, v in options.items() if k in _WORKER_FIELDS}
        if plan is not None and plan_kw:
            raise OptionError(
                f"give plan options either as plan= or as keywords, not both: {plan_kw}"
            )
        if workers is not None and worker_kw:
            raise OptionError(f"give worker options either as workers= or as keywords: {worker_kw}")
        self.source = source
        self.options = plan or PlanOptions(**plan_kw)  # type: ignore[arg-type]
        self.workers = workers or WorkerOptions(**worker_kw)  # type: ignore[arg-type]
        self.topology: Topology = detect(rank, world_size)
        self.transform = transform
        self.planner = Planner(
            {k: source.lengths(k) for k in source.keys}, self.options, source.tags, repr(source)
        )
        self.length_key = self.planner.length_key
        self._fingerprint = self.planner.fingerprint(source.fingerprint())
        self._checked_ranks = False
        self._position = Position(epoch=0, segment_world_size=self.topology.world_size)
        self._resume: Position | None = None
        self._segment_plan: GlobalPlan | None = None
        self._sampler = PlanSampler()
        self._dataloader: DataLoader | None = None
        self._last_report: EpochReport | None = None

    # ---- planning (no data read) ----
    @property
    def fingerprint(self) -> str:
        return self._fingerprint

    def global_plan(self, epoch: int, world_size: int | None = None) -> GlobalPlan:
        """All ranks' batches of ``epoch`` (from its start)."""
        return self.planner.global_plan(epoch, world_size or self.topology.world_size)

    def plan(self, epoch: int, rank: int | None = None) -> list[np.ndarray]:
        """The planned batches of ``rank`` (default: this rank) for ``epoch``, as index arrays."""
        r = self.topology.rank if rank is None else rank
        Topology(r, self.topology.world_size)  # validates
        share = self.global_plan(epoch).rank_share(r)
        return [share.batch(k)[0] for k in range(len(share))]

    def steps(self, epoch: int) -> int:
        """Steps every rank takes in ``epoch``."""
        return self.global_plan(epoch).steps

    # ---- execution ----
    def _make_dataloader(self) -> DataLoader:
        w = self.workers
        kwargs: dict = {}
        if w.num_workers > 0:
            kwargs = {
                "persistent_workers": w.persistent_workers,
                "prefetch_factor": w.prefetch_factor,
                "multiprocessing_context": w.multiprocessing_context,
                "timeout": w.timeout,
            }
        return DataLoader(
            PlannedBatches(self.source, self.options.seed, self.transform),
            batch_size=None,
            sampler=self._sampler,
            num_workers=w.num_workers,
            pin_memory=w.pin_memory,
            collate_fn=_identity,
            **kwargs,
        )

    def _start_position(self, epoch: int) -> Position:
        if self._resume is not None and self._resume.epoch == epoch:
            return self._resume
        return Position(epoch, 0, self.topology.world_size, 0)

    def epoch(self, epoch: int) -> Iterator[Batch]:
        """Yield this rank's batches of ``epoch`` (from the resume position, if one was loaded)."""
        if not self._checked_ranks:
            check_same_plan(self.describe())
            self._checked_ranks = True
        plan, position = continue_plan(
            self.planner, self._start_position(epoch), self.topology.world_size
        )
        self._resume = None
        self._segment_plan, self._position = plan, position
        share = plan.rank_share(self.topology.rank, position.steps)
        self._sampler.set_plan(epoch, share, position.steps)
        report = EpochReport(
            epoch,
            self.topology.rank,
            self.topology.world_size,
            planned_steps=plan.steps,
            planned_seqs=plan.batches.real_count(),
            filtered=dict(self.planner.admission.filtered),
            dropped=plan.dropped,
            repeats=plan.repeats,
            resumed_at_step=position.steps,
        )
        self._last_report = report
        return self._run(share, report)

    def _run(self, share, report: EpochReport) -> Iterator[Batch]:
        meter = EpochMeter(report, self.length_key)
        if len(share):
            if self._dataloader is None:
                self._dataloader = self._make_dataloader()
            it = iter(self._dataloader)
            for _ in range(len(share)):
                meter.before_next()
                batch = next(it)
                meter.after_next(
                    batch.lengths[self.length_key].numpy(), batch.mask.numpy(), batch.skipped
                )
                p = self._position
                self._position = Position(
                    p.epoch, p.segment_start, p.segment_world_size, p.steps + 1
                )
                yield batch
        meter.finish()
        log.info("seqloader: %s", report.format())

    def report(self) -> EpochReport | None:
        """The report of the last (or current) epoch."""
        return self._last_report

    def describe(self) -> dict[str, str]:
        """What ranks compare (C7): plan fingerprint, source fingerprint, options."""
        return {
            "plan_fingerprint": self._fingerprint,
            "source": f"{self.source!r} fingerprint={self.source.fingerprint()}",
            "options": self.options.to_json(),
            "length_key": self.length_key,
        }

    # ---- resume ----
    def state_dict(self) -> dict:
        """Small, JSON-able state of *consumed* batches (prefetched ones don't count)."""
        p = self._position
        seqs = p.seq_offset(self._segment_plan) if self._segment_plan is not None else 0
        return {
            "format": STATE_FORMAT,
            "version": STATE_VERSION,
            "plan_fingerprint": self._fingerprint,
            "epoch": p.epoch,
            "segment_start": p.segment_start,
            "segment_world_size": p.segment_world_size,
            "steps": p.steps,
            "seqs_consumed": seqs,
            "world_size": self.topology.world_size,
        }

    def load_state_dict(self, state: dict) -> None:
        """Continue where ``state`` was taken: the next ``epoch(state['epoch'])`` yields exactly the
        remaining batches (with another world size: the rest of the same global plan)."""
        if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
            raise ResumeError(f"not a seqloader loader state: expected format {STATE_FORMAT!r}")
        if state.get("version") != STATE_VERSION:
            raise ResumeError(
                f"loader state version: got {state.get('version')!r}, expected {STATE_VERSION}"
            )
        missing = {
            "plan_fingerprint",
            "epoch",
            "segment_start",
            "segment_world_size",
            "steps",
        } - set(state)
        if missing:
            raise ResumeError(f"loader state lacks {sorted(missing)}")
        if state["plan_fingerprint"] != self._fingerprint:
            raise ResumeError(
                f"loader state plan fingerprint {state['plan_fingerprint']} differs from this "
                f"loader's {self._fingerprint}: the data, the options or the seed changed since "
                "the state was saved, so its position means nothing here. Resume with the same "
                "files (same order), options and seed."
            )
        epoch = int(state["epoch"])
        if epoch == 0:
            self._resume = None
            return
        self._resume = Position(
            epoch,
            int(state["segment_start"]),
            int(state["segment_world_size"]),
            int(state["steps"]),
        )

    # ---- lifecycle ----
    def close(self) -> None:
        """Stop worker processes now (they also stop when the loader is garbage-collected)."""
        dl, self._dataloader = self._dataloader, None
        if dl is not None:
            it = getattr(dl, "_iterator", None)
            if it is not None and hasattr(it, "_shutdown_workers"):
                it._shutdown_workers()
            dl._iterator = None

    def __enter__(self) -> SeqLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self.close()


def _identity(x: Batch) -> Batch:
    return x
