"""A mid-epoch state of indexed ``files`` carries its segment's units and consumption
(``seqloader.plan.indexed.files_carry``): a resume that uses them plans exactly what a resume
from the position alone plans (a state saved before the field existed), along resume chains
W -> W' -> W''; a damaged or mismatched field is detected, set aside with a warning, and the
resume plans from counts (never served)."""

from __future__ import annotations

import base64
import warnings
from collections.abc import Callable
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from seqloader.errors import ResumeError
from seqloader.plan import PlanOptions
from seqloader.plan.indexed.files_carry import FIELD, decode, encode
from seqloader.plan.indexed.planner import IndexedPlanner
from seqloader.plan.mix import Corpora
from seqloader.plan.state import LoaderState

Make = Callable[[], IndexedPlanner]


def planner_maker(
    seed: int,
    ordering: str,
    uneven: str,
    mixed: bool,
    n: int = 300,
    world: int = 12,
    max_frames: int = 1600,
    **more: object,
) -> Make:
    rng = np.random.default_rng(seed)
    files = np.unique(np.concatenate([[0, n], rng.choice(np.arange(1, n), 4 * world, False)]))
    lengths = rng.integers(1, 401, n)
    options = PlanOptions(
        ordering=ordering,
        max_seqs=6,
        max_frames=max_frames,
        uneven=uneven,
        distribution="files",
        planning="indexed",
        seed=seed % 7,
        mix={"a": 0.7, "b": 1.5} if mixed else None,
        **more,  # type: ignore[arg-type]
    )
    corpora = Corpora(("a", "b"), files[[0, len(files) // 2, -1]]) if mixed else None
    return lambda: IndexedPlanner({"data": lengths}, options, files=files, corpora=corpora)


def without(state: dict) -> dict:
    """``state`` as a loader before the field existed saved it."""
    return {k: v for k, v in state.items() if k != FIELD}


def resumed(make: Make, world: int, state: dict | None) -> tuple[LoaderState, list, object]:
    """A new loader state of ``world`` ranks (a new planner) loaded with ``state``, begun:
    (it, every rank's rest as (seqs, bounds, real), the position)."""
    ls = LoaderState(make(), "fingerprint", world, plan_ahead=False)
    if state is not None:
        ls.load(state)
    plan, position = ls.begin(1)
    shares = [plan.rank_share(r, position.steps) for r in range(world)]
    rests = [(s.seqs.tolist(), s.bounds.tolist(), s.real.tolist()) for s in shares]
    return ls, rests, position


def chain(make: Make, worlds: list[int], fracs: list[float], carry: bool) -> list:
    """Epoch 1 run on ``worlds`` in turn, each stopping at ``frac`` of its rest; the states
    loaded with (``carry``) or without their field -> each segment's (rests, position, state)."""
    out: list = []
    state = None
    for world, frac in zip(worlds, fracs, strict=True):
        loaded = state if carry or state is None else without(state)
        try:
            ls, rests, position = resumed(make, world, loaded)
        except ResumeError as e:  # drop with a rank left without units: refused either way
            out.append(str(e))
            break
        steps = len(rests[0][1]) - 1
        ls.consumed = min(steps, max(1, int(steps * frac)))
        state = ls.to_dict()
        out.append((rests, position, state))
        if state["epoch_complete"]:
            break
    return out


@st.composite
def chains(draw: st.DrawFn) -> dict:
    mixed = draw(st.booleans())
    more: dict = {"chunking": draw(st.sampled_from([None, "200:100"]))}
    if draw(st.booleans()):  # a kept set per sub-epoch (a mix: of its slots): its counts, carried
        more["epoch_wise_filter"] = {(1, None): {"max_mean_len": 150}}
    return {
        "make": planner_maker(
            draw(st.integers(0, 2**32 - 1)),
            draw(st.sampled_from(["buckets:3", "buckets:30", "laplace", "laplace:.40"])),
            draw(st.sampled_from(["pad", "split", "drop"])),
            mixed,
            **more,
        ),
        "worlds": draw(st.lists(st.integers(2, 9), min_size=2, max_size=3)),
        "fracs": draw(st.lists(st.floats(0.05, 0.7), min_size=3, max_size=3)),
    }


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chains())
def test_a_resume_from_the_carried_units_plans_what_the_position_alone_plans(case: dict) -> None:
    worlds, fracs = case["worlds"], case["fracs"][: len(case["worlds"])]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        carried = chain(case["make"], worlds, fracs, carry=True)
    assert not [w for w in caught if FIELD in str(w.message)], "a field set aside, not used"
    plain = chain(case["make"], worlds, fracs, carry=False)
    assert len(carried) == len(plain)
    if isinstance(carried[-1], str):  # refused: by name, the same way
        assert carried[-1] == plain[-1]
        carried, plain = carried[:-1], plain[:-1]
    for (rests, position, state), (rests0, position0, state0) in zip(carried, plain, strict=True):
        assert position == position0
        assert rests == rests0  # every rank's rest, batch for batch
        assert state == state0  # the field too: the same units, the same consumption
        assert (FIELD in state) is not state["epoch_complete"]  # carried mid-epoch only


@pytest.fixture(scope="module")
def saved() -> tuple[Make, dict]:
    """A state saved by 8 ranks a third into epoch 1 (``buckets:30``)."""
    make = planner_maker(5, "buckets:30", "pad", False, n=400)
    ls = LoaderState(make(), "fingerprint", 8, plan_ahead=False)
    plan, _ = ls.begin(1)
    ls.consumed = plan.steps // 3
    return make, ls.to_dict()


def damaged_fields(field: str, plan: str) -> dict[str, str]:
    raw = bytearray(base64.b64decode(field))
    flipped = raw.copy()
    flipped[len(raw) // 2] ^= 0x10
    c = decode(field, plan)
    assert c is not None
    count = c.count.copy()
    count[0] += 1
    used = c.used.copy()
    used[np.argmax(c.count - c.start)] = int(c.count.max()) + 1
    return {
        "flipped byte": base64.b64encode(bytes(flipped)).decode(),
        "cut short": field[: len(field) // 2],
        "not base64": field[:-8] + "!!!!!!!!",
        "not a str": 17,  # type: ignore[dict-item]
        "resealed, other counts": encode(replace(c, count=count)),
        "resealed, past a unit's end": encode(replace(c, used=used)),
    }


def test_a_damaged_carried_field_is_set_aside_and_the_resume_plans_from_counts(
    saved: tuple[Make, dict],
) -> None:
    make, state = saved
    _, want, position = resumed(make, 5, without(state))
    for why, field in damaged_fields(state[FIELD], make().distribution.plan_id).items():
        with pytest.warns(UserWarning, match=f"loader state {FIELD}"):
            _, got, got_position = resumed(make, 5, {**state, FIELD: field})
        assert (got, got_position) == (want, position), why


def test_an_edit_resealed_without_the_plans_identity_is_set_aside(saved: tuple[Make, dict]) -> None:
    """Counts moved between two units of one old rank keep every rank's total, so no count
    check sees them; resealed as anyone holding the state can (the digest of its bytes), such a
    field was used and the resume planned other batches than the position says. The seal is
    keyed by the plan's identity (options, files, their counts and frames), which the field does
    not name: set aside with a warning, the resume plans from counts."""
    import hashlib

    from seqloader.plan.indexed import files_carry

    make, state = saved
    _, want, position = resumed(make, 5, without(state))
    c = decode(state[FIELD], make().distribution.plan_id)
    assert c is not None
    count = c.count.copy()
    rank = np.repeat(np.arange(len(c.per_rank)), c.per_rank)
    i = next(
        i
        for i in range(len(count) - 1)
        if rank[i] == rank[i + 1] and count[i] - 1 >= max(1, c.start[i] + c.used[i])
    )
    count[i] -= 1
    count[i + 1] += 1
    edited = replace(c, count=count)
    units = files_carry.pack_units(edited)
    head = {"history": [list(h) for h in c.history], "world_size": c.world_size, "steps": c.steps}
    run = files_carry._pack(head, {"start": c.start, "used": c.used}, 1)
    sealed = len(units).to_bytes(4, "little") + units + run
    digest = hashlib.blake2b(sealed, digest_size=16).digest()
    field = base64.b64encode(digest + sealed).decode()
    with pytest.warns(UserWarning, match=f"loader state {FIELD}"):
        _, got, got_position = resumed(make, 5, {**state, FIELD: field})
    assert (got, got_position) == (want, position)


def test_a_state_without_the_field_resumes_and_the_next_state_carries_it(
    saved: tuple[Make, dict],
) -> None:
    make, state = saved
    _, rests, _ = resumed(make, 5, without(state))
    _, carried_rests, _ = resumed(make, 5, state)
    assert rests == carried_rests
    ls = LoaderState(make(), "fingerprint", 5, plan_ahead=False)
    ls.load(without(state))
    assert ls.to_dict() == {**state, "world_size": 5}  # loaded, not started: as saved, carried


@pytest.mark.parametrize("ordering", ["laplace", "buckets:30"])
def test_a_field_of_another_plan_is_set_aside(ordering: str) -> None:
    """A field taken from a state of other options (the same files and position) holds other
    units: set aside with a warning, the resume plans from counts (neither served nor blamed
    on the position)."""

    def state_of(make: Make) -> dict:
        ls = LoaderState(make(), "fingerprint", 8, plan_ahead=False)
        plan, _ = ls.begin(1)
        ls.consumed = max(1, plan.steps // 5)
        return ls.to_dict()

    make = planner_maker(5, ordering, "pad", False, n=400)
    state = state_of(make)
    other = state_of(planner_maker(5, ordering, "pad", False, n=400, max_frames=2000))
    _, want, position = resumed(make, 5, without(state))
    with pytest.warns(UserWarning, match=f"loader state {FIELD}"):
        _, got, got_position = resumed(make, 5, {**state, FIELD: other[FIELD]})
    assert (got, got_position) == (want, position)


def test_a_mixed_field_with_other_pieces_is_set_aside() -> None:
    """A mix over files carries its pieces' old ranks: a field resealed with one piece more or
    less than the sub-epoch's, or its pieces dealt to other ranks, is set aside with a warning
    (not an error from its arrays)."""
    make = planner_maker(5, "buckets:3", "pad", True, n=400)
    ls = LoaderState(make(), "fingerprint", 8, plan_ahead=False)
    plan, _ = ls.begin(1)
    ls.consumed = plan.steps // 3
    state = ls.to_dict()
    c = decode(state[FIELD], make().distribution.plan_id)
    assert c is not None
    _, want, position = resumed(make, 5, without(state))
    for rank_of in (c.rank_of[:-1], np.append(c.rank_of, 0), np.roll(c.rank_of, 1)):
        with pytest.warns(UserWarning, match=f"loader state {FIELD}"):
            _, got, got_position = resumed(
                make, 5, {**state, FIELD: encode(replace(c, rank_of=rank_of))}
            )
        assert (got, got_position) == (want, position)


@settings(max_examples=40, deadline=None)
@given(
    per_rank=st.lists(st.integers(0, 6), min_size=1, max_size=9),
    files=st.integers(0, 40),
    seed=st.integers(0, 2**32 - 1),
)
def test_the_field_gives_back_what_was_packed(per_rank, files, seed) -> None:
    """The packed ranks and the units' differences (``pack_units``) are undone exactly, for any
    values (consistent or not: the loader's checks judge them after), under the seal of the plan
    it is of; not for another plan's, nor a field of an earlier format (``/2``: every array as it
    is, sealed without a key by the seqloader before)."""
    from seqloader.plan.indexed import files_carry

    rng = np.random.default_rng(seed)
    u, world0 = sum(per_rank), len(per_rank)

    def ints(top: int, n: int = u) -> np.ndarray:
        return rng.integers(0, top, n)

    c = files_carry.Carried(
        (1, world0), ((world0, 3),), world0 + 1, 4, ints(world0, files), np.array(per_rank),
        ints(2**40), ints(300), ints(2**31 - 1), ints(2**31 - 1), ints(50), ints(2**40), "p",
    )  # fmt: skip
    back = decode(encode(c), "p")
    assert back is not None and decode(encode(c), "q") is None
    for name in ("rank_of", "per_rank", "count", "size", "level", "top", "start", "used"):
        assert getattr(back, name).tolist() == getattr(c, name).tolist(), name
    assert (back.key, back.history, back.world_size, back.steps, back.plan) == (
        c.key, c.history, c.world_size, c.steps, c.plan,
    )  # fmt: skip
    arrays = {k: getattr(c, k) for k in ("rank_of", "per_rank", "count", "size", "level", "top")}
    head = {"format": "seqloader-files-units/2", "key": list(c.key), "plan": c.plan}
    assert decode(encode(c, files_carry._pack(head, arrays, 1)), "p") is None
