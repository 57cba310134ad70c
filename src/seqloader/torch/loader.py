"""``SeqLoader``: the plan, executed by torch's DataLoader, with resume state and per-epoch reports.

A coordinator: options are merged in ``trainer/loader_options.py``, the resume state is
``plan/state.py`` (torch-free), the DataLoader's lifecycle is ``torch/dataloader.py`` and the
per-batch loop is ``torch/run.py``.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import sys
import threading
import time
import weakref
from collections.abc import Callable, Generator, Mapping
from typing import TYPE_CHECKING, TypeVar

import numpy as np
from torch.utils.data import DataLoader

from seqloader.errors import OptionError
from seqloader.loading.planner_for import planner_for
from seqloader.loading.variants import planned_variants
from seqloader.loading.worker_spec import Transform, WorkerSpec
from seqloader.plan.batches import BatchList
from seqloader.plan.epochs import EPOCH_EXPECTED
from seqloader.plan.options import PlanOptions
from seqloader.plan.planners import EpochPlan
from seqloader.plan.state import STATE_FORMAT, STATE_VERSION, LoaderState
from seqloader.plan.topology import Topology
from seqloader.sources.base import (
    Source,
    loader_needs,
    remote_files,
)
from seqloader.torch.batch import Batch
from seqloader.torch.dataloader import Execution
from seqloader.torch.dataset import RunPlan
from seqloader.torch.distributed import check_same_plan
from seqloader.torch.features_on import FeaturesOn
from seqloader.torch.process_rank import detect
from seqloader.torch.run import RunStop, run_epoch
from seqloader.trainer.audit import EpochAuditor
from seqloader.trainer.checks import BatchChecks, CheckOptions, check_source
from seqloader.trainer.corpus_report import planned_corpora
from seqloader.trainer.loader_options import LoaderKeywords, WorkerOptions, merge_options
from seqloader.trainer.prefetch import PlanPrefetch
from seqloader.trainer.report import Clock, EpochReport
from seqloader.validate import Policy, int_option

if TYPE_CHECKING:
    if sys.version_info >= (3, 11):
        from typing import Unpack
    else:
        from typing_extensions import Unpack

__all__ = ["STATE_FORMAT", "STATE_VERSION", "SeqLoader", "WorkerOptions"]

log = logging.getLogger("seqloader")
T = TypeVar("T")

#: the loaders alive in this process, closed at interpreter exit (``_close_at_exit``)
_LIVE: weakref.WeakSet[SeqLoader] = weakref.WeakSet()


def _close_at_exit() -> None:
    """Close the loaders still alive while the interpreter is whole: a script's module-level
    loader is collected only after the modules' globals were emptied, where its ``close`` (and
    ``__del__``) found them None and reported it ("Exception ignored in SeqLoader.__del__")."""
    for loader in list(_LIVE):
        with contextlib.suppress(Exception):
            loader.close()


atexit.register(_close_at_exit)


class SeqLoader:
    """Feeds a training loop with planned batches.

    Options come either grouped (``plan=PlanOptions(...)``, ``workers=WorkerOptions(...)``,
    ``checks=CheckOptions(...)``) or as keyword arguments of the first two
    (``ordering=..., max_frames=..., num_workers=...``; see ``LoaderKeywords``); ``audit=True`` is
    short for ``CheckOptions(audit="error")``. Rank and world size come from the arguments, else
    ``torch.distributed``, else ``RANK``/``WORLD_SIZE``. ``clock``: the time source of the epoch
    reports (seconds; ``time.perf_counter``), replaceable so a test can drive it.

    >>> src = sl.MemorySource({"data": [np.ones((n, 2), "float32") for n in (3, 5, 2, 4)]})
    >>> loader = SeqLoader(src, max_seqs=2, ordering="sorted", seed=1)
    >>> [(batch["data"].shape, batch.lengths["data"].tolist()) for batch in loader.epoch(1)]
    [(torch.Size([2, 3, 2]), [2, 3]), (torch.Size([2, 5, 2]), [4, 5])]
    >>> loader.state_dict()["epoch_complete"]
    True
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
        checks: CheckOptions | None = None,
        audit: bool | Policy | None = None,
        clock: Clock = time.perf_counter,
        **options: Unpack[LoaderKeywords],
    ) -> None:
        _LIVE.add(self)
        merged = merge_options(plan, workers, checks, audit, options)
        self.source = source
        self.plan_options: PlanOptions = merged.plan
        self.worker_options: WorkerOptions = merged.workers
        self.checks: CheckOptions = (
            merged.checks
        )  # data checks and the audit (seqloader.trainer.checks)
        self.topology: Topology = detect(rank, world_size)
        needs = loader_needs(source)
        features_on = self.worker_options.features_on
        self._finish = None if features_on is None else FeaturesOn.of(source, needs, features_on)
        if transform is None and needs.transform_keys and self._finish is None:
            raise OptionError(
                f"{source!r} {needs.why}, but no transform is given. Fix: {needs.fix}"
            )
        self.transform = transform
        self.clock = clock
        self.planner = planner_for(source, self.plan_options)
        self.length_key = self.planner.length_key
        self.planner.check_world(self.topology.world_size)  # too few files: say so now
        self._fingerprint = self.planner.fingerprint(source.fingerprint())
        check_source(source, self.planner, self.checks)
        self._batch_checks = BatchChecks(source, self.checks)
        self._checked_ranks = False
        self._state = LoaderState(
            self.planner, self._fingerprint, self.topology.world_size, rank=self.topology.rank
        )
        chunks = self.planner.chunks
        carried = self.planner.options.planning == "indexed"  # each batch says its variants
        variants = planned_variants(source, self.plan_options.partition_epoch, carried)
        if self._finish is not None and (variants is not None or chunks is not None):
            raise OptionError(
                "features_on computes features of whole padded batches of waveforms: not with "
                "length variants or chunked plans. Fix: compute the features in the workers "
                "(transform=seqloader.transforms.Features(...))"
            )
        worker = WorkerSpec(
            seed=self.plan_options.seed,
            transform=transform,
            screen=self._batch_checks.screen,  # workers look for NaN/Inf (loading.screen)
            chunking=WorkerSpec.pairs(None if chunks is None else chunks.spec),
            packed=self.worker_options.layout == "packed",
            variants=variants,
            deferred=None if self._finish is None else self._finish.features,
        )
        self._execution = Execution(source, self.worker_options, worker)
        self._last_report: EpochReport | None = None
        self._run_stop: RunStop | None = None  # the last epoch() call's run, stopped by the next
        remote = remote_files(source)
        self._prefetch = (
            None
            if remote is None
            else PlanPrefetch(
                remote,
                self._share_from_start,
                rank=self.topology.rank,
                sub_epochs=self.plan_options.partition_epoch,
            )
        )
        if self._prefetch is None:  # (remote files: fetched ahead per epoch, not prepared)
            self._execution.prepare_ahead(_weak_call(self._upcoming))

    def _upcoming(self, ended: int) -> RunPlan | None:
        """The run the next ``epoch()`` call most likely starts once epoch ``ended``'s last
        batch is taken: the next epoch from its start, planned ahead
        (``LoaderState.planned_next``). Its first batches are then built before the loop asks,
        and used only if it asks for exactly this run (anything else: dropped, and torch's
        reset receives what was in flight)."""
        upcoming = self._state.planned_next(ended)
        if upcoming is None:
            return None
        plan, position = upcoming
        share = plan.rank_share(self.topology.rank, position.steps)
        return RunPlan(position.epoch, share, position.epoch_steps, plan, position)

    def _share_from_start(self, epoch: int) -> BatchList:
        """This rank's batches of ``epoch`` from its start (what the prefetcher fetches for)."""
        return self.global_plan(epoch).rank_share(self.topology.rank)

    @property
    def audit(self) -> Policy:
        """The epoch audit's policy (``checks.audit``)."""
        return self.checks.audit

    # ---- planning (no data read) ----
    @property
    def fingerprint(self) -> str:
        return self._fingerprint

    def global_plan(self, epoch: int, world_size: int | None = None) -> EpochPlan:
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

    @property
    def running_plan(self) -> EpochPlan | None:
        """All ranks' batches that the last ``epoch()`` call runs (planned once by it; None
        before the first call), for counts that every rank must derive alike."""
        return self._state.segment

    # ---- execution ----
    def epoch(self, epoch: int) -> Generator[Batch, None, None]:
        """Yield this rank's batches of ``epoch`` (from the resume position, if one was loaded).

        The first call compares plan fingerprint, epoch, world size and resume position across
        ranks (one ``all_gather`` when torch.distributed is initialized; C7). The epoch's report
        (``report()``) measures from this call on, as the training loop experiences it."""
        started = self.clock()
        epoch = int_option("epoch", epoch, 1, expected=EPOCH_EXPECTED)
        if self._run_stop is not None:  # its loop, if it goes on, must count nothing into this one
            self._run_stop.stop(epoch)
        self._run_stop = stop = RunStop(epoch)
        if not self._checked_ranks and self.topology.world_size > 1:  # 1: a loader of its own
            check_same_plan(self._agreement(epoch), {"source_fingerprint": repr(self.source)})
            self._checked_ranks = True
        # the next epoch's plan and the report's O(n) figures are computed in background threads
        # that start once the first batch is handed (the boundary's own work goes first)
        settled = threading.Event()
        # the last run's workers prepare the next epoch from its start: waited for if that is
        # this run (the same test as the adoption's), else stopped now (it would be dropped)
        self._execution.settle(use=self._state.starts_planned_next(epoch))
        plan, position = self._state.begin(epoch, after=settled)
        share = plan.rank_share(self.topology.rank, position.steps)
        if self._prefetch is not None:  # remote files: this rank's, fetched ahead of the plan
            self._prefetch.start(epoch, share)
        self._execution.set_plan(epoch, share, position.epoch_steps, plan, position)
        report = EpochReport.planned(
            self.topology,
            plan,
            position,
            self.planner.filtered(epoch),
            planned_corpora(self.planner, epoch),
            imbalance=self.planner.step_imbalance(plan, position.steps),
            after=settled,
        )
        self._last_report = report
        auditor = None
        if self.audit != "off":
            auditor = EpochAuditor.for_run(
                self.audit,
                self.planner,
                plan,
                share,
                self.topology,
                position,
                self.source,
                check_lengths=self.transform is None and self._execution.worker.variants is None,
            )
        return run_epoch(
            share,
            report,
            execution=self._execution,
            state=self._state,
            checks=self._batch_checks,
            auditor=auditor,
            length_key=self.length_key,
            tag=self.source.tag,
            started=started,
            prefetched=None if self._prefetch is None else self._prefetch.counts,
            clock=self.clock,
            finish=self._finish,
            settled=settled.set,
            stop=stop,
        )

    # ---- what defines the plans ----
    def _identity(self) -> dict[str, str]:
        """What defines this loader's plans: the plan fingerprint and what it is made of (the
        data by content fingerprint, not by file name; the options; the length key)."""
        return {
            "plan_fingerprint": self._fingerprint,
            "source_fingerprint": self.source.fingerprint(),
            "options": self.plan_options.to_json(),
            "length_key": self.length_key,
        }

    def _agreement(self, epoch: int) -> dict[str, str]:
        """What every rank must hold equally at its first ``epoch()`` call: the identity, the
        epoch asked for, world size and the loaded resume position (every rank must load the
        same state)."""
        return {
            **self._identity(),
            "epoch": str(epoch),
            "world_size": str(self.topology.world_size),
            "resume_position": self._state.loaded_text(),
        }

    def describe(self) -> dict[str, str]:
        """Plan fingerprint, source (readable, with its fingerprint), options: for logs and
        reports (what ranks compare, C7, is ``_agreement``: the same identity)."""
        identity = self._identity()
        source = f"{self.source!r} fingerprint={identity.pop('source_fingerprint')}"
        return {"plan_fingerprint": identity.pop("plan_fingerprint"), "source": source, **identity}

    def report(self) -> EpochReport | None:
        """The report of the last (or current) epoch, every batch handed so far counted."""
        report = self._last_report
        return None if report is None else report.current()

    # ---- resume ----
    def state_dict(self) -> dict:
        """Small, JSON-able state of the *consumed* batches: a batch counts once the loop has
        received it; prefetched ones don't. Identical on every rank (positions are global), so
        rank 0 can save it for all. Fields: ``epoch`` (0: none started), ``steps`` consumed per
        rank in it, ``seqs_consumed`` (global position in the epoch's order, all ranks together),
        ``epoch_complete``, the saver's ``world_size``, the segment fields of ``Position``, the plan
        fingerprint and the format version."""
        return self._state.to_dict()

    def load_state_dict(self, state: Mapping) -> None:
        """Continue where ``state`` was taken: the next ``epoch(state["epoch"])`` yields exactly the
        remaining batches. With the saver's world size that is the rest of the same plan, batch for
        batch; with another one, the rest of the epoch's order re-planned for this world size.

        Raises ``ResumeError`` for a state of other data, options or seed (plan fingerprint), of
        another format version, or whose position does not fit this plan."""
        loaded = self._state.load(state)
        if loaded is not None:
            log.info(
                "seqloader: resuming epoch %d at step %d (%d sequences consumed), saved with world "
                "size %s, now %d",
                loaded["epoch"],
                loaded["steps"],
                loaded["seqs_consumed"],
                state.get("world_size"),
                self.topology.world_size,
            )

    # ---- lifecycle ----
    @property
    def _dataloader(self) -> DataLoader | None:
        return self._execution.dataloader

    def close(self) -> None:
        """Stop worker processes now (they also stop when the loader is garbage-collected)."""
        if self._prefetch is not None:
            self._prefetch.close()
        self._execution.close()

    def __enter__(self) -> SeqLoader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self, _suppress: type[contextlib.suppress] = contextlib.suppress) -> None:
        # bound at definition: at interpreter exit this may run after ``contextlib`` is None here
        # (closed by then: ``_close_at_exit``)
        with _suppress(Exception):
            self.close()


def _weak_call(method: Callable[[int], T]) -> Callable[[int], T | None]:
    """``method(x)`` while its object lives, else None: the DataLoader's sampler calls back into
    the loader without keeping it alive (the loader owns the DataLoader)."""
    ref = weakref.WeakMethod(method)

    def call(x: int) -> T | None:
        bound = ref()
        return None if bound is None else bound(x)

    return call
