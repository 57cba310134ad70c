"""Epoch audit (``SeqLoader(audit=True)``): did this epoch really deliver every sequence exactly once?

The plan promises exactly-once (C1); the audit checks what the training loop actually *received*,
so it also catches execution bugs (a worker returning another batch, a double-sharding wrapper, a
resume that replays or skips). It records each delivered batch and, at the epoch's end, compares:

- per batch: epoch and step are the next planned ones, the sequences are the planned ones (less
  those the source skipped, which the batch reports), tags match the source, and (without a
  transform) lengths match the source;
- per epoch: the real sequences delivered by all ranks (one ``all_gather_object`` when
  ``torch.distributed`` is initialized) against the epoch's sequence order *as the planner orders it*
  (independent of batching and distribution): every sequence from the run's start position on
  exactly once; missing ones allowed only if the source skipped them or ``uneven="drop"`` dropped
  them (both reported); all ranks took the same number of steps (C2).

After a resume the audit can only check the part it saw: sequences consumed before the resume
position (``unchecked``) belong to an earlier run. Without a process group and with
``world_size > 1`` each rank checks its own share of the plan only (``scope="rank"``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from seqloader.errors import EXAMPLES, AuditError, AuditWarning
from seqloader.plan.audit_order import AuditRun
from seqloader.plan.batches import BatchList
from seqloader.plan.planned_units import units_of
from seqloader.plan.planners import EpochPlan, Planner
from seqloader.plan.position import Position
from seqloader.plan.topology import Topology
from seqloader.sources.base import Source
from seqloader.validate import POLICIES, Policy, choice_option


class _Array(Protocol):
    def numpy(self) -> np.ndarray: ...

    def __len__(self) -> int: ...


class Delivered(Protocol):
    """What the audit reads of a delivered batch (``seqloader.torch.batch.Batch`` has it)."""

    @property
    def epoch(self) -> int: ...

    @property
    def step(self) -> int: ...

    @property
    def seq_indices(self) -> _Array: ...

    @property
    def mask(self) -> _Array: ...

    @property
    def seq_tags(self) -> Sequence[str]: ...

    @property
    def skipped(self) -> Sequence[str]: ...

    @property
    def lengths(self) -> Mapping[str, _Array]: ...

    @property
    def chunks(self) -> _Array | None: ...


def audit_policy(value: bool | Policy | None) -> Policy:
    """``audit=`` option -> policy: True = "error", False (or None) = "off", or the policy name."""
    if value is True:
        return "error"
    if value is False or value is None:
        return "off"
    expected = f"True, False or one of {POLICIES}"
    return choice_option("audit", value, POLICIES, expected=expected)


@dataclass
class AuditResult:
    """The verdict of one epoch's audit (all counts are sequences unless said otherwise).

    - ``scope``: "all ranks" (gathered), "single rank" (world size 1) or "rank" (this rank's share).
    - ``expected``: sequences the checked part should deliver; ``delivered``: real ones delivered.
    - ``missing`` / ``repeated`` / ``unplanned``: the violations (unplanned: not in the expected
      part — e.g. consumed before the resume position, or filtered).
    - ``skipped`` (source skipped, reported) and ``dropped`` (``uneven="drop"``): allowed gaps.
    - ``unchecked``: sequences before the run's start position (consumed by an earlier run).
    - ``batch_errors``: delivered batches that differ from the plan (order, content, tags).
    - ``steps``: steps per checked rank.
    """

    epoch: int
    scope: str
    ranks: int
    expected: int = 0
    delivered: int = 0
    missing: int = 0
    repeated: int = 0
    unplanned: int = 0
    skipped: int = 0
    dropped: int = 0
    unchecked: int = 0
    batch_errors: int = 0
    steps: list[int] = field(default_factory=list)
    rank_ids: list[int] = field(default_factory=list)
    examples: list[str] = field(default_factory=list)
    mixed: bool = False  # a mixed epoch (``mix``): counts are uses (slots), one per corpus epoch

    @property
    def ranks_consistent(self) -> bool:
        """Every rank delivered the same number of steps (C2) and each rank id came once."""
        ids_ok = self.scope != "all ranks" or sorted(self.rank_ids) == list(range(self.ranks))
        return ids_ok and len(set(self.steps)) <= 1

    @property
    def ok(self) -> bool:
        return self.ranks_consistent and not (
            self.missing or self.repeated or self.unplanned or self.batch_errors
        )

    def format(self) -> str:
        where = {
            "all ranks": f"across {self.ranks} ranks",
            "single rank": "on the single rank",
            "rank": "in this rank's share (no process group: other ranks not checked)",
        }[self.scope]
        allowed = []
        if self.skipped:
            allowed.append(f"{self.skipped} skipped by the source")
        if self.dropped:
            allowed.append(
                f"{self.dropped} dropped by uneven='drop', or past the shortest rank "
                "(random_seed_offset; sharded file pools, as RETURNN)"
            )
        if self.unchecked:
            allowed.append(f"{self.unchecked} before the resume position not checked")
        extra = f" ({'; '.join(allowed)})" if allowed else ""
        if self.ok:
            what = "uses (one per corpus epoch)" if self.mixed else "sequences"
            return (
                f"audit ok: {self.delivered} of {self.expected} expected {what} delivered "
                f"exactly once {where}{extra}"
            )
        problems = [
            f"{n} {what}"
            for n, what in (
                (self.missing, "missing"),
                (self.repeated, "repeated"),
                (self.unplanned, "unplanned"),
                (self.batch_errors, "batches off plan"),
            )
            if n
        ]
        if not self.ranks_consistent:
            problems.append(f"ranks {self.rank_ids} took steps {self.steps}")
        return (
            f"audit FAILED {where}: {', '.join(problems)}; {self.delivered} delivered of "
            f"{self.expected} expected{extra}"
        )

    def to_dict(self) -> dict:
        from dataclasses import asdict

        return {**asdict(self), "ok": self.ok}


@dataclass(frozen=True)
class Stream:
    """One sequence order that must be delivered once: the epoch's order (shard), or one rank's
    own order (random_seed_offset), or a rank's planned share (rank-local audit)."""

    order: np.ndarray  # int64 [m] sequence indices
    start: int  # position in order where this run starts (earlier ones: unchecked)
    dropped: int  # the last `dropped` of order are left out by the plan (uneven="drop")
    delivered: np.ndarray  # int [d] real sequences delivered
    skipped: np.ndarray  # int [s] planned sequences the source skipped


class Tally:
    """Counts per sequence of the index arrays of one stream: over all ``n`` sequences (a
    ``bincount``) when the stream names a large part of the corpus, else over the distinct
    sequences it names, so a rank's own share is checked without arrays of ``n`` (at 10^8
    sequences each would be 800 MB). Both give the same verdict."""

    def __init__(
        self, num_seqs: int, parts: Sequence[np.ndarray], dense: bool | None = None
    ) -> None:
        if dense is None:
            dense = 4 * sum(len(p) for p in parts) >= num_seqs
        self.ids: np.ndarray | None = None
        if not dense:
            self.ids = np.unique(np.concatenate([np.asarray(p, np.int64) for p in parts]))
        self.size = num_seqs if self.ids is None else len(self.ids)

    def count(self, values: np.ndarray) -> np.ndarray:
        """Occurrences of each counted sequence in ``values`` -> int64 ``[size]``."""
        v = np.asarray(values).astype(np.int64)
        if self.ids is not None:
            v = np.searchsorted(self.ids, v)
        return np.bincount(v, minlength=self.size)

    def seq(self, k: int) -> int:
        """The sequence index of counted position ``k``."""
        return k if self.ids is None else int(self.ids[k])


def verify(
    streams: Sequence[Stream],
    num_seqs: int,
    tag: Callable[[int], str],
    dense: bool | None = None,
) -> dict[str, Any]:
    """Count violations over ``streams`` (each checked on its own) -> AuditResult fields.

    Counts are per *slot*: in a mixed epoch (``mix``) the order can hold a sequence several times
    (once per corpus epoch), and it must then be delivered exactly that many times. Unmixed, every
    expected count is 1 and slots are sequences. ``dense``: count over all ``num_seqs``
    sequences, or over those the stream names (``Tally``; default: by the stream's size)."""
    out: dict[str, Any] = {
        "expected": 0,
        "delivered": 0,
        "missing": 0,
        "repeated": 0,
        "unplanned": 0,
    }
    out |= {"skipped": 0, "dropped": 0, "unchecked": 0}
    examples: list[str] = []

    for s in streams:
        planned = s.order[s.start :]
        dropped_part = s.order[len(s.order) - s.dropped :] if s.dropped else s.order[:0]
        tally = Tally(num_seqs, [s.delivered, planned, dropped_part, s.skipped], dense)
        count = tally.count  # [m]: per counted sequence (all n, or those the stream names)
        got = count(s.delivered)  # [m] deliveries per sequence
        want = count(planned)  # [m] planned slots per sequence
        tail = count(dropped_part)  # [m]
        short = np.maximum(want - got, 0)  # [m] planned slots not delivered
        skipped = np.minimum(short, count(s.skipped))  # [m] explained by the source skipping
        dropped = np.minimum(short - skipped, tail)  # [m] explained by uneven="drop"
        lacking = short - skipped - dropped  # [m]
        missing = np.flatnonzero(lacking)
        repeated = np.flatnonzero((want > 0) & (got > want))
        unplanned = np.flatnonzero((want == 0) & (got > 0))
        out["expected"] += int(want.sum())
        out["delivered"] += len(s.delivered)
        out["missing"] += int(lacking.sum())
        out["repeated"] += len(repeated)
        out["unplanned"] += len(unplanned)
        out["skipped"] += int(skipped.sum())
        out["dropped"] += int(dropped.sum())
        out["unchecked"] += s.start
        for label, idx in (("missing", missing), ("repeated", repeated), ("unplanned", unplanned)):
            for k in idx[: max(0, EXAMPLES - len(examples))]:
                i = tally.seq(int(k))
                times_planned = f", planned {int(want[k])}" if want[k] > 1 else ""
                times = f" ({int(got[k])} times{times_planned})" if got[k] > 1 else ""
                examples.append(f"{label}: sequence {i} (tag {tag(i)!r}){times}")
    out["examples"] = examples
    return out


class EpochAuditor:
    """Records one rank's deliveries in one epoch run and verifies them at its end."""

    def __init__(
        self,
        *,
        policy: Policy,
        planner: Planner,
        plan: EpochPlan,
        share: BatchList,
        rank: int,
        world_size: int,
        epoch: int,
        first_step: int,
        start_steps: int,
        start_offset: int,
        source: Source,
        check_lengths: bool,
        order_world_size: int = 1,
        history: tuple[tuple[int, int], ...] = (),
    ) -> None:
        self.policy = policy
        self.history = history  # distribution="files": earlier segments of the epoch (Position)
        self.order_world_size = order_world_size  # buckets:N orders depend on it (Position)
        self.planner, self.plan, self.share = planner, plan, share
        self.units = units_of(planner)  # sequences or chunks: what a delivered row is
        self.rank, self.world_size, self.epoch = rank, world_size, epoch
        self.first_step = first_step  # Batch.step of this run's first batch
        self.start_steps = start_steps  # steps of the segment plan consumed before this run
        self.start_offset = start_offset  # sequences of the epoch order consumed before this run
        self.source = source
        self.check_lengths = check_lengths
        self._delivered: list[np.ndarray] = []
        self._skipped: list[np.ndarray] = []
        self._batch_errors: list[str] = []
        self._received = 0

    @classmethod
    def for_run(
        cls,
        policy: Policy,
        planner: Planner,
        plan: EpochPlan,
        share: BatchList,
        topology: Topology,
        position: Position,
        source: Source,
        check_lengths: bool,
    ) -> EpochAuditor:
        """The auditor of a run of ``plan`` (this rank: ``share``) from ``position``."""
        return cls(
            policy=policy,
            planner=planner,
            plan=plan,
            share=share,
            rank=topology.rank,
            world_size=topology.world_size,
            epoch=position.epoch,
            first_step=position.epoch_steps,
            start_steps=position.steps,
            start_offset=position.seq_offset(plan),
            source=source,
            check_lengths=check_lengths,
            order_world_size=position.order_world_size,
            history=position.history,
        )

    def record(self, batch: Delivered) -> None:
        """Check one delivered batch against its planned one and remember its sequences."""
        k = self._received
        self._received += 1
        got = batch.seq_indices.numpy()
        real = batch.mask.numpy()
        self._delivered.append(got[real].copy())
        if k >= len(self.share):
            self._error(f"batch {k} delivered, but only {len(self.share)} planned for this run")
            return
        planned, planned_real = self.share.batch(k)
        step = self.first_step + k
        if batch.epoch != self.epoch or batch.step != step:
            self._error(
                f"expected epoch {self.epoch} step {step}, got epoch {batch.epoch} step "
                f"{batch.step}"
            )
            return  # one finding per batch; the epoch check counts its sequences
        rest = planned.tolist()
        for i in got.tolist():  # delivered: the planned ones, less those the source skipped
            if i not in rest:
                self._error(f"step {step}: sequence {i} delivered but not planned in this batch")
                return
            rest.remove(i)
        skipped = batch.skipped
        if len(rest) != len(skipped):
            self._error(
                f"step {step}: {len(rest)} planned sequence(s) {rest[:EXAMPLES]} not delivered, "
                f"but the batch reports {len(skipped)} skipped"
            )
        real_planned = set(planned[planned_real].tolist())
        self._skipped.append(np.asarray([i for i in rest if i in real_planned], dtype=np.int64))
        self._check_identity(batch, got, step)

    def _windows(self, batch: Delivered, got: np.ndarray, step: int) -> dict[str, np.ndarray]:
        """Each delivered row's planned unit, checked (chunked: its chunk index), and its length
        on each key the unit cuts -> ``{key: int64 [B]}`` (empty for whole sequences or a
        mismatch)."""
        chunks = None if batch.chunks is None else batch.chunks.numpy()
        wrong = self.units.misplanned(got, chunks)
        if wrong is not None:
            self._error(f"step {step}: {wrong}")
            return {}
        return self.units.windows(got, chunks)

    def _check_identity(self, batch: Delivered, got: np.ndarray, step: int) -> None:
        tags = batch.seq_tags
        for row, i in enumerate(got.tolist()):
            want = self.source.tag(i)
            if tags[row] != want:
                self._error(f"step {step} row {row}: tag {tags[row]!r}, expected {want!r} ({i})")
                return
        if not self.check_lengths:
            return
        windows = self._windows(batch, got, step)
        for key, delivered in batch.lengths.items():
            lens = delivered.numpy()
            want_lens = windows[key] if key in windows else self.source.lengths(key)[got]
            bad = np.flatnonzero(lens != want_lens)
            if len(bad):
                r = int(bad[0])
                self._error(
                    f"step {step} row {r}: {key!r} has {int(lens[r])} frames, the source says "
                    f"{int(want_lens[r])} for sequence {int(got[r])}: the data of another sequence"
                )
                return

    def _error(self, message: str) -> None:
        self._batch_errors.append(message)

    # ---- epoch end ----
    def payload(self) -> dict:
        """What this rank contributes to the gathered audit (compact: int32 indices if they fit)."""
        dtype = np.int32 if len(self.planner.lengths) < 2**31 else np.int64
        cat = lambda parts: np.concatenate(parts).astype(dtype) if parts else np.zeros(0, dtype)  # noqa: E731
        return {
            "rank": self.rank,
            "steps": self._received,
            "delivered": cat(self._delivered),
            "skipped": cat(self._skipped),
            "batch_errors": self._batch_errors[:EXAMPLES],
            "n_batch_errors": len(self._batch_errors),
        }

    def enforce(self, result: AuditResult) -> None:
        """Raise ``AuditError`` or warn ``AuditWarning`` (by the policy) if ``result`` failed."""
        if result.ok:
            return
        message = (
            f"epoch {self.epoch} rank {self.rank}: {result.format()}. "
            + "; ".join(result.examples)
            + ". The loop did not receive every planned sequence exactly once: please report "
            "this with the loader's options and the state_dict() it resumed from (if any)."
        )
        if self.policy == "error":
            raise AuditError(message)
        if self.policy == "warn":
            warnings.warn(message, AuditWarning, stacklevel=3)

    def verify(self, payloads: list[dict]) -> AuditResult:
        """The verdict over every rank's ``payload()`` (only this rank's when none were
        gathered: then it checks this rank's share of the plan)."""
        gathered = len(payloads) > 1 or self.world_size == 1
        if not gathered:
            scope = "rank"
            streams = [self._stream(self.share_order(), 0, 0, payloads[0])]
        else:
            scope = "all ranks" if self.world_size > 1 else "single rank"
            run = AuditRun(
                self.epoch,
                self.start_steps,
                self.start_offset,
                self.order_world_size,
                self.history,
            )
            by_rank = {int(p["rank"]): p for p in payloads}
            merged = {
                "delivered": np.concatenate([p["delivered"] for p in payloads]),
                "skipped": np.concatenate([p["skipped"] for p in payloads]),
            }
            streams = [
                self._stream(
                    o.order, o.start, o.dropped, merged if o.rank is None else by_rank[o.rank]
                )
                for o in self.planner.audit_order(self.plan, run, list(by_rank))
            ]
        counts = verify(streams, len(self.planner.lengths), self.source.tag)
        batch_errors = [e for p in payloads for e in p["batch_errors"]]
        seq_examples = counts.pop("examples")
        examples = [*seq_examples[:3], *batch_errors[:2], *seq_examples[3:]][:EXAMPLES]
        if scope == "rank":  # the share of the plan is all this rank can be checked against
            counts["unchecked"] = 0
        return AuditResult(
            self.epoch,
            scope,
            len(payloads),
            batch_errors=sum(int(p["n_batch_errors"]) for p in payloads),
            steps=[int(p["steps"]) for p in payloads],
            rank_ids=[int(p["rank"]) for p in payloads],
            examples=examples,
            mixed=self.planner.mix is not None,
            **counts,
        )

    def share_order(self) -> np.ndarray:
        """This run's planned real sequences of this rank, in order (rank-local audit)."""
        return self.share.seqs[self.share.real]

    @staticmethod
    def _stream(order: np.ndarray, start: int, dropped: int, p: dict) -> Stream:
        return Stream(order, start, dropped, p["delivered"], p["skipped"])
