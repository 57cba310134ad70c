"""``epoch_wise_filter`` with ``distribution="files"`` under indexed planning (hypothesis; pure
numpy): in the epochs of a filter's range each sub-epoch's files' admitted sequences are
filtered once, as one set (RETURNN's ``max_mean_len`` selection, ``admission.mean_filtered``),
for every rank and world size; the rest is lost for that sub-epoch and counted per epoch.

Checked for every ordering, chunked too: the filter is applied (no batch holds a sequence the
filter leaves out of its sub-epoch, fillers included; the sub-epoch plans exactly the kept set,
computed here from the unfiltered planner's sub-epoch files), the report counts what it left out,
and every contract holds on the kept set (``check_plan_contracts``: exactly once, equal steps,
resume chains W -> W' -> W'', determinism). Global planning still refuses it by name."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plan_contracts import Checked, check_plan_contracts
from seqloader.errors import OptionError
from seqloader.plan import BatchList, EpochPlan, PlanOptions
from seqloader.plan.admission import mean_filtered
from seqloader.plan.indexed.planner import IndexedPlanner
from seqloader.plan.planners import make_planner
from test_plan_indexed import indexed_digest

ORDERINGS = [
    "laplace:.8",
    "buckets:3",
    "default",
    "sorted_reverse",
    "random",
    "sort_bin_shuffle:.4",
]


@st.composite
def cases(draw: st.DrawFn) -> dict:
    n = draw(st.integers(12, 160))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    data = rng.integers(1, draw(st.sampled_from([30, 120])) + 1, size=n).astype(np.int64)
    files = np.unique(np.concatenate([[0, n], rng.integers(0, n + 1, 9)]))
    first = draw(st.integers(1, 2))
    options = {
        "ordering": draw(st.sampled_from(ORDERINGS)),
        "max_seqs": draw(st.one_of(st.none(), st.integers(1, 9))),
        "max_frames": draw(st.sampled_from([None, 400])),
        "partition_epoch": draw(st.integers(1, 2)),
        "uneven": draw(st.sampled_from(["split", "pad", "drop"])),
        "distribution": "files",
        "chunking": draw(st.sampled_from([None, "20:10"])),
        "seed": draw(st.integers(0, 5)),
        "epoch_wise_filter": {
            (first, draw(st.sampled_from([first, 3, None]))): {
                "max_mean_len": draw(st.sampled_from([5, 12.5, 40]))
            }
        },
    }
    worlds = draw(st.sampled_from([[2], [3, 2], [2, 4, 3]]))
    return {"lengths": {"data": data}, "options": options, "files": files, "worlds": worlds}


def planner_of(case: dict, filtered: bool = True) -> IndexedPlanner:
    options = dict(case["options"])
    if not filtered:
        options.pop("epoch_wise_filter")
    planner = make_planner(case["lengths"], PlanOptions(**options), files=case["files"])
    assert isinstance(planner, IndexedPlanner)
    return planner


def kept_set(case: dict, plain: IndexedPlanner, epoch: int) -> tuple[np.ndarray, int]:
    """(the sequences sub-epoch ``epoch`` admits, what the filter left out of it), from the
    unfiltered planner's sub-epoch files and the filter both plannings share."""
    whole = np.sort(plain.distribution.sub_epoch_files(epoch)[0].seqs)
    spec = PlanOptions(**case["options"]).epoch_wise_filter
    kept, reasons = mean_filtered(spec, epoch, whole, case["lengths"]["data"])  # type: ignore[arg-type]
    return np.sort(kept), sum(reasons.values())


