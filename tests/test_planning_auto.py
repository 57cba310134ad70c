"""``planning="auto"``: indexed planning wherever it plans the options and what the source
declares, the greedy global algorithm otherwise; the resolved planning is what plans, what the
fingerprint and the state record, and a state of the other planning is refused by name."""

from __future__ import annotations

import itertools
import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import seqloader as sl
from seqloader.errors import OptionError, ResumeError
from seqloader.plan.indexed.planner import INDEXED_ALGORITHM
from seqloader.plan.inputs import PlanInputs
from seqloader.plan.mix import Corpora
from seqloader.plan.options import PlanOptions
from seqloader.plan.planners import GLOBAL_ALGORITHM, make_planner, resolve_planning
from seqloader.plan.selections import EpochSelection
from seqloader.plan.variants import LengthVariants

STATES = Path(__file__).parent / "states"
#: the corpus and options of ``states/greedy_default_laplace.json``
LEGACY_LENGTHS = [7, 3, 12, 5, 9, 1, 14, 6, 8, 2, 11, 4, 10, 13, 3, 7, 9, 5, 6, 12]
LEGACY_OPTIONS = {"ordering": "laplace:.4", "max_seqs": 3, "max_frames": 40, "seed": 3}

OPTION_SPACE = {
    "ordering": st.sampled_from(
        [
            "default",
            "sorted",
            "random",
            "random:2",
            "laplace:.3",
            "buckets:3",
            "sort_bin_shuffle:.3",
        ]
    ),
    "distribution": st.sampled_from(["shard", "random_seed_offset", "files"]),
    "seeding": st.sampled_from(["seqloader", "returnn"]),
    "chunking": st.sampled_from([None, "4:2", {"classes": (2, 1)}]),
    "length_key": st.sampled_from([None, "data"]),
    "partition_epoch": st.integers(1, 2),
    "fixed_random_subset": st.sampled_from([None, 0.5]),
    "epoch_wise_filter": st.sampled_from([None, {(1, 1): {"max_mean_len": 6}}]),
    "mix": st.sampled_from([None, {"a": 0.5}]),
}


def built(**options: object) -> PlanOptions | None:
    """The options, or None where they are refused."""
    try:
        return PlanOptions(max_seqs=3, max_frames=40, **options)  # type: ignore[arg-type]
    except OptionError:
        return None


@settings(max_examples=120, deadline=None)
@given(st.fixed_dictionaries(OPTION_SPACE))
def test_auto_is_indexed_exactly_where_indexed_plans_the_options(options: dict) -> None:
    auto, indexed, greedy = (built(**options, planning=p) for p in ("auto", "indexed", "global"))
    if indexed is not None:
        assert auto is not None and auto.resolved_planning == "indexed"
        assert auto.to_dict() == indexed.to_dict()  # the fingerprint records what plans
    elif greedy is not None:
        assert auto is not None and auto.resolved_planning == "global"
        assert auto.to_dict() == greedy.to_dict()
        assert "planning" not in auto.to_dict()  # greedy plans keep their fingerprints
    else:
        assert auto is None  # refused by both planners: refused by auto too
    if options["seeding"] == "returnn" and auto is not None:
        assert auto.resolved_planning == "global"  # RETURNN's own order is global


@settings(max_examples=25, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 20), min_size=0, max_size=40),
    ordering=st.sampled_from(["default", "random", "laplace:.4", "buckets:2", "sort_bin_shuffle"]),
    seed=st.integers(0, 4),
    world=st.integers(1, 3),
)
def test_auto_plans_what_the_resolved_planning_plans(
    lengths: list[int], ordering: str, seed: int, world: int
) -> None:
    given_lengths = {"data": np.array(lengths, dtype=np.int64)}
    asked = PlanOptions(ordering=ordering, seed=seed, max_frames=40, planning="auto")
    auto = make_planner(given_lengths, asked)
    resolved = replace(asked, planning=asked.resolved_planning)
    explicit = make_planner(given_lengths, resolved)
    assert auto.options.planning == resolved.planning == auto.options.resolved_planning
    assert auto.algorithm == explicit.algorithm
    assert auto.fingerprint("src") == explicit.fingerprint("src")
    for epoch in (1, 2):
        got, want = auto.global_plan(epoch, world), explicit.global_plan(epoch, world)
        assert got.steps == want.steps
        for rank in range(world):
            a, b = got.rank_share(rank), want.rank_share(rank)
            assert np.array_equal(a.seqs, b.seqs) and np.array_equal(a.real, b.real)


