"""``ordering="buckets:N"`` under indexed planning with per-key ``max_frames``,
``batch_cost="packed"`` or ``max_packed_frames`` (hypothesis; pure numpy): each bucket's batch
size fits every limit at the bucket's longest length per key (as ``laplace``'s do), so no batch
breaks one, and every contract holds
(``check_plan_contracts``: exactly once, equal steps, resume W -> W' -> W'', determinism).
Per-key ``max_frames`` with ``batch_cost="quadratic:Q"``: every key's own quadratic cost.
Global planning still refuses them by name (its buckets are cut by the padded cost)."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plan_contracts import check_plan_contracts
from seqloader.errors import OptionError
from seqloader.plan import PlanOptions
from seqloader.plan.indexed.planner import IndexedPlanner
from seqloader.plan.mix import Corpora
from seqloader.plan.planners import make_planner

LIMITS = [
    {"max_frames": {"data": 900, "classes": 120}},
    {"max_frames": {"*": 700}},
    {"max_frames": 900, "batch_cost": "packed"},
    {"max_frames": 900, "max_packed_frames": 600},
    {"max_frames": 9000, "batch_cost": "quadratic:100", "max_packed_frames": 700},
    {"max_frames": {"data": 800}, "max_packed_frames": {"classes": 90}},
    {"max_frames": {"data": 9000, "classes": 1500}, "batch_cost": "quadratic:100"},
    {"max_frames": {"*": 6000}, "batch_cost": "quadratic:40", "max_packed_frames": {"classes": 90}},
]


@st.composite
def cases(draw: st.DrawFn) -> dict:
    n = draw(st.integers(0, 240))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    data = rng.integers(1, draw(st.sampled_from([30, 200])) + 1, size=n).astype(np.int64)
    classes = np.maximum(data // 3 + rng.integers(0, 4, size=n), 1)
    distribution = draw(st.sampled_from(["shard", "random_seed_offset", "files"]))
    options = {
        "ordering": draw(st.sampled_from(["buckets:1", "buckets:3", "buckets:6:2"])),
        "max_seqs": draw(st.one_of(st.none(), st.integers(1, 12))),
        **draw(st.sampled_from(LIMITS)),
        "partition_epoch": draw(st.integers(1, 2)),
        "uneven": draw(st.sampled_from(["split", "pad", "drop"])),
        "distribution": distribution,
        "chunking": draw(st.sampled_from([None, {"data": (30, 15), "classes": (10, 5)}])),
        "seed": draw(st.integers(0, 5)),
        "mix": draw(st.sampled_from([None, {"a": 1.5, "b": 2}]))
        if distribution != "random_seed_offset"
        else None,
    }
    if options["chunking"] is not None:  # every chunked key the same number of chunks
        classes = -(-data // 3)
    files = np.unique(np.concatenate([[0, n], rng.integers(0, n + 1, 6)])) if n else None
    if files is None and distribution == "files":
        options["distribution"] = "shard"  # files needs a layout
    inner = files[(files > 0) & (files < n)] if files is not None else []
    if not len(inner):
        options["mix"] = None  # a mix of two corpora of whole files, neither empty
    corpora = Corpora(("a", "b"), np.array([0, inner[0], n])) if options["mix"] else None
    worlds = draw(st.sampled_from([[2], [3, 2], [2, 4, 3]]))
    return {"lengths": {"data": data, "classes": classes}, "options": options, "files": files,
            "corpora": corpora, "worlds": worlds}  # fmt: skip


def planner_of(case: dict) -> IndexedPlanner:
    options = PlanOptions(**case["options"])
    planner = make_planner(case["lengths"], options, files=case["files"], corpora=case["corpora"])
    assert isinstance(planner, IndexedPlanner)
    return planner


def within_limits(planner: IndexedPlanner, epoch: int, plan) -> None:
    """Every batch within every limit by its units' lengths (its chunks' windows)."""
    o, b = planner.options, plan.batches
    if not len(b.seqs):
        return
    starts = b.bounds[:-1][np.diff(b.bounds) > 0]
    sizes = np.diff(np.append(starts, b.bounds[-1]))
    chunks = b.chunks if planner.chunks is not None else None
    lengths = {}
    for key in ("data", "classes"):
        whole = np.asarray(planner.corpus.batch_lengths[key])[b.seqs]
        if chunks is not None:
            whole = planner.chunks.window(key, whole, chunks)
        lengths[key] = whole
    padded = o.max_frames if isinstance(o.max_frames, dict) else {"data": o.max_frames}
    packed = o.max_packed_frames
    packed = packed if isinstance(packed, dict) else {"data": packed}
    if o.cost.packed:
        padded, packed = {}, {"data": o.max_frames}
    for key, lengths_k in lengths.items():
        limit = padded.get(key, padded.get("*"))
        units = o.cost.units(lengths_k) if key == "data" or limit is not None else lengths_k
        if limit is not None and o.cost.quadratic is not None:
            limit *= o.cost.quadratic  # every key's quadratic cost, in its units (L*Q + L*L)
        if limit is not None:
            longest = np.maximum.reduceat(units, starts)
            assert (longest * sizes).max() <= limit, key
        limit = packed.get(key)
        if limit is not None:
            assert np.add.reduceat(lengths_k, starts).max() <= limit, key


@settings(max_examples=60, deadline=None)
@given(cases())
def test_buckets_with_per_key_and_packed_limits_keep_every_contract(case: dict) -> None:
    epochs = range(1, case["options"]["partition_epoch"] + 1)
    factory = partial(planner_of, case)
    check_plan_contracts(factory, case["worlds"], [0.4, 0.5], epochs, each_plan=within_limits)


@pytest.mark.parametrize("limits", [*LIMITS[:4], *LIMITS[6:]], ids=str)
def test_global_planning_still_refuses_them_by_name(limits: dict) -> None:
    with pytest.raises(OptionError, match="use planning='indexed'"):
        PlanOptions(ordering="buckets:3", **limits, planning="global")
    assert PlanOptions(ordering="buckets:3", **limits).resolved_planning == "indexed"
