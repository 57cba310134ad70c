"""Exact and elastic resume of ``SeqLoader`` (C5), with ranks simulated in one process.

One generic harness (in the spirit of torchdata's ``run_test_save_load_state``): run the loaders of
every rank in lockstep, stop after some steps, take the state (equal on all ranks, JSON round trip),
resume in fresh loaders — maybe with another world size, maybe twice — and compare with the
uninterrupted run: exactly once per epoch, equal steps, and with the same world size the very same
batches (indices, tags, masks, lengths and tensor bytes). The harness runs over plan options and
corpora drawn by hypothesis (``num_workers=0``) and over DataLoader worker settings × interrupt
points (parametrized).

To cover a new ordering, add it to ``conftest.ORDERINGS``; a new plan option, one line in
``OPTION_STRATEGIES``; a new kind of corpus (e.g. several mixed), one line in ``SOURCES``.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable
from functools import cache
from pathlib import Path

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import seqloader as sl
from conftest import (
    MIX_ORDERINGS,
    ORDERINGS,
    BatchRecord,
    batch_record,
    check_rows,
    children_since,
    describe,
    index_corpus,
    settled_children,
)
from seqloader.errors import ResumeError
from seqloader.plan import Planner

Record = tuple[int, int, tuple[BatchRecord, ...]]  # epoch, step, every rank's batch
MakeLoader = Callable[[int, int], sl.SeqLoader]  # (rank, world_size) -> loader


def corpus(n: int, seed: int = 0) -> sl.MemorySource:
    """An index corpus of sequences of 1..20 frames (so ``max_frames >= 20`` fits them all)."""
    return index_corpus(n, seed, max_len=20, dim=1)


def record(batch: sl.Batch) -> BatchRecord:
    """The batch as a record; in a chunked plan a unit is a chunk, so ``seqs`` holds
    ``(sequence, chunk)`` pairs."""
    check_rows(batch)  # content matches the sequences the batch claims
    rec = batch_record(batch)
    if batch.chunks is None:
        return rec
    return rec._replace(seqs=tuple(zip(rec.seqs, batch.chunks.tolist())))


def consume(
    loaders: list[sl.SeqLoader],
    first_epoch: int,
    last_epoch: int,
    limit: int | None = None,
    enter_next_epoch: bool = False,
) -> list[Record]:
    """Lockstep steps of all ranks over epochs ``first..last``, at most ``limit`` of them. With
    ``enter_next_epoch``, stopping right at an epoch's end first starts the next epoch (state at
    its step 0). Asserts equal steps: all ranks run out together."""
    out: list[Record] = []
    for epoch in range(first_epoch, last_epoch + 1):
        iters = [ld.epoch(epoch) for ld in loaders]
        while True:
            if limit is not None and len(out) == limit:
                at_end = loaders[0].state_dict()["epoch_complete"]
                if enter_next_epoch and epoch < last_epoch and at_end:
                    for ld in loaders:
                        ld.epoch(epoch + 1)
                return out
            got = [next(it, None) for it in iters]
            if all(b is None for b in got):
                break
            assert all(b is not None for b in got), f"epoch {epoch}: ranks ran out unequally"
            assert len({(b.epoch, b.step) for b in got}) == 1
            out.append((epoch, got[0].step, tuple(record(b) for b in got)))
    return out


def run_all(make: MakeLoader, world: int, last_epoch: int) -> list[Record]:
    """The uninterrupted run of ``world`` ranks over epochs ``1..last_epoch``."""
    loaders = [make(r, world) for r in range(world)]
    try:
        return consume(loaders, 1, last_epoch)
    finally:
        for ld in loaders:
            ld.close()


def real_by_epoch(records: list[Record]) -> dict[int, list]:
    """Per epoch the real units delivered: sequence indices, or (sequence, chunk) pairs."""
    out: dict[int, list] = {}
    for epoch, _, ranks in records:
        for batch in ranks:
            out.setdefault(epoch, []).extend(u for u, m in zip(batch.seqs, batch.mask) if m)
    return out


def planned_units(planner: Planner, epoch: int) -> list:
    """The sub-epoch's units as ``real_by_epoch`` names them."""
    if planner.chunks is None:
        return planner.sub_epoch_order(epoch).tolist()  # a mix can plan a sequence twice
    units = planner.sub_epoch_units(epoch)
    return list(zip(units.seqs.tolist(), units.chunks.tolist()))


