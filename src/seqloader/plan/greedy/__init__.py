"""Greedy planning (``planning="global"``): the whole epoch's order cut into greedy batches, then
shared out over the ranks, as RETURNN orders and batches; chunked epochs plan chunks as units.
Internal to ``seqloader.plan``: callers build planners with ``seqloader.plan.make_planner``.
"""