@settings(max_examples=30, deadline=None)
@given(cases())
def test_files_filter_keeps_one_set_per_sub_epoch_and_every_contract(case: dict) -> None:
    plain = planner_of(case, filtered=False)
    parts = case["options"]["partition_epoch"]
    # in the range and one sub-epoch after the first pass (the unfiltered files plans' own
    # contracts over more epochs: test_plan_indexed_files_laplace, test_plan_indexed_files_cut)
    epochs = range(1, parts + 2)
    expected = {e: kept_set(case, plain, e) for e in epochs}

    def planned(planner: IndexedPlanner, epoch: int, world: int) -> np.ndarray:
        return np.unique(planner.sub_epoch_order(epoch, 0, world))  # chunked: each kept's chunks

    factory = partial(planner_of, case)
    checked = check_filtered(
        factory, case["worlds"], expected, lambda batches: batches.seqs, planned
    )
    for epoch in epochs:
        if case["worlds"][0] not in checked.refused:
            assert np.isin(checked.consumed[epoch].seqs, expected[epoch][0]).all()


def check_filtered(
    factory: Callable[[], IndexedPlanner],
    worlds: list[int],
    expected: dict[int, tuple[np.ndarray, int]],
    members: Callable[[BatchList], np.ndarray],
    planned: Callable[[IndexedPlanner, int, int], np.ndarray],
) -> Checked:
    """Every contract over ``expected``'s epochs (each: (its kept set, sorted; how many the
    filter left out)), every plan's ``members`` (fillers too) in the kept set; the sub-epoch's
    ``planned`` members exactly the kept set and the report's count what it left out."""

    def filter_applied(planner: IndexedPlanner, epoch: int, plan: EpochPlan) -> None:
        assert np.isin(members(plan.batches), expected[epoch][0]).all()

    epochs = sorted(expected)
    checked = check_plan_contracts(factory, worlds, [0.5, 0.4], epochs, each_plan=filter_applied)
    planner = factory()
    for epoch in epochs if worlds[0] not in checked.refused else ():
        kept, left_out = expected[epoch]
        np.testing.assert_array_equal(planned(planner, epoch, worlds[0]), kept)
        counted = planner.filtered(epoch)
        assert sum(v for k, v in counted.items() if k.startswith("epoch_wise_filter")) == left_out
    return checked


def test_global_planning_refuses_it_by_name() -> None:
    wise = {(1, 1): {"max_mean_len": 5}}
    with pytest.raises(OptionError, match="unless planning='indexed'"):
        PlanOptions(distribution="files", epoch_wise_filter=wise, planning="global")
    assert PlanOptions(distribution="files", epoch_wise_filter=wise).resolved_planning == "indexed"


