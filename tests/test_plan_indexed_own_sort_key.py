"""A source's own sort key (``order_lengths``: RETURNN sorts OggZip corpora by
``int(duration * 100)``, LibriSpeech by transcription length) with ``sorted``,
``sorted_reverse`` and ``sort_bin_shuffle[_x2]`` under indexed planning, chunked, over
``files`` or with a ``mix`` (hypothesis, pure numpy): the order sorted by the key, as global
planning sorts; plan for plan global planning's where global planning plans the options
(chunked under ``shard``, ``files``); every contract of ``check_plan_contracts``; ``auto``
resolves them to indexed; the golden plans pinned.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from plan_contracts import check_plan_contracts
from seqloader.plan import PlanOptions
from seqloader.plan.greedy.planner import Planner
from seqloader.plan.indexed.planner import IndexedPlanner
from seqloader.plan.inputs import PlanInputs
from seqloader.plan.mix import Corpora
from seqloader.plan.planners import resolve_planning
from test_plan_indexed import indexed_digest

pytestmark = pytest.mark.filterwarnings("ignore::seqloader.errors.DataWarning")  # tiny rates

#: what the key is combined with (refused by indexed planning before: issue 34)
SETTINGS = {
    "chunked": {"chunking": "6:4"},
    "files": {"distribution": "files"},
    "files chunked": {"distribution": "files", "chunking": "6:4"},
    "mix": {"mix": {"a": 0.5, "b": 2}},
    "mix chunked": {"mix": {"a": 1.5, "b": 1}, "chunking": "6:4"},
    "mix over files": {"distribution": "files", "mix": {"a": 0.5, "b": 2}},
    "mix over files chunked": {"distribution": "files", "mix": {"a": 1.5, "b": 1},
                               "chunking": "6:4"},
    # epoch_wise_filter keeps the shortest by the key (global planning's filter), any cut order
    "filtered": {"epoch_wise_filter": {(1, 2): {"max_mean_len": 7}}},
    "filtered chunked": {"epoch_wise_filter": {(2, 2): {"max_mean_len": 6}}, "chunking": "6:4"},
}  # fmt: skip
ORDERINGS = ["sorted", "sorted_reverse", "sort_bin_shuffle:.4", "sort_bin_shuffle_x2:.4"]
#: the orders global planning's plans are compared with (sorted kinds; filtered: every fixed one)
COMPARED = ["sorted", "sorted_reverse", "default", "reverse"]


@st.composite
def cases(draw: st.DrawFn, settings_: tuple[str, ...] = tuple(SETTINGS)) -> dict:
    """8-30 sequences of 1-20 frames in two corpora of 2-5 files each, a key with many ties
    (unrelated to the lengths), 1-2 sub-epochs, resume chains of 1-3 world sizes in 1..3."""
    sizes = [draw(st.lists(st.integers(1, 5), min_size=2, max_size=5)) for _ in range(2)]
    files = np.concatenate([[0], np.cumsum([s for part in sizes for s in part])]).astype(np.int64)
    n = int(files[-1])
    assume(n >= 8)
    rng = np.random.default_rng(draw(st.integers(0, 99)))
    lengths = rng.integers(1, 21, n)
    key = rng.integers(0, draw(st.integers(1, 6)), n)
    setting = SETTINGS[draw(st.sampled_from(settings_))]
    options = PlanOptions(
        ordering=draw(
            st.sampled_from(
                ORDERINGS
                if "epoch_wise_filter" not in setting
                else [*ORDERINGS, "random:2", "default"]
            )
        ),
        max_seqs=draw(st.sampled_from([None, 3])),
        max_frames=draw(st.sampled_from([40, 70])),
        partition_epoch=draw(st.integers(1, 2)),
        uneven=draw(st.sampled_from(["split", "pad", "drop"])),
        seed=draw(st.integers(0, 3)),
        **setting,  # type: ignore[arg-type]
    )
    mixed = options.mix is not None
    corpora = Corpora(("a", "b"), np.array([0, sum(sizes[0]), n])) if mixed else None
    given_files = files if options.distribution == "files" else None
    inputs = PlanInputs({"data": lengths}, options, order_lengths=key, files=given_files,
                        corpora=corpora)  # fmt: skip
    P = options.partition_epoch
    worlds = [draw(st.lists(st.integers(1, 3), min_size=1, max_size=3)) for _ in range(P)]
    cuts = [draw(st.lists(st.floats(0, 1), min_size=len(w) - 1, max_size=len(w) - 1))
            for w in worlds]  # fmt: skip
    return {"inputs": inputs, "key": key, "worlds": worlds, "cuts": cuts}


def key_order_holds(planner: IndexedPlanner, key: np.ndarray, epoch: int) -> None:
    """The sorted kinds' units follow the key (a rank's share over files: each rank sorts its
    own; else the sub-epoch's order on one rank), chunks of a sequence consecutive."""
    kind = planner.options.parsed_ordering.kind
    if kind not in ("sorted", "sorted_reverse"):
        return
    plan = planner.global_plan(epoch, 1)
    seqs = plan.rank_share(0).seqs[plan.rank_share(0).real]
    steps = np.diff(key[seqs])
    assert (steps >= 0).all() if kind == "sorted" else (steps <= 0).all()


