"""One epoch's run: hand this rank's planned batches to the training loop, measured and counted.

Per batch the training thread does only this: time the wait, take the batch from the DataLoader
(a dead worker becomes a ``WorkerError`` naming its batch), apply the data checks to what the
worker found, let the audit record it, add its precomputed counts to the report and count the step
as consumed (``LoaderState.consumed``). Everything else was done where the batch was built.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Generator

from seqloader.errors import SeqLoaderError
from seqloader.plan.batches import BatchList
from seqloader.plan.state import LoaderState
from seqloader.torch.batch import Batch
from seqloader.torch.dataloader import Execution
from seqloader.torch.distributed import gather_objects
from seqloader.torch.receiving import ReceivingIter
from seqloader.torch.worker_errors import EpochWatch, WorkerRaised
from seqloader.trainer.audit import EpochAuditor
from seqloader.trainer.checks import BatchChecks
from seqloader.trainer.release import EVERY, release, releaser
from seqloader.trainer.report import Clock, EpochMeter, EpochReport

log = logging.getLogger("seqloader")


class RunStop:
    """Stops one ``epoch()`` call's run when the next one starts: its generator, if the loop
    goes on with it, raises ``error`` at its next request and counts nothing into the new
    epoch's position (with per-epoch or no workers it would otherwise take and count batches of
    its own plan). No per-batch cost: the loop already checks ``EpochWatch.error``."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        self.error: SeqLoaderError | None = None
        self.watch: EpochWatch | None = None  # the run's watch, once its first request made it

    def stop(self, new_epoch: int) -> None:
        epoch = self.epoch
        self.error = SeqLoaderError(
            f"seqloader: epoch {epoch}'s batches stopped coming: epoch({new_epoch}) was asked "
            f"for while this epoch's loop was still going on, and the position now counts only "
            f"epoch {new_epoch}'s batches; finish (or drop) an epoch's loop before asking for "
            f"the next epoch, or to go on with epoch {epoch} load the state saved in it "
            f"(loader.load_state_dict(state)) and ask for epoch({epoch}) again"
        )
        watch = self.watch
        if watch is not None and watch.error is None:
            watch.error = self.error


