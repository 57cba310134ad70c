"""Where in an epoch a run stands, and how to continue from there — also with another world size.

Ranks advance in lockstep by whole steps, so "how far" is one number for all ranks. What that number
counts in is a *segment*: the part of a (sub-)epoch planned for one world size, from a sequence
position of the sub-epoch order onwards (position 0 unless the run was resumed elastically).

Why this is exact:

- **Real sequences form a prefix.** In a shard plan the real (not filler) sequences of the global
  batch list are the segment's part of the order, in order: greedy batching keeps the order,
  ``uneven="split"`` only cuts the tail's batches further, and the filler slots of ``pad`` (and of an
  infeasible ``split``) are appended at the end, marked ``real=False``; ``drop`` cuts the end off.
  Steps are whole rounds of ``world_size`` batches, so after ``steps`` steps the consumed real
  sequences are exactly ``order[segment_start : seq_offset]``.
- **Same world size: the same plan.** The segment is re-planned from the state's own
  ``(segment_start, segment_world_size)`` and continued from ``steps``, so the rest is identical
  to the uninterrupted run, batch for batch (fillers and the re-split tail included).
- **Other world size: a new segment** from ``seq_offset``, planned for the new world size.
  Consumed + remaining = the segment's order, each sequence once, and every rank of the new world
  has the same number of steps. A finished segment stays finished: nothing is re-planned after the
  last step, so sequences that ``drop`` left out are not brought back by resuming elsewhere.

``random_seed_offset`` has no global order (each rank its own permutation), so it resumes only with
the same world size, or from a finished epoch.

``files`` has no global order either, but every segment is a function of what the segments before
it consumed: the position keeps ``history``, the ``(world_size, steps)`` of each earlier segment of
the epoch. Replaying it (segment i plans what segments 0..i-1 left, for its world size, and its
first ``steps`` steps are consumed) gives the consumed sequences; the next segment assigns the
rest's files to the new ranks (``Planner.files_segment``). ``segment_start`` then counts the
sequences consumed before the segment (what ``seq_offset`` adds to), and is checked against the
replay. Every state of an epoch resumed elastically carries the history: global orders replay it
too when a state is loaded (segment i planned from what segments 0..i-1 consumed, for its world
size), so ``segment_start`` and ``prior_steps`` are checked against it (states written before
global orders kept it are checked by ``check_reachable`` alone).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from seqloader.errors import OptionError, ResumeError
from seqloader.plan.planners import EpochPlan, Planner
from seqloader.validate import is_int

#: state fields that hold a ``Position`` (see ``Position.to_fields``)
POSITION_FIELDS = ("epoch", "segment_start", "segment_world_size", "segment_steps", "prior_steps")
_ATTRS = ("epoch", "segment_start", "segment_world_size", "steps", "prior_steps")  # same order
#: optional in a state (older states lack it): the world size the epoch's order was arranged for
ORDER_WORLD_SIZE = "order_world_size"
#: optional in a state (distribution="files" after an elastic resume): [[world_size, steps], ...]
SEGMENT_HISTORY = "segment_history"
History = tuple[tuple[int, int], ...]


@dataclass(frozen=True)
class Position:
    """A point in epoch ``epoch`` (0: no epoch started yet).

    - ``segment_start``: sequence position in the sub-epoch order where the current segment begins.
    - ``segment_world_size``: the world size the segment is planned for.
    - ``steps``: steps per rank consumed in this segment.
    - ``prior_steps``: steps per rank consumed in earlier segments of this epoch (elastic resumes),
      so that ``epoch_steps`` keeps counting across them.
    - ``order_world_size``: the world size the epoch started with (default: ``segment_world_size``).
      ``buckets:N`` arranges an epoch's order in runs of that many batches (one step's batches
      from one bucket), so its order — which ``segment_start`` indexes — depends on it; it stays
      the same across elastic resumes within the epoch. Other orderings ignore it (an elastic
      resume sets it to the new world size, so their states look as before the field existed).
    - ``history``: ``(world_size, steps)`` of each earlier segment of this epoch that consumed
      steps (see the module doc); empty before the first elastic resume.
    """

    epoch: int
    segment_start: int = 0
    segment_world_size: int = 1
    steps: int = 0
    prior_steps: int = 0
    order_world_size: int = None  # type: ignore[assignment]  # None: segment_world_size
    history: History = ()

    def __post_init__(self) -> None:
        if self.order_world_size is None:
            object.__setattr__(self, "order_world_size", self.segment_world_size)
        for attr, name in (*zip(_ATTRS, POSITION_FIELDS), (ORDER_WORLD_SIZE, ORDER_WORLD_SIZE)):
            value = getattr(self, attr)
            low = 1 if name in ("segment_world_size", ORDER_WORLD_SIZE) else 0
            if not is_int(value) or value < low:
                raise ResumeError(f"loader state {name}: got {value!r}, expected an int >= {low}")
            object.__setattr__(self, attr, int(value))  # numpy ints become plain (JSON) ints
        object.__setattr__(self, "history", _checked_history(self.history))

    @property
    def epoch_steps(self) -> int:
        """Steps per rank consumed in this epoch, over all segments."""
        return self.prior_steps + self.steps

    def advanced(self, steps: int = 1) -> Position:
        """``steps`` more steps consumed in this segment."""
        return Position(
            self.epoch,
            self.segment_start,
            self.segment_world_size,
            self.steps + steps,
            self.prior_steps,
            self.order_world_size,
            self.history,
        )

    def seq_offset(self, segment_plan: EpochPlan) -> int:
        """Sequences of the sub-epoch order consumed by all ranks together (shard plans; under
        ``random_seed_offset`` it counts the real sequences all ranks consumed)."""
        return self.segment_start + segment_plan.consumed_seqs(self.steps)

    def to_fields(self) -> dict[str, object]:
        """The JSON-able fields of a loader state that hold this position (``POSITION_FIELDS``,
        and ``order_world_size`` only where it differs from ``segment_world_size``, i.e. after an
        elastic resume: states keep the format they had before the field existed)."""
        fields: dict[str, object] = {
            "epoch": self.epoch,
            "segment_start": self.segment_start,
            "segment_world_size": self.segment_world_size,
            "segment_steps": self.steps,
            "prior_steps": self.prior_steps,
        }
        if self.order_world_size != self.segment_world_size:
            fields[ORDER_WORLD_SIZE] = self.order_world_size
        if self.history:
            fields[SEGMENT_HISTORY] = [list(h) for h in self.history]
        return fields

    @classmethod
    def from_fields(cls, state: Mapping[str, object]) -> Position:
        """Inverse of ``to_fields``; raises ``ResumeError`` naming a missing or bad field."""
        missing = [name for name in POSITION_FIELDS if name not in state]
        if missing:
            raise ResumeError(f"loader state lacks {missing}; expected all of {POSITION_FIELDS}")
        values = {name: state[name] for name in POSITION_FIELDS}
        values["steps"] = values.pop("segment_steps")
        values[ORDER_WORLD_SIZE] = state.get(ORDER_WORLD_SIZE)  # absent: segment_world_size
        values["history"] = state.get(SEGMENT_HISTORY, ())
        return cls(**values)  # type: ignore[arg-type]


def _checked_history(history: object) -> History:
    """``segment_history`` as a tuple of ``(world_size >= 1, steps >= 0)`` int pairs."""
    expected = "a list of [world_size >= 1, steps >= 0] pairs"
    if not isinstance(history, (list, tuple)):
        raise ResumeError(f"loader state {SEGMENT_HISTORY}: got {history!r}, expected {expected}")
    out = []
    for item in history:
        ok = isinstance(item, (list, tuple)) and len(item) == 2 and all(map(is_int, item))
        if not ok or item[0] < 1 or item[1] < 0:
            raise ResumeError(
                f"loader state {SEGMENT_HISTORY}: got {history!r}, expected {expected}"
            )
        out.append((int(item[0]), int(item[1])))
    return tuple(out)


def check_reachable(planner: Planner, position: Position) -> None:
    """Refuse a position no run writes, for every plan kind, naming the field: a segment begins
    at the epoch's start (``segment_start`` 0, ``prior_steps`` 0) or after an elastic resume
    (``prior_steps`` > 0, and ``segment_start >= prior_steps``: every step consumes at least one
    sequence or chunk); ``order_world_size`` differs from ``segment_world_size`` only after an
    elastic resume of a ``buckets:N`` order (at step 0 too); a per-rank order
    (``random_seed_offset``) has one segment per epoch. ``distribution="files"`` replays its
    ``segment_history`` instead (``segment_plan``) and keeps no other world size; the derived fields (``steps``,
    ``seqs_consumed``, ``epoch_complete``) are checked against the plan by ``LoaderState``."""
    start, prior = position.segment_start, position.prior_steps
    options = planner.options
    field, problem = "segment_start", ""
    files = options.distribution == "files"  # its history is replayed instead (segment_plan)
    if files:
        if position.order_world_size != position.segment_world_size:
            field = ORDER_WORLD_SIZE
            problem = (
                f"got {position.order_world_size} with segment_world_size "
                f"{position.segment_world_size}: distribution='files' segments keep no other "
                "world size"
            )
    elif prior == 0 and start:
        problem = (
            f"got {start} with prior_steps 0: a segment starts past sequence 0 only after an "
            "elastic resume, which carries the steps before it in prior_steps"
        )
    elif start < prior:
        field = "prior_steps"
        problem = (
            f"got {prior} with segment_start {start}: each of those steps consumed at least one "
            f"sequence, so the segment cannot start before sequence {prior}"
        )
    elif prior and options.distribution == "random_seed_offset":
        field = "prior_steps"
        problem = (
            f"got {prior}: distribution='random_seed_offset' resumes on the same world size only "
            "(one segment per epoch), so no steps come before the segment"
        )
    elif (
        position.order_world_size != position.segment_world_size
        and not options.parsed_ordering.is_buckets
    ):
        field = ORDER_WORLD_SIZE
        problem = (
            f"got {position.order_world_size} with segment_world_size "
            f"{position.segment_world_size}: only an elastic resume of a buckets:N order keeps "
            f"the epoch's first world size (ordering {options.ordering!r})"
        )
    if problem:
        raise ResumeError(
            f"loader state {field}: {problem}. No run writes this state (it was edited): load the "
            "state as SeqLoader.state_dict() wrote it, or start without load_state_dict"
        )


def segment_plan(planner: Planner, position: Position) -> EpochPlan:
    """The global plan of ``position``'s segment; raises if ``position`` cannot lie in it (a
    position no run writes: ``check_reachable``)."""
    if position.epoch < 1:
        raise ResumeError(f"position epoch: got {position.epoch}, expected >= 1")
    check_reachable(planner, position)
    if planner.options.distribution == "files":
        plan = _files_segment_plan(planner, position)
    else:
        plan = _order_segment_plan(planner, position)
    if position.steps > plan.steps:
        raise ResumeError(
            f"loader state segment_steps: got {position.steps} in epoch {position.epoch} "
            f"(segment_start {position.segment_start}, segment_world_size "
            f"{position.segment_world_size}), but "
            f"that plan has only {plan.steps} steps per rank: the state belongs to other data or "
            "options, or to another version of the planner"
        )
    return plan


def _files_segment_plan(planner: Planner, position: Position) -> EpochPlan:
    """``distribution="files"``: replay the history, check what it says consumed."""
    history = position.history
    plan, consumed = planner.files_segment(position.epoch, position.segment_world_size, history)
    _check_replayed(position, consumed, sum(steps for _, steps in history))
    return plan


def _order_segment_plan(planner: Planner, position: Position) -> EpochPlan:
    """``shard`` / ``random_seed_offset``: the segment from ``segment_start`` of the order."""
    if position.history:
        _replay_order(planner, position)
    if position.segment_start:
        if planner.options.distribution != "shard":
            raise ResumeError(
                f"loader state segment_start: got {position.segment_start}, expected 0 with "
                f"distribution={planner.options.distribution!r} (it has no global order)"
            )
        size = planner.order_size(position.epoch, position.order_world_size)
        if position.segment_start > size:
            raise ResumeError(
                f"loader state segment_start: got {position.segment_start}, but epoch "
                f"{position.epoch} has only {size} sequences; the state belongs to other data"
            )
    try:
        return planner.global_plan(
            position.epoch,
            position.segment_world_size,
            position.segment_start,
            position.order_world_size,
        )
    except OptionError as e:  # e.g. an indexed plan's start inside a batch: the state's field
        raise ResumeError(
            f"loader state segment_start: got {position.segment_start}, which is not where a "
            f"segment of epoch {position.epoch} can start ({e}); the state was edited or belongs "
            "to other data or options"
        ) from e


def _replay_order(planner: Planner, position: Position) -> None:
    """Check ``segment_start`` and ``prior_steps`` against the earlier segments the state lists
    (an elastic resume writes them): segment i is planned from what segments 0..i-1 consumed,
    for its world size, and its steps consume a prefix of it."""
    start = steps = 0
    for world, done in position.history:
        try:
            plan = planner.global_plan(position.epoch, world, start, position.order_world_size)
        except OptionError as e:
            raise ResumeError(
                f"loader state {SEGMENT_HISTORY}: {[list(h) for h in position.history]} cannot be "
                f"replayed ({e}); the state was edited or belongs to other data or options"
            ) from e
        if done > plan.steps:
            raise ResumeError(
                f"loader state {SEGMENT_HISTORY}: a segment of {done} steps on {world} ranks, but "
                f"that segment has {plan.steps}; the state was edited or belongs to other data"
            )
        start += plan.consumed_seqs(done)
        steps += done
    _check_replayed(position, start, steps)


def _check_replayed(position: Position, start: int, steps: int) -> None:
    """``segment_start`` and ``prior_steps`` against what replaying the state's history gives:
    ``start`` sequences and ``steps`` steps consumed before the segment."""
    for name, got, want, unit in (
        ("segment_start", position.segment_start, start, "sequences"),
        ("prior_steps", position.prior_steps, steps, "steps"),
    ):
        if got != want:
            raise ResumeError(
                f"loader state {name}: got {got}, but its {SEGMENT_HISTORY} "
                f"{[list(h) for h in position.history]} gives {want} {unit} consumed before the "
                "segment: no run writes this state (it was edited), or it belongs to other data "
                "or options"
            )


def is_finished(position: Position, plan: EpochPlan) -> bool:
    """True if ``position`` is at the end of its segment ``plan``, so nothing of the epoch is left."""
    return position.steps == plan.steps


def check_resumable(
    planner: Planner, position: Position, segment: EpochPlan, world_size: int
) -> None:
    """Refuse what cannot continue on ``world_size`` ranks: a mid-epoch position of
    ``random_seed_offset`` (each rank its own order: no global position) on another world size.
    Called at ``load_state_dict`` already, so the refusal comes before any training resumes.
    File pools sharded over the ranks (RETURNN's ``distrib_shard_files``) resume only with the
    same world size too: which files a rank reads depends on the world size."""
    pools = planner.pools
    if (
        pools is not None
        and pools.shard_files
        and world_size != position.segment_world_size
        and max(world_size, position.segment_world_size) > 1
        and not is_finished(position, segment)
    ):
        raise ResumeError(
            f"cannot resume epoch {position.epoch} mid-way with world_size={world_size} from a "
            f"state saved with world_size={position.segment_world_size}: the file pools are "
            "sharded over the ranks (RETURNN's DistributeFilesDataset with distrib_shard_files, "
            "or torch_distributed 'shard'), each rank reading its own bins of files, and those "
            "bins depend on the world size, so the rest of the sub-epoch has no exact "
            "continuation. Resume with the same world size, or finish the sub-epoch first."
        )
    if (
        planner.options.distribution == "random_seed_offset"
        and world_size != position.segment_world_size
        and not is_finished(position, segment)
    ):
        raise ResumeError(
            f"cannot resume epoch {position.epoch} mid-way with world_size={world_size} from a "
            f"state saved with world_size={position.segment_world_size}: "
            "distribution='random_seed_offset' gives each rank its own order, so there is no "
            "global position to continue from. Resume with the same world size, finish the epoch "
            "first, or use distribution='shard'."
        )


def continue_plan(
    planner: Planner,
    position: Position,
    world_size: int,
    segment: EpochPlan | None = None,
) -> tuple[EpochPlan, Position]:
    """The global plan to run from ``position`` with ``world_size`` ranks, and the position to count
    from (its ``steps`` index the returned plan). ``segment``: ``segment_plan(planner, position)``
    if the caller has it already.

    With the segment's own world size, or when the segment is finished, the segment itself is
    returned (a finished one then yields no batch on any rank, whatever the world size, since
    ``rank_share`` starts past its end). Otherwise a new segment begins at the consumed offset.
    """
    seg = segment if segment is not None else segment_plan(planner, position)
    if world_size == position.segment_world_size or is_finished(position, seg):
        return seg, position
    if planner.options.distribution == "files":  # the rest's files to the new ranks
        done = ((position.segment_world_size, position.steps),) if position.steps else ()
        history = position.history + done
        plan, consumed = planner.files_segment(position.epoch, world_size, history)
        before = position.epoch_steps
        return plan, Position(position.epoch, consumed, world_size, 0, before, history=history)
    check_resumable(planner, position, seg, world_size)
    start = position.seq_offset(seg)
    # only buckets:N orders depend on the world size they were arranged for: others need no record
    keep = planner.options.parsed_ordering.is_buckets
    done = ((position.segment_world_size, position.steps),) if position.steps else ()
    new_position = Position(
        position.epoch,
        start,
        world_size,
        0,
        position.epoch_steps,
        position.order_world_size if keep else world_size,
        position.history + done,  # replayed when the state is loaded (_replay_order)
    )
    plan = planner.global_plan(position.epoch, world_size, start, position.order_world_size)
    return plan, new_position
