"""``mix`` with ``distribution="files"`` under ``planning="indexed"``
(seqloader.plan.indexed.files_mix), chunked or not, on the pure planner: every contract through
``check_plan_contracts`` (exactly once per corpus epoch incl. resume chains W -> W' -> W'' through
JSON, equal steps, a rank's share computed alone, determinism, simulate over worker counts);
each full epoch's slots are the global mix's counts per corpus and each rank reads whole pieces
of files; progress from counts; refusals by name (hypothesis; no torch, no I/O).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from plan_contracts import check_plan_contracts
from seqloader.errors import OptionError
from seqloader.plan import PlanOptions
from seqloader.plan.files import files_read
from seqloader.plan.indexed.files_mix import FilesMix
from seqloader.plan.indexed.planner import IndexedPlanner
from seqloader.plan.mix import Corpora, stream_span

pytestmark = pytest.mark.filterwarnings("ignore::seqloader.errors.DataWarning")  # tiny rates

RATES = [0.25, 0.5, 0.7, 1.0, 1.3, 2.0, 2.5, "1/3"]


@st.composite
def mixes(draw: st.DrawFn, uneven: tuple[str, ...] = ("split", "pad", "drop")) -> dict:
    """2-3 corpora of 2-6 files each (files of 0-25 sequences: empty ones too), rates, an
    optional length limit (files whose sequences are all filtered), chunking or not, 1-3
    sub-epochs, and resume chains of 1-3 world sizes in 1..5 per sub-epoch of 1-2 full epochs."""
    n_corpora = draw(st.integers(2, 3))
    names = [f"c{i}" for i in range(n_corpora)]
    file_sizes = [
        draw(st.lists(st.integers(0, 25), min_size=2, max_size=6)) for _ in range(n_corpora)
    ]
    for sizes in file_sizes:
        assume(sum(sizes) > 0)
    files = np.concatenate([[0], np.cumsum([s for sizes in file_sizes for s in sizes])])
    bounds = np.concatenate([[0], np.cumsum([sum(s) for s in file_sizes])]).astype(np.int64)
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    lengths = rng.integers(1, 61, int(bounds[-1])).astype(np.int64)
    limit = draw(st.sampled_from([None, 45]))
    keep = np.ones(len(lengths), bool) if limit is None else lengths <= limit
    assume(all(keep[bounds[c] : bounds[c + 1]].any() for c in range(n_corpora)))
    options = PlanOptions(
        ordering=draw(st.sampled_from(["buckets:1", "buckets:3", "laplace", "laplace:.4"])),
        max_seqs=draw(st.one_of(st.none(), st.integers(1, 6))),
        max_frames=draw(st.one_of(st.none(), st.integers(60, 240))),
        max_seq_length=limit,
        partition_epoch=draw(st.integers(1, 3)),
        uneven=draw(st.sampled_from(uneven)),
        seed=draw(st.integers(0, 3)),
        mix={n: draw(st.sampled_from(RATES)) for n in names if draw(st.booleans())},
        chunking=draw(st.sampled_from([None, None, "40:25"])),  # chunks of the slots
        min_chunk_size=draw(st.sampled_from([0, 5])),
        distribution="files",
        planning="indexed",
    )
    corpora = Corpora(tuple(names), bounds)

    def make() -> IndexedPlanner:
        return IndexedPlanner({"data": lengths}, options, corpora=corpora, files=files)

    epochs = draw(st.integers(1, 2)) * options.partition_epoch  # whole full epochs
    worlds = [draw(st.lists(st.integers(1, 5), min_size=1, max_size=3)) for _ in range(epochs)]
    cuts = [
        draw(
            st.lists(st.floats(0, 1) | st.integers(0, 3), min_size=len(w) - 1, max_size=len(w) - 1)
        )
        for w in worlds
    ]
    return {"make": make, "lengths": lengths, "files": files, "epochs": epochs,
            "worlds": worlds, "cuts": cuts}  # fmt: skip


# 30 examples (was 60) draw every chain length and world-size chain length the 60 drew
@settings(max_examples=30, deadline=None)
@given(mixes())
def test_contracts_hold_across_resume_chains(m: dict) -> None:
    """check_plan_contracts on 1-2 full epochs (each sub-epoch resumed W -> W' -> W'' through
    JSON, shares computed alone by fresh planners, simulate over workers); without drops the
    consumed slots of the full epochs are, per corpus, every sequence exactly once per corpus
    epoch (the global mix's check) and the full epochs' multisets are the mix's selections,
    whose per-corpus counts are the global mix's floor arithmetic."""
    planner: IndexedPlanner = m["make"]()
    mix = planner.mix
    assert isinstance(mix, FilesMix)
    epochs = range(1, m["epochs"] + 1)
    checked = check_plan_contracts(m["make"], m["worlds"], m["cuts"], epochs)
    refused = set(checked.refused)
    assume(len(checked.consumed) == len(epochs))  # a world size refused before a step
    P = planner.options.partition_epoch
    full = m["epochs"] // P
    got = [checked.consumed[e] for e in epochs]
    firsts = [g.take(g.chunks == 0) if g.chunks is not None else g for g in got]  # a use each
    seqs = np.concatenate([g.seqs for g in firsts])
    uses = np.concatenate([g.uses for g in firsts])
    slots = [planner.sub_epoch_slots(e) for e in epochs]  # every slot planned
    for f in range(full):
        sel = mix.select(f)
        planned = Counter(
            (int(s), int(u))
            for e in range(f * P + 1, (f + 1) * P + 1)
            for s, u in zip(*slots[e - 1])
        )
        assert planned == Counter(zip(sel.seqs.tolist(), sel.uses.tolist()))
        by_corpus = mix.corpora.counts(sel.seqs).tolist()
        spans = [stream_span(f, r, n) for r, n in zip(mix.rates, mix.sizes)]
        assert by_corpus == [b - a for a, b in spans] == list(mix.epoch_counts(f))
    if not refused and planner.options.uneven != "drop":
        check = mix.check(range(full), seqs, uses)
        assert check.ok, check.problems
        assert len(seqs) == sum(sum(mix.epoch_counts(f)) for f in range(full))


@settings(max_examples=40, deadline=None)
@given(mixes(uneven=("split", "pad")), st.integers(1, 5))
def test_a_rank_reads_whole_pieces_and_only_its_own(m: dict, world: int) -> None:
    """Each sub-epoch's pieces go to ranks whole: a (file, corpus epoch) pair's slots are on one
    rank (LPT over pieces, as files over ranks), and a rank's files are those of its pieces."""
    planner: IndexedPlanner = m["make"]()
    try:
        planner.check_world(world)
    except OptionError:
        return
    for epoch in range(1, planner.options.partition_epoch + 1):
        plan = planner.global_plan(epoch, world)
        owner: dict[tuple[int, int], int] = {}
        for r in range(world):
            share = plan.rank_share(r)
            assert share.uses is not None
            real = share.real
            file = np.searchsorted(m["files"], share.seqs[real], side="right") - 1
            for key in set(zip(file.tolist(), share.uses[real].tolist())):
                assert owner.setdefault(key, r) == r, f"piece {key} on two ranks"
            read = files_read(m["files"], share.seqs[real])
            assert set(read.tolist()) == set(file.tolist())


@settings(max_examples=30, deadline=None)
@given(mixes())
def test_report_progress_comes_from_counts(m: dict) -> None:
    """corpus_plan (the report's planned slots and progress) equals counting the sub-epoch's
    slots; at a full epoch's end the progress is the span's end over the corpus' size."""
    planner: IndexedPlanner = m["make"]()
    mix = planner.mix
    assert isinstance(mix, FilesMix)
    P = planner.options.partition_epoch
    done = np.zeros(len(mix.sizes), dtype=np.int64)
    for epoch in range(1, P + 1):
        counted = mix.corpora.counts(planner.sub_epoch_slots(epoch)[0])
        done += counted
        for c, (name, slots_, progress) in enumerate(planner.corpus_plan(epoch)):
            assert name == mix.corpora.names[c] and slots_ == counted[c]
            assert progress is not None and progress.used == done[c]
    for c, (_, _, progress) in enumerate(planner.corpus_plan(P)):
        _, end = stream_span(0, mix.rates[c], mix.sizes[c])
        assert progress is not None and progress.corpus_epochs_done == end / mix.sizes[c]


def test_deterministic_keyed_by_seed_and_a_corpus_stream_kept_when_another_is_reweighted():
    lengths = np.random.default_rng(0).integers(1, 200, 600)
    files = np.arange(0, 601, 20)
    corpora = Corpora(("a", "b"), np.array([0, 300, 600]))

    def planner(seed: int, mix: dict) -> IndexedPlanner:
        options = PlanOptions(ordering="laplace", max_frames=2000, distribution="files",
                              planning="indexed", mix=mix, seed=seed)  # fmt: skip
        return IndexedPlanner({"data": lengths}, options, corpora=corpora, files=files)

    def share(p: IndexedPlanner, epoch: int) -> list:
        s = p.global_plan(epoch, 3).rank_share(1)
        return list(zip(s.seqs.tolist(), s.uses.tolist()))

    a = planner(1, {"a": 0.7, "b": 2})
    assert share(a, 2) == share(planner(1, {"a": 0.7, "b": 2}), 2)
    assert share(a, 2) != share(planner(2, {"a": 0.7, "b": 2}), 2)
    assert share(a, 1) != share(a, 2)

    def a_part(p: IndexedPlanner, f: int) -> list:
        sel = p.mix.select(f)
        return sorted(zip(sel.seqs[sel.seqs < 300].tolist(), sel.uses[sel.seqs < 300].tolist()))

    b = planner(1, {"a": 0.7, "b": 3})
    assert all(a_part(a, f) == a_part(b, f) for f in range(3))


@pytest.mark.parametrize(
    "kept", [{"ordering": "buckets:2:2"}, {"ordering": "laplace:.3", "fixed_random_seed": 3}]
)
def test_a_planner_reused_across_full_epochs_plans_each_full_epochs_pieces(kept: dict) -> None:
    """Where the draws are kept across full epochs (``buckets:N:K``, ``fixed_random_seed``) the
    mix's file pieces still change every full epoch: one planner that planned full epoch 1
    plans full epoch 2 as a fresh planner does (a resume's), and the two full epochs deliver
    the half-rate corpus' two halves, every sequence once (its kept units and segments were
    keyed by the seed epoch alone: epoch 2 replanned epoch 1's pieces)."""
    lengths = (np.arange(60, dtype=np.int64) * 7919 + 17) % 40 + 1
    files, corpora = np.arange(0, 61, 5), Corpora(("a", "b"), np.array([0, 30, 60]))
    options = PlanOptions(max_seqs=3, distribution="files", mix={"a": 0.5, "b": 1.0}, seed=1,
                          planning="indexed", **kept)  # fmt: skip

    def make() -> IndexedPlanner:
        return IndexedPlanner({"data": lengths}, options, corpora=corpora, files=files)

    checked = check_plan_contracts(make, [2, 3], [0.5], [1, 2])
    seqs = np.concatenate([checked.consumed[e].seqs for e in (1, 2)])
    uses = np.concatenate([checked.consumed[e].uses for e in (1, 2)])
    check = make().mix.check(range(2), seqs, uses)
    assert check.ok, check.problems


def test_refused_by_name() -> None:
    """Global planning keeps refusing mix over files (naming planning='indexed' as the fix);
    chunking with a mix is taken, sharded and over files; a corpus bound inside a file is
    refused naming the corpora and the fix."""
    with pytest.raises(OptionError, match=r"not supported with distribution='files'.*'indexed'"):
        PlanOptions(mix={"a": 1.0}, distribution="files", planning="global")
    assert PlanOptions(mix={"a": 1.0}, distribution="files").resolved_planning == "indexed"
    PlanOptions(ordering="laplace", mix={"a": 1.0}, planning="indexed", chunking="10:5")
    PlanOptions(ordering="laplace", mix={"a": 1.0}, distribution="files", planning="indexed",
                chunking="10:5")  # fmt: skip
    options = PlanOptions(ordering="laplace", mix={"a": 2}, distribution="files",
                          planning="indexed")  # fmt: skip
    corpora = Corpora(("a", "b"), np.array([0, 15, 30]))
    with pytest.raises(
        OptionError, match=r"in x\.hdf corpora 'a' and 'b' meet inside a file .* Fix: give"
    ):
        IndexedPlanner({"data": np.arange(1, 31)}, options, corpora=corpora,
                       files=[0, 10, 20, 30], origin="x.hdf")  # fmt: skip
