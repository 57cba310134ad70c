"""``epoch_wise_filter`` with a ``mix`` over ``distribution="files"`` under indexed planning
(``laplace``, ``buckets:N``, the fixed orders, ``random``, chunked too; hypothesis, pure numpy):
in the epochs of a filter's range each sub-epoch's file pieces' ``(sequence, corpus epoch)``
slots are filtered once, as one set (RETURNN's ``max_mean_len`` selection by (length, sequence,
corpus epoch)), for every rank and world size; a filtered slot is lost for its sub-epoch and
counted per epoch.

Checked: no batch holds a slot the filter leaves out of its sub-epoch (fillers included); the
sub-epoch plans exactly the kept set, computed here from the unfiltered planner's slots with the
filter both plannings share (``admission.mean_filtered``); the report and ``corpus_plan`` count
it; every contract holds (``check_plan_contracts``: the mix's exactly-once less the filtered
slots, equal steps, resume chains W -> W' -> W'', determinism); the mix check finds a slot used
twice, lost, or filtered; a state's carried units (``files_units``) resume what the position
alone resumes. Global planning still refuses the combination by name."""

from __future__ import annotations

from functools import partial

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from plan_contracts import Units
from seqloader.errors import OptionError
from seqloader.plan import BatchList, PlanOptions
from seqloader.plan.indexed.files_mix import FilesMix
from seqloader.plan.indexed.planner import IndexedPlanner
from seqloader.plan.mix import Corpora
from test_plan_indexed import indexed_digest
from test_plan_indexed_files_filter import check_filtered
from test_plan_indexed_mix_filter import kept_set, pairs

pytestmark = pytest.mark.filterwarnings("ignore::seqloader.errors.DataWarning")  # tiny rates

ORDERINGS = ["laplace:.6", "buckets:3", "default", "sorted", "random", "random:2"]


