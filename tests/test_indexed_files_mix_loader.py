"""``mix`` with ``distribution="files"`` and ``planning="indexed"`` through ``SeqLoader`` over a
``ConcatSource`` of real HDF files (three corpora, 3-4 files each, written by seqloader's
writer): real DataLoader workers (0 and 2), two ranks, the audit on, every corpus epoch exactly
once, the report's per-corpus counts, a draw per use; chunked, every chunk of a slot once per
use; and the resume harness of ``test_resume`` (chains of fresh loaders through JSON, elastic
W -> W', chunked or not)."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import seqloader as sl
from conftest import index_corpus
from test_indexed_mix_loader import RATES, check_two_ranks
from test_resume import check_chain, file_bounds, loader_factory

SIZES = {"a": 23, "b": 17, "c": 13}
FILES = {"a": 4, "b": 3, "c": 3}


@pytest.fixture(scope="module")
def corpora(tmp_path_factory) -> sl.ConcatSource:
    """Three corpora of 3-4 HDF files each; frames hold the sequence's index within its corpus,
    tags name corpus and index."""
    root = tmp_path_factory.mktemp("indexed_files_mix")
    parts = {}
    for k, (name, n) in enumerate(SIZES.items()):
        whole = index_corpus(n, seed=k, max_len=30, tags=[f"{name}/{i}" for i in range(n)])
        paths = []
        for f in range(FILES[name]):
            part = range(f * n // FILES[name], (f + 1) * n // FILES[name])
            src = sl.MemorySource(
                {"data": [whole.read(i)["data"] for i in part]}, [whole.tag(i) for i in part]
            )
            paths.append(root / f"{name}-{f}.hdf")
            sl.write_hdf(str(paths[-1]), src)
        parts[name] = sl.HDFSource([str(p) for p in paths])
    return sl.ConcatSource(parts)


@pytest.mark.parametrize("num_workers", [0, 2])
def test_files_mix_through_workers_exactly_once_per_corpus_epoch(corpora, num_workers):
    """Two full epochs (partition_epoch=2) on 2 ranks: equal steps; each sub-epoch delivers its
    planned slots (the audit agrees); a at rate 0.5 once, b twice, c four times (whole corpus
    epochs); rows hold their sequence; each use of a sequence draws its own; the report's
    per-corpus counts are what the ranks received (``check_mix_epochs``, as with shard)."""
    check_two_ranks(corpora, SIZES, num_workers, distribution="files", ordering="laplace:.4")


def files_mix_corpora(n: int, seed: int) -> sl.ConcatSource:
    """Two corpora of the index corpus' sequences, each as files of 1..3 sequences."""
    whole = index_corpus(max(n, 4), seed=seed, max_len=12)
    cut = max(2, len(whole) // 3)
    parts = {}
    for name, part in (("a", range(cut)), ("b", range(cut, len(whole)))):
        data = [whole.read(i)["data"] for i in part]
        parts[name] = sl.MemorySource(
            {"data": data}, [whole.tag(i) for i in part], file_bounds=file_bounds(len(part), seed)
        )
    return sl.ConcatSource(parts)


@settings(max_examples=15, deadline=None)
@given(
    n=st.integers(8, 40),
    seed=st.integers(0, 5),
    ordering=st.sampled_from(["laplace:.5", "buckets:3"]),
    uneven=st.sampled_from(["split", "pad", "drop"]),
    partition_epoch=st.integers(1, 2),
    worlds=st.lists(st.integers(1, 3), min_size=1, max_size=3),
    cuts=st.lists(st.integers(0, 12), min_size=2, max_size=2),
    enter_next_epoch=st.booleans(),
    chunking=st.sampled_from([None, "6:4"]),
)
def test_files_mix_resume_chains(
    n, seed, ordering, uneven, partition_epoch, worlds, cuts, enter_next_epoch, chunking
) -> None:
    """The resume harness over a mix of files: every slot once per epoch across chains of fresh
    loaders (elastic W -> W'), steps without gaps, and with the same world size the very same
    batches."""
    make = loader_factory(
        files_mix_corpora(n, seed),
        planning="indexed",
        distribution="files",
        mix={"a": 1.5, "b": 0.5},
        max_seqs=3,
        max_frames=40,
        ordering=ordering,
        uneven=uneven,
        partition_epoch=partition_epoch,
        chunking=chunking,
    )
    try:
        make(0, max(worlds)).planner.check_world(max(worlds))
    except sl.OptionError:
        return  # too few files for these world sizes (the planner's own refusal, tested apart)
    check_chain(make, worlds, cuts[: len(worlds) - 1], partition_epoch + 1, enter_next_epoch)


@pytest.mark.parametrize("ordering", ["laplace:.4", "random"])
def test_chunked_files_mix_through_workers(corpora, ordering: str) -> None:
    """Chunking with a mix over files: 2 ranks with 2 DataLoader workers each, the audit on;
    per sub-epoch the delivered (sequence, chunk) pairs are the planned ones (each chunk of a
    slot once per use), equal steps, and over two full epochs each sequence's every chunk
    comes as often as its corpus' rate x 2 (``random``: each rank's pieces' slots' chunks cut
    greedily, ``files_mix_cut``)."""
    loaders = [
        sl.SeqLoader(
            corpora,
            mix=RATES,
            distribution="files",
            ordering=ordering,
            max_frames=60,
            chunking="10:6",
            partition_epoch=2,
            planning="indexed",
            rank=r,
            world_size=2,
            num_workers=2,
            audit=True,
        )
        for r in range(2)
    ]
    total: Counter = Counter()
    try:
        for epoch in range(1, 5):
            per_rank = [list(loader.epoch(epoch)) for loader in loaders]
            assert len({len(b) for b in per_rank}) == 1, "equal steps"
            got: Counter = Counter()
            for loader, batches in zip(loaders, per_rank):
                for b in batches:
                    assert b.chunks is not None
                    for tag, chunk, real in zip(b.seq_tags, b.chunks.tolist(), b.mask.tolist()):
                        if real:
                            got[(tag, chunk)] += 1
                report = loader.report()
                assert report is not None and report.audit is not None and report.audit.ok
            units = loaders[0].planner.sub_epoch_units(epoch, 0, 2)
            tags = [corpora.tag(i) for i in units.seqs.tolist()]
            assert got == Counter(zip(tags, units.chunks.tolist()))
            total.update(got)
        chunks = loaders[0].planner.chunks
        names, bounds = corpora.corpus_layout()
        uses = {"a": 1, "b": 2, "c": 4}  # rate x 2 full epochs, whole corpus epochs
        for c, name in enumerate(names):
            for i in range(SIZES[name]):
                count = int(chunks.counts[int(bounds[c]) + i])
                times = {total[(f"{name}/{i}", k)] for k in range(count)}
                assert count >= 1 and times == {uses[name]}, (name, i)
    finally:
        for loader in loaders:
            loader.close()
