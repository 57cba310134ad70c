"""Indexed planning (``planning="indexed"``): per-rank plans drawn from a bucket index (lengths
histogram), without materialising the epoch's order. Internal to ``seqloader.plan`` except for
the names below, which the docs name (``make_planner`` builds the planner).
"""

from seqloader.plan.indexed.planner import INDEXED_ALGORITHM, IndexedPlanner, index_key

__all__ = ["INDEXED_ALGORITHM", "IndexedPlanner", "index_key"]