#: combinations that resolved to global before indexed planning planned them (issue 34)
NEWLY_INDEXED = [
    {"ordering": "random", "distribution": "random_seed_offset"},
    {"ordering": "random:2", "distribution": "random_seed_offset", "partition_epoch": 2},
    {"ordering": "laplace:.3", "chunking": "4:2", "partition_epoch": 2,
     "epoch_wise_filter": {(1, 1): {"max_mean_len": 6}}},
    {"ordering": "buckets:3", "chunking": "4:2", "partition_epoch": 2,
     "distribution": "random_seed_offset", "epoch_wise_filter": {(1, 2): {"max_mean_len": 6}}},
    # ... with a mix (refused under every planning before: the sub-epoch's slots filtered as
    # one set by length class, their chunks bucketed by window, mix_chunks_filter)
    {"ordering": "laplace:.3", "chunking": "4:2", "mix": {"a": 0.5, "b": 2},
     "epoch_wise_filter": {(1, 1): {"max_mean_len": 6}}},
    {"ordering": "buckets:3", "chunking": "4:2", "mix": {"b": 1.5}, "partition_epoch": 2,
     "distribution": "random_seed_offset", "epoch_wise_filter": {(1, 2): {"max_mean_len": 6}}},
    {"ordering": "sorted", "chunking": "4:2", "partition_epoch": 2},
    {"ordering": "default", "chunking": "4:2", "distribution": "random_seed_offset"},
    {"ordering": "random", "chunking": "4:2", "partition_epoch": 2},
    # fixed and random orders over files (each rank's files' order, cut greedily: files_cut)
    {"ordering": "default", "distribution": "files"},
    {"ordering": "sorted_reverse", "distribution": "files", "partition_epoch": 2},
    {"ordering": "random:2", "distribution": "files", "uneven": "drop"},
    # ... chunked (each rank's ordered sequences' chunks, cut greedily: files_cut)
    {"ordering": "random", "chunking": "4:2", "distribution": "files"},
    {"ordering": "sorted_reverse", "chunking": "4:2", "distribution": "files",
     "partition_epoch": 2, "uneven": "pad"},
    {"ordering": "sorted", "fixed_random_subset": 0.5, "partition_epoch": 2},
    {"ordering": "random", "chunking": "4:2", "fixed_random_subset": 20},
    {"ordering": "sorted_reverse", "chunking": "4:2", "fixed_random_subset": 0.5},
    # fixed and random orders with a mix under shard (the mix's sub-epoch cut greedily: mix_cuts)
    {"ordering": "random", "mix": {"a": 0.5, "b": 2}},
    {"ordering": "sorted", "mix": {"b": 1.5}, "partition_epoch": 2},
    # ... chunked (the mix's slots' chunks cut greedily: mix_cuts.chunked_mix_cut)
    {"ordering": "random", "mix": {"a": 0.5, "b": 2}, "chunking": "4:2"},
    {"ordering": "reverse", "mix": {"b": 1.5}, "chunking": "4:2", "partition_epoch": 2},
    # laplace and buckets:N with chunking and a sharded mix (the slots' chunks: mix_chunks)
    {"ordering": "laplace:.3", "mix": {"a": 0.5, "b": 2}, "chunking": "4:2"},
    {"ordering": "buckets:3", "mix": {"b": 1.5}, "chunking": "4:2", "partition_epoch": 2},
    # sort_bin_shuffle with chunking and a sharded mix (its slots' chunks: ChunkedSortBinsMix)
    {"ordering": "sort_bin_shuffle_x2:.3", "mix": {"a": 0.5, "b": 2}, "chunking": "4:2"},
    {"ordering": "default", "epoch_wise_filter": {(1, 1): {"max_mean_len": 6}}},
    {"ordering": "random", "chunking": "4:2", "epoch_wise_filter": {(1, 1): {"max_mean_len": 6}}},
    # fixed and random orders with a mix over files (refused under every planning before: the
    # mix's file pieces dealt and cut greedily per rank, files_mix_cut)
    {"ordering": "random", "distribution": "files", "mix": {"a": 0.5, "b": 2}},
    {"ordering": "sorted_reverse", "distribution": "files", "mix": {"b": 1.5},
     "partition_epoch": 2},
    {"ordering": "default", "distribution": "files", "mix": {"a": 2}, "uneven": "drop"},
    # RETURNN's sort_bin_shuffle: its keyed order cut greedily by every rank (sort_bins)
    {"ordering": "sort_bin_shuffle:.3"},
    {"ordering": "sort_bin_shuffle_x2:2:2", "distribution": "random_seed_offset",
     "partition_epoch": 2},
    {"ordering": "sort_bin_shuffle", "epoch_wise_filter": {(1, 1): {"max_mean_len": 6}}},
    {"ordering": "sort_bin_shuffle_x2:.4", "distribution": "files"},
    {"ordering": "sort_bin_shuffle:.4", "distribution": "files", "mix": {"a": 0.5, "b": 2}},
    {"ordering": "sort_bin_shuffle_x2:.4", "chunking": "4:2", "partition_epoch": 2},
    {"ordering": "sort_bin_shuffle:.4", "mix": {"a": 0.5, "b": 2}, "partition_epoch": 2},
    # ... and chunked (each rank's pieces' slots expanded into chunks, cut greedily: refused
    # under every planning before, files_mix_cut)
    {"ordering": "random", "distribution": "files", "mix": {"a": 0.5, "b": 2}, "chunking": "4:2"},
    {"ordering": "sorted", "distribution": "files", "mix": {"b": 1.5}, "chunking": "4:2",
     "partition_epoch": 2},
    {"ordering": "sort_bin_shuffle_x2:.4", "distribution": "files", "mix": {"a": 2},
     "chunking": "4:2", "uneven": "drop"},
    # epoch_wise_filter with a mix over files (refused under every planning before: each
    # sub-epoch's slots filtered once as one set, files_mix_filter)
    {"ordering": "laplace:.3", "distribution": "files", "mix": {"a": 0.5, "b": 2},
     "epoch_wise_filter": {(1, 1): {"max_mean_len": 9}}},
    {"ordering": "random", "distribution": "files", "mix": {"b": 1.5}, "chunking": "4:2",
     "epoch_wise_filter": {(1, None): {"max_mean_len": 9}}, "partition_epoch": 2},
]  # fmt: skip


