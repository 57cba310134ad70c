"""Resume positions on the pure planner: exactly once, equal steps and exact continuation for any
corpus, world sizes, cut points and options (hypothesis; no torch, no data read)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from conftest import ORDERINGS
from plan_contracts import check_plan_contracts
from seqloader.errors import ResumeError
from seqloader.plan import Planner, PlanOptions, Position, continue_plan
from seqloader.plan.options import batch_cost_option
from seqloader.plan.position import segment_plan


@st.composite
def scenarios(draw: st.DrawFn) -> dict:
    n = draw(st.integers(0, 70))
    lengths = np.array(draw(st.lists(st.integers(1, 30), min_size=n, max_size=n)), dtype=np.int64)
    max_frames = draw(st.one_of(st.none(), st.integers(30, 150)))
    cost = draw(st.sampled_from(["frames", "quadratic:60"]))
    # quadratic: sequences too costly for a batch alone are filtered (counted), as a user would
    fits = None if max_frames is None else batch_cost_option(cost).longest_fitting(max_frames)
    options = PlanOptions(
        ordering=draw(st.sampled_from(ORDERINGS)),
        max_seqs=draw(st.one_of(st.none(), st.integers(1, 6))),
        max_frames=max_frames,
        max_seq_length=fits if fits is not None and fits < 30 else None,
        partition_epoch=draw(st.integers(1, 3)),
        uneven=draw(st.sampled_from(["split", "pad", "drop"])),
        seed=draw(st.integers(0, 3)),
        batch_cost=cost,
    )
    epoch = draw(st.integers(1, 2 * options.partition_epoch))
    worlds = draw(st.lists(st.integers(1, 6), min_size=1, max_size=3))
    cut = st.one_of(st.sampled_from([0.0, 1.0]), st.floats(0, 1))
    cuts = draw(st.lists(cut, min_size=len(worlds) - 1, max_size=len(worlds) - 1))
    return {"lengths": lengths, "options": options, "epoch": epoch, "worlds": worlds, "cuts": cuts}


@settings(max_examples=120, deadline=None)
@given(scenarios())
def test_resume_chain_exactly_once_equal_steps(s: dict) -> None:
    """Every contract of the epoch (plans on each world size, determinism from a fresh planner)
    and its resume chain W -> W' -> W'' through JSON: exactly once (``drop``: what is missing is
    exactly what the last segment's plan drops), equal steps in every segment."""
    check_plan_contracts(
        lambda: Planner({"data": s["lengths"]}, s["options"]),
        s["worlds"],
        s["cuts"],
        [s["epoch"]],
        ordered=True,
    )


@settings(max_examples=60, deadline=None)
@given(scenarios())
def test_real_sequences_are_a_prefix_of_the_order(s: dict) -> None:
    """What ``Position.seq_offset`` relies on: a plan's real sequences are its part of the order,
    in order (fillers and the re-split tail included), from any start, for any world size. The
    order is the one of the world size the epoch started with (only ``buckets:N`` depends on it)."""
    planner = Planner({"data": s["lengths"]}, s["options"])
    first = s["worlds"][0]
    order = planner.sub_epoch_order(s["epoch"], world_size=first)
    start = int(s["cuts"][0] * len(order)) if s["cuts"] else 0
    for world in s["worlds"]:
        plan = planner.global_plan(s["epoch"], world, start, order_world_size=first)
        real = plan.batches.seqs[plan.batches.real]
        np.testing.assert_array_equal(real, order[start : start + len(real)])
        if s["options"].uneven != "drop":
            assert start + len(real) == len(order)


def test_finished_drop_segment_stays_finished_with_another_world_size() -> None:
    """11 sequences in batches of 3 over 3 ranks: ``drop`` leaves out the last batch (2 seqs).
    Resuming the finished epoch with 1 rank must not bring them back."""
    planner = Planner({"data": np.full(11, 5)}, PlanOptions(max_seqs=3, uneven="drop"))
    full = planner.global_plan(1, 3)
    assert (full.steps, full.dropped) == (1, 2)
    plan, position = continue_plan(planner, Position(1, 0, 3, full.steps), 1)
    assert len(plan.rank_share(0, position.steps)) == 0
    # and again, from the position the loader would save after that
    plan, position = continue_plan(planner, position, 2)
    assert [len(plan.rank_share(r, position.steps)) for r in range(2)] == [0, 0]


