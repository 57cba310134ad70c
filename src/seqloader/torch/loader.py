"""``SeqLoader``: the plan, executed by torch's DataLoader, with resume state and per-epoch reports."""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import Generator, Mapping
from dataclasses import dataclass, fields
from typing import Any, cast

import numpy as np
from torch.utils.data import DataLoader

from seqloader.errors import OptionError, ResumeError
from seqloader.loading.corpora import corpora_of
from seqloader.loading.execute import Transform
from seqloader.plan.batches import BatchList
from seqloader.plan.distribute import GlobalPlan
from seqloader.plan.options import PlanOptions
from seqloader.plan.planner import Planner
from seqloader.plan.position import Position, continue_plan, is_finished, segment_plan
from seqloader.plan.topology import Topology
from seqloader.sources.base import PlanHints, Source, declares, loader_needs
from seqloader.torch.audit import EpochAuditor, audit_policy
from seqloader.torch.batch import Batch
from seqloader.torch.checks import BatchChecks, CheckOptions, check_source
from seqloader.torch.corpus_report import planned_corpora
from seqloader.torch.dataset import (
    PlannedBatches,
    PlanSampler,
    ReceivingDataLoader,
    worker_progress,
)
from seqloader.torch.distributed import check_same_plan
from seqloader.torch.report import EpochMeter, EpochReport
from seqloader.torch.topology import detect
from seqloader.torch.workers import EpochWatch, WorkerProgress, workers_alive

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
        for name in ("pin_memory", "persistent_workers"):
            if not isinstance(getattr(self, name), bool):
                raise OptionError(f"{name}: got {getattr(self, name)!r}, expected True or False")
        t = self.timeout
        if not isinstance(t, int | float) or isinstance(t, bool) or t < 0:
            raise OptionError(f"timeout: got {t!r}, expected seconds >= 0 (0: none)")
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

    _saved_position: Position  # set through _position
    _unsaved_steps: int

    def __init__(
        self,
        source: Source,
        *,
        plan: PlanOptions | None = None,
        workers: WorkerOptions | None = None,
        rank: int | None = None,
        world_size: int | None = None,
        transform: Transform | None = None,
        checks: CheckOptions | None = None,
        audit: bool | str = False,
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
        needs = loader_needs(source)
        if transform is None and needs.transform_keys:
            raise OptionError(
                f"{source!r} {needs.why}, but no transform is given. Fix: {needs.fix}"
            )
        self.transform = transform
        hints = cast(PlanHints, source) if declares(source, PlanHints) else None
        self.planner = Planner(
            {k: source.lengths(k) for k in source.keys},
            self.options,
            source.tags,
            repr(source),
            order_lengths=None if hints is None else hints.order_lengths(),
            excluded=None if hints is None else hints.excluded(),
            corpora=corpora_of(source),
        )
        self.length_key = self.planner.length_key
        self._fingerprint = self.planner.fingerprint(source.fingerprint())
        self.checks = checks or CheckOptions()  # data checks (seqloader.torch.checks)
        self.audit = audit_policy(audit)  # epoch audit (seqloader.torch.audit)
        check_source(source, self.planner, self.checks)
        self._batch_checks = BatchChecks(source, self.checks)
        self._checked_ranks = False
        self._position = Position(epoch=0, segment_world_size=self.topology.world_size)
        self._resume: Position | None = None  # loaded by load_state_dict, not started yet
        self._resume_plan: GlobalPlan | None = None  # the segment plan of _resume
        self._segment_plan: GlobalPlan | None = None
        self._sampler = PlanSampler()
        self._dataloader: DataLoader | None = None
        self._last_report: EpochReport | None = None

    @property
    def _position(self) -> Position:
        """Where the consumed batches end. The training loop only counts steps; they are folded
        in when the position is read (``state_dict``, the next ``epoch``, the audit), instead of a
        new validated ``Position`` per batch in the training thread (5x5 runs at a 10 ms step:
        median wait per batch 0.303 -> 0.291 ms)."""
        if self._unsaved_steps:
            self._saved_position = self._saved_position.advanced(self._unsaved_steps)
            self._unsaved_steps = 0
        return self._saved_position

    @_position.setter
    def _position(self, position: Position) -> None:
        self._saved_position, self._unsaved_steps = position, 0

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
        batches = PlannedBatches(self.source, self.options.seed, self.transform)
        batches.screen = self._batch_checks.screen  # workers look for NaN/Inf (loading.screen)
        if w.num_workers > 0:  # which batch each worker builds: a death names it
            batches.progress = WorkerProgress(w.num_workers)
        return ReceivingDataLoader(
            batches,
            batch_size=None,
            sampler=self._sampler,
            num_workers=w.num_workers,
            pin_memory=w.pin_memory,
            collate_fn=_identity,
            **kwargs,
        )

    def _start_position(self, epoch: int) -> tuple[Position, GlobalPlan | None]:
        """The loaded resume position if it is in ``epoch``, else the epoch's start (with the
        segment plan when it is known). A loaded position is never skipped silently: asking for
        another epoch than a mid-epoch state's, or an earlier one than a finished state's, raises."""
        resume, plan = self._resume, self._resume_plan
        if resume is None or plan is None:
            return Position(epoch, 0, self.topology.world_size, 0), None
        if epoch == resume.epoch:
            return resume, plan
        if epoch < resume.epoch or not is_finished(resume, plan):
            total = resume.prior_steps + plan.steps
            effect = "go back before" if epoch < resume.epoch else "skip the rest of"
            raise ResumeError(
                f"epoch({epoch}) asked, but the loaded state is at step {resume.epoch_steps} of "
                f"{total} of epoch {resume.epoch}: that would {effect} epoch {resume.epoch}. "
                f"Call loader.epoch({resume.epoch}) first (the state's 'epoch' field), or build a "
                "new loader without load_state_dict to start elsewhere."
            )
        return Position(epoch, 0, self.topology.world_size, 0), None

    def epoch(self, epoch: int) -> Generator[Batch, None, None]:
        """Yield this rank's batches of ``epoch`` (from the resume position, if one was loaded).

        The first call compares plan fingerprint, epoch, world size and resume position across
        ranks (one ``all_gather`` when torch.distributed is initialized; C7)."""
        if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 1:
            raise OptionError(f"epoch: got {epoch!r}, expected an int >= 1 (epochs count from 1)")
        if not self._checked_ranks:
            check_same_plan(self._agreement(epoch), {"source_fingerprint": repr(self.source)})
            self._checked_ranks = True
        start, segment = self._start_position(epoch)
        plan, position = continue_plan(self.planner, start, self.topology.world_size, segment)
        self._resume = self._resume_plan = None
        self._segment_plan, self._position = plan, position
        share = plan.rank_share(self.topology.rank, position.steps)
        self._sampler.set_plan(epoch, share, position.epoch_steps)
        report = EpochReport(
            epoch,
            self.topology.rank,
            self.topology.world_size,
            planned_steps=position.prior_steps + plan.steps,
            planned_seqs=position.segment_start + plan.batches.real_count(),
            filtered=dict(self.planner.admission.filtered),
            dropped=plan.dropped,
            repeats=plan.repeats,
            resumed_at_step=position.epoch_steps,
            corpora=planned_corpora(self.planner, epoch),
        )
        self._last_report = report
        return self._run(share, report)

    def _agreement(self, epoch: int) -> dict[str, str]:
        """What every rank must hold equally at its first ``epoch()`` call: data (by content
        fingerprint, not by file name), options, the epoch asked for, world size and the loaded
        resume position (every rank must load the same state)."""
        resume = "none" if self._resume is None else json.dumps(self._resume.to_fields())
        return {
            "plan_fingerprint": self._fingerprint,
            "source_fingerprint": self.source.fingerprint(),
            "options": self.options.to_json(),
            "length_key": self.length_key,
            "epoch": str(epoch),
            "world_size": str(self.topology.world_size),
            "resume_position": resume,
        }

    def _run(self, share: BatchList, report: EpochReport) -> Generator[Batch, None, None]:
        meter = EpochMeter(report, self.length_key)
        auditor = self._auditor(share, report)
        finished = False
        watch: EpochWatch | None = None
        try:
            if len(share):
                if self._dataloader is not None and not workers_alive(self._dataloader):
                    self.close()  # a worker died (WorkerError raised): start fresh workers
                if self._dataloader is None:
                    self._dataloader = self._make_dataloader()
                it = iter(self._dataloader)
                watch = EpochWatch.start(
                    self._dataloader,
                    it,
                    epoch=report.epoch,
                    rank=self.topology.rank,
                    share=share,
                    first_step=report.resumed_at_step,
                    tag=self.source.tag,
                    on_failure=self.close,
                    progress=worker_progress(self._dataloader),
                )
                for _ in range(len(share)):
                    meter.before_next()
                    batch = watch.next(it)  # a dead worker -> WorkerError naming its batch
                    self._batch_checks.check(batch, report)  # NaN/Inf the workers found
                    if auditor is not None:
                        auditor.record(batch)
                    meter.after_counts(
                        batch.counts_of(self.length_key), batch.skipped, batch.corpus_counts
                    )
                    # consumed once handed to the loop; batches still in prefetch don't count
                    self._unsaved_steps += 1  # folded into _position when it is read
                    yield batch
            finished = True
        finally:
            if watch is not None:
                watch.stop()
            meter.finish()  # also when the loop stops early or raises: the report keeps its times
            if not finished:
                log.info("seqloader: epoch stopped early: %s", report.format())
        if auditor is not None:
            auditor.finish(report)  # raises AuditError / warns if not exactly-once
        log.info("seqloader: %s", report.format())

    def _auditor(self, share, report: EpochReport) -> EpochAuditor | None:
        if self.audit == "off" or self._segment_plan is None:
            return None
        p, plan = self._position, self._segment_plan
        return EpochAuditor(
            policy=self.audit,
            planner=self.planner,
            plan=plan,
            share=share,
            rank=self.topology.rank,
            world_size=self.topology.world_size,
            epoch=report.epoch,
            first_step=p.epoch_steps,
            start_steps=p.steps,
            start_offset=p.seq_offset(plan),
            source=self.source,
            check_lengths=self.transform is None,
        )

    def report(self) -> EpochReport | None:
        """The report of the last (or current) epoch."""
        return self._last_report

    def describe(self) -> dict[str, str]:
        """Plan fingerprint, source (readable, with its fingerprint), options: for logs and
        reports. (What ranks compare, C7, is ``_agreement``.)"""
        return {
            "plan_fingerprint": self._fingerprint,
            "source": f"{self.source!r} fingerprint={self.source.fingerprint()}",
            "options": self.options.to_json(),
            "length_key": self.length_key,
        }

    # ---- resume ----
    def state_dict(self) -> dict:
        """Small, JSON-able state of the *consumed* batches: a batch counts once the loop has
        received it; prefetched ones don't. Identical on every rank (positions are global), so
        rank 0 can save it for all. Fields: ``epoch`` (0: none started), ``steps`` consumed per
        rank in it, ``seqs_consumed`` (global position in the epoch's order, all ranks together),
        ``epoch_complete``, the saver's ``world_size``, the segment fields of ``Position``, the plan
        fingerprint and the format version."""
        plan: GlobalPlan | None
        if self._resume is not None and self._resume_plan is not None:  # loaded, not started
            position, plan = self._resume, self._resume_plan
        else:
            position, plan = self._position, self._segment_plan
        return {
            "format": STATE_FORMAT,
            "version": STATE_VERSION,
            "plan_fingerprint": self._fingerprint,
            **position.to_fields(),
            "steps": position.epoch_steps,
            "seqs_consumed": position.seq_offset(plan) if plan is not None else 0,
            "epoch_complete": plan is not None and is_finished(position, plan),
            "world_size": self.topology.world_size,
        }

    def load_state_dict(self, state: Mapping) -> None:
        """Continue where ``state`` was taken: the next ``epoch(state["epoch"])`` yields exactly the
        remaining batches. With the saver's world size that is the rest of the same plan, batch for
        batch; with another one, the rest of the epoch's order re-planned for this world size.

        Raises ``ResumeError`` for a state of other data, options or seed (plan fingerprint), of
        another format version, or whose position does not fit this plan."""
        if not isinstance(state, Mapping) or state.get("format") != STATE_FORMAT:
            raise ResumeError(
                f"not a seqloader loader state: got {type(state).__name__} with format "
                f"{state.get('format') if isinstance(state, Mapping) else None!r}, expected a "
                f"dict from SeqLoader.state_dict() with format {STATE_FORMAT!r}"
            )
        if state.get("version") != STATE_VERSION:
            raise ResumeError(
                f"loader state version: got {state.get('version')!r}, expected {STATE_VERSION}"
            )
        if state.get("plan_fingerprint") != self._fingerprint:
            raise ResumeError(
                f"loader state plan fingerprint {state.get('plan_fingerprint')!r} differs from "
                f"this loader's {self._fingerprint!r}: the data, the options or the seed changed "
                "since the state was saved, so its position means nothing here. Resume with the "
                "same files (in the same order), options and seed."
            )
        position = Position.from_fields(state)
        if position.epoch == 0:
            self._resume = self._resume_plan = None
            return
        plan = segment_plan(self.planner, position)
        derived = {"steps": position.epoch_steps, "seqs_consumed": position.seq_offset(plan)}
        for key, value in derived.items():
            if key in state and state[key] != value:
                raise ResumeError(
                    f"loader state {key}: got {state[key]!r}, but its position gives {value} "
                    "with this loader's plan: the state was written by a seqloader version that "
                    "plans differently, or was edited"
                )
        self._resume, self._resume_plan = position, plan
        log.info(
            "seqloader: resuming epoch %d at step %d (%d sequences consumed), saved with world "
            "size %s, now %d",
            position.epoch,
            position.epoch_steps,
            derived["seqs_consumed"],
            state.get("world_size"),
            self.topology.world_size,
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


def _identity(x: Any) -> Any:
    """``collate_fn`` with ``batch_size=None``: the item (a built ``Batch``) as it is."""
    return x