@pytest.mark.parametrize("options", NEWLY_INDEXED, ids=str)
def test_newly_planned_combinations_resolve_to_indexed(options: dict) -> None:
    """Each is accepted by ``planning="indexed"`` and so resolved to it by ``auto`` (with the
    source declaring nothing more), planned by the indexed planner."""
    auto = PlanOptions(max_frames=40, **options)
    assert auto.resolved_planning == "indexed"
    files = np.r_[np.arange(0, 29, 3), 29] if auto.distribution == "files" else None
    corpora = Corpora(("a", "b"), np.array([0, 12, 29])) if auto.mix is not None else None
    planner = make_planner({"data": np.arange(1, 30)}, auto, files=files, corpora=corpora)
    assert planner.options.planning == "indexed" and planner.global_plan(1, 2).steps > 0


def resolved_for(inputs: PlanInputs) -> str:
    return resolve_planning(inputs).options.planning


def test_what_the_source_declares_resolves_auto_to_global() -> None:
    lengths = {"data": np.array([5, 3, 8, 2, 7, 1]), "classes": np.array([2, 1, 3, 1, 2, 1])}
    auto = PlanOptions(ordering="laplace:.2", max_frames=40, planning="auto")
    assert resolved_for(PlanInputs(lengths, auto)) == "indexed"
    keep = np.array([True, False, True, True, False, True])
    selections = (EpochSelection(1, 1, keep, "subdirs=['a']"),)
    # epoch selections with a fixed, random or sort_bin_shuffle order: each sub-epoch listed
    # and filtered (chunked too: test_plan_indexed_selections)
    for ordering in ("default", "random", "sort_bin_shuffle:.2"):
        options = replace(auto, ordering=ordering)
        assert resolved_for(PlanInputs(lengths, options, selections=selections)) == "indexed"
        chunked = replace(options, chunking=2)
        assert resolved_for(PlanInputs(lengths, chunked, selections=selections)) == "indexed"
    assert resolved_for(PlanInputs(lengths, auto, selections=selections)) == "indexed"
    # ... but chunked with laplace/buckets:N (auto: global); with files or a mix refused by both
    chunked = replace(auto, chunking=2)
    assert resolved_for(PlanInputs(lengths, chunked, selections=selections)) == "global"
    with pytest.raises(OptionError, match=r"epoch selections .*chunking with ordering='laplace"):
        make_planner(
            PlanInputs(lengths, replace(chunked, planning="indexed"), selections=selections)
        )
    for extra in ({"distribution": "files"}, {"mix": {"a": 1.0}}):
        files = np.array([0, 3, 6]) if extra.get("distribution") else None
        corpora = Corpora(("a",), np.array([0, 6])) if "mix" in extra else None
        given_ = PlanInputs(lengths, replace(auto, **extra), selections=selections, files=files,
                            corpora=corpora)  # fmt: skip
        assert resolved_for(given_) == "global"
        with pytest.raises(OptionError, match="epoch selections"):
            make_planner(given_)  # global planning refuses them too
    # a source's length variants (speed perturbation)
    variants = LengthVariants(
        {"data": np.stack([lengths["data"] - 1, lengths["data"]])}, ("a", "b")
    )
    # indexed for every ordering (test_speed_plan_indexed), global with chunking (and the rest)
    assert resolved_for(PlanInputs(lengths, auto, variants=variants)) == "indexed"
    chunked = replace(auto, chunking="3:2")
    assert resolved_for(PlanInputs(lengths, chunked, variants=variants)) == "global"
    # with epoch_wise_filter, per-key max_frames, max_packed_frames, epoch selections
    # (test_speed_plan_indexed_filter, _limits)
    wise = replace(auto, epoch_wise_filter={(1, 1): {"max_mean_len": 3}})
    keyed = replace(auto, max_frames={"data": 40})
    packed = replace(auto, max_packed_frames=30)
    for options in (wise, keyed, packed):
        assert resolved_for(PlanInputs(lengths, options, variants=variants)) == "indexed"
    # ... but laplace limiting another key: global (test_speed_plan_indexed_limits)
    for other in (
        {"max_frames": {"data": 40, "classes": 9}},
        {"max_packed_frames": {"classes": 9}},
    ):
        options = replace(auto, **other)  # type: ignore[arg-type]
        assert resolved_for(PlanInputs(lengths, options, variants=variants)) == "global"
    selected = PlanInputs(lengths, auto, variants=variants, selections=selections)
    assert resolved_for(selected) == "indexed"  # epoch selections too
    # a sort key of the source's own with a sorted order (RETURNN's order_lengths): indexed
    # sorts by it, chunked, over files and with a mix too (test_plan_indexed_own_sort_key)
    sorted_auto = replace(auto, ordering="sorted")
    for ordering in ("sorted", "sorted_reverse", "sort_bin_shuffle:.2", "sort_bin_shuffle_x2"):
        own_key = PlanInputs(lengths, replace(auto, ordering=ordering), order_lengths=np.arange(6))
        assert resolved_for(own_key) == "indexed"
        for extra in ({"chunking": 2}, {"distribution": "files"}, {"mix": {"a": 1.0}}):
            files = np.array([0, 3, 6]) if extra.get("distribution") else None
            options = replace(own_key.options, **extra)
            assert resolved_for(replace(own_key, options=options, files=files)) == "indexed"
        # ... and with epoch_wise_filter (which keeps the shortest by the key, as global's)
        filtered = replace(own_key.options, epoch_wise_filter={(1, 1): {"max_mean_len": 4}})
        assert resolved_for(replace(own_key, options=filtered)) == "indexed"
    assert resolved_for(PlanInputs(lengths, sorted_auto)) == "indexed"
    # chunking that leaves the length key unchunked: indexed plans it (its length classes
    # keyed by length and chunk count: test_plan_indexed_unchunked_key)
    chunked = replace(auto, chunking={"classes": (2, 1)}, length_key="data")
    assert resolved_for(PlanInputs(lengths, chunked)) == "indexed"
    planner = make_planner(PlanInputs(lengths, chunked))
    assert planner.options.planning == "indexed" and planner.algorithm == INDEXED_ALGORITHM