def take_state(loaders: list[sl.SeqLoader]) -> dict:
    states = [ld.state_dict() for ld in loaders]
    assert all(s == states[0] for s in states), "ranks disagree on the state"
    restored = json.loads(json.dumps(states[0]))
    assert restored == states[0]
    return restored


def run_chain(
    make: MakeLoader,
    worlds: list[int],
    cuts: list[int],
    last_epoch: int,
    enter_next_epoch: bool = False,
) -> tuple[list[list[Record]], list[dict]]:
    """Stage i runs ``worlds[i]`` ranks for ``cuts[i]`` steps (the last stage to the end), saves
    the state; stage i+1 resumes from it in fresh loaders. Returns records and states per stage."""
    stages: list[list[Record]] = []
    states: list[dict] = []
    state: dict | None = None
    for i, world in enumerate(worlds):
        loaders = [make(r, world) for r in range(world)]
        try:
            first = 1
            if state is not None:
                for ld in loaders:
                    ld.load_state_dict(state)
                    assert ld.state_dict() == {**state, "world_size": world}  # same position
                first = max(state["epoch"], 1)
            limit = cuts[i] if i < len(cuts) else None
            stages.append(consume(loaders, first, last_epoch, limit, enter_next_epoch))
            state = take_state(loaders)
            states.append(state)
        finally:
            for ld in loaders:
                ld.close()
    return stages, states


def check_chain(
    make: MakeLoader,
    worlds: list[int],
    cuts: list[int],
    last_epoch: int,
    enter_next_epoch: bool = False,
    reference: list[Record] | None = None,
) -> None:
    """The properties of a resume chain against the uninterrupted run with ``worlds[0]`` ranks
    (``reference``: that run if the caller has it, e.g. from loaders without workers)."""
    if reference is None:
        reference = run_all(make, worlds[0], last_epoch)
    stages, states = run_chain(make, worlds, cuts, last_epoch, enter_next_epoch)
    chain = [r for stage in stages for r in stage]
    planner = make(0, 1).planner  # planning only: starts no workers
    uneven = planner.options.uneven
    got, want = real_by_epoch(chain), real_by_epoch(reference)
    for epoch in range(1, last_epoch + 1):
        seen = got.get(epoch, [])
        order = planned_units(planner, epoch)
        assert not Counter(seen) - Counter(order), f"epoch {epoch}: a sequence came too often"
        if uneven != "drop":
            assert sorted(seen) == sorted(order) == sorted(want.get(epoch, []))
        steps = [step for e, step, _ in chain if e == epoch]
        assert steps == list(range(len(steps))), f"epoch {epoch}: step numbers {steps}"
    # with the same world size, resuming changes nothing: the very same batches
    same = 1
    while same < len(worlds) and worlds[same] == worlds[0]:
        same += 1
    prefix = [r for stage in stages[:same] for r in stage]
    assert prefix == reference[: len(prefix)]
    if same == len(worlds):
        assert chain == reference
    assert states[-1]["epoch"] == last_epoch and states[-1]["epoch_complete"]
    for state, after in zip(states, stages[1:]):  # a finished epoch stays finished
        if state["epoch_complete"]:
            assert all(e != state["epoch"] for e, _, _ in after)


def loader_factory(source: sl.Source, **options: object) -> MakeLoader:
    def make(rank: int, world: int) -> sl.SeqLoader:
        return sl.SeqLoader(source, rank=rank, world_size=world, **options)

    return make


