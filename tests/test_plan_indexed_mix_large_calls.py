"""A mix's large draws (``MixDraw.bucket_slots`` of at least ``bijection.BIG`` positions: corpus by
corpus, corpus epoch by corpus epoch, each stream's bijection kept) give the slots its small
draws give (``streams_slots``), so the plans are the same whichever path a call takes.

The golden digests cannot pin this: their corpora (300 sequences) never make a call that large.
Here the threshold is moved instead (1: every call large; 2**62: none), on drawn mixes with every
ordering a mix draws by bucket position (hypothesis, pure numpy).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from seqloader.errors import OptionError, ResumeError
from seqloader.plan import PlanOptions, Position, continue_plan
from seqloader.plan.indexed import mix, mix_cuts
from seqloader.plan.indexed.planner import IndexedPlanner
from seqloader.plan.mix import Corpora

pytestmark = pytest.mark.filterwarnings("ignore::seqloader.errors.DataWarning")  # tiny rates


@st.composite
def cases(draw: st.DrawFn) -> dict:
    # a corpus of 1-3 sequences beside larger ones: draws that miss it (each corpus' stream
    # is skipped where no position of a large draw falls in it)
    sizes = draw(st.lists(st.sampled_from([1, 2, 3, 12, 30]), min_size=1, max_size=3))
    names = tuple(f"c{i}" for i in range(len(sizes)))
    n = sum(sizes)
    lengths = np.array(draw(st.lists(st.integers(1, 40), min_size=n, max_size=n)), np.int64)
    options = {
        "ordering": draw(st.sampled_from(["random", "random:2", "laplace:.5", "buckets:3"])),
        "max_seqs": draw(st.sampled_from([None, 2, 5])),
        "max_frames": draw(st.sampled_from([None, 60])),
        "partition_epoch": draw(st.integers(1, 2)),
        "uneven": draw(st.sampled_from(["split", "pad", "drop"])),
        "seed": draw(st.integers(0, 3)),
        "mix": {c: draw(st.sampled_from([0.3, 1.0, 1.5, "2/3", 3])) for c in names},
        "distribution": draw(st.sampled_from(["shard", "files"])),
        "planning": "indexed",
    }
    if options["distribution"] == "files":
        cuts = draw(st.lists(st.integers(0, n), max_size=8))  # corpora never share a file
        files = np.unique(np.concatenate([np.cumsum([0, *sizes]), cuts])).astype(np.int64)
    else:
        files = None
    bounds = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    return {"lengths": lengths, "corpora": Corpora(names, bounds), "files": files,
            "options": options, "world": draw(st.integers(1, 4))}  # fmt: skip


def plans(case: dict) -> list:
    """Every epoch-1/2 plan, rank share computed alone and an elastic continuation, as lists."""
    planner = IndexedPlanner(
        {"data": case["lengths"]},
        PlanOptions(**case["options"]),
        files=case["files"],
        corpora=case["corpora"],
    )
    world, out = case["world"], []
    for epoch in (1, 2):
        plan = planner.global_plan(epoch, world)
        shares = [plan.rank_share(r) for r in range(world)]
        if epoch == 1 and plan.steps > 1:
            try:
                shares.append(continue_plan(planner, Position(1, 0, world, 1), world % 3 + 1)[0])
            except ResumeError as err:  # files + drop: too few files left for the ranks
                out.append(str(err))
        for b in [plan.batches, *(s if hasattr(s, "uses") else s.batches for s in shares)]:
            out.append([b.seqs.tolist(), b.bounds.tolist(), b.real.tolist()])
            out.append(None if b.uses is None else b.uses.tolist())
    return out


@settings(max_examples=40, deadline=None)
@given(cases())
def test_large_and_small_mix_draws_give_the_same_plans(case: dict) -> None:
    """The same plans, shares and continuations with every draw large as with every draw small."""
    with pytest.MonkeyPatch.context() as patch:
        try:
            patch.setattr(mix, "BIG", 1)
            large = plans(case)
        except OptionError:  # refused options are refused either way
            patch.setattr(mix, "BIG", 1 << 62)
            with pytest.raises(OptionError):
                plans(case)
            return
        patch.setattr(mix, "BIG", 1 << 62)
        small = plans(case)
    assert large == small


def test_a_large_draw_that_misses_a_small_corpus() -> None:
    """A draw of many positions of one bucket, none of them in a small corpus of that bucket
    (``random`` + a mix with a corpus of 3 sequences beside 600,000 raised a ValueError, the
    min of no corpus epochs: the cut's blocks of 262,144 positions mostly miss it; here blocks
    of 500 in 2,000) plans as the small draws do."""
    n = 2000
    case = {
        "lengths": (np.arange(n, dtype=np.int64) * 7919 + 17) % 400 + 1,
        "corpora": Corpora(("big", "tiny"), np.array([0, n - 3, n])),
        "files": None,
        "options": {"ordering": "random", "max_seqs": 8, "mix": {"big": 1, "tiny": 1},
                    "planning": "indexed"},
        "world": 2,
    }  # fmt: skip
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(mix_cuts, "MIX_BLOCK", 500)
        patch.setattr(mix, "BIG", 400)  # calls of >= 400 positions go the large way
        large = plans(case)
        patch.setattr(mix, "BIG", 1 << 62)
        assert large == plans(case)