@settings(max_examples=14, deadline=None)
@given(cases())
def test_every_contract_holds_and_the_order_is_the_keys(case: dict) -> None:
    """``auto`` resolves to indexed (refused before); every contract of
    ``check_plan_contracts`` over resume chains W -> W' -> W''; the sorted kinds' order is by the
    source's key (not by the length key)."""
    inputs: PlanInputs = case["inputs"]
    assert resolve_planning(inputs).options.planning == "indexed"
    given_ = replace(inputs, options=replace(inputs.options, planning="indexed"))
    planner = IndexedPlanner(given_)
    epochs = range(1, planner.options.partition_epoch + 1)
    for epoch in epochs:
        key_order_holds(planner, case["key"], epoch)
    check_plan_contracts(
        lambda: IndexedPlanner(given_), case["worlds"], case["cuts"], epochs, workers=()
    )


@settings(max_examples=12, deadline=None)
@given(
    cases(("chunked", "files", "files chunked", "filtered", "filtered chunked")),
    st.sampled_from(COMPARED),
)
def test_global_plannings_plans_where_it_plans_them(case: dict, ordering: str) -> None:
    """Chunked under ``shard``, over ``files`` and with ``epoch_wise_filter`` global planning
    sorts (and filters) by the key: the same plans, chunk for chunk, and the same counts in the
    epoch's report (over files on every world size; sharded on one rank and with ``pad``, as
    ``split`` re-cuts a short last round differently, as without a key)."""
    inputs: PlanInputs = case["inputs"]
    if inputs.options.epoch_wise_filter is None and ordering not in ORDERINGS:
        ordering = "sorted"  # default/reverse sort nothing: the key is read by the filter only
    options = replace(inputs.options, ordering=ordering)
    planner = IndexedPlanner(replace(inputs, options=replace(options, planning="indexed")))
    reference = Planner(replace(inputs, options=replace(options, planning="global")))
    files = options.distribution == "files"
    for epoch in range(1, options.partition_epoch + 1):
        for world in sorted({1, *case["worlds"][0]}):
            if not files and world > 1 and options.uneven == "split":
                continue
            if files and len(inputs.files) - 1 < options.partition_epoch * world:
                continue  # too few files: refused by both
            got, want = planner.global_plan(epoch, world), reference.global_plan(epoch, world)
            assert planner.filtered(epoch) == reference.filtered(epoch)
            a, b = got.batches, want.batches
            np.testing.assert_array_equal(a.seqs, b.seqs)
            np.testing.assert_array_equal(a.bounds, b.bounds)
            if b.chunks is not None:
                np.testing.assert_array_equal(a.chunks, b.chunks)


