"""Indexed planning's length buckets and batch budgets, from the options and the admitted lengths.

What a corpus's ``BucketIndex`` is cut by (``edges_for``: ``num_buckets`` buckets of about equal
cost, cut further where the batch size changes) and the budgets a bucket's batch size ``k_b``
must fit (``indexed_budget``, ``key_budgets``, ``packed_budget``). Both the admitted corpus
(``seqloader.plan.indexed.corpus``, which builds the index) and the planner (which sizes the
batches) read them.
"""

from __future__ import annotations

import numpy as np

from seqloader.plan.edges import bucket_edges
from seqloader.plan.indexed.histogram import batching_edges, length_counts, narrow_edges
from seqloader.plan.limits import BatchLimits
from seqloader.plan.options import PlanOptions

#: Length buckets of ``laplace`` under indexed planning (histogram batching pads up to the
#: bucket's longest length: more buckets, less padding, more short last batches).
LAPLACE_BUCKETS = 64


def num_buckets(options: PlanOptions) -> int:
    """The length buckets indexed planning cuts for ``options`` (``buckets:N``: N; ``laplace``:
    ``LAPLACE_BUCKETS``)."""
    ordering = options.parsed_ordering
    return (ordering.bins or 1) if ordering.is_buckets else LAPLACE_BUCKETS


def edges_for(
    lengths: np.ndarray,
    options: PlanOptions,
    costs: np.ndarray,
    budget: int | None,
    sum_limit: int | None = None,
) -> np.ndarray:
    """The length-bucket edges indexed planning uses for ``options`` (``lengths``: the admitted
    lengths of the length key, ``costs`` their cost units): ``num_buckets`` buckets of about
    equal cost, each cut further where the batch size its lengths allow changes
    (``batching_edges``; ``budget``: ``indexed_budget``). With ``distribution="files"`` and a
    limit on the sum of lengths alone (``sum_limit``: ``sum_budget``), which ``files`` cuts
    by (``cut_packed``), wide buckets of long sequences are cut further (``narrow_edges``)."""
    coarse = bucket_edges(lengths, costs, num_buckets(options))
    values, counts = length_counts(lengths)
    units = np.asarray(options.cost.units(values), dtype=np.int64)
    edges = batching_edges(values, counts, units, options.max_seqs, budget, coarse)
    if sum_limit is not None and options.distribution == "files":
        edges = narrow_edges(values, edges, sum_limit, options.max_seqs)
    return edges


def histogram_edges(
    options: PlanOptions, budget: int | None, values: np.ndarray, counts: np.ndarray
) -> np.ndarray:
    """``edges_for`` from a length histogram (``values`` ascending, ``counts`` of each): the
    buckets of a chunked plan's windows (``seqloader.plan.indexed.chunks``)."""
    units = np.asarray(options.cost.units(values), dtype=np.int64)
    coarse = bucket_edges(values, counts * units, num_buckets(options))  # distinct: weighted
    return batching_edges(values, counts, units, options.max_seqs, budget, coarse)


def indexed_budget(limits: BatchLimits, origin: str = "") -> int | None:
    """The one budget of indexed planning, in the length key's cost units, None without one.
    A batch of bucket b holds ``k_b`` sequences of lengths at most the bucket's longest ``L``:
    its padded cost is ``k_b * cost(L)`` and its sum of lengths at most ``k_b * L``, so a packed
    limit (``batch_cost="packed"``'s ``max_frames``, or ``max_packed_frames``) bounds ``k_b``
    the way a padded one does: the budget is the tighter of the two (a batch never breaks
    either; next to a quadratic cost the packed limit bounds ``k_b`` apart: ``packed_budget``).
    Other keys' limits: ``key_budgets``.

    >>> limits = BatchLimits.of(None, 3000, 2000, PlanOptions().cost, ["data"], "data")
    >>> indexed_budget(limits)
    2000
    """
    return key_budgets(limits).get(limits.length_key)


def key_budgets(limits: BatchLimits) -> dict[str, int]:
    """Per limited key, the tighter of its padded and packed limit (frames; the length key's in
    its cost units): a bucket's batch of ``k`` sequences fits key ``K``'s limits when ``k``
    times the bucket's longest ``K`` length does.

    Under a quadratic cost the length key's packed limit is in other units than its padded
    one: it is left out here and bounds ``k`` on its own (``packed_budget``); so are the other
    keys' padded limits, in cost units (``quadratic_budgets``).

    >>> limits = BatchLimits.of(None, {"*": 900}, {"text": 50}, PlanOptions().cost, ["audio", "text"], "audio")
    >>> key_budgets(limits)
    {'audio': 900, 'text': 50}
    """
    out: dict[str, int] = {}
    quadratic = limits.cost.quadratic is not None
    for table in (limits.padded, limits.packed):
        for key, value in table.items():
            if quadratic and (table is limits.packed) == (key == limits.length_key):
                continue  # the length key's packed limit, another key's quadratic one: apart
            out[key] = min(out.get(key, value), value)
    return out


def quadratic_budgets(limits: BatchLimits) -> dict[str, int]:
    """Under a quadratic cost with per-key ``max_frames``, the other keys' padded limits in
    cost units (``F_k * Q``): a bucket's batch of ``k`` fits key ``K`` when ``k`` times the
    quadratic cost of the bucket's longest ``K`` length does. Empty otherwise.

    >>> cost = PlanOptions(batch_cost="quadratic:10").cost
    >>> quadratic_budgets(BatchLimits.of(None, {"*": 90}, None, cost, ["a", "t"], "a"))
    {'t': 900}
    """
    if limits.cost.quadratic is None:
        return {}
    return {k: b for k, b in limits.padded.items() if k != limits.length_key}


def packed_budget(limits: BatchLimits) -> int | None:
    """Under a quadratic cost, the length key's packed limit (``max_packed_frames``, frames),
    which bounds a bucket's batch size apart from the quadratic budget: ``k`` sequences of at
    most ``L`` frames sum to at most ``k * L``. None otherwise (one budget: ``indexed_budget``).

    >>> cost = PlanOptions(batch_cost="quadratic:100").cost
    >>> packed_budget(BatchLimits.of(None, 9000, 2000, cost, ["data"], "data"))
    2000
    """
    if limits.cost.quadratic is None:
        return None
    return limits.packed.get(limits.length_key)


def sum_budget(limits: BatchLimits) -> int | None:
    """The length key's limit on a batch's sum of lengths where it is the only limit on frames
    (``batch_cost="packed"``'s ``max_frames``, or ``max_packed_frames`` alone; no quadratic
    cost, no other key's limit), else None. Then a batch's members may be counted each at its
    own bucket's longest length (``histogram.cut_packed``) rather than all at the longest's.

    >>> cost = PlanOptions(batch_cost="packed").cost
    >>> sum_budget(BatchLimits.of(None, 2000, None, cost, ["data"], "data"))
    2000
    >>> sum_budget(BatchLimits.of(None, 2000, None, PlanOptions().cost, ["data"], "data")) is None
    True
    """
    if (
        limits.padded
        or limits.cost.quadratic is not None
        or set(limits.packed) != {limits.length_key}
    ):
        return None
    return limits.packed[limits.length_key]


def tighter(k: np.ndarray, fit: np.ndarray) -> np.ndarray:
    """The tighter of two batch sizes per bucket (0: unbounded) -> int64 ``[N]``."""
    return np.where(k == 0, fit, np.where(fit == 0, k, np.minimum(k, fit)))