@pytest.mark.parametrize("ordering", ["sorted", "random", "sort_bin_shuffle:.3"])
def test_a_chunked_mix_over_files_is_indexed_and_global_names_the_fix(ordering: str) -> None:
    """Global planning refuses a mix over files (it selects a mix's sequences across files) and
    names indexed planning, which plans it chunked too (``files_mix_cut``): ``auto`` resolves
    to it."""
    options = {"ordering": ordering, "distribution": "files", "mix": {"a": 1.0}, "chunking": 4}
    assert PlanOptions(**options).resolved_planning == "indexed"
    with pytest.raises(OptionError, match="use planning='indexed'"):
        PlanOptions(**options, planning="global")


def test_explicit_planning_keeps_its_meaning() -> None:
    with pytest.raises(OptionError, match="planning='indexed': seeding='returnn'"):
        PlanOptions(planning="indexed", seeding="returnn")
    greedy = PlanOptions(planning="global", ordering="laplace:.3")
    assert greedy.resolved_planning == "global" and "planning" not in greedy.to_dict()
    lengths = {"data": np.array([5, 3, 8, 2])}
    assert make_planner(lengths, greedy).algorithm == GLOBAL_ALGORITHM


def legacy_source() -> sl.MemorySource:
    return sl.MemorySource(
        {"data": [np.arange(n, dtype=np.float32)[:, None] for n in LEGACY_LENGTHS]}
    )