def run_epoch(
    share: BatchList,
    report: EpochReport,
    *,
    execution: Execution,
    state: LoaderState,
    checks: BatchChecks,
    auditor: EpochAuditor | None,
    length_key: str,
    tag: Callable[[int], str],
    started: float | None = None,
    prefetched: Callable[[], tuple[int, int]] | None = None,
    clock: Clock = time.perf_counter,
    finish: Callable[[Batch], Batch] | None = None,
    settled: Callable[[], None] | None = None,
    stop: RunStop | None = None,
) -> Generator[Batch, None, None]:
    """Yield ``share`` (this rank's batches from the run's first step) as ``Batch`` es.

    ``started``: when the loop asked for the epoch (read off ``clock``, the report's time source);
    the report's clock starts there, so everything before the first batch is data wait
    (``EpochMeter``).
    ``prefetched()``: what the remote files' prefetcher fetched, counted at the end
    (``PlanPrefetch.counts``).
    ``finish``: the last step before the loop gets a batch (``features_on``), after it is counted
    and audited; inside the loop's wait.
    ``settled()``: called once the first batch is about to be handed (or the epoch ends without
    one): lets the background work of the epoch's start begin (``PlanAhead``, ``InBackground``).
    ``stop``: set by the next ``epoch()`` call; the loop then raises its error (``RunStop``)."""
    # an epoch without batches for this rank has nothing to measure
    meter = EpochMeter(report, length_key, clock, started=started if len(share) else None)
    finished = False
    watch: EpochWatch | None = None
    handed: Batch | None = None  # the batch the loop holds: freed at the next request
    # with workers, in the release thread (off the loop's time), EVERY batches at a time, in the
    # request whose take woke that thread; without, right here (the batch's block is then free
    # again before the next batch is built into it)
    background = execution.options.num_workers > 0
    pending: list[Batch] = []  # batches the loop is done with, not yet passed to the release
    # after the first batch, a request's start is read off the clock here (``asked``) and the
    # meter only told of it if the request is not served (an error, the epoch's end); a batch
    # handed appends its counts and wait to the meter's lists (``EpochMeter.fold`` adds them
    # up): per batch, every Python call the training thread makes after a step costs it µs
    in_request = False  # a request the meter was not told of is being served since ``asked``
    asked = 0.0
    first = True  # the first batch: the meter's own call (its wait began at the epoch's request)
    fold_every = meter.FOLD_EVERY
    try:
        if stop is not None and stop.error is not None:  # the next epoch started before this one
            raise stop.error
        if len(share):
            meter.before_next()  # the first request: DataLoader, workers, indexes, first batch
            dataloader = execution.ready()
            it = iter(dataloader)
            watch = EpochWatch.start(
                dataloader,
                it,
                epoch=report.epoch,
                rank=report.rank,
                share=share,
                first_step=report.resumed_at_step,
                tag=tag,
                on_failure=execution.close,
                progress=execution.progress(),
            )
            if stop is not None:
                stop.watch = watch
                if stop.error is not None:  # stopped while its first batch was being asked for
                    raise stop.error
            take = it.taker() if isinstance(it, ReceivingIter) else it.__next__
            counts, waits = meter.counts.append, meter.waits.append
            to_release = releaser() if background else release
            taken = 0
            for _ in range(len(share)):
                if watch.error is not None:  # raised before (in the loop's code): it is broken
                    raise watch.error
                # the worker-failure handling only when the take raised: no wrapper call per batch
                try:
                    batch = take()
                except Exception as e:
                    err = watch.failure(e)  # a dead worker -> WorkerError naming its batch
                    if err is None:
                        raise
                    raise err from e
                if type(batch) is WorkerRaised:  # a seqloader error in the worker: message first
                    batch.reraise()
                taken = watch.consumed = taken + 1
                if handed is not None and background:  # the loop has replaced it by now
                    pending.append(handed)
                    if not taken % EVERY:  # the take just woke the release thread:
                        # their last references, freed there (a put into an awake thread's
                        # queue costs ~1 µs, a wake 20 µs)
                        to_release(pending)
                        pending = []
                handed = batch
                if batch.nonfinite:  # NaN/Inf the workers found (a call less when none)
                    checks.check(batch.nonfinite, report)
                if auditor is not None:
                    auditor.record(batch)
                # consumed once handed to the loop; batches still in prefetch don't count
                state.consumed += 1  # folded into the position when it is read
                counted = batch
                if finish is not None:
                    batch = handed = finish(batch)
                if settled is not None:  # the first batch: background work may start now
                    settled()
                    settled = None
                # counted, and the wait ends here: the loader's work is all inside it
                if (
                    first
                    or counted.skipped
                    or counted.corpus_counts
                    or counted.fetch_wait_s
                    or counted.fetch_bytes
                ):
                    if in_request:
                        meter.asked_at(asked)
                    meter.count_handed(
                        counted.counts_of(length_key),
                        counted.skipped,
                        counted.corpus_counts,
                        counted.fetch_wait_s,
                        counted.fetch_bytes,
                    )
                    first = False
                else:
                    if not taken % fold_every:
                        meter.fold()
                    counts(counted.counts.get(length_key) or counted.counts_of(length_key))
                    waits(clock() - asked)  # the clock last
                in_request = False
                yield batch
                asked = clock()  # the loop asks again: from here on it waits
                in_request = True
                del batch
        finished = True
        if auditor is not None:  # all ranks' deliveries (one all_gather_object), verified
            report.audit = auditor.verify(gather_objects(auditor.payload(), auditor.world_size))
            auditor.enforce(report.audit)  # raises AuditError / warns if not exactly-once
    finally:
        if settled is not None:
            settled()
        if handed is not None and background:
            pending.append(handed)
        if pending:
            release(pending)
        handed = None
        pending = []
        if watch is not None:
            watch.stop()
        if stop is not None:  # holds nothing of a run that is over
            stop.watch = None
        if in_request:  # the final request (the epoch's end), or one an error interrupted
            meter.asked_at(asked)
        meter.finish()  # also when the loop stops early or raises: the report keeps its times
        if prefetched is not None:
            meter.prefetched(*prefetched())
        if not finished and log.isEnabledFor(logging.INFO):
            log.info("seqloader: epoch stopped early: %s", report.format())
    if log.isEnabledFor(logging.INFO):  # formatting costs the loop's time: only when shown
        log.info("seqloader: %s", report.format())