def test_random_seed_offset_resumes_only_with_the_same_world_size_mid_epoch() -> None:
    planner = Planner(
        {"data": np.arange(1, 30)}, PlanOptions(max_seqs=2, distribution="random_seed_offset")
    )
    full = planner.global_plan(1, 2)
    plan, position = continue_plan(planner, Position(1, 0, 2, 3), 2)
    np.testing.assert_array_equal(plan.rank_share(1, 3).seqs, full.rank_share(1, 3).seqs)
    with pytest.raises(ResumeError, match="random_seed_offset"):
        continue_plan(planner, Position(1, 0, 2, 3), 3)
    plan, position = continue_plan(planner, Position(1, 0, 2, full.steps), 3)  # finished: fine
    assert [len(plan.rank_share(r, position.steps)) for r in range(3)] == [0, 0, 0]


@pytest.mark.parametrize(
    ("fields", "match"),
    [
        ({"segment_steps": 99}, "only 3 steps"),
        ({"segment_start": 50, "prior_steps": 4}, "only 29 sequences"),
        ({"segment_start": 5}, "segment_start: got 5 with prior_steps 0"),
        ({"segment_start": 3, "prior_steps": 4}, "prior_steps: got 4 with segment_start 3"),
        ({"segment_world_size": 0}, "segment_world_size: got 0"),
        ({"prior_steps": -1}, "prior_steps: got -1"),
        ({"segment_steps": "2"}, "segment_steps: got '2'"),
        ({"epoch": True}, "epoch: got True"),
        ({"order_world_size": 0}, "order_world_size: got 0"),
    ],
)
def test_impossible_positions_are_refused(fields: dict, match: str) -> None:
    planner = Planner({"data": np.arange(1, 30)}, PlanOptions(max_seqs=5))
    good = Position(1, 0, 2, 1).to_fields()
    with pytest.raises(ResumeError, match=match):
        segment_plan(planner, Position.from_fields({**good, **fields}))


def test_missing_position_field_is_named() -> None:
    fields = Position(1, 0, 2, 1).to_fields()
    del fields["prior_steps"]
    with pytest.raises(ResumeError, match="prior_steps"):
        Position.from_fields(fields)


def test_buckets_order_world_size_survives_elastic_resumes() -> None:
    """buckets:N arranges the epoch for the world size it starts with; an elastic resume keeps
    that arrangement (the position's offset indexes it), also over a second resume and JSON."""
    lengths = np.random.default_rng(3).integers(1, 60, size=300)
    planner = Planner({"data": lengths}, PlanOptions(ordering="buckets:4", max_frames=200))
    order = planner.sub_epoch_order(1, world_size=4)
    assert not np.array_equal(order, planner.sub_epoch_order(1, world_size=3))
    consumed, position = [], Position(1, 0, 4, 0)
    for world, steps in ((4, 3), (3, 2), (2, None)):
        plan, position = continue_plan(planner, position, world)
        assert position.order_world_size == 4
        stop = plan.steps if steps is None else position.steps + steps
        b = plan.batches
        lo, hi = b.bounds[position.steps * world], b.bounds[stop * world]
        consumed.append(b.seqs[lo:hi][b.real[lo:hi]])
        position = Position.from_fields(
            json.loads(json.dumps(position.advanced(stop - position.steps).to_fields()))
        )
    np.testing.assert_array_equal(np.concatenate(consumed), order)


def test_states_without_order_world_size_still_load() -> None:
    """The field appears only where it differs from the segment's world size (after an elastic
    resume), so other states keep their format; absent means the segment's world size."""
    fields = Position(1, 0, 2, 1).to_fields()
    assert "order_world_size" not in fields
    assert Position.from_fields(fields).order_world_size == 2
    elastic = Position(1, 10, 2, 1, 3, order_world_size=4).to_fields()
    assert elastic["order_world_size"] == 4
    assert Position.from_fields(elastic) == Position(1, 10, 2, 1, 3, 4)
