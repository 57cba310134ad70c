"""Resume states are checked for reachability (issue 30, findings 3 and 5), by one check for every
plan kind (greedy, indexed, chunked, mixed, ``files``): every state a real run writes (elastic
chains included) loads, and a state edited into one no run writes is a ``ResumeError`` naming a
field of the state, before any batch is planned from it."""

from __future__ import annotations

import re

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from seqloader.errors import OptionError, ResumeError
from test_resume import corpus, files_corpus, loader_factory, mixed_corpora, run_chain

#: plan kind -> (corpus, options)
KINDS = {
    "greedy": (corpus, {"ordering": "laplace:3"}),
    "greedy buckets": (corpus, {"ordering": "buckets:2"}),
    "indexed": (corpus, {"planning": "indexed", "ordering": "laplace:3"}),
    "chunked": (corpus, {"chunking": "3:2", "min_chunk_size": 1}),
    "mixed": (mixed_corpora, {"mix": {"a": 1.5, "b": 0.5}}),
    "files": (files_corpus, {"distribution": "files"}),
}
FIELDS = (
    "epoch",
    "segment_start",
    "segment_world_size",
    "segment_steps",
    "prior_steps",
    "order_world_size",
    "segment_history",
    "steps",
    "seqs_consumed",
    "epoch_complete",
    "plan_algorithm",
)


def edits(state: dict, buckets: bool) -> dict[str, dict]:
    """Edits of ``state`` into states no run writes (name -> edited state)."""
    out: dict[str, dict] = {}
    start, consumed = state["segment_start"], state["seqs_consumed"]
    # finding 3: skip ahead by raising segment_start and seqs_consumed together
    if state.get("prior_steps") == 0:
        out["skip ahead"] = {**state, "segment_start": start + 3, "seqs_consumed": consumed + 3}
    out["seqs_consumed"] = {**state, "seqs_consumed": consumed + 1}
    out["segment_steps"] = {**state, "segment_steps": state["segment_steps"] + 1}
    out["prior_steps"] = {**state, "prior_steps": state["prior_steps"] + 1}
    out["epoch_complete"] = {**state, "epoch_complete": not state["epoch_complete"]}
    if start == 0 and "segment_history" not in state:  # steps before a segment at sequence 0
        out["prior and steps"] = {
            **state,
            "prior_steps": state["prior_steps"] + 2,
            "steps": state["steps"] + 2,
        }
    if state["prior_steps"] and "segment_history" in state:  # elastic: replayed on load
        out["elastic skip ahead"] = {
            **state,
            "segment_start": start + 1,
            "seqs_consumed": consumed + 1,
        }
        out["elastic prior steps"] = {
            **state,
            "prior_steps": state["prior_steps"] + 1,
            "steps": state["steps"] + 1,
        }
    if not buckets:  # only buckets:N orders keep the epoch's first world size
        out["order_world_size"] = {**state, "order_world_size": state["segment_world_size"] + 1}
    if "plan_algorithm" in state:  # finding 5: indexed states always name their algorithm
        out["plan_algorithm"] = {k: v for k, v in state.items() if k != "plan_algorithm"}
    return out


def refused(make, world: int, state: dict) -> list[str]:
    """Loading ``state`` raises a ResumeError naming a state field; the fields it names."""
    loader = make(0, world)
    try:
        with pytest.raises(ResumeError) as info:
            loader.load_state_dict(state)
    finally:
        loader.close()
    named = re.findall(r"\b(" + "|".join(FIELDS) + r")\b", str(info.value))
    assert named, str(info.value)
    return named


@settings(max_examples=40, deadline=None)
@given(
    kind=st.sampled_from(sorted(KINDS)),
    n=st.integers(6, 40),
    seed=st.integers(0, 3),
    worlds=st.lists(st.integers(1, 3), min_size=2, max_size=3),
    cuts=st.lists(st.integers(0, 12), min_size=2, max_size=2),
    max_frames=st.integers(20, 60),
)
def test_written_states_load_and_edited_states_are_refused(
    kind, n, seed, worlds, cuts, max_frames
) -> None:
    source, options = KINDS[kind]
    make = loader_factory(source(n, seed), max_frames=max_frames, **options)
    try:
        _, states = run_chain(make, worlds, cuts, 2)  # loads every state it writes, elastic too
    except OptionError as e:  # too few files for a world size: not a resume question
        assume("files" not in str(e))
        raise
    for i, state in enumerate(states[:-1]):
        world = worlds[i + 1]
        if state["epoch"] == 0:
            continue
        for name, edited in edits(state, "buckets" in kind).items():
            changed = {k for k in {*state, *edited} if state.get(k) != edited.get(k)}
            assert changed & set(refused(make, world, edited)), name  # names a field it edited


@pytest.mark.parametrize("kind", ["chunked", "indexed", "greedy", "mixed"])
@pytest.mark.parametrize("world", [2, 3])
def test_skipping_ahead_with_no_prior_steps_is_refused(kind: str, world: int) -> None:
    """Finding 3: segment_start and seqs_consumed raised together, prior_steps 0: lost 3
    chunks (chunked) and 16 sequences (indexed) before."""
    source, options = KINDS[kind]
    make = loader_factory(source(40, 1), max_frames=40, **options)
    _, states = run_chain(make, [2, world], [3], 1)
    state = states[0]
    assert state["prior_steps"] == 0 and not state["epoch_complete"]
    edited = {**state, "segment_start": 3, "seqs_consumed": state["seqs_consumed"] + 3}
    assert refused(make, world, edited)[0] == "segment_start"


def test_an_indexed_state_inside_a_batch_names_segment_start() -> None:
    """Finding 5: it was ``OptionError: start: ...``."""
    source, options = KINDS["indexed"]
    make = loader_factory(source(40, 1), max_frames=40, **options)
    _, states = run_chain(make, [2, 3, 1], [3, 2], 1)  # elastic: segment_start > 0 in states[1]
    elastic = [s for s in states if s["prior_steps"] > 0 and not s["epoch_complete"]]
    if not elastic:  # the chain's second stage ran to the end; take its first step's state
        pytest.skip("no mid-epoch elastic state")
    state = elastic[0]
    for delta in (1, -1):
        edited = {**state, "segment_start": state["segment_start"] + delta}
        edited["seqs_consumed"] = state["seqs_consumed"] + delta
        assert refused(make, state["world_size"], edited)[0] == "segment_start"


def test_an_indexed_state_without_plan_algorithm_is_refused() -> None:
    """Finding 5: docs/planning.md says indexed states carry it; one without was accepted."""
    source, options = KINDS["indexed"]
    make = loader_factory(source(30, 2), max_frames=40, **options)
    _, states = run_chain(make, [2, 2], [2], 1)
    state = {k: v for k, v in states[0].items() if k != "plan_algorithm"}
    assert refused(make, 2, state)[0] == "plan_algorithm"


def test_a_written_elastic_state_still_loads() -> None:
    """The checks refuse edits, not what runs write: W 2 -> 3 -> 1 states all load."""
    for kind in sorted(KINDS):
        source, options = KINDS[kind]
        make = loader_factory(source(30, 0), max_frames=40, **options)
        _, states = run_chain(make, [2, 3, 1], [2, 2], 2)
        elastic = [s for s in states if s["prior_steps"] > 0]
        assert elastic or kind == "files", kind
        assert all("segment_history" in s for s in elastic), kind  # replayed when loaded