def test_a_state_of_the_greedy_default_is_refused_by_name_under_auto() -> None:
    """A state the previous default saved (greedy global, no ``planning`` key), loaded where
    ``planning="auto"`` resolves to indexed: refused naming the field, the saved algorithm and
    the fix; with the fix it resumes."""
    state = json.loads((STATES / "greedy_default_laplace.json").read_text())
    assert "planning" not in state and "plan_algorithm" not in state
    auto = sl.SeqLoader(legacy_source(), **LEGACY_OPTIONS, planning="auto")
    with pytest.raises(ResumeError) as refused:
        auto.load_state_dict(state)
    message = str(refused.value)
    assert "loader state planning" in message
    assert f"plan_algorithm {GLOBAL_ALGORITHM!r}" in message
    assert "Fix: pass planning='global' to resume it" in message
    fixed = sl.SeqLoader(legacy_source(), **LEGACY_OPTIONS, planning="global")
    fixed.load_state_dict(state)
    assert fixed.state_dict() == state  # loaded, not started: as saved
    batches = fixed.epoch(1)
    rest = [batch.seq_indices.tolist() for batch in batches]
    assert rest and fixed.state_dict()["epoch_complete"] is True
    fresh = sl.SeqLoader(legacy_source(), **LEGACY_OPTIONS, planning="global")
    whole = [batch.seq_indices.tolist() for batch in fresh.epoch(1)]
    assert whole[2:] == rest  # the greedy plan resumed after its two saved steps


