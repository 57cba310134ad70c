"""Pure planning (numpy only; no torch, no I/O): order -> sub-epoch -> batches -> rank share."""

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
