"""The DataLoader that executes a loader's plan: built on first use, kept (persistent workers),
rebuilt after a worker died, stopped by ``close()``."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable

from torch.utils.data import DataLoader

from seqloader.loading.worker_spec import WorkerSpec
from seqloader.plan.batches import BatchList
from seqloader.sources.base import Source, prepare_workers
from seqloader.torch._compat import current_iterator, workers_alive
from seqloader.torch.dataset import PlannedBatches, PlanSampler, RunPlan, whole_batch
from seqloader.torch.held_batches import WorkerProgress
from seqloader.torch.receiving import ReceivingDataLoaderBase, ReceivingIter
from seqloader.trainer.loader_options import WorkerOptions


class Execution:
    """Owns the DataLoader; the sampler it reads is set to each run's batches. ``worker``: how
    the workers build each batch (``WorkerSpec``, built once by the loader)."""

    def __init__(self, source: Source, options: WorkerOptions, worker: WorkerSpec) -> None:
        self.source = source
        self.options = options
        self.worker = worker
        self.sampler = PlanSampler()
        self.dataloader: ReceivingDataLoader | None = None

    def set_plan(
        self,
        epoch: int,
        share: BatchList,
        first_step: int,
        plan: object = None,
        position: object = None,
    ) -> None:
        """What the next ``iter(dataloader)`` yields: ``share`` from step ``first_step`` on;
        ``plan`` and ``position`` say which run that is, so batches prepared ahead for it are
        used (``PlanSampler``, ``RunPlan.same_run``)."""
        self.sampler.set_plan(epoch, share, first_step, plan, position)

    def prepare_ahead(self, upcoming: Callable[[int], RunPlan | None] | None) -> None:
        """``upcoming(epoch)``: the run the loader will most likely ask after ``epoch``'s;
        persistent workers build its first batches once that epoch's last batch is taken
        (None: never)."""
        self.sampler.upcoming = upcoming

    def settle(self, use: bool) -> None:
        """Before a new run's plan is taken, if the last run's batches were all taken: ``use``
        (the new run is the one its workers prepare ahead, ``LoaderState.starts_planned_next``):
        wait until they have prepared it (or decided not to); else stop the preparation now."""
        dataloader = self.dataloader
        it = None if dataloader is None else current_iterator(dataloader)
        if isinstance(it, ReceivingIter):
            it.settle(use)

    def ready(self) -> ReceivingDataLoader:
        """The DataLoader to iterate: the kept one, unless a worker of it died (reusing it would
        wait for that worker), else a new one."""
        if self.dataloader is not None and not workers_alive(self.dataloader):
            self.close()  # a worker died (WorkerError raised): start fresh workers
        if self.dataloader is None:
            self.dataloader = self._make()
        return self.dataloader

    def progress(self) -> WorkerProgress | None:
        """The workers' board of the batch each is building (None without workers)."""
        return worker_progress(self.dataloader) if self.dataloader is not None else None

    def _make(self) -> ReceivingDataLoader:
        w = self.options
        kwargs: dict = {}
        if w.num_workers > 0:
            kwargs = {
                "persistent_workers": w.persistent_workers,
                "prefetch_factor": w.prefetch_factor,
                "multiprocessing_context": w.multiprocessing_context,
                "timeout": w.timeout,
            }
        # which batch each worker builds: a death names it
        progress = WorkerProgress(w.num_workers) if w.num_workers > 0 else None
        batches = PlannedBatches(self.source, self.worker, progress)
        return ReceivingDataLoader(
            batches,
            batch_size=None,
            sampler=self.sampler,
            num_workers=w.num_workers,
            pin_memory=w.pin_memory,
            collate_fn=whole_batch,
            **kwargs,
        )

    def close(self) -> None:
        """Stop worker processes now (they also stop when the DataLoader is garbage-collected)."""
        dl, self.dataloader = self.dataloader, None
        if dl is not None:
            dl.shutdown()


class ReceivingDataLoader(ReceivingDataLoaderBase):
    """torch's DataLoader, but with workers their results are received in a background thread
    (``seqloader.torch.receiving``)."""

    def before_workers(self) -> None:
        # work done here once is inherited by every forked worker (e.g. HDF chunk indexes)
        if _forks(self.multiprocessing_context) and isinstance(self.dataset, PlannedBatches):
            prepare_workers(self.dataset.source)


def worker_progress(dataloader: DataLoader) -> WorkerProgress | None:
    """The board where the workers of ``dataloader`` mark the batch they build (None without
    workers, or for a dataset other than ``PlannedBatches``)."""
    dataset = dataloader.dataset
    return dataset.progress if isinstance(dataset, PlannedBatches) else None


def _forks(context) -> bool:
    """Whether DataLoader workers of this context are forked (so they inherit our memory)."""
    if context is None:  # the default, without fixing it (allow_none) as get_start_method would
        method = multiprocessing.get_start_method(allow_none=True)
        return (method or multiprocessing.get_all_start_methods()[0]) == "fork"
    if isinstance(context, str):
        return context == "fork"
    return context.get_start_method() == "fork"