@st.composite
def cases(draw: st.DrawFn, ordering: str) -> dict:
    """2 corpora of enough files (1-7 sequences each) for every world size of the chain, rates
    over and under 1, 1-3 sub-epochs, resume chains of 1-3 world sizes in 1..4, a filter from
    epoch 1 (so every sub-epoch checked is filtered or, past its range, not)."""
    parts = draw(st.integers(1, 3))
    worlds = draw(st.sampled_from([[1], [2], [3, 2], [2, 4, 3], [4, 1]]))
    each = -(-parts * max(worlds) // 2)  # files per corpus: every world size can be planned
    sizes = [draw(st.lists(st.integers(1, 7), min_size=each, max_size=each + 2)) for _ in "ab"]
    files = np.concatenate([[0], np.cumsum([s for part in sizes for s in part])]).astype(np.int64)
    bounds = np.array([0, sum(sizes[0]), int(files[-1])], dtype=np.int64)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    data = rng.integers(1, draw(st.sampled_from([30, 120])) + 1, int(files[-1])).astype(np.int64)
    options = {
        "ordering": ordering,
        "chunking": draw(st.sampled_from([None, None, "20:10"])),
        "max_seqs": draw(st.one_of(st.none(), st.integers(1, 6))),
        "max_frames": draw(st.sampled_from([None, 300])),
        "partition_epoch": parts,
        "uneven": draw(st.sampled_from(["split", "pad", "drop"])),
        "seed": draw(st.integers(0, 5)),
        "distribution": "files",
        "mix": {"a": draw(st.sampled_from([0.5, 1, 1.5])), "b": draw(st.sampled_from([1, 2]))},
        "epoch_wise_filter": {
            (1, draw(st.sampled_from([1, 2, None]))): {
                "max_mean_len": draw(st.sampled_from([5, 12.5, 25]))
            }
        },
    }
    corpora = Corpora(("a", "b"), bounds)
    return {"lengths": {"data": data}, "options": options, "corpora": corpora,
            "files": files, "worlds": worlds}  # fmt: skip


def planner_of(case: dict, filtered: bool = True) -> IndexedPlanner:
    options = dict(case["options"])
    if not filtered:
        options.pop("epoch_wise_filter")
    return IndexedPlanner(
        case["lengths"], PlanOptions(**options), files=case["files"], corpora=case["corpora"]
    )


@pytest.mark.parametrize("ordering", ORDERINGS)
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_files_mix_filter_keeps_one_set_per_sub_epoch_and_every_contract(
    ordering: str, data: st.DataObject
) -> None:
    case = data.draw(cases(ordering))
    plain = planner_of(case, filtered=False)
    parts = case["options"]["partition_epoch"]
    epochs = range(1, parts + 1)  # one full epoch: the mix's check over it
    expected = {e: kept_set(case, plain, e) for e in epochs}

    checked = check_filtered(
        partial(planner_of, case), case["worlds"], expected, slot_pairs, listed_pairs
    )
    planner = planner_of(case)
    assert planner.options.resolved_planning == "indexed"
    mix = planner.mix
    assert isinstance(mix, FilesMix)
    for epoch in epochs if case["worlds"][0] not in checked.refused else ():
        kept = expected[epoch][0]  # per corpus: corpus_plan counts the kept slots
        per_corpus = np.bincount(mix.corpora.corpus_of(kept % 1_000_000), minlength=2)
        assert [n for _, n, _ in planner.corpus_plan(epoch)] == per_corpus.tolist()
        assert np.isin(slot_pairs(checked.consumed[epoch]), kept).all()


def slot_pairs(slots: BatchList | Units) -> np.ndarray:
    """A plan's or a chain's slots as (sequence, corpus epoch) pairs (``pairs``)."""
    assert slots.uses is not None
    return pairs(slots.seqs, slots.uses)


def listed_pairs(planner: IndexedPlanner, epoch: int, world: int) -> np.ndarray:
    """The sub-epoch's listed slots as pairs, sorted."""
    seqs, uses = planner.sub_epoch_slots(epoch)
    assert uses is not None
    return np.sort(pairs(seqs, uses))


def _case() -> tuple[IndexedPlanner, np.ndarray, np.ndarray]:
    """A filtered mix over files (rates 1.5 and 0.5) and full epoch 1's kept slots."""
    lengths = (np.arange(90, dtype=np.int64) * 37 + 5) % 60 + 1
    options = PlanOptions(
        ordering="laplace:.5", max_frames=400, partition_epoch=2, mix={"a": 1.5, "b": 0.5},
        distribution="files", epoch_wise_filter={(1, 2): {"max_mean_len": 20}},
    )  # fmt: skip
    planner = IndexedPlanner(
        {"data": lengths}, options, files=np.arange(0, 91, 10),
        corpora=Corpora(("a", "b"), np.array([0, 50, 90])),
    )  # fmt: skip
    slots = [planner.sub_epoch_slots(e) for e in (1, 2)]
    seqs = np.concatenate([s for s, _ in slots])
    uses = np.concatenate([u for _, u in slots if u is not None])
    return planner, seqs, uses


#: a delivered pass made faulty: (kept sequences, uses, filtered sequences, uses) -> (sequences, uses)
FAULTS = {
    "a kept slot lost": lambda s, u, gs, gu: (s[1:], u[1:]),
    "a kept slot twice": lambda s, u, gs, gu: (np.r_[s, s[:1]], np.r_[u, u[:1]]),
    "a filtered slot for a kept one": lambda s, u, gs, gu: (np.r_[s[1:], gs[:1]], np.r_[u[1:], gu[:1]]),
}  # fmt: skip


@pytest.mark.parametrize("fault", FAULTS)
def test_the_mix_check_accepts_the_kept_slots_and_finds_a_fault(fault: str) -> None:
    """``FilesMix.check`` over a full epoch: the kept slots pass (counted as delivered, not
    with the filtered ones); each fault is found; ``select`` is the kept slots."""
    planner, seqs, uses = _case()
    mix = planner.mix
    assert isinstance(mix, FilesMix)
    check = mix.check([0], seqs, uses)
    assert check.problems == [] and sum(c.used for c in check.corpora) == len(seqs)
    gone = mix.left_out(0, 2)
    assert len(gone[0]) == sum(sum(planner.filtered(e).values()) for e in (1, 2)) > 0
    assert mix.check([0], *FAULTS[fault](seqs, uses, *gone)).problems
    sel = mix.select(0)
    assert np.array_equal(np.sort(pairs(sel.seqs, sel.uses)), np.sort(pairs(seqs, uses)))


@pytest.mark.parametrize("ordering", ["laplace:.5", "buckets:3", "sorted", "random:2"])
def test_each_full_epoch_is_filtered_apart_on_one_planner(ordering: str) -> None:
    """One planner asked for full epochs 1-3 in turn (one sub-epoch each: the same part every
    time; ``random:2`` and ``fixed_random_seed`` keep the draws across epochs) plans each as a
    fresh planner does: no kept set, units or segment of a sub-epoch is taken for the same part
    of a later full epoch, whose pieces are other ones."""
    lengths = (np.arange(90, dtype=np.int64) * 37 + 5) % 60 + 1
    options = PlanOptions(
        ordering=ordering, max_frames=400, mix={"a": 1.5, "b": 0.5}, distribution="files",
        fixed_random_seed=3, epoch_wise_filter={(1, None): {"max_mean_len": 20}},
    )  # fmt: skip

    def make() -> IndexedPlanner:
        return IndexedPlanner(
            {"data": lengths}, options, files=np.arange(0, 91, 10),
            corpora=Corpora(("a", "b"), np.array([0, 50, 90])),
        )  # fmt: skip

    planner = make()
    for epoch in (1, 2, 3):
        fresh = make()  # the sequential planner has planned the epochs before
        got, want = planner.global_plan(epoch, 3).batches, fresh.global_plan(epoch, 3).batches
        for name in ("seqs", "bounds", "uses"):
            np.testing.assert_array_equal(getattr(got, name), getattr(want, name), err_msg=name)
        assert planner.filtered(epoch) == fresh.filtered(epoch)
        assert planner.corpus_plan(epoch) == fresh.corpus_plan(epoch)


def test_global_planning_still_refuses_it_and_auto_resolves_to_indexed() -> None:
    wise = {(1, 1): {"max_mean_len": 5}}
    for ordering in ("laplace:.4", "buckets:3", "random", "sorted", "default"):
        for chunking in (None, "20:10"):
            options = PlanOptions(mix={"a": 1}, epoch_wise_filter=wise, ordering=ordering,
                                  distribution="files", chunking=chunking)  # fmt: skip
            assert options.resolved_planning == "indexed"
    with pytest.raises(OptionError, match="use planning='indexed'"):  # a mix over files
        PlanOptions(mix={"a": 1}, epoch_wise_filter=wise, distribution="files", planning="global")


#: option sets both plannings refused before this planning: recorded when first planned
NEWLY_PLANNED_CASES: dict[str, dict] = {
    "files mix laplace:.10 partition 2 W3 split, epoch_wise_filter elastic -> W2 -> W4": {
        "options": {"ordering": "laplace:.10", "max_frames": 2000, "partition_epoch": 2,
                    "distribution": "files", "mix": {"a": 0.5, "b": 1.5, "c": 1},
                    "epoch_wise_filter": {(1, 1): {"max_mean_len": 150}}, "seed": 1},
        "files": list(range(0, 301, 10)),
        "world": 3,
        "elastic": (2, 2),
        "elastic_again": (1, 4),
    },
    "files mix sorted W3 pad, epoch_wise_filter elastic -> W2": {
        "options": {"ordering": "sorted", "max_frames": 2000, "uneven": "pad",
                    "distribution": "files", "mix": {"a": 1, "b": "1/3", "c": 2},
                    "epoch_wise_filter": {(1, 2): {"max_mean_len": 120}}, "seed": 2},
        "files": list(range(0, 301, 10)),
        "world": 3,
        "elastic": (2, 2),
    },
    "chunked 80:40 files mix random partition 2 W2 drop, epoch_wise_filter elastic -> W3": {
        "options": {"ordering": "random", "chunking": "80:40", "max_frames": 1500,
                    "partition_epoch": 2, "uneven": "drop", "distribution": "files",
                    "mix": {"a": 1.5, "b": 0.5, "c": 1},
                    "epoch_wise_filter": {(1, 1): {"max_mean_len": 110}}, "seed": 5},
        "files": list(range(0, 301, 10)),
        "world": 2,
        "elastic": (2, 3),
    },
}  # fmt: skip
NEWLY_PLANNED_GOLDEN = {
    "files mix laplace:.10 partition 2 W3 split, epoch_wise_filter elastic -> W2 -> W4": (
        "ee4f0ad29db35a0f59c998799bb5fd5fab7943e3657e2b03a350069124382ee1"
    ),
    "files mix sorted W3 pad, epoch_wise_filter elastic -> W2": (
        "edb8dda93151e9a4f67bcbc8fac58e21fb48d49848bba9dc5ebc89a538bdfa9e"
    ),
    "chunked 80:40 files mix random partition 2 W2 drop, epoch_wise_filter elastic -> W3": (
        "5603bd0850dc539e6b9e0b4fe9630db7ee5c285140e71db17b6dda265a291f85"
    ),
}


def test_newly_planned_golden_plans_are_pinned() -> None:
    """Recorded when these sets were first planned (``seqloader-plan-indexed/11``); bump
    ``INDEXED_ALGORITHM`` and record anew if one changes."""
    got = {name: indexed_digest(case) for name, case in NEWLY_PLANNED_CASES.items()}
    assert got == NEWLY_PLANNED_GOLDEN, f"record: {got}"
