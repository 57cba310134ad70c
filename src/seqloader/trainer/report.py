"""Per-epoch accounting: computation time % (RETURNN's definition) and what the epoch contained."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from seqloader.loading.corpora import CorpusCounts
from seqloader.loading.counts import KeyCounts
from seqloader.plan.ahead import InBackground
from seqloader.trainer.corpus_report import CorpusReport, add_counts

if TYPE_CHECKING:
    from seqloader.plan.cost import PlannedImbalance
    from seqloader.plan.planners import EpochPlan
    from seqloader.plan.position import Position
    from seqloader.plan.topology import Topology
    from seqloader.trainer.audit import AuditResult


#: Seconds from an arbitrary start (``time.perf_counter`` by default): the report's and the loop-side
#: measurement's only time source, so tests drive a fake one and compare exactly.
Clock = Callable[[], float]

WAIT_BINS = 32  # bin i counts waits in [2^(i-1), 2^i) µs (bin 0: under 1 µs); the last is open


class _Deferred:
    """A float field that may be given as a function, called once when the field is first read:
    the report's O(n) figures are given as ``InBackground`` computations started when the epoch
    begins, so neither the epoch boundary nor the end-of-epoch log computes them on the training
    loop's thread (reading waits for the thread, normally long finished)."""

    def __set_name__(self, owner: type, name: str) -> None:
        self._slot = f"_{name}_value"

    def __get__(self, obj: object, owner: type | None = None) -> float:
        if obj is None:
            return 1.0  # the dataclass field's default
        value = obj.__dict__[self._slot]
        if callable(value):
            value = obj.__dict__[self._slot] = float(value())
        return value

    def __set__(self, obj: object, value: float | Callable[[], float]) -> None:
        obj.__dict__[self._slot] = value


