"""Golden plans: the digests of a few fixed plans are pinned to the planning algorithm's version.

A resume state and the cross-rank check (C7) carry the plan fingerprint, which includes
``PLAN_ALGORITHM``. If a change to ``plan/`` makes the same inputs plan differently without bumping
that version, an old resume state would be accepted and silently continue a *different* plan (C5
broken). This test catches that: change a plan on purpose, and it tells you to bump the version and
record the new digests.

To pin a new ordering or option (e.g. a new ordering family), add one entry to ``CASES``; the test
fails once, printing the digest to record in ``GOLDEN`` (a new case needs no version bump).
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from seqloader.plan import Planner, PlanOptions, Position, continue_plan
from seqloader.plan.greedy import planner as planner_module
from seqloader.plan.greedy.distribute import GlobalPlan
from seqloader.plan.greedy.planner import PLAN_ALGORITHM
from seqloader.plan.position import SEGMENT_HISTORY


def lengths(n: int, high: int, empty_every: int = 0) -> np.ndarray:
    """``n`` lengths in 1..high from integer arithmetic, no random stream (so only the planner can
    change a digest); every ``empty_every``-th sequence empty."""
    out = (np.arange(n, dtype=np.int64) * 7919 + 17) % high + 1
    if empty_every:
        out[::empty_every] = 0
    return out


# name -> (corpus, plan options, epoch, world size[, elastic: (steps, new world size)])
CASES: dict[str, dict] = {
    "random W5 split": {
        "corpus": (300, 400),
        "options": {"ordering": "random", "max_seqs": 8, "max_frames": 1600, "seed": 5},
        "epoch": 2,
        "world": 5,
    },
    "laplace:.20 partition 3 W4 pad": {
        "corpus": (301, 500),
        "options": {"ordering": "laplace:.20", "max_seqs": 6, "partition_epoch": 3,
                    "uneven": "pad", "seed": 2},
        "epoch": 5,
        "world": 4,
    },
    "laplace:4 filters W4 drop": {
        "corpus": (257, 900, 11),
        "options": {"ordering": "laplace:4", "max_frames": 2000, "max_seq_length": 700,
                    "min_seq_length": 1, "uneven": "drop", "seed": 9},
        "epoch": 1,
        "world": 4,
    },
    "sort_bin_shuffle:.16 W6 split": {
        "corpus": (263, 300),
        "options": {"ordering": "sort_bin_shuffle:.16", "max_seqs": 5, "max_frames": 900,
                    "seed": 3},
        "epoch": 3,
        "world": 6,
    },
    "sort_bin_shuffle_x2:6:2 partition 2 W2": {
        "corpus": (199, 250),
        "options": {"ordering": "sort_bin_shuffle_x2:6:2", "max_seqs": 4, "partition_epoch": 2,
                    "seed": 4},
        "epoch": 4,
        "world": 2,
    },
    "random:3 partition 2 W1": {
        "corpus": (150, 100),
        "options": {"ordering": "random:3", "max_seqs": 7, "partition_epoch": 2, "seed": 8},
        "epoch": 6,
        "world": 1,
    },
    "sorted_reverse W8 infeasible split": {
        "corpus": (29, 60),
        "options": {"ordering": "sorted_reverse", "max_seqs": 1},
        "epoch": 1,
        "world": 8,
    },
    "default pad with empties W4": {
        "corpus": (100, 40, 7),
        "options": {"ordering": "default", "max_frames": 120, "uneven": "pad"},
        "epoch": 1,
        "world": 4,
    },
    "random_seed_offset W3": {
        "corpus": (120, 200),
        "options": {"ordering": "random", "max_seqs": 5, "distribution": "random_seed_offset",
                    "seed": 6},
        "epoch": 2,
        "world": 3,
    },
    "seeding returnn laplace:.12 partition 2 filters W2": {
        "corpus": (173, 400, 13),
        "options": {"ordering": "laplace:.12", "max_seqs": 6, "partition_epoch": 2,
                    "max_seq_length": 350, "min_seq_length": 1, "seeding": "returnn", "seed": 7},
        "epoch": 3,
        "world": 2,
    },
    "laplace:.10 elastic W3 -> W2 after 4 steps": {
        "corpus": (211, 300),
        "options": {"ordering": "laplace:.10", "max_seqs": 6, "max_frames": 1200, "seed": 1},
        "epoch": 2,
        "world": 3,
        "elastic": (4, 2),
    },
    "files laplace:.8 partition 2 W3 split, elastic -> W2": {
        "corpus": (240, 300),
        "files": list(range(0, 241, 10)),
        "options": {"ordering": "laplace:.8", "max_seqs": 6, "max_frames": 1200,
                    "partition_epoch": 2, "distribution": "files", "seed": 4},
        "epoch": 3,
        "world": 3,
        "elastic": (2, 2),
    },
    "files buckets:3 W2 pad": {
        "corpus": (150, 200, 9),
        "files": [0, 5, 30, 31, 60, 90, 100, 150],
        "options": {"ordering": "buckets:3", "max_frames": 800, "distribution": "files",
                    "uneven": "pad", "seed": 2},
        "epoch": 1,
        "world": 2,
    },
    "chunked 100:60 laplace:.10 partition 2 W3 split, elastic -> W2": {
        "corpus": (181, 600, 17),
        "options": {"ordering": "laplace:.10", "chunking": "100:60", "min_chunk_size": 20,
                    "max_frames": 800, "max_seqs": 8, "partition_epoch": 2, "seed": 3},
        "epoch": 2,
        "world": 3,
        "elastic": (3, 2),
    },
    "packed random W4 pad": {
        "corpus": (160, 500, 11),
        "options": {"ordering": "random", "batch_cost": "packed", "max_frames": 2500,
                    "max_seqs": 12, "uneven": "pad", "seed": 5},
        "epoch": 1,
        "world": 4,
    },
}  # fmt: skip

#: The digests of ``CASES`` as planned by ``GOLDEN_VERSION`` of the algorithm.
GOLDEN_VERSION = "seqloader-plan/1"
GOLDEN: dict[str, str] = {
    "random W5 split": "ab670d1b5ce3d20749f2d453febfeaf215021ce63b40ef211787b797ef600a92",
    "laplace:.20 partition 3 W4 pad": "c163277302216eea82b014d897d127c8b69e6e2b271a4465de87252fd779fbaa",
    "laplace:4 filters W4 drop": "0c0ea449cf293cb85b009c30f80af90de627eced0c2216b4bcc69450921dfb95",
    "sort_bin_shuffle:.16 W6 split": "1e63052f8c115559d0667835b8fe4959d3fcd00a960b029c33c0d143a005575e",
    "sort_bin_shuffle_x2:6:2 partition 2 W2": "ca31984e0b3790684de6cbad1fb283987d86d1a233e96bef71a7f226a1e8bf4c",
    "random:3 partition 2 W1": "6d9b90be9cdd4b7492b091bd66bc4cbec7a7d31b07c1b212bdbf2bcd9c7f3d00",
    "sorted_reverse W8 infeasible split": "e2fed8cb67da209abd764892c5e8a3dab6b7decfff84bc31fa50a3543d256e08",
    "default pad with empties W4": "f7072a174616da16a773bcda14a4fa55ba1fe38169bf7c0f9e48764751b8b3c7",
    "random_seed_offset W3": "7483787f6ef094cc9e032b6270fef4a7fb65d597b3a7c1317e90063cc1687e84",
    "seeding returnn laplace:.12 partition 2 filters W2": "ab7d22d0d2b1b0e222fdcfe2e064461303c135360c8bdf690bd192939b106acf",
    "laplace:.10 elastic W3 -> W2 after 4 steps": "a938a1b89fa2423cd0047c96971cca63023068ba2257c340ddfe25f2bdcf4df2",
    "files laplace:.8 partition 2 W3 split, elastic -> W2": "44c0bbcb4815b925c2f1e8e504a2e7bbb6e28ae9e2d38c24cbb9ff9ffcbaaa7c",
    "files buckets:3 W2 pad": "986e1b395d56d79739047d95454b40f1af760141769365440149ef6f30e8f1ca",
    "chunked 100:60 laplace:.10 partition 2 W3 split, elastic -> W2": "689efa0b2ab81cb3ad02f32e605c522f55f15dba34c357d8ad10c7ec6eac689a",
    "packed random W4 pad": "01339198293d16006a8c488ccca2d997416ef684a100068bd2d1542b69865d31",
}  # fmt: skip


def plan_fields(plan: GlobalPlan) -> dict:
    b = plan.batches
    return {
        "seqs": b.seqs.tolist(),
        "bounds": b.bounds.tolist(),
        "real": b.real.astype(int).tolist(),
        "world_size": plan.world_size,
        "dropped": plan.dropped,
        **({} if b.chunks is None else {"chunks": b.chunks.tolist()}),
    }


def digest(case: dict) -> str:
    """sha256 of everything the planner decides for ``case``: admission, the sub-epoch order, the
    global plan and, for an elastic case, the continuation and its position."""
    files = np.array(case["files"]) if "files" in case else None
    options = PlanOptions(**case["options"])
    planner = Planner({"data": lengths(*case["corpus"])}, options, files=files)
    epoch, world = case["epoch"], case["world"]
    plan = planner.global_plan(epoch, world)
    content: dict = {
        "admitted": planner.admission.admitted.tolist(),
        "filtered": planner.admission.filtered,
        "order": planner.sub_epoch_order(epoch).tolist(),
        "plan": plan_fields(plan),
    }
    if "elastic" in case:
        steps, new_world = case["elastic"]
        rest, position = continue_plan(planner, Position(epoch, 0, world, steps), new_world)
        content["continued"] = plan_fields(rest)
        fields = position.to_fields()
        # every elastic state records the segment it left as (world size, steps), replayed as a
        # check when it is loaded; files plans always kept it (it decides their next segment), so
        # it stays in their digest, while for orders it is a record of the case's own (world,
        # steps), checked here rather than digested, so their digests stay those of /1
        assert fields[SEGMENT_HISTORY] == [[world, steps]]
        if options.distribution != "files":
            del fields[SEGMENT_HISTORY]
        content["position"] = fields
    return hashlib.sha256(json.dumps(content, sort_keys=True).encode()).hexdigest()


def table(digests: dict[str, str]) -> str:
    return (
        "GOLDEN = {\n"
        + "".join(f"    {json.dumps(k)}: {json.dumps(v)},\n" for k, v in digests.items())
        + "}"
    )


def test_golden_plans_are_pinned_to_the_plan_algorithm_version() -> None:
    got = {name: digest(case) for name, case in CASES.items()}
    if PLAN_ALGORITHM != GOLDEN_VERSION:
        pytest.fail(
            f"PLAN_ALGORITHM is {PLAN_ALGORITHM!r} but the golden digests are of "
            f"{GOLDEN_VERSION!r}: set GOLDEN_VERSION = {PLAN_ALGORITHM!r} and record the new "
            f"digests in {__file__}:\n{table(got)}"
        )
    new = {name: d for name, d in got.items() if name not in GOLDEN}
    changed = sorted(name for name in got if name in GOLDEN and got[name] != GOLDEN[name])
    assert not changed, (
        f"the plans of {changed} changed, but PLAN_ALGORITHM is still {PLAN_ALGORITHM!r}. If "
        "the change is intended, bump PLAN_ALGORITHM in seqloader/plan/greedy/planner.py (this "
        "invalidates every saved resume state: the plan fingerprint changes, so load_state_dict "
        "refuses states of the old version instead of continuing a different plan), set "
        f"GOLDEN_VERSION to it and record the new digests in {__file__}:\n{table(got)}\n"
        "If it is not intended, the change broke determinism (C4): fix it. (A numpy release "
        "that changes Generator streams also lands here; then the version must be bumped too.)"
    )
    assert not new, f"new golden cases: record their digests in GOLDEN:\n{table(new)}"
    assert set(GOLDEN) <= set(got), f"GOLDEN names cases that are gone: {set(GOLDEN) - set(got)}"


def test_a_planning_change_moves_every_golden_digest(monkeypatch: pytest.MonkeyPatch) -> None:
    """The digests see the plan: an ordering that comes out reversed changes every case's."""
    order = planner_module.order_sequences
    monkeypatch.setattr(planner_module, "order_sequences", lambda *a: order(*a)[::-1])
    moved = [name for name, case in CASES.items() if digest(case) != GOLDEN[name]]
    assert moved == list(CASES)


def test_the_version_is_part_of_the_plan_fingerprint(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bumping the version is what makes old resume states and ranks of another version fail."""
    planner = Planner({"data": lengths(50, 30)}, PlanOptions(ordering="random", max_seqs=4))
    before = planner.fingerprint("source")
    monkeypatch.setattr(planner_module, "PLAN_ALGORITHM", "seqloader-plan/next")
    assert planner.fingerprint("source") != before