# ---- over plan options and corpora (hypothesis, no workers) ----

#: Plan options the property draws, one line each (orderings: ``conftest.ORDERINGS``).
OPTION_STRATEGIES = {
    "ordering": st.sampled_from(ORDERINGS),
    "partition_epoch": st.integers(1, 2),
    "uneven": st.sampled_from(["split", "pad", "drop"]),
    "max_seqs": st.one_of(st.none(), st.integers(1, 5)),
    "max_frames": st.one_of(st.none(), st.integers(20, 80)),
    "seed": st.integers(0, 5),
    # the default ('auto': indexed wherever it plans the options) and the greedy global
    # algorithm, whose loader-level resume chains (laplace, buckets, random, sorted orders,
    # partition_epoch, chunking, mix, files, elastic W -> W' -> W'') no other test runs
    "planning": st.sampled_from(["auto", "global"]),
}


def mixed_corpora(n: int, seed: int = 0) -> sl.ConcatSource:
    """The index corpus cut into two named corpora (frames keep their index in the whole), for
    ``mix`` (``SOURCE_OPTIONS``): epochs then hold sequences of ``a`` more than once."""
    whole = corpus(max(n, 2), seed)
    cut = max(1, len(whole) // 3)
    return sl.ConcatSource(
        {
            name: sl.MemorySource(
                {"data": [whole.read(i)["data"] for i in part]}, [whole.tag(i) for i in part]
            )
            for name, part in (("a", range(cut)), ("b", range(cut, len(whole))))
        }
    )


def file_bounds(n: int, seed: int = 0) -> list[int]:
    """Cuts of ``n`` sequences into files of 1..3 sequences (drawn from ``seed``)."""
    sizes = np.random.default_rng(seed + 100).integers(1, 4, size=n)
    return [0, *sorted({min(int(c), n) for c in np.cumsum(sizes)})] if n else [0, 0]


def files_corpus(n: int, seed: int = 0) -> sl.MemorySource:
    """The index corpus as if written to files of 1..3 sequences, for ``distribution="files"``."""
    whole = corpus(n, seed)
    data = [whole.read(i)["data"] for i in range(n)]
    return sl.MemorySource({"data": data}, list(whole.tags), file_bounds=file_bounds(n, seed))


#: Corpora the property draws: name -> (n, seed) -> source whose frames hold their own index.
SOURCES: dict[str, Callable[[int, int], sl.Source]] = {
    "index": corpus,
    "mixed corpora": mixed_corpora,
    "files": files_corpus,
    "chunked": corpus,
    "chunked files": files_corpus,
    "chunked mixed corpora": mixed_corpora,
}
#: Plan options a corpus kind needs (a mix needs named corpora; files a layout).
SOURCE_OPTIONS: dict[str, dict[str, object]] = {
    "mixed corpora": {"mix": {"a": 1.5, "b": 0.5}},
    "files": {"distribution": "files"},
    "chunked": {"chunking": "3:2", "min_chunk_size": 1},
    "chunked files": {"distribution": "files", "chunking": "3:2", "min_chunk_size": 1},
    "chunked mixed corpora": {"mix": {"a": 1.5, "b": 0.5}, "chunking": "4:3"},
}


# 60 examples (was 84) draw as many orderings (14) and every source, uneven and planning the 84
# drew
@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(0, 45),
    seed=st.integers(0, 5),
    source=st.sampled_from(sorted(SOURCES)),
    options=st.fixed_dictionaries(OPTION_STRATEGIES),
    worlds=st.lists(st.integers(1, 4), min_size=1, max_size=3),
    cuts=st.lists(st.integers(0, 25), min_size=2, max_size=2),
    enter_next_epoch=st.booleans(),
)
def test_resume_chains_property(n, seed, source, options, worlds, cuts, enter_next_epoch) -> None:
    """Random (corpus, W, W', W'', k, plan options): resuming after k steps, once or twice,
    elastic or not, at step 0, mid-epoch, at an epoch's end or across it."""
    extra = SOURCE_OPTIONS.get(source, {})
    assume("mix" not in extra or options["ordering"] in MIX_ORDERINGS)  # buckets: no mix
    if "files" in source:  # fewer files than sub-epochs x ranks are refused (test_files_plan)
        assume(n == 0 or len(file_bounds(n, seed)) - 1 >= options["partition_epoch"] * max(worlds))
    make = loader_factory(SOURCES[source](n, seed), **options, **extra)
    last_epoch = options["partition_epoch"] + 1
    check_chain(make, worlds, cuts[: len(worlds) - 1], last_epoch, enter_next_epoch)