def test_states_of_auto_name_the_resolved_planning() -> None:
    auto = sl.SeqLoader(legacy_source(), **LEGACY_OPTIONS, planning="auto")
    state = auto.state_dict()
    assert state["planning"] == "indexed" and state["plan_algorithm"] == auto.planner.algorithm
    explicit = sl.SeqLoader(legacy_source(), **LEGACY_OPTIONS, planning="indexed")
    explicit.load_state_dict(state)  # the same plan: the same fingerprint
    greedy = sl.SeqLoader(legacy_source(), **LEGACY_OPTIONS, planning="global")
    with pytest.raises(ResumeError, match="Fix: pass planning='indexed' to resume it"):
        greedy.load_state_dict(state)


def test_global_files_plans_refuse_fixed_random_seed_by_name() -> None:
    """Global planning's files plans draw the file shuffle and each rank's order from seed and
    epoch, so ``fixed_random_seed`` would be ignored: refused by name with both fixes, also
    where ``auto`` resolves to global for what the source declares; without it global files
    plans are planned as before, and ``auto`` (indexed) honours it."""
    fixes = (
        r"fixed_random_seed=3: .*distribution='files'.*planning='indexed'.*drop fixed_random_seed"
    )
    with pytest.raises(OptionError, match=fixes):
        PlanOptions(distribution="files", fixed_random_seed=3, planning="global")
    lengths = {"data": np.array([5, 3, 8, 2, 7, 1]), "classes": np.array([2, 1, 3, 1, 2, 1])}
    files = np.array([0, 2, 4, 6])
    auto = PlanOptions(distribution="files", fixed_random_seed=3, max_frames=40)
    assert make_planner(lengths, auto, files=files).options.planning == "indexed"
    for named in ("data", None):  # the length key unchunked: indexed too (None: the data's)
        unchunked_key = replace(auto, chunking={"classes": (2, 1)}, length_key=named)
        planned = make_planner(PlanInputs(lengths, unchunked_key, files=files))
        assert planned.options.planning == "indexed" and planned.global_plan(1, 2).steps > 0
    greedy = PlanOptions(distribution="files", max_frames=40, planning="global")
    assert make_planner(lengths, greedy, files=files).global_plan(1, 2).steps > 0


#: The audit of what ``planning="auto"`` does with every option set (docs/planning.md, "Which
#: planning plans"): orderings x distribution (``random_seed_offset`` too) x mix x chunking x
#: filters x batch limits, ``seeding="seqloader"`` (``partition_epoch`` and ``uneven`` change
#: nothing of it: checked when the list was made, with the planners built and an epoch planned).
AUDIT_GRID = {
    "ordering": ["default", "reverse", "sorted", "random:2", "laplace:.3", "buckets:3",
                 "sort_bin_shuffle_x2:.3"],
    "distribution": ["shard", "random_seed_offset", "files"],
    "mix": [None, {"a": 0.5}],
    "chunking": [None, "4:2"],
    "filters": [{}, {"max_seq_length": {"data": 18}, "min_seq_length": 2},
                {"epoch_wise_filter": {(1, 1): {"max_mean_len": 8}}},
                {"fixed_random_subset": 0.5}, {"fixed_random_seed": 3}],
    "limits": [{"max_frames": 60}, {"max_frames": {"data": 60}},
               {"max_frames": 60, "batch_cost": "packed"},
               {"max_frames": 6000, "batch_cost": "quadratic:20"},
               {"max_frames": {"*": 6000}, "batch_cost": "quadratic:20"},
               {"max_frames": 60, "max_packed_frames": 50}],
}  # fmt: skip


