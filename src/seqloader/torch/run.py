"""One epoch's run: hand this rank's planned batches to the training loop, measured and counted.

Per batch the training thread does only this: time the wait, take the batch from the DataLoader
(a dead worker becomes a ``WorkerError`` naming its batch), apply the data checks to what the
worker found, let the audit record it, add its precomputed counts to the report and count the step
as consumed (``LoaderState.consumed``). Everything else was done where the batch was built.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator

from seqloader.plan.batches import BatchList
from seqloader.plan.state import LoaderState
from seqloader.torch.audit import EpochAuditor
from seqloader.torch.batch import Batch
from seqloader.torch.checks import BatchChecks
from seqloader.torch.execution import Execution
from seqloader.torch.report import EpochMeter, EpochReport
from seqloader.torch.workers import EpochWatch

log = logging.getLogger("seqloader")


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
) -> Generator[Batch, None, None]:
    """Yield ``share`` (this rank's batches from the run's first step) as ``Batch`` es."""
    meter = EpochMeter(report, length_key)
    finished = False
    watch: EpochWatch | None = None
    try:
        if len(share):
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
            for _ in range(len(share)):
                meter.before_next()
                batch = watch.next(it)  # a dead worker -> WorkerError naming its batch
                checks.check(batch, report)  # NaN/Inf the workers found
                if auditor is not None:
                    auditor.record(batch)
                meter.after_counts(batch.counts_of(length_key), batch.skipped, batch.corpus_counts)
                # consumed once handed to the loop; batches still in prefetch don't count
                state.consumed += 1  # folded into the position when it is read
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