@pytest.mark.parametrize(
    ("worlds", "uneven"),
    [([2, 2], "split"), ([2, 3], "split"), ([3, 2], "pad"), ([3, 1], "drop"), ([1, 2], "split")],
)
def test_save_load_at_every_step(worlds: list[int], uneven: str) -> None:
    """torchdata style: cut at every step of two sub-epochs and one more epoch (0, middle, each
    epoch's end, just inside the next epoch) and check the continuation each time."""
    make = loader_factory(
        corpus(47, seed=4),
        ordering="laplace:.5",
        partition_epoch=2,
        uneven=uneven,
        max_seqs=3,
        max_frames=40,
    )
    reference = run_all(make, worlds[0], 3)
    total = len(reference)
    assert total >= 6
    for k in range(total + 1):
        for enter in (False, True):
            check_chain(make, worlds, [k], 3, enter, reference)


def test_resume_twice_elastic_example() -> None:
    """2 -> 3 -> 1 ranks, on a corpus size that divides by nothing convenient."""
    make = loader_factory(corpus(97, seed=2), ordering="random", max_seqs=4, max_frames=50)
    check_chain(make, [2, 3, 1], [5, 4], 1)


@pytest.mark.parametrize("chunking", [None, "5:3"])
@pytest.mark.parametrize("worlds", [[2, 3], [3, 2], [2, 3, 1]])
def test_files_distribution_resumes_elastically(worlds: list[int], chunking: str | None) -> None:
    """``distribution="files"``: the state of a run stopped mid-epoch resumes with another world
    size (twice), every sequence (chunked: every chunk) once per epoch; the state carries the
    segment history."""
    make = loader_factory(
        files_corpus(97, seed=2),
        distribution="files",
        ordering="laplace:.5",
        partition_epoch=2,
        max_seqs=4,
        max_frames=50,
        chunking=chunking,
    )
    cuts = [3, 2][: len(worlds) - 1]
    check_chain(make, worlds, cuts, 3)
    _, states = run_chain(make, worlds, [3, 2, 1], 3)  # every stage stops mid-epoch
    assert states[1]["epoch"] == 1 and not states[1]["epoch_complete"]
    assert states[1]["segment_history"] == [[worlds[0], 3]]
    assert states[1]["steps"] == 5 and states[1]["prior_steps"] == 3
    if len(worlds) == 3:
        assert states[2]["segment_history"] == [[worlds[0], 3], [worlds[1], 2]]
    assert "segment_history" not in states[0]  # before an elastic resume: the usual format


# ---- over DataLoader worker settings x interrupt points ----

WORKER_PLAN = {"ordering": "laplace:.5", "partition_epoch": 2, "max_seqs": 3, "max_frames": 40}
WORKER_EPOCHS = 3  # two sub-epochs (one full epoch) and the first of the next

WORKER_SETTINGS = [
    pytest.param({"num_workers": 0}, id="0 workers"),
    pytest.param(
        {"num_workers": 2, "persistent_workers": False},
        id="2 workers",
        marks=pytest.mark.slow,
    ),
    pytest.param(
        {"num_workers": 2, "persistent_workers": True},
        id="2 persistent workers",
        marks=pytest.mark.slow,
    ),
]