def test_auto_resolves_every_option_set_to_indexed() -> None:
    """No option set of the grid resolves to global (``seeding="returnn"`` aside) and none is
    refused: the last ones both plannings refused, a mix with ``epoch_wise_filter`` over
    ``files`` or chunked with ``laplace``/``buckets:N``, are planned by indexed planning."""
    keys = list(AUDIT_GRID)
    for combo in itertools.product(*AUDIT_GRID.values()):
        given_ = dict(zip(keys, combo, strict=True))
        opts = {k: v for k, v in given_.items() if k not in ("filters", "limits")}
        opts = {**opts, **given_["filters"], **given_["limits"]}
        assert PlanOptions(**opts).resolved_planning == "indexed", opts


#: chunkings x length keys x the data's keys: which key is the length key, and whether chunked
CHUNK_GRID = {
    "ordering": ["default", "random", "laplace:.3", "buckets:2", "sort_bin_shuffle:.3"],
    "chunking": [{"classes": (2, 1)}, {"data": (4, 2)}, {"text": (4, 2)},
                 {"data": (4, 2), "classes": (2, 1)}, {"*": (4, 2), "classes": (2, 1)}],
    "length_key": [None, "data", "classes"],
    "keys": [("data", "classes"), ("classes", "data"), ("classes", "text")],
}  # fmt: skip


def test_the_resolved_planning_is_what_plans_whatever_is_chunked() -> None:
    """Chunking plans indexed whichever key it chunks (the length key unchunked too: length
    classes keyed by length and chunk count), whether the options say which key is the length
    key (``length_key``, or ``data`` named) or the data's keys do; what is recorded (options,
    fingerprint, loader state) is what plans."""
    rng = np.random.default_rng(5)
    data = rng.integers(1, 12, 30)
    base = {"data": data, "classes": -(-data // 2), "text": data}
    keys = list(CHUNK_GRID)
    for combo in itertools.product(*CHUNK_GRID.values()):
        o = dict(zip(keys, combo, strict=True))
        lengths = {k: base[k] for k in o.pop("keys")}
        try:
            options = PlanOptions(max_frames=40, **o)
            planner = make_planner(lengths, options)
        except OptionError as refused:
            assert "not in the data" in str(refused) or "length_key" in str(refused), o
            continue
        assert planner.algorithm == INDEXED_ALGORITHM, o
        assert options.resolved_planning == "indexed", o  # the options say it
        assert resolved_for(PlanInputs(lengths, options)) == "indexed" == planner.options.planning
        assert planner.options.to_dict().get("planning") == "indexed"
        explicit = make_planner(lengths, replace(options, planning="indexed"))
        assert explicit.fingerprint("src") == planner.fingerprint("src")
        assert planner.global_plan(1, 2).steps == explicit.global_plan(1, 2).steps


def test_the_loader_records_and_resumes_indexed_for_an_unchunked_length_key() -> None:
    """Through the loader: chunking only ``classes`` (the length key ``data`` unchunked) plans
    indexed and records it, ``planning="global"`` still plans it greedily, and an elastic
    resume chain continues it (the resume harness: every chunk once, what each batch holds)."""
    from test_resume import check_chain, loader_factory

    n = 16
    lengths = np.random.default_rng(3).integers(1, 12, n)
    data = [np.full((int(t), 1), i, dtype=np.float32) for i, t in enumerate(lengths)]
    classes = [np.full(-(-int(t) // 2), i, dtype=np.int32) for i, t in enumerate(lengths)]
    source = sl.MemorySource({"data": data, "classes": classes})
    options = {"chunking": {"classes": (2, 1)}, "max_frames": 40, "max_seqs": 3}
    make = loader_factory(source, **options)
    loader = make(0, 1)
    assert loader.planner.algorithm == INDEXED_ALGORITHM
    assert loader.planner.options.planning == "indexed"
    assert loader.state_dict()["planning"] == "indexed"
    greedy = sl.SeqLoader(source, **options, planning="global")
    assert greedy.planner.algorithm == GLOBAL_ALGORITHM
    for batch in loader.epoch(1):  # every chunk whole in data, two classes long at most
        assert batch.lengths["classes"].max() <= 2
        assert set(batch.lengths["data"].tolist()) <= set(lengths.tolist())
    check_chain(make, [2, 3], [3], 1)