#: option sets both plannings refused before this planning: recorded when first planned
NEWLY_PLANNED_CASES: dict[str, dict] = {
    "files laplace:.10 partition 2 W3 split, epoch_wise_filter elastic -> W2": {
        "options": {"ordering": "laplace:.10", "max_frames": 2000, "partition_epoch": 2,
                    "distribution": "files", "epoch_wise_filter": {(1, 1): {"max_mean_len": 150}},
                    "seed": 1},
        "files": list(range(0, 301, 10)),
        "world": 3,
        "elastic": (2, 2),
    },
    "files buckets:3 W4 pad, epoch_wise_filter elastic -> W3": {
        "options": {"ordering": "buckets:3", "max_frames": 1800, "uneven": "pad",
                    "distribution": "files", "epoch_wise_filter": {(1, 1): {"max_mean_len": 120}},
                    "seed": 2},
        "files": [*range(0, 300, 9), 300],
        "world": 4,
        "elastic": (2, 3),
    },
    "chunked 80:40 files laplace:.8 W3 split, epoch_wise_filter": {
        "options": {"ordering": "laplace:.8", "max_frames": 1500, "chunking": "80:40",
                    "distribution": "files", "epoch_wise_filter": {(1, 2): {"max_mean_len": 100}}},
        "files": list(range(0, 301, 12)),
        "world": 3,
    },
    "files sorted W3 drop, epoch_wise_filter elastic -> W2": {
        "options": {"ordering": "sorted", "max_frames": 2000, "uneven": "drop",
                    "distribution": "files", "epoch_wise_filter": {(1, 1): {"max_mean_len": 90}}},
        "files": list(range(0, 301, 15)),
        "world": 3,
        "elastic": (2, 2),
    },
    "buckets:4 W3 split, quadratic max_frames per key elastic -> W2": {
        "options": {"ordering": "buckets:4", "max_frames": {"data": 6000, "classes": 2500},
                    "batch_cost": "quadratic:100", "seed": 4},
        "classes": True,
        "world": 3,
        "elastic": (2, 2),
    },
    "files laplace:.10 W3 pad, quadratic max_frames per key": {
        "options": {"ordering": "laplace:.10", "max_frames": {"*": 5000},
                    "batch_cost": "quadratic:50", "distribution": "files", "uneven": "pad"},
        "classes": True,
        "files": list(range(0, 301, 10)),
        "world": 3,
    },
}  # fmt: skip
NEWLY_PLANNED_GOLDEN = {
    "files laplace:.10 partition 2 W3 split, epoch_wise_filter elastic -> W2": (
        "39076d11ac4df4e7f771590e59fad4fc96adfe13ad1faa99712de7afeb54408b"
    ),
    "files buckets:3 W4 pad, epoch_wise_filter elastic -> W3": (
        "3df667820520f17a4094e8c2c44837953809964050d53cad79d679aee6db90d4"
    ),
    "chunked 80:40 files laplace:.8 W3 split, epoch_wise_filter": (
        "6128b277f6eb4b78a5bb925261e11a4ebb2f516ea4f6f1b66b9cf6742313f241"
    ),
    "files sorted W3 drop, epoch_wise_filter elastic -> W2": (
        "d58a1b525fc7c4547816131af3ac0b1d4d5f6dbf726abdb586e7827c09db2782"
    ),
    "buckets:4 W3 split, quadratic max_frames per key elastic -> W2": (
        "fbc88b3d49e4ba18668be21f8367a4bed9d0a000fb97fe3655bf6140a98f56f1"
    ),
    "files laplace:.10 W3 pad, quadratic max_frames per key": (
        "b12f0eda6ad5613f1cf0263945a78781a4f002286bb5fddbbff24b324e729a52"
    ),
}


def test_newly_planned_golden_plans_are_pinned() -> None:
    """Recorded when these sets were first planned; bump ``INDEXED_ALGORITHM`` and record anew
    if one changes."""
    got = {name: indexed_digest(case) for name, case in NEWLY_PLANNED_CASES.items()}
    assert got == NEWLY_PLANNED_GOLDEN, f"record: {got}"


@pytest.mark.parametrize(
    "ordering, more",
    [("sorted", {"fixed_random_seed": 3}), ("random", {"fixed_random_seed": 3}), ("random:2", {})],
)
def test_a_filtered_epoch_is_not_planned_again_for_an_epoch_with_the_same_draws(
    ordering: str, more: dict
) -> None:
    """Epochs that share their draws (``fixed_random_seed``, ``:K``) differ where the filter
    applies to one and not the other: a planner that planned the filtered epoch plans the next
    one as a new planner does (every admitted sequence), and the filtered one after it again."""
    rng = np.random.default_rng(3)
    data = rng.integers(1, 121, 200)
    case = {
        "lengths": {"data": data},
        "files": np.unique(np.concatenate([[0, 200], rng.integers(0, 201, 12)])),
        "options": {"ordering": ordering, "max_seqs": 4, "distribution": "files", **more,
                    "epoch_wise_filter": {(1, 1): {"max_mean_len": 30}}},
    }  # fmt: skip

    def shares(planner: IndexedPlanner, epoch: int) -> list[list[int]]:
        plan = planner.global_plan(epoch, 2)
        return [plan.rank_share(r).seqs.tolist() for r in range(2)]

    planner = planner_of(case)
    got = [shares(planner, epoch) for epoch in (1, 2, 1)]
    want = [shares(planner_of(case), epoch) for epoch in (1, 2, 1)]
    assert got == want
    assert sorted(got[1][0] + got[1][1]) == list(range(200))  # epoch 2: unfiltered, every one