#: name -> (world sizes of the stages, the cut given epoch 1's steps and all steps, enter the next
#: epoch when the cut is at an epoch's end)
INTERRUPTS: dict[str, tuple[list[int], Callable[[int, int], int], bool]] = {
    "at step 0": ([1, 1], lambda first, total: 0, False),
    "mid-epoch, 2 ranks": ([2, 2], lambda first, total: first // 2, False),
    "at the epoch's end": ([1, 1], lambda first, total: first, False),
    "across the epoch boundary": ([1, 1], lambda first, total: first, True),
    "in the next full epoch": ([1, 1], lambda first, total: total - 1, False),
    "at the run's end": ([1, 1], lambda first, total: total, False),
    "elastic 2 -> 1 ranks mid-epoch": ([2, 1], lambda first, total: first // 2 + 1, False),
}


@cache
def worker_reference(world: int) -> tuple[Record, ...]:
    """The uninterrupted run in the main process (C3: the same with any worker setting)."""
    return tuple(run_all(loader_factory(corpus(47, seed=4), **WORKER_PLAN), world, WORKER_EPOCHS))


@pytest.mark.parametrize("interrupt", list(INTERRUPTS))
@pytest.mark.parametrize("workers", WORKER_SETTINGS)
def test_resume_with_dataloader_workers(workers: dict, interrupt: str) -> None:
    """Loaders with real DataLoader workers (persistent or started per epoch) are interrupted,
    their state goes through JSON into fresh loaders with workers, and the rest equals the
    uninterrupted run without workers batch for batch, tensor bytes included."""
    worlds, cut, enter = INTERRUPTS[interrupt]
    reference = list(worker_reference(worlds[0]))
    first = sum(1 for epoch, _, _ in reference if epoch == 1)
    k = cut(first, len(reference))
    assert 0 <= k <= len(reference)
    make = loader_factory(corpus(47, seed=4), **WORKER_PLAN, **workers)
    before = settled_children()
    with make(0, 1) as loader:  # the setting really runs worker processes
        assert loader.planner.options.planning == "indexed"  # indexed planning's C3 with workers
        batches = loader.epoch(1)
        next(batches)
        alive = children_since(before)
        assert len(alive) == workers["num_workers"], describe(alive)
        batches.close()
    check_chain(make, worlds, [k], WORKER_EPOCHS, enter, reference)


# ---- global planning (seeding="returnn", the RETURNN config converter) through workers ----

FORK_1 = {"num_workers": 1, "multiprocessing_context": "fork"}
FORK_2 = {"num_workers": 2, "multiprocessing_context": "fork"}

#: name -> (plan options, worker setting, world sizes of the two stages). One full epoch in two
#: sub-epochs, cut inside the first: the rest of it and the second come from fresh loaders. A
#: spawned worker: test_loader_workers.py::test_spawned_workers_give_the_same_batches.
GLOBAL_WORKER_CASES: dict[str, tuple[dict, dict, list[int]]] = {
    "1 worker, 2 -> 2 ranks": ({"planning": "global"}, FORK_1, [2, 2]),
    "2 workers, 2 -> 3 ranks": ({"planning": "global"}, FORK_2, [2, 3]),
    # what the RETURNN config converter asks for: seeding="returnn", planning left to resolve
    "returnn seeding, 2 persistent workers, 2 -> 3 ranks": (
        {"seeding": "returnn"},
        {**FORK_2, "persistent_workers": True},
        [2, 3],
    ),
}


@cache
def global_reference(seeding: str, world: int) -> tuple[Record, ...]:
    """The uninterrupted run without workers (sub-epochs 1 and 2: one full epoch)."""
    make = loader_factory(corpus(47, seed=4), **WORKER_PLAN, planning="global", seeding=seeding)
    return tuple(run_all(make, world, 2))


@pytest.mark.parametrize("case", list(GLOBAL_WORKER_CASES))
def test_global_planning_resumes_with_dataloader_workers(case: str) -> None:
    """Greedy global plans through real DataLoader workers give the batches of a run without
    workers, and a state saved mid-epoch resumes exactly the rest in fresh loaders with workers,
    with the same or another world size."""
    options, workers, worlds = GLOBAL_WORKER_CASES[case]
    make = loader_factory(corpus(47, seed=4), **WORKER_PLAN, **options, **workers)
    planner = make(0, 1).planner  # planning only: starts no workers
    assert planner.options.planning == "global"  # a default change must not drop this coverage
    reference = list(global_reference(planner.options.seeding, worlds[0]))
    k = sum(1 for epoch, _, _ in reference if epoch == 1) // 2
    check_chain(make, worlds, [k], 2, reference=reference)


class ReadLog:
    """A source that appends every sequence index it reads (in any process) to a file, so a test
    can see what the workers prefetched, and writes a byte to the pipe ``wake`` after each (forked
    workers inherit it), so the test can wait for a read as an event."""

    def __init__(self, source: sl.MemorySource, path: Path, wake: int) -> None:
        self.source, self.path, self.wake = source, str(path), wake

    def __getattr__(self, name: str):
        return getattr(self.source, name)

    def __len__(self) -> int:
        return len(self.source)

    def read(self, index: int) -> dict:
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        try:
            os.write(fd, f"{index}\n".encode())
        finally:
            os.close(fd)
        os.write(self.wake, b".")
        return self.source.read(index)

    def __repr__(self) -> str:
        return f"ReadLog({self.source!r})"


def reads(path: Path) -> int:
    return len(path.read_text().split()) if path.exists() else 0


@pytest.mark.slow
@pytest.mark.parametrize(("workers", "resume_workers"), [(2, 0), (1, 2)])
def test_prefetched_batches_are_not_consumed(tmp_path: Path, workers: int, resume_workers: int):
    """Workers read ahead (prefetch), but the state counts only the batches the loop received;
    resuming with another worker count continues with the very next batch."""
    log = tmp_path / "reads"
    woken, wake = os.pipe()
    src = ReadLog(corpus(60, seed=1), log, wake)
    options = {"ordering": "random", "max_seqs": 1, "seed": 5}
    reference = run_all(loader_factory(src.source, **options), 1, 1)
    loader = sl.SeqLoader(
        src, rank=0, world_size=1, num_workers=workers, prefetch_factor=2, **options
    )
    k = 7
    head = consume([loader], 1, 1, limit=k)
    while reads(log) <= k:  # wait for the workers' read-ahead: each read wakes us (an event)
        os.read(woken, 1)
    assert reads(log) > k, "the workers did not read ahead; the test proves nothing"
    state = take_state([loader])
    loader.close()
    os.close(woken)
    os.close(wake)
    assert (state["steps"], state["seqs_consumed"], state["epoch_complete"]) == (k, k, False)
    resumed = sl.SeqLoader(src.source, rank=0, world_size=1, num_workers=resume_workers, **options)
    resumed.load_state_dict(state)
    tail = consume([resumed], 1, 1)
    resumed.close()
    assert head + tail == reference


def test_state_is_small_and_json_able() -> None:
    loader = sl.SeqLoader(corpus(500), rank=1, world_size=3, ordering="random", max_seqs=4)
    it = loader.epoch(1)
    next(it)
    next(it)
    state = loader.state_dict()
    assert len(json.dumps(state)) < 600
    assert state["epoch"] == 1 and state["steps"] == 2 and state["world_size"] == 3
    assert state["seqs_consumed"] == 2 * 3 * 4
    assert set(state) >= {"format", "version", "plan_fingerprint", "segment_start"}


def test_state_before_any_epoch_resumes_from_the_start() -> None:
    make = loader_factory(corpus(20), ordering="random", max_seqs=3)
    state = take_state([make(0, 1)])
    assert (state["epoch"], state["steps"], state["epoch_complete"]) == (0, 0, False)
    fresh = make(0, 1)
    fresh.load_state_dict(state)
    assert consume([fresh], 1, 1) == consume([make(0, 1)], 1, 1)


def finished_state(make: MakeLoader, epoch: int, steps: int | None = None) -> dict:
    loader = make(0, 1)
    consume([loader], 1, epoch, limit=steps)
    return take_state([loader])


class TestRefusals:
    make = staticmethod(loader_factory(corpus(40), ordering="random", max_seqs=3, seed=1))

    def test_other_seed(self) -> None:
        state = finished_state(self.make, 1, steps=3)
        other = sl.SeqLoader(corpus(40), ordering="random", max_seqs=3, seed=2)
        with pytest.raises(ResumeError, match=r"fingerprint.*seed"):
            other.load_state_dict(state)

    def test_other_data(self) -> None:
        state = finished_state(self.make, 1, steps=3)
        other = sl.SeqLoader(corpus(41), ordering="random", max_seqs=3, seed=1)
        with pytest.raises(ResumeError, match="same files"):
            other.load_state_dict(state)

    @pytest.mark.parametrize(
        ("change", "match"),
        [
            ({"format": "x"}, "not a seqloader loader state"),
            ({"version": 99}, "version: got 99"),
            ({"segment_steps": 1000}, "only 14 steps"),
            (
                {"seqs_consumed": 4},
                r"seqs_consumed: got 4, but its position \(prior_steps 0 \+ segment_steps 3 "
                r"of 14, segment_start 0, epoch 1\) gives 9.*Fix: ",
            ),
            ({"steps": 2}, "steps: got 2"),
            # the attack: a mid-epoch state edited to say the epoch is done
            (
                {"epoch_complete": True},
                r"epoch_complete: got True, but its position \(prior_steps 0 \+ "
                r"segment_steps 3 of 14, segment_start 0, epoch 1\) gives False",
            ),
            ({"epoch_complete": 1}, r"epoch_complete: got 1, .* gives False"),
        ],
    )
    def test_broken_state(self, change: dict, match: str) -> None:
        state = finished_state(self.make, 1, steps=3)
        with pytest.raises(ResumeError, match=match):
            self.make(0, 1).load_state_dict({**state, **change})

    def test_mid_epoch_state_is_never_skipped_silently(self) -> None:
        state = finished_state(self.make, 2, steps=16)  # epoch 2, step 2 of 14
        assert (state["epoch"], state["steps"]) == (2, 2)
        for wrong in (1, 3):
            loader = self.make(0, 1)
            loader.load_state_dict(state)
            with pytest.raises(ResumeError, match=r"epoch\(2\) first"):
                loader.epoch(wrong)

    def test_finished_state_moves_on(self) -> None:
        state = finished_state(self.make, 1)
        assert state["epoch_complete"]
        loader = self.make(0, 1)
        loader.load_state_dict(state)
        assert consume([loader], 2, 2) == consume([self.make(0, 1)], 2, 2)

    def test_random_seed_offset_elastic_mid_epoch(self) -> None:
        make = loader_factory(corpus(40), max_seqs=3, distribution="random_seed_offset")
        loaders = [make(r, 2) for r in range(2)]
        consume(loaders, 1, 1, limit=2)
        state = take_state(loaders)
        loader = make(0, 3)
        with pytest.raises(ResumeError, match="same world size"):  # at load, before any epoch
            loader.load_state_dict(state)
        same = make(0, 2)
        same.load_state_dict(state)  # the saver's world size resumes
        assert next(iter(same.epoch(1))).step == 2

    def test_finished_state_with_epoch_complete_false_is_refused(self) -> None:
        state = finished_state(self.make, 1)
        assert state["epoch_complete"]
        with pytest.raises(ResumeError, match=r"epoch_complete: got False.*gives True"):
            self.make(0, 1).load_state_dict({**state, "epoch_complete": False})