@settings(max_examples=8, deadline=None)
@given(cases(("mix", "mix chunked", "chunked")))
def test_chunked_plans_expand_the_unchunked_order(case: dict) -> None:
    """Chunked, the slots are the unchunked plan's, in its order (sort_bin_shuffle's bins and
    draws, a sharded mix's selection, both over the key's index), each expanded into its
    chunks."""
    inputs: PlanInputs = case["inputs"]
    options = replace(inputs.options, planning="indexed", uneven="pad")
    chunked = IndexedPlanner(replace(inputs, options=replace(options, chunking="6:4")))
    plain = IndexedPlanner(replace(inputs, options=replace(options, chunking=None)))
    for epoch in range(1, options.partition_epoch + 1):
        got = chunked.global_plan(epoch, 1).batches
        first = np.r_[True, (np.diff(got.seqs) != 0) | (got.chunks[1:] <= got.chunks[:-1])]
        want = plain.global_plan(epoch, 1).batches
        if options.mix is not None:  # the same (sequence, corpus epoch) slots in order
            slots = list(zip(got.seqs[first].tolist(), got.uses[first].tolist(), strict=True))
            assert slots == list(zip(want.seqs.tolist(), want.uses.tolist(), strict=True))
        else:
            np.testing.assert_array_equal(got.seqs[first], want.seqs)


#: new plans (no digest of an earlier one changes): the key with chunking, files, a mix, a filter
OWN_KEY_CASES: dict[str, dict] = {
    "sorted_reverse own key chunked 60:30 W3 pad": {
        "options": {"ordering": "sorted_reverse", "max_frames": 1500, "chunking": "60:30",
                    "partition_epoch": 2, "uneven": "pad"},
        "own_sort_key": True, "world": 3, "elastic": (2, 2),
    },
    "sort_bin_shuffle own key chunked 60:30 W2": {
        "options": {"ordering": "sort_bin_shuffle:.20", "max_frames": 1500, "chunking": "60:30"},
        "own_sort_key": True, "world": 2,
    },
    "sorted own key files W3 split": {
        "options": {"ordering": "sorted", "max_frames": 1500, "distribution": "files"},
        "files": list(range(0, 301, 12)), "own_sort_key": True, "world": 3, "elastic": (2, 4),
    },
    "sorted own key mix W2": {
        "options": {"ordering": "sorted", "max_frames": 1500, "mix": {"a": 0.5, "b": 2}},
        "own_sort_key": True, "world": 2,
    },
    "sort_bin_shuffle_x2 own key mix over files W2": {
        "options": {"ordering": "sort_bin_shuffle_x2:.20", "max_frames": 1500,
                    "distribution": "files", "mix": {"a": 1, "b": 1.5}},
        "files": [0, *range(12, 121, 12), *range(130, 251, 12), *range(262, 301, 12), 300],
        "own_sort_key": True, "world": 2,
    },
    "reverse own key filtered partition 2 W2 pad": {
        "options": {"ordering": "reverse", "max_frames": 1500, "partition_epoch": 2,
                    "epoch_wise_filter": {(1, 2): {"max_mean_len": 15}}, "uneven": "pad"},
        "own_sort_key": True, "world": 2,
    },
}  # fmt: skip
OWN_KEY_GOLDEN = {
    "reverse own key filtered partition 2 W2 pad": (
        "51051af314f8c366f9f76e803b671157ac992da59838ab21cae91e35019d9db4"
    ),
    "sorted_reverse own key chunked 60:30 W3 pad": (
        "c6f69302a890a141e74a968e2aac5437cb2037ea2b4fb0105ed2a8d64a80b1bf"
    ),
    "sort_bin_shuffle own key chunked 60:30 W2": (
        "889bb613d1fbb5932dce6110d5bfd7796fc0fdc8f34d3492acfe0ec1b051c922"
    ),
    "sorted own key files W3 split": (
        "385a13c47e2278c60191f044d2f3d95458824c91127be41ae62bdd94ed5d0f4c"
    ),
    "sorted own key mix W2": ("1d9f094e1227763fc1ae4ebd31e6213c96bbfa9607ba4c0e11ed0dd9e8c8b3be"),
    "sort_bin_shuffle_x2 own key mix over files W2": (
        "fb6e6f97257b7221532724004c8d9426e60e310e705cd6207862ee89dc9d044b"
    ),
}


def test_own_key_golden_plans_are_pinned() -> None:
    """Added with these option sets (refused under indexed planning before, so no plan of the
    current ``INDEXED_ALGORITHM`` moved); bump it and record anew if one changes."""
    got = {name: indexed_digest(case) for name, case in OWN_KEY_CASES.items()}
    assert got == OWN_KEY_GOLDEN, f"record: {got}"
