"""Where in an epoch a run stands, and how to continue from there — also with another world size.

A *segment* is the part of a (sub-)epoch planned for one world size, starting at a sequence position
of the sub-epoch order (0 unless the run was resumed elastically). Within a segment, ranks advance in
lockstep by whole steps, so ``steps`` consumed per rank is the whole state. Because real sequences
appear in the global plan in the order's sequence order, the global sequence offset reached is
``segment_start + real sequences in the first steps * world_size batches``; an elastic resume
re-plans the rest of the order from there (greedy batching is memoryless, so with the same world
size the continuation equals the original plan).
"""

from __future__ import annotations

from dataclasses import dataclass

from seqloader.errors import ResumeError
from seqloader.plan.distribute import GlobalPlan
from seqloader.plan.planner import Planner


@dataclass(frozen=True)
class Position:
    epoch: int
    segment_start: int = 0
    segment_world_size: int = 1
    steps: int = 0

    def seq_offset(self, segment_plan: GlobalPlan) -> int:
        """Sequences of the sub-epoch order consumed by all ranks together."""
        return self.segment_start + segment_plan.batches.real_count(
            self.steps * self.segment_world_size
        )


def continue_plan(
    planner: Planner, position: Position, world_size: int
) -> tuple[GlobalPlan, Position]:
    """The global plan to run from ``position`` with ``world_size`` ranks, and the position to
    count from (steps are counted within the returned plan)."""
    seg_plan = planner.global_plan(
        position.epoch, position.segment_world_size, position.segment_start
    )
    if position.steps > seg_plan.steps:
        raise ResumeError(
            f"state says {position.steps} steps consumed in epoch {position.epoch}, but the plan "
            f"has only {seg_plan.steps} steps per rank; the state belongs to other data or options"
        )
    if world_size == position.segment_world_size:
        return seg_plan, position
    if planner.options.distribution != "shard":
        raise ResumeError(
            f"cannot resume with world_size={world_size} from a state saved with "
            f"world_size={position.segment_world_size}: distribution='random_seed_offset' gives "
            "each rank its own order, so there is no global position to continue from. "
            "Resume with the same world size, or use distribution='shard'."
        )
    start = position.seq_offset(seg_plan)
    new_position = Position(position.epoch, start, world_size, 0)
    return planner.global_plan(position.epoch, world_size, start), new_position
