"""``mix`` under ``distribution="shard"`` with ``random`` or a fixed ordering under indexed planning
(``seqloader.plan.indexed.mix_cuts``; hypothesis, pure numpy).

A sub-epoch is the mix's (``IndexedMix``: each corpus' stream part, every corpus epoch once), its
slots in the ordering (``random``: the mix's keyed order; ``default``: the corpus' own order,
ascending sequence with a sequence's corpus epochs adjacent; ``reverse``: that backwards;
``sorted``/``sorted_reverse``: by length, stably), cut greedily by global planning's ``Batcher``.
Every contract holds (``check_plan_contracts``: per-corpus exactly once over corpus epochs, equal
steps, a rank's share computed alone, determinism, resume chains ``W -> W' -> W''``).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plan_contracts import check_plan_contracts
from seqloader.errors import OptionError
from seqloader.plan import PlanOptions
from seqloader.plan.epochs import EpochIndex, batch_limits
from seqloader.plan.greedy.planner import Planner
from seqloader.plan.indexed.mix import IndexedMix
from seqloader.plan.indexed.planner import IndexedPlanner
from seqloader.plan.limits import Batcher
from seqloader.plan.mix import Corpora
from test_plan_indexed import indexed_digest

pytestmark = pytest.mark.filterwarnings("ignore::seqloader.errors.DataWarning")  # tiny rates

ORDERINGS = ["random", "random:2", "default", "reverse", "sorted", "sorted_reverse"]


@st.composite
def cases(draw: st.DrawFn, chunked: bool = False) -> dict:
    sizes = draw(st.lists(st.integers(1, 14), min_size=1, max_size=3))
    names = tuple(f"c{i}" for i in range(len(sizes)))
    lengths = np.array(
        draw(st.lists(st.integers(1, 20), min_size=sum(sizes), max_size=sum(sizes))), np.int64
    )
    rates = {n: draw(st.sampled_from([0.5, 1.0, 1.5, "2/3", 2])) for n in names}
    options = {
        "ordering": draw(st.sampled_from(ORDERINGS)),
        "max_seqs": draw(st.sampled_from([None, 2, 4])),
        "max_frames": draw(st.sampled_from([None, 30, 60])),
        "partition_epoch": draw(st.integers(1, 2)),
        "uneven": draw(st.sampled_from(["split", "pad", "drop"])),
        "seed": draw(st.integers(0, 3)),
        "mix": rates,
    }
    if chunked:  # windows of up to 7 frames: several chunks per sequence, short last ones
        options["chunking"] = draw(st.sampled_from(["4:2", "5:5", "7:3"]))
        options["min_chunk_size"] = draw(st.sampled_from([0, 0, 2]))
    bounds = np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64)
    worlds = draw(st.lists(st.integers(1, 4), min_size=2, max_size=3))
    return {"lengths": lengths, "corpora": Corpora(names, bounds), "options": options,
            "worlds": worlds}  # fmt: skip


def planner(case: dict, **changes: object) -> IndexedPlanner:
    options = PlanOptions(**{**case["options"], **changes})
    assert options.resolved_planning == "indexed"
    return IndexedPlanner({"data": case["lengths"]}, options, corpora=case["corpora"])


@settings(max_examples=12, deadline=None)
@given(cases())
def test_batches_are_greedy_cuts_of_the_mix_in_the_ordering_and_every_contract_holds(
    case: dict,
) -> None:
    """On one rank a sub-epoch's slots are the mix's sub-epoch (the ``IndexedMix`` counts per
    corpus), in the ordering, and its bounds the greedy ``Batcher``'s on that order; the
    contracts hold on the chain ``worlds``."""
    indexed = planner(case)
    mix, o = indexed.mix, indexed.options
    assert isinstance(mix, IndexedMix)
    lengths = case["lengths"]
    limits = batch_limits(o, ["data"], "data")
    for epoch in range(1, o.partition_epoch + 1):
        b = indexed.global_plan(epoch, 1).batches
        assert b.uses is not None and b.real.all()
        seqs, uses = b.seqs, b.uses.astype(np.int64)
        ep = EpochIndex(epoch, o.partition_epoch)
        want = mix.part(ep.full_epoch, ep.part, o.partition_epoch)[1].sum(axis=0)
        np.testing.assert_array_equal(case["corpora"].counts(seqs), want)
        kind = o.parsed_ordering.kind
        key = seqs * 1000 + uses  # the corpus' own order: ascending sequence, then corpus epoch
        if kind == "default":
            assert (np.diff(key) > 0).all()
        elif kind == "reverse":
            assert (np.diff(key) < 0).all()
        elif kind in ("sorted", "sorted_reverse"):
            step = np.diff(lengths[seqs]) * (1 if kind == "sorted" else -1)
            assert (step >= 0).all()
            assert (np.diff(key)[step == 0] > 0).all()  # stable: ties in the corpus' order
        else:  # the mix's keyed order of the sub-epoch's slots
            draw = mix.draw(ep.full_epoch, ep.part, o.partition_epoch)
            got = draw.slots(np.zeros(len(seqs), np.int64), np.arange(len(seqs)))
            np.testing.assert_array_equal(got[0], seqs)
            np.testing.assert_array_equal(got[1], uses)
        np.testing.assert_array_equal(b.bounds, Batcher(limits, {"data": lengths}).bounds(seqs))
    cut = [0.5, 1][: len(case["worlds"]) - 1]
    check_plan_contracts(lambda: planner(case), case["worlds"], cut, workers=(2,))


@settings(max_examples=8, deadline=None)
@given(cases(chunked=True))
def test_chunked_batches_cut_the_unchunked_slots_chunks_and_every_contract_holds(
    case: dict,
) -> None:
    """Chunked: on one rank a sub-epoch's slots are the unchunked plan's (the same mix
    selection in the same order), each expanded into its chunks (consecutive, carrying its
    corpus epoch), and its bounds the greedy ``Batcher``'s over the chunks' windows (global
    planning's chunked batches of a mix's slots); the contracts hold on the chain, every chunk
    once per corpus epoch."""
    o = PlanOptions(**case["options"])
    try:
        indexed = planner(case)
    except OptionError as refused:  # a corpus whose sequences all lack a chunk: refused alike
        assert "no admitted sequences" in str(refused)
        with pytest.raises(OptionError, match="no admitted sequences"):
            Planner({"data": case["lengths"]}, replace(o, planning="global"),
                    corpora=case["corpora"])  # fmt: skip
        return
    size, step = o.chunking["*"]  # type: ignore[index]
    limits = batch_limits(o, ["data"], "data")
    lengths = case["lengths"]
    for epoch in range(1, o.partition_epoch + 1):
        b = indexed.global_plan(epoch, 1).batches
        assert b.uses is not None and b.chunks is not None and b.real.all()
        window = np.minimum(lengths[b.seqs] - b.chunks * step, size)
        np.testing.assert_array_equal(b.bounds, Batcher(limits, {"data": lengths}).bounds_of(
            {"data": window}))  # fmt: skip
        if o.min_chunk_size:  # sequences without a chunk are filtered: another admission
            continue
        whole = planner(case, chunking=None, min_chunk_size=0).global_plan(epoch, 1).batches
        counts = -(-lengths[whole.seqs] // step)  # a window at every start below the length
        np.testing.assert_array_equal(b.seqs, np.repeat(whole.seqs, counts))
        np.testing.assert_array_equal(b.uses, np.repeat(whole.uses, counts))
        starts = np.repeat(np.cumsum(counts) - counts, counts)
        np.testing.assert_array_equal(b.chunks, np.arange(len(b.seqs)) - starts)
    cut = [0.5, 1][: len(case["worlds"]) - 1]
    check_plan_contracts(lambda: planner(case), case["worlds"], cut, workers=(2,))


MIX_CUT_CASES: dict[str, dict] = {
    "mix random W3 split": {
        "options": {"ordering": "random", "max_seqs": 6, "max_frames": 1500,
                    "mix": {"a": 0.5, "b": 1.5}},
        "world": 3,
    },
    "mix default partition 2 W2 drop": {
        "options": {"ordering": "default", "max_frames": 2000, "partition_epoch": 2,
                    "uneven": "drop", "mix": {"a": 2, "c": "1/3"}},
        "world": 2,
    },
    "mix sorted_reverse W4 pad": {
        "options": {"ordering": "sorted_reverse", "max_frames": 1800, "uneven": "pad",
                    "mix": {"b": 0.7}},
        "world": 4,
    },
    "chunked 90:60 mix random partition 2 W3 split": {
        "options": {"ordering": "random", "max_seqs": 5, "max_frames": 900, "chunking": "90:60",
                    "min_chunk_size": 20, "partition_epoch": 2, "mix": {"a": 0.5, "b": 1.5}},
        "world": 3,
    },
    "chunked 120:120 mix sorted W2 pad": {
        "options": {"ordering": "sorted", "max_frames": 1000, "chunking": "120:120",
                    "uneven": "pad", "mix": {"a": 2, "c": "1/3"}},
        "world": 2,
    },
    # laplace and buckets:N with chunking and a mix (plan/indexed/mix_chunks.py)
    "chunked 90:60 mix laplace:.10 partition 2 W3 split": {
        "options": {"ordering": "laplace:.10", "max_seqs": 5, "max_frames": 900,
                    "chunking": "90:60", "min_chunk_size": 20, "partition_epoch": 2,
                    "mix": {"a": 0.5, "b": 1.5}},
        "world": 3,
    },
    "chunked 120:120 mix buckets:3 W2 pad": {
        "options": {"ordering": "buckets:3", "max_frames": 1000, "chunking": "120:120",
                    "uneven": "pad", "mix": {"a": 2, "c": "1/3"}},
        "world": 2,
    },
}  # fmt: skip
MIX_CUT_GOLDEN = {
    "mix random W3 split": "251bbc4023b9687a1f223d0dc133da1c4053c2a444851f5e10577c367f778d81",
    "mix default partition 2 W2 drop": (
        "25af239da1c797e6a9dd7ffff74ae224e90cbc16f4e7b576769c8964c75741d6"
    ),
    "mix sorted_reverse W4 pad": (
        "af6abe1728a74b09bc0d3b74d2a4ef022d388c1d28a13e809d6363dc5c72828f"
    ),
    # chunked (added with chunking and a mix under indexed planning)
    "chunked 90:60 mix random partition 2 W3 split": (
        "c6b88ede5b4be6fd688bc150ee448157e716389ff98f894209b38f1a4192ccdb"
    ),
    "chunked 120:120 mix sorted W2 pad": (
        "a87e5c0d92329a55b7d18f61b21105032beaeae933a14ace87cfff542e6b0066"
    ),
    "chunked 90:60 mix laplace:.10 partition 2 W3 split": (
        "0e052813b349c1deb56c9716c08199db4d8ea3301cb9fc408e29a603d0e874c2"
    ),
    "chunked 120:120 mix buckets:3 W2 pad": (
        "e3cd0ad7eb74d2cf64d05030c51f795d22cdb58ca7b8631b795311d600f84ca0"
    ),
}


def test_mix_cut_golden_plans_are_pinned() -> None:
    """Added with fixed and random orders under a mix (refused before under indexed planning:
    no plan of the current ``INDEXED_ALGORITHM`` moved); bump it and record anew if one
    changes."""
    got = {name: indexed_digest(case) for name, case in MIX_CUT_CASES.items()}
    assert got == MIX_CUT_GOLDEN, f"record: {got}"


@settings(max_examples=15, deadline=None)
@given(
    st.lists(st.integers(1, 30), min_size=1, max_size=3),
    st.lists(st.integers(0, 9), min_size=0, max_size=4),
    st.data(),
)
def test_part_slots_list_each_streams_slots_bucket_after_bucket(sizes, edges, data) -> None:
    """``part_slots`` (every stream's segments laid out as arrays, one gather) lists what each
    (bucket, corpus) stream gives at its positions (``IndexedMix.stream_slots``, one stream at
    a time), in its documented order: bucket after bucket, a bucket's whole corpus epochs
    (corpus, then corpus epoch) before its drawn parts (the same order), each in stream order
    (whole ones: the index's). The chunked mix's classes read that order as their lists."""
    from seqloader.plan.indexed.histogram import build_bucket_index
    from seqloader.plan.indexed.mix_cuts import part_slots

    lengths = np.array(
        data.draw(st.lists(st.integers(1, 10), min_size=sum(sizes), max_size=sum(sizes))), np.int64
    )
    names = tuple(f"c{i}" for i in range(len(sizes)))
    rates = {n: data.draw(st.sampled_from([0.5, 1, 1.5, "2/3", 2, 3.5])) for n in names}
    index = build_bucket_index(lengths, np.unique(np.array(edges, np.int64)))
    corpora = Corpora(names, np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64))
    mix = IndexedMix(data.draw(st.integers(0, 5)), rates, corpora, index, lengths)
    parts = data.draw(st.integers(1, 3))
    f, part = data.draw(st.integers(0, 3)), data.draw(st.integers(0, parts - 1))
    lo, count = mix.part(f, part, parts)
    want_seqs, want_uses, cache = [], [], {}
    for b in range(count.shape[0]):
        drawn_seqs, drawn_uses = [], []
        for c in np.flatnonzero(count[b]).tolist():
            n = int(mix.counts[b, c])
            stream = np.arange(lo[b, c], lo[b, c] + count[b, c], dtype=np.int64)
            for k in np.unique(stream // n).tolist():
                at = stream[stream // n == k]
                if len(at) == n:  # whole: the index's order
                    base = int(index.starts[b]) + int(mix.offsets[b, c])
                    want_seqs.append(np.asarray(index.members[base : base + n], np.int64))
                    want_uses.append(np.full(n, k))
                else:
                    s, u = mix.stream_slots(b, c, at, cache)
                    drawn_seqs.append(s)
                    drawn_uses.append(u)
        want_seqs += drawn_seqs
        want_uses += drawn_uses
    seqs, uses = part_slots(mix, lo, count)
    assert seqs.dtype == np.int64 and uses.dtype == np.int32
    assert seqs.tolist() == np.concatenate([np.zeros(0, np.int64), *want_seqs]).tolist()
    assert uses.tolist() == np.concatenate([np.zeros(0, np.int64), *want_uses]).tolist()


@settings(max_examples=25, deadline=None)
@given(
    st.lists(st.integers(1, 30), min_size=1, max_size=3),
    st.lists(st.integers(0, 9), min_size=0, max_size=3),
    st.data(),
)
def test_a_mixed_buckets_keyed_order_is_a_bijection_over_exactly_its_slots(
    sizes, edges, data
) -> None:
    """A mixed sub-epoch's bucket lists (``MixDraw``: one keyed bijection over exactly the
    bucket's slots; a whole corpus epoch read in stream order, a part drawn by its stream) hold
    every slot of ``part_slots``' listing once, the same slots position by position as in one
    large call; another seed or full epoch orders them otherwise."""
    from collections import Counter

    from seqloader.plan.indexed import mix as mix_module
    from seqloader.plan.indexed.histogram import build_bucket_index
    from seqloader.plan.indexed.mix_cuts import part_slots

    lengths = np.array(
        data.draw(st.lists(st.integers(1, 10), min_size=sum(sizes), max_size=sum(sizes))), np.int64
    )
    names = tuple(f"c{i}" for i in range(len(sizes)))
    rates = {n: data.draw(st.sampled_from([0.5, 1, 1.5, "2/3", 2])) for n in names}
    index = build_bucket_index(lengths, np.unique(np.array(edges, np.int64)))
    corpora = Corpora(names, np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64))
    seed, parts = data.draw(st.integers(0, 5)), data.draw(st.integers(1, 3))
    f, part = data.draw(st.integers(0, 3)), data.draw(st.integers(0, parts - 1))
    mix = IndexedMix(seed, rates, corpora, index, lengths)
    draw = mix.draw(f, part, parts)
    lo, count = mix.part(f, part, parts)
    want_seqs, want_uses = part_slots(mix, lo, count)
    got = []
    for b in range(count.shape[0]):
        pos = np.arange(int(count[b].sum()), dtype=np.int64)
        one = [draw.bucket_slots(b, pos[i : i + 1]) for i in range(len(pos))]  # one at a time
        with pytest.MonkeyPatch.context() as patch:
            patch.setattr(mix_module, "BIG", 1)  # all at once: the large calls' pieces
            seqs, uses = draw.bucket_slots(b, pos)
        assert [int(s[0]) for s, _ in one] == seqs.tolist()
        assert [int(u[0]) for _, u in one] == uses.tolist()
        got += list(zip(seqs.tolist(), uses.tolist()))
    assert Counter(got) == Counter(zip(want_seqs.tolist(), want_uses.tolist()))
    whole = Corpora(("all",), np.array([0, len(lengths)], np.int64))
    one_bucket = build_bucket_index(lengths, np.zeros(0, np.int64))
    if len(lengths) >= 8:  # 8! orders: another key draws the same one by chance only
        at = np.arange(len(lengths), dtype=np.int64)
        ours = IndexedMix(seed, {"all": 1}, whole, one_bucket, lengths).draw(f, 0, 1)
        other = IndexedMix(seed + 1, {"all": 1}, whole, one_bucket, lengths).draw(f, 0, 1)
        later = IndexedMix(seed, {"all": 1}, whole, one_bucket, lengths).draw(f + 1, 0, 1)
        mine = ours.bucket_slots(0, at)[0].tolist()
        assert sorted(mine) == list(range(len(lengths)))
        assert other.bucket_slots(0, at)[0].tolist() != mine
        assert later.bucket_slots(0, at)[0].tolist() != mine