@dataclass
class EpochReport:
    """What one rank's epoch contained and how long it waited for data.

    ``computation_pct`` = time the consumer spent between receiving a batch and asking for the next,
    over the epoch's wall time. ``filtered``: sequences the options exclude from every epoch (by
    reason); ``dropped``/``repeats``: real sequences left out / filler slots of this epoch's plan
    (all ranks together). The waits after the first batch are also kept as a log2 histogram
    (``wait_histogram``, ``max_wait_s``): a steady per-batch cost and rare stalls give the same
    percentage but call for different fixes (more workers vs. a slow file or a stalled worker).

    >>> loader = sl.SeqLoader(sl.MemorySource({"data": [np.ones((n, 2), "float32") for n in (3, 5)]}), max_seqs=1)
    >>> _ = list(loader.epoch(1))
    >>> report = loader.report()
    >>> report.steps, report.seqs, report.frames, report.padded_frames
    (2, 2, 8, 8)
    """

    epoch: int
    rank: int
    world_size: int
    steps: int = 0
    seqs: int = 0
    repeats_seen: int = 0
    frames: int = 0
    # frames delivered: n_seqs x max_len per batch; layout="packed": the rows' lengths
    padded_frames: int = 0
    wall_s: float = 0.0
    data_wait_s: float = 0.0
    first_batch_s: float = 0.0
    planned_steps: int = 0
    planned_seqs: int = 0
    filtered: dict[str, int] = field(default_factory=dict)
    dropped: int = 0
    repeats: int = 0
    resumed_at_step: int = 0
    skipped: int = 0  # planned sequences the source skipped (on_error="skip"); not delivered
    skipped_examples: list[str] = field(default_factory=list)  # the first few messages
    nonfinite: int = 0  # delivered sequences with NaN/Inf features (seqloader.trainer.checks)
    nonfinite_examples: list[str] = field(default_factory=list)
    audit: AuditResult | None = None  # with SeqLoader(audit=...): the epoch's exactly-once verdict
    max_wait_s: float = 0.0  # the longest wait for a batch after the first
    # planned: mean over steps of max/mean padded batch cost across ranks (1.0: even); computed
    # on a background thread and waited for when first read, not at the epoch boundary; indexed
    # plans: planned costs (size x its bucket's / group's longest), seqloader.plan.indexed.imbalance
    step_imbalance: float = _Deferred()  # type: ignore[assignment]
    wait_histogram: list[int] = field(default_factory=lambda: [0] * WAIT_BINS)
    corpora: dict[str, CorpusReport] = field(default_factory=dict)  # named corpora (corpora.md)
    # remote files (docs/remote.md): what building this rank's batches waited for files to arrive
    # in the local cache (summed over batches, in workers; part of their read time, not of the
    # loop's data wait), bytes fetched for this rank (ahead and on demand), the cache's high water
    fetch_wait_s: float = 0.0
    fetched_bytes: int = 0
    cache_high_water_bytes: int = 0

    @classmethod
    def planned(
        cls,
        topology: Topology,
        plan: EpochPlan,
        position: Position,
        filtered: dict[str, int],
        corpora: dict[str, CorpusReport] | None = None,
        imbalance: PlannedImbalance | None = None,
        after: threading.Event | None = None,
    ) -> EpochReport:
        """The empty report of a run of ``plan`` from ``position`` (what the epoch will contain;
        ``corpora``: the named corpora's planned counts; ``imbalance``: the planned step-cost
        imbalance from the position's step on, as the planner computes it,
        ``Planner.step_imbalance``). Unless cheap, the imbalance is computed on a background
        thread (O(n) with global planning) and waited for when ``step_imbalance`` is first
        read, not here at the epoch boundary (and starts once ``after`` is set: ``InBackground``)."""
        report = cls(
            position.epoch,
            topology.rank,
            topology.world_size,
            planned_steps=position.prior_steps + plan.steps,
            planned_seqs=position.segment_start + plan.real_total(),
            filtered=dict(filtered),
            dropped=plan.dropped,
            repeats=plan.repeats,
            resumed_at_step=position.epoch_steps,
            corpora=dict(corpora or {}),
        )
        if imbalance is not None:
            compute = imbalance.compute
            if imbalance.cheap:  # milliseconds: when first read
                report.step_imbalance = compute  # type: ignore[assignment]
            else:  # O(n): on a thread of its own from now on, so neither the epoch boundary
                # nor the end-of-epoch log waits for it on the training loop's thread
                report.step_imbalance = InBackground(compute, after)  # type: ignore[assignment]
        return report

    def __getstate__(self) -> dict:
        """Pickled and copied with its figures computed (a thread does not pickle) and the
        batches handed so far counted."""
        _ = self.step_imbalance
        state = dict(self.current().__dict__)
        state.pop("_pending", None)
        return state

    def current(self) -> EpochReport:
        """This report with every batch handed so far counted: during an epoch the training
        thread leaves the counting of most batches to a later moment (``EpochMeter.fold``);
        ``SeqLoader.report()``, ``format()``, ``to_dict()``, the figures computed from the
        counts (``computation_pct``, ``padding_ratio``, ``complete``, the wait quantiles) and
        the epoch's end call this. A field read directly on a report held since an earlier
        ``report()`` gives the batches counted then: read it through ``current()``."""
        pending = self.__dict__.get("_pending")
        if pending is not None:
            pending()
        return self

    @property
    def computation_pct(self) -> float:
        self.current()
        if self.wall_s <= 0:
            return 100.0
        return 100.0 * max(self.wall_s - self.data_wait_s, 0.0) / self.wall_s

    def wait_quantile_s(self, q: float) -> float | None:
        """An upper bound (within 2x: log2 bins) of the ``q``-quantile of the waits after the first
        batch, in seconds; None before a second batch."""
        self.current()
        n = sum(self.wait_histogram)
        if n == 0:
            return None
        rank, seen = max(1, int(np.ceil(q * n))), 0
        for i, count in enumerate(self.wait_histogram):
            seen += count
            if seen >= rank:
                return min(2.0**i * 1e-6, self.max_wait_s)
        return self.max_wait_s

    def wait_summary_ms(self) -> dict[str, float] | None:
        """Median, p90, p99 (upper bounds) and max of the waits after the first batch, in ms."""
        out: dict[str, float] = {}
        for name, q in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99)):
            value = self.wait_quantile_s(q)
            if value is None:
                return None
            out[name] = round(1e3 * value, 3)
        out["max"] = round(1e3 * self.max_wait_s, 3)
        return out

    @property
    def padding_ratio(self) -> float:
        self.current()
        return 0.0 if not self.padded_frames else 1.0 - self.frames / self.padded_frames

    @property
    def complete(self) -> bool:
        self.current()
        return self.resumed_at_step + self.steps == self.planned_steps

    def to_dict(self) -> dict:
        d = asdict(self.current())
        d["computation_pct"] = round(self.computation_pct, 3)
        d["padding_ratio"] = round(self.padding_ratio, 5)
        d["step_imbalance"] = round(self.step_imbalance, 5)
        d["wait_ms_after_first_batch"] = self.wait_summary_ms()
        return d

    def format(self) -> str:
        self.current()
        filtered = sum(self.filtered.values())
        parts = [
            f"epoch {self.epoch} rank {self.rank}/{self.world_size}",
            f"{self.steps} steps",
            f"{self.seqs} seqs",
            f"{self.frames} frames",
            f"padding {100 * self.padding_ratio:.1f}%",
            *(
                [f"step imbalance {self.step_imbalance:.3f} (max/mean batch cost over ranks)"]
                if self.world_size > 1
                else []
            ),
            f"computation {self.computation_pct:.1f}%",
            f"data wait {self.data_wait_s:.2f}s of {self.wall_s:.2f}s" + self._wait_text(),
            f"filtered {filtered}" + (f" {self.filtered}" if filtered else ""),
        ]
        if self.dropped:
            parts.append(
                f"dropped {self.dropped} (uneven/drop, or past the shortest rank: "
                "random_seed_offset, or file pools sharded over ranks as RETURNN's "
                "distrib_shard_files, whose epoch ends when the first rank runs out)"
            )
        if self.repeats:
            parts.append(f"filler repeats {self.repeats} (masked)")
        if self.skipped:
            first = self.skipped_examples[0] if self.skipped_examples else ""
            parts.append(f"SKIPPED {self.skipped} unreadable (on_error='skip'; first: {first})")
        if self.resumed_at_step:
            parts.append(f"resumed at step {self.resumed_at_step}")
        if self.nonfinite:
            parts.append(f"NaN/Inf in {self.nonfinite} seqs (first: {self.nonfinite_examples[0]})")
        if self.fetched_bytes or self.fetch_wait_s or self.cache_high_water_bytes:
            parts.append(
                f"remote: fetch wait {self.fetch_wait_s:.2f}s (in readers), fetched "
                f"{self.fetched_bytes / 1e6:.1f} MB, cache high water "
                f"{self.cache_high_water_bytes / 1e6:.1f} MB"
            )
        if self.corpora:
            parts.append("corpora: " + "; ".join(c.format(n) for n, c in self.corpora.items()))
        if self.audit is not None:
            parts.append(self.audit.format())
        return ", ".join(parts)

    def _wait_text(self) -> str:
        w = self.wait_summary_ms()
        if w is None:
            return ""
        return (
            f" (first batch {self.first_batch_s:.2f}s; then per batch median <={w['p50']:.2f}ms, "
            f"p99 <={w['p99']:.2f}ms, max {w['max']:.2f}ms)"
        )


