"""Pure planning (numpy only; no torch, no I/O): order -> sub-epoch -> batches -> rank share.

The face is lazy, like ``seqloader``'s: each name is imported from its module when first used, so
a module that needs one piece of the core (a DataLoader worker unpickling its dataset needs
``plan.batches`` and ``plan.seeding``) does not import both planners with it (~90 modules: a
spawned worker's start paid about 0.25 s of CPU for them).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from seqloader.plan.lazy_face import lazy_names

if TYPE_CHECKING:
    from seqloader.plan.batches import BatchList
    from seqloader.plan.batching import greedy_bounds, padded_frames
    from seqloader.plan.epoch_plan import EpochPlan
    from seqloader.plan.epochs import Admission, EpochIndex
    from seqloader.plan.greedy.distribute import GlobalPlan
    from seqloader.plan.greedy.planner import Planner
    from seqloader.plan.inputs import PlanInputs
    from seqloader.plan.options import Ordering, PlanOptions
    from seqloader.plan.planners import make_planner
    from seqloader.plan.position import Position, continue_plan
    from seqloader.plan.topology import Topology

# public name -> the module that defines it
_HOME: dict[str, str] = {
    "Admission": "seqloader.plan.epochs",
    "BatchList": "seqloader.plan.batches",
    "EpochIndex": "seqloader.plan.epochs",
    "EpochPlan": "seqloader.plan.epoch_plan",
    "GlobalPlan": "seqloader.plan.greedy.distribute",
    "Ordering": "seqloader.plan.options",
    "PlanInputs": "seqloader.plan.inputs",
    "PlanOptions": "seqloader.plan.options",
    "Planner": "seqloader.plan.greedy.planner",
    "Position": "seqloader.plan.position",
    "Topology": "seqloader.plan.topology",
    "continue_plan": "seqloader.plan.position",
    "greedy_bounds": "seqloader.plan.batching",
    "make_planner": "seqloader.plan.planners",
    "padded_frames": "seqloader.plan.batching",
}

__all__ = [
    "Admission",
    "BatchList",
    "EpochIndex",
    "EpochPlan",
    "GlobalPlan",
    "Ordering",
    "PlanInputs",
    "PlanOptions",
    "Planner",
    "Position",
    "Topology",
    "continue_plan",
    "greedy_bounds",
    "make_planner",
    "padded_frames",
]


__getattr__, __dir__ = lazy_names(__name__, _HOME)
