"""Mixed plans run as a job would run them, for the mix tests of either planning: a plan's real
slots between two steps, and an epoch stopped and resumed on other world sizes through JSON."""

from __future__ import annotations

import json

import numpy as np

from seqloader.plan import Planner, Position, continue_plan
from seqloader.plan.greedy.distribute import GlobalPlan


def slots(plan: GlobalPlan, from_step: int, to_step: int) -> tuple[np.ndarray, np.ndarray]:
    """(sequences, corpus epochs) of the real slots of global steps ``[from_step, to_step)``."""
    b = plan.batches
    lo, hi = b.bounds[from_step * plan.world_size], b.bounds[to_step * plan.world_size]
    real = b.real[lo:hi]
    assert b.uses is not None
    return b.seqs[lo:hi][real], b.uses[lo:hi][real]


def run_epoch(planner: Planner, epoch: int, worlds: list[int], cuts: list[float]):
    """Run ``epoch`` on ``worlds[0]`` ranks, stop at fraction ``cuts[0]``, save the position as
    JSON, resume on ``worlds[1]`` ranks, ... -> (sequences, corpus epochs) consumed, in order."""
    position = Position(epoch, 0, worlds[0], 0)
    seqs, uses = [], []
    for i, world in enumerate(worlds):
        plan, position = continue_plan(planner, position, world)
        steps = {len(plan.rank_share(r, position.steps)) for r in range(world)}
        assert steps == {plan.steps - position.steps}, "ranks take different numbers of steps"
        stop = plan.steps
        if i < len(cuts):
            stop = position.steps + int(cuts[i] * (plan.steps - position.steps))
        s, u = slots(plan, position.steps, stop)
        seqs.append(s)
        uses.append(u)
        position = Position.from_fields(
            json.loads(json.dumps(position.advanced(stop - position.steps).to_fields()))
        )
    return np.concatenate(seqs), np.concatenate(uses)