class EpochMeter:
    """Measures the epoch as the training loop sees it: the wall clock starts at the loop's
    request for the epoch (``started``: when ``loader.epoch()`` was called), and every moment
    inside the loader's ``next()`` is data wait — before the first batch that includes building
    the DataLoader, starting workers, indexing files; per batch, everything the loader does in the
    training thread; at the end, the final request that finds the epoch finished. Only the time
    between handing a batch to the loop and the loop's next request is computation. The wait for
    the first batch is kept as ``first_batch_s`` (time to first batch).

    Per batch the training thread may instead only append the batch's counts to ``counts`` and
    its wait to ``waits`` (in that order; ``run_epoch`` does, with the clock read inline: each
    Python call it makes after a step costs µs with cold caches); ``fold()`` adds them to the
    report later, in the order handed, so every figure is the one ``count_handed`` gives. The
    report folds itself when read (``EpochReport.current``); ``finish()`` folds too."""

    #: batches appended to ``counts``/``waits`` are folded at least this often (``run_epoch``)
    FOLD_EVERY = 512

    def __init__(
        self,
        report: EpochReport,
        length_key: str,
        clock: Clock = time.perf_counter,
        started: float | None = None,
    ) -> None:
        self.report = report
        self.length_key = length_key
        self._clock = clock  # seconds; tests give a fake one
        self._t0: float | None = started
        self._wait_start = 0.0 if started is None else started
        self._waiting = started is not None  # a request is being served (its wait not counted)
        # batches handed and not yet in the report: their counts and waits (``fold``)
        self.counts: list[KeyCounts] = []
        self.waits: list[float] = []
        # a read of the report from another thread folds too: the report's writers hold this
        self._folding = threading.RLock()
        report.__dict__["_pending"] = self.fold

    def before_next(self) -> None:
        """The loop asks for a batch (or, after the last one, for the end of the epoch)."""
        self.asked_at(self._clock())  # first: the request's wait starts as early as it can be seen

    def asked_at(self, now: float) -> None:
        """The loop asked for a batch at ``now`` (read off the clock by the caller)."""
        if self._waiting:  # the wait of this request started earlier (at the epoch's request)
            return
        if self._t0 is None:
            self._t0 = now
        self._wait_start = now
        self._waiting = True

    def fold(self) -> None:
        """Add the batches appended to ``counts``/``waits`` to the report, in the order handed."""
        with self._folding:
            counts, waits = self.counts, self.waits
            n = len(waits)  # (each batch's counts are appended before its wait)
            if not n:
                return
            r = self.report
            steps, seqs, repeats, frames, padded = 0, 0, 0, 0, 0
            for c in counts[:n]:
                steps += 1
                seqs += c.real_seqs
                repeats += c.repeats
                frames += c.frames
                padded += c.padded_frames
            r.seqs += seqs
            r.repeats_seen += repeats
            r.frames += frames
            r.padded_frames += padded
            if r.steps == 0:  # the first batch's wait is the time to first batch
                r.steps = 1
                self._waited(waits[0])
                steps -= 1
                start = 1
            else:
                start = 0
            r.steps += steps
            hist, longest, waited = r.wait_histogram, r.max_wait_s, r.data_wait_s
            last = WAIT_BINS - 1
            for wait in waits[start:n]:
                hist[min(int(wait * 1e6).bit_length(), last)] += 1
                if wait > longest:
                    longest = wait
                waited += wait  # in the order handed: the sum count_handed gives
            r.max_wait_s, r.data_wait_s = longest, waited
            del counts[:n], waits[:n]

    def count_handed(
        self,
        counts: KeyCounts,
        skipped: Sequence[str] = (),
        corpus_counts: Mapping[str, CorpusCounts] | None = None,
        fetch_wait_s: float = 0.0,
        fetch_bytes: int = 0,
    ) -> None:
        """The batch goes to the loop: what it contains, from counts computed where it was built
        (``Batch.counts_of``), so the training thread does no array work per batch for the
        report (for remote files also what its reader waited for and fetched itself,
        ``Batch.fetch_wait_s``), and the request's wait ends (``handed``). One call: per batch,
        every Python call the training thread makes after a step runs with cold caches (~2-8 µs
        each)."""
        with self._folding:
            self._count_handed(counts, skipped, corpus_counts, fetch_wait_s, fetch_bytes)

    def _count_handed(
        self,
        counts: KeyCounts,
        skipped: Sequence[str],
        corpus_counts: Mapping[str, CorpusCounts] | None,
        fetch_wait_s: float,
        fetch_bytes: int,
    ) -> None:
        self.fold()  # the batches handed before it first, in order
        r = self.report
        if fetch_wait_s or fetch_bytes:
            r.fetch_wait_s += fetch_wait_s
            r.fetched_bytes += fetch_bytes
        self._count(counts)
        if corpus_counts:
            add_counts(r.corpora, corpus_counts, self.length_key)
        if skipped:
            r.skipped += len(skipped)
            r.skipped_examples.extend(list(skipped)[: max(0, 5 - len(r.skipped_examples))])
        self.handed()

    def _count(self, counts: KeyCounts) -> None:
        r = self.report
        r.steps += 1
        r.seqs += counts.real_seqs
        r.repeats_seen += counts.repeats
        r.frames += counts.frames
        r.padded_frames += counts.padded_frames

    def handed(self) -> None:
        """The batch goes to the loop now: the request's wait ends (the clock is read first, so
        all of the loader's work for this batch is inside the wait)."""
        now = self._clock()
        self._waiting = False
        self._waited(now - self._wait_start)

    def _waited(self, wait: float) -> None:
        """The wait of the batch counted last (the first batch's: ``first_batch_s``)."""
        r = self.report
        if r.steps <= 1:
            r.first_batch_s = wait
        else:
            r.wait_histogram[min(int(wait * 1e6).bit_length(), WAIT_BINS - 1)] += 1
            if wait > r.max_wait_s:
                r.max_wait_s = wait
        r.data_wait_s += wait

    def prefetched(self, fetched_bytes: int, cache_high_water_bytes: int) -> None:
        """What the remote files' prefetcher fetched ahead for this epoch, and the cache's
        high-water mark (``PlanPrefetch.counts``)."""
        self.report.fetched_bytes += fetched_bytes
        self.report.cache_high_water_bytes = cache_high_water_bytes

    def finish(self) -> EpochReport:
        """The epoch's end: the wall clock stops; a request still being served (the final one,
        which finds the epoch over, or one interrupted by an error) counts as wait up to here."""
        now = self._clock()
        with self._folding:
            self.fold()
            self.report.__dict__.pop("_pending", None)
            if self._waiting:
                self.report.data_wait_s += now - self._wait_start
                self._waiting = False
            if self._t0 is not None:
                self.report.wall_s = now - self._t0
        return self.report
