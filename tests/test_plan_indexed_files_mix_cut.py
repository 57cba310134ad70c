"""``mix`` with ``distribution="files"`` and a fixed or random ordering under indexed planning
(``seqloader.plan.indexed.files_mix_cut``; hypothesis, pure numpy): every contract through
``check_plan_contracts`` (exactly once per corpus epoch incl. resume chains W -> W' -> W'' through
JSON, equal steps, a rank's share computed alone, determinism), unchunked and chunked (each chunk
of every slot once, a resumed slot continued from its first undelivered chunk); a piece's slots
on one rank, in the ordering; the golden plans pinned.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from plan_contracts import Units, check_plan_contracts
from seqloader.plan import EpochPlan, PlanOptions, Position
from seqloader.plan.indexed.files_mix import FilesMix
from seqloader.plan.indexed.files_mix_cut import MixCutFiles
from seqloader.plan.indexed.planner import IndexedPlanner
from seqloader.plan.mix import Corpora
from test_plan_indexed import indexed_digest

pytestmark = pytest.mark.filterwarnings("ignore::seqloader.errors.DataWarning")  # tiny rates

ORDERINGS = ["default", "reverse", "sorted", "sorted_reverse", "random", "random:2"]


#: chunked: the sort_bin_shuffle orders too (the same cuts of each rank's slots' chunks)
CHUNKED_ORDERINGS = [*ORDERINGS, "sort_bin_shuffle:.3", "sort_bin_shuffle_x2:2"]


@st.composite
def mixes(draw: st.DrawFn, chunked: bool = False) -> dict:
    """2 corpora of 2-4 files of 0-8 sequences, rates over and under 1, an optional length
    limit, 1-2 sub-epochs, one full epoch, resume chains of 1-3 world sizes in 1..4 (chunked:
    windows of up to 12 frames over lengths of up to 30, several chunks per sequence)."""
    sizes = [draw(st.lists(st.integers(0, 8), min_size=2, max_size=4)) for _ in range(2)]
    assume(all(sum(s) for s in sizes))
    files = np.concatenate([[0], np.cumsum([s for part in sizes for s in part])]).astype(np.int64)
    bounds = np.array([0, sum(sizes[0]), sum(sizes[0]) + sum(sizes[1])], dtype=np.int64)
    lengths = np.random.default_rng(draw(st.integers(0, 99))).integers(1, 31, int(bounds[-1]))
    limit = draw(st.sampled_from([None, 25]))
    keep = np.ones(len(lengths), bool) if limit is None else lengths <= limit
    chunking: dict = {}
    if chunked:
        chunking["chunking"] = draw(st.sampled_from(["8:4", "10:10", "12:5"]))
        chunking["min_chunk_size"] = draw(st.sampled_from([0, 0, 3]))
        keep &= lengths >= chunking["min_chunk_size"]  # shorter: no window kept
    assume(keep[: bounds[1]].any() and keep[bounds[1] :].any())
    options = PlanOptions(
        ordering=draw(st.sampled_from(CHUNKED_ORDERINGS if chunked else ORDERINGS)),
        max_seqs=draw(st.sampled_from([None, 2, 3])),
        max_frames=draw(st.sampled_from([None, 40, 90])),
        max_seq_length=limit,
        partition_epoch=draw(st.integers(1, 2)),
        uneven=draw(st.sampled_from(["split", "pad", "drop"])),
        seed=draw(st.integers(0, 3)),
        mix={"c0": draw(st.sampled_from([0.5, 1.0, 1.5])), "c1": draw(st.sampled_from([1, 2]))},
        distribution="files",
        **chunking,
    )
    corpora = Corpora(("c0", "c1"), bounds)

    def make() -> IndexedPlanner:
        return IndexedPlanner({"data": lengths}, options, corpora=corpora, files=files)

    P = options.partition_epoch
    worlds = [draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)) for _ in range(P)]
    cuts = [draw(st.lists(st.floats(0, 1), min_size=len(w) - 1, max_size=len(w) - 1))
            for w in worlds]  # fmt: skip
    return {"make": make, "files": files, "worlds": worlds, "cuts": cuts}


@settings(max_examples=12, deadline=None)
@given(mixes())
def test_contracts_hold_across_resume_chains(m: dict) -> None:
    """check_plan_contracts on one full epoch (each sub-epoch resumed W -> W' -> W'' through
    JSON, shares computed alone by fresh planners); the planned slots are the mix's selection
    (the global mix's counts per corpus), and without drops every corpus' sequences come once
    per corpus epoch (the mix's own check)."""
    planner: IndexedPlanner = m["make"]()
    assert planner.options.resolved_planning == "indexed"
    assert isinstance(planner.distribution, MixCutFiles)
    mix = planner.mix
    assert isinstance(mix, FilesMix)
    P = planner.options.partition_epoch
    epochs = range(1, P + 1)
    checked = check_plan_contracts(m["make"], m["worlds"], m["cuts"], epochs, workers=())
    slots = Counter((int(s), int(u)) for e in epochs for s, u in zip(*planner.sub_epoch_slots(e)))
    sel = mix.select(0)
    assert slots == Counter(zip(sel.seqs.tolist(), sel.uses.tolist()))
    assume(len(checked.consumed) == P and not checked.refused)
    if planner.options.uneven != "drop":
        got = [checked.consumed[e] for e in epochs]
        seqs = np.concatenate([g.seqs for g in got])
        uses = np.concatenate([g.uses for g in got])
        check = mix.check(range(1), seqs, uses)
        assert check.ok, check.problems


def slots_continue(planner: IndexedPlanner, at: Position, plan: EpochPlan, before: Units) -> None:
    """A resumed segment plans each slot's chunks from its first one not delivered: per
    (sequence, corpus epoch), the chunks planned are consecutive and start where the chunks
    consumed before end (``drop``: the planned ones are a prefix of what is left)."""
    uses = [] if before.uses is None else before.uses.tolist()  # None: nothing consumed
    done = Counter(zip(before.seqs.tolist(), uses, strict=True))
    planned: dict[tuple[int, int], list[int]] = {}
    for r in range(plan.world_size):
        share = plan.rank_share(r, at.steps)  # what is left to run of the segment
        assert share.chunks is not None and share.uses is not None
        real = share.real
        for s, c, u in zip(share.seqs[real], share.chunks[real], share.uses[real], strict=True):
            planned.setdefault((int(s), int(u)), []).append(int(c))
    for slot, chunks in planned.items():
        first = done[slot]
        assert chunks == list(range(first, first + len(chunks))), (at, slot, chunks, first)


@settings(max_examples=10, deadline=None)
@given(mixes(chunked=True))
def test_chunked_contracts_hold_and_a_slot_continues_from_its_first_chunk_left(m: dict) -> None:
    """Chunked: each rank's pieces' slots, in the ordering, expanded into their chunks and cut
    greedily by their windows. check_plan_contracts on one full epoch (each chunk of every
    slot once, resume chains W -> W' -> W'' through JSON, equal steps, shares computed alone,
    determinism, 2 DataLoader workers simulated); a resumed segment continues each slot from
    its first undelivered chunk (a sequence holding two slots, at a rate over 1, continues each
    on its own); the slots are the mix's selection, the unchunked plan's."""
    planner: IndexedPlanner = m["make"]()
    assert planner.options.resolved_planning == "indexed"
    assert isinstance(planner.distribution, MixCutFiles) and planner.chunks is not None
    mix = planner.mix
    assert isinstance(mix, FilesMix)
    P = planner.options.partition_epoch
    epochs = range(1, P + 1)
    checked = check_plan_contracts(
        m["make"], m["worlds"], m["cuts"], epochs, workers=(2,), each_segment=slots_continue
    )
    slots = Counter((int(s), int(u)) for e in epochs for s, u in zip(*planner.sub_epoch_slots(e)))
    sel = mix.select(0)
    assert slots == Counter(zip(sel.seqs.tolist(), sel.uses.tolist()))
    assume(len(checked.consumed) == P and not checked.refused)
    if planner.options.uneven != "drop":  # every chunk of every slot came
        got = [checked.consumed[e] for e in epochs]
        count = Counter(
            (int(s), int(u))
            for g in got
            for s, u in zip(g.seqs, g.uses)  # type: ignore[arg-type]
        )
        chunks = planner.chunks.counts
        want = Counter({k: int(chunks[k[0]]) for k in slots if chunks[k[0]]})
        assert count == want


def test_a_piece_is_on_one_rank_in_the_ordering() -> None:
    """A sub-epoch's pieces are dealt whole ((file, corpus epoch) on one rank); a rank's slots
    are sorted by length under ``sorted``, and ``default`` keeps a piece's stored order."""
    lengths = np.random.default_rng(5).integers(1, 90, 240)
    files = np.arange(0, 241, 12)
    corpora = Corpora(("a", "b"), np.array([0, 120, 240]))
    for ordering in ("sorted", "default"):
        options = PlanOptions(ordering=ordering, max_frames=300, distribution="files",
                              mix={"a": 0.5, "b": 1.5}, uneven="pad")  # fmt: skip
        planner = IndexedPlanner({"data": lengths}, options, corpora=corpora, files=files)
        plan = planner.global_plan(1, 3)
        owner: dict[tuple[int, int], int] = {}
        for r in range(3):
            share = plan.rank_share(r)
            seqs, uses = share.seqs[share.real], share.uses[share.real]
            for key in zip((seqs // 12).tolist(), uses.tolist()):
                assert owner.setdefault(key, r) == r, f"piece {key} on two ranks"
            if ordering == "sorted":
                assert np.all(np.diff(lengths[seqs]) >= 0)
            else:  # pieces one after another, each ascending
                for key in set(zip((seqs // 12).tolist(), uses.tolist())):
                    at = (seqs // 12 == key[0]) & (uses == key[1])
                    assert np.all(np.diff(seqs[at]) == 1)
        assert sum(int(plan.rank_share(r).real.sum()) for r in range(3)) == 60 + 180


FILES_MIX_CUT_CASES: dict[str, dict] = {
    "files mix random W3 split": {
        "options": {"ordering": "random", "max_frames": 1500, "distribution": "files",
                    "mix": {"a": 0.5, "b": 1.5, "c": 1}},
        "files": list(range(0, 301, 10)),
        "world": 3,
        "elastic": (3, 4),
    },
    "files mix sorted partition 2 W2 drop": {
        "options": {"ordering": "sorted", "max_frames": 2000, "partition_epoch": 2,
                    "uneven": "drop", "distribution": "files", "mix": {"a": 2, "c": 0.5}},
        "files": list(range(0, 301, 10)),
        "world": 2,
        "elastic": (2, 3),
        "elastic_again": (1, 1),
    },
    "files mix default W4 pad": {
        "options": {"ordering": "default", "max_seqs": 5, "uneven": "pad",
                    "distribution": "files", "mix": {"b": 2}},
        "files": list(range(0, 301, 10)),
        "world": 4,
    },
    # chunked (added with chunking over a mix of files: refused under every planning before)
    "chunked 90:60 files mix random W3 split": {
        "options": {"ordering": "random", "max_seqs": 5, "max_frames": 900, "chunking": "90:60",
                    "min_chunk_size": 20, "distribution": "files", "mix": {"a": 0.5, "b": 1.5}},
        "files": list(range(0, 301, 10)),
        "world": 3,
        "elastic": (3, 4),
    },
    "chunked 120:120 files mix sorted partition 2 W2 drop": {
        "options": {"ordering": "sorted", "max_frames": 1000, "chunking": "120:120",
                    "partition_epoch": 2, "uneven": "drop", "distribution": "files",
                    "mix": {"a": 2, "c": 0.5}},
        "files": list(range(0, 301, 10)),
        "world": 2,
        "elastic": (2, 3),
        "elastic_again": (1, 1),
    },
    "chunked 100:50 files mix sort_bin_shuffle W4 pad": {
        "options": {"ordering": "sort_bin_shuffle:.3", "max_seqs": 4, "chunking": "100:50",
                    "uneven": "pad", "distribution": "files", "mix": {"b": 2}},
        "files": list(range(0, 301, 10)),
        "world": 4,
        "elastic": (2, 2),
    },
}  # fmt: skip
FILES_MIX_CUT_GOLDEN = {
    "files mix random W3 split": "3249fe1b4e97b62f0cb57f62fa669a3f9faaec8abfde33a483c7220f5b50a986",
    "files mix sorted partition 2 W2 drop": (
        "89c9fc8a830103e30bb772f671a20eba69da64623d05b809edb448e2d59158f8"
    ),
    "files mix default W4 pad": "dfc19f098b9334a69d5368d37bc5c16add1968b3965a6f2c01bf276bc8feeb39",
    "chunked 90:60 files mix random W3 split": (
        "944d12b261379071273e6279f47573f55b772a564f11aa2887185638bad0cbda"
    ),
    "chunked 120:120 files mix sorted partition 2 W2 drop": (
        "3aba8391d0f2eb7b0e0fb54db8f0e581164b58c21baf64cea6761c7bf78a4a34"
    ),
    "chunked 100:50 files mix sort_bin_shuffle W4 pad": (
        "821e931868e09aee7105fbbdcfe33b2a2ff4963a54e5ae04ba98f2bb98ed6ec6"
    ),
}


def test_files_mix_cut_golden_plans_are_pinned() -> None:
    """Added with fixed and random orders over a mix of files, the chunked ones with chunking
    over it (each refused before under every planning: no earlier plan moved); bump
    ``INDEXED_ALGORITHM`` and record anew if one changes."""
    got = {name: indexed_digest(case) for name, case in FILES_MIX_CUT_CASES.items()}
    assert got == FILES_MIX_CUT_GOLDEN, f"record: {got}"
