"""``mix`` with ``planning="indexed"`` through ``SeqLoader`` over a ``ConcatSource`` of real HDF
files: real DataLoader workers (0 and 2), two ranks, the audit on, every corpus epoch exactly
once, the report's per-corpus counts, a draw per use; and the resume harness of ``test_resume``
(chains of fresh loaders through JSON, elastic W -> W')."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import seqloader as sl
from conftest import index_corpus
from test_resume import check_chain, loader_factory, mixed_corpora

SIZES = {"a": 23, "b": 17, "c": 9}
RATES = {"a": 0.5, "b": 1.0, "c": 2.0}


@pytest.fixture(scope="module")
def corpora(tmp_path_factory) -> sl.ConcatSource:
    """Three corpora, one HDF file each, written by seqloader's writer; frames hold the
    sequence's index within its corpus, tags name corpus and index."""
    root = tmp_path_factory.mktemp("indexed_mix")
    parts = {}
    for k, (name, n) in enumerate(SIZES.items()):
        src = index_corpus(n, seed=k, max_len=30, tags=[f"{name}/{i}" for i in range(n)])
        sl.write_hdf(str(root / f"{name}.hdf"), src)
        parts[name] = sl.HDFSource(str(root / f"{name}.hdf"))
    return sl.ConcatSource(parts)


def marker(seq: dict, rng: np.random.Generator) -> dict:
    """Writes one random draw into the last feature of the first frame: each use's own draw."""
    data = seq["data"].copy()
    data[0, -1] = rng.random()
    return {**seq, "data": data}


@pytest.mark.parametrize("num_workers", [0, 2])
def test_indexed_mix_through_workers_exactly_once_per_corpus_epoch(corpora, num_workers):
    """Two full epochs (partition_epoch=2) on 2 ranks: equal steps; each sub-epoch delivers its
    planned slots (the audit agrees); a at rate 0.5 once, b twice, c four times (whole corpus
    epochs); rows hold their sequence; two uses of a sequence draw differently; the report's
    per-corpus counts are what the ranks received."""
    check_two_ranks(corpora, SIZES, num_workers, ordering="buckets:3")


def check_two_ranks(
    corpora: sl.Source, sizes: dict[str, int], num_workers: int, **options: object
) -> None:
    """``check_mix_epochs`` on two ranks' loaders of ``corpora`` mixed at ``RATES`` (two
    sub-epochs, audit on, each use marked by ``marker``), closed after."""
    loaders = [
        sl.SeqLoader(
            corpora,
            mix=RATES,
            max_frames=120,
            partition_epoch=2,
            planning="indexed",
            rank=r,
            world_size=2,
            num_workers=num_workers,
            audit=True,
            transform=marker,
            **options,
        )
        for r in range(2)
    ]
    try:
        check_mix_epochs(loaders, corpora, sizes, {"a": 1, "b": 2, "c": 4})
    finally:
        for loader in loaders:
            loader.close()


def check_mix_epochs(
    loaders: list[sl.SeqLoader],
    corpora: sl.ConcatSource,
    sizes: dict[str, int],
    uses: dict[str, int],
) -> None:
    """Epochs 1-4 of ``loaders`` (one per rank; two full epochs of 2 sub-epochs): equal steps;
    each sub-epoch delivers its planned slots (the audit agrees); each corpus' sequences
    ``uses[name]`` times (whole corpus epochs); rows hold their sequence; each use draws its own
    (``marker``); the report's per-corpus counts are what the ranks received."""
    total: Counter = Counter()
    draws: dict[str, set[float]] = {}
    for epoch in range(1, 5):
        per_rank = [list(loader.epoch(epoch)) for loader in loaders]
        assert len({len(b) for b in per_rank}) == 1, "equal steps"
        got: list[str] = []
        reported: Counter = Counter()
        for loader, batches in zip(loaders, per_rank):
            for b in batches:
                for row, (tag, real) in enumerate(zip(b.seq_tags, b.mask.tolist())):
                    if not real:
                        continue
                    got.append(tag)
                    index = int(tag.split("/")[1])
                    assert b["data"][row, 0, 0] == index  # the row holds its sequence
                    draws.setdefault(tag, set()).add(float(b["data"][row, 0, -1]))
            report = loader.report()
            assert report is not None and report.audit is not None and report.audit.ok
            for name, entry in report.corpora.items():
                reported[name] += entry.seqs
        planner = loaders[0].planner
        planned = [corpora.tag(i) for i in planner.sub_epoch_order(epoch).tolist()]
        assert Counter(got) == Counter(planned)
        assert reported == Counter(t.split("/")[0] for t in got)
        here = {name: slots for name, slots, _ in planner.corpus_plan(epoch)}
        assert {name: loaders[0].report().corpora[name].planned_seqs for name in sizes} == here
        total.update(got)
    for name, n in sizes.items():
        assert {total[f"{name}/{i}"] for i in range(n)} == {uses[name]}
        assert all(len(draws[f"{name}/{i}"]) == uses[name] for i in range(n)), "a draw per use"
    progress = loaders[0].report().corpora
    assert {n: progress[n].corpus_epochs_done for n in sizes} == {
        n: float(u) for n, u in uses.items()
    }


@settings(max_examples=20, deadline=None)
@given(
    n=st.integers(2, 45),
    seed=st.integers(0, 5),
    ordering=st.sampled_from(["laplace:.5", "buckets:3"]),
    uneven=st.sampled_from(["split", "pad", "drop"]),
    partition_epoch=st.integers(1, 2),
    worlds=st.lists(st.integers(1, 4), min_size=1, max_size=3),
    cuts=st.lists(st.integers(0, 25), min_size=2, max_size=2),
    enter_next_epoch=st.booleans(),
)
def test_indexed_mix_resume_chains(
    n, seed, ordering, uneven, partition_epoch, worlds, cuts, enter_next_epoch
) -> None:
    """The resume harness over a mix: every slot once per epoch across chains of fresh loaders
    (elastic W -> W'), steps without gaps, and with the same world size the very same batches."""
    make = loader_factory(
        mixed_corpora(n, seed),
        planning="indexed",
        mix={"a": 1.5, "b": 0.5},
        max_seqs=3,
        max_frames=40,
        ordering=ordering,
        uneven=uneven,
        partition_epoch=partition_epoch,
    )
    check_chain(make, worlds, cuts[: len(worlds) - 1], partition_epoch + 1, enter_next_epoch)
