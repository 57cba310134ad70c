"""``sorted_reverse`` over a source that declares its own sort key (``order_lengths``: RETURNN
sorts OggZip corpora by ``int(duration * 100)``) through the real loader, with the default
planning (``auto``, resolved to indexed, which sorts by that key: ``indexed.corpus.own_sort_key``):
the resume harness of ``test_resume`` (save -> JSON -> fresh loaders, elastic ``W -> W' -> W''``)
with the exactly-once audit on; the batches sorted by the source's key, not the length key."""

from __future__ import annotations

import numpy as np

from seqloader.returnn import ReturnnView
from test_resume import check_chain, corpus, loader_factory


def test_elastic_resume_chains_deliver_every_sequence_once() -> None:
    """Every sequence once per epoch through ``W -> W' -> W''``, equal steps; the order global
    planning's (``sort_bin_shuffle`` reads the same index: its contracts in the property tests)."""
    inner = corpus(24, 3)
    by = (np.arange(24) * 7) % 5  # the source's own key: many ties, unrelated to the lengths
    make = loader_factory(
        ReturnnView(inner, order_lengths=by), max_seqs=3, max_frames=40, partition_epoch=2,
        audit=True, ordering="sorted_reverse", uneven="pad",
    )  # fmt: skip
    with make(0, 1) as loader:
        assert loader.planner.options.planning == "indexed"
        # global planning's order: by the source's key, descending, ties ascending
        seqs = np.concatenate([loader.planner.sub_epoch_order(e) for e in (1, 2)])
        np.testing.assert_array_equal(seqs, np.argsort(-by, kind="stable"))
    check_chain(make, [2, 3, 1], [2, 1], 2)


def test_the_nodes_file_is_the_sort_keys_own(tmp_path, monkeypatch) -> None:
    """Above ``MIN_SEQUENCES`` the sorted index comes from a node file: a view that only adds
    a sort key has its source's fingerprint, so the key's digest names the file (another key,
    another file; never the length key's index mapped), and it plans what in memory plans."""
    import seqloader as sl
    from seqloader.loading import bucket_store

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(bucket_store, "MIN_SEQUENCES", 10)
    folder = tmp_path / "seqloader" / "buckets"
    src, by = corpus(30, 1), (np.arange(30) * 11) % 7
    options = {"max_seqs": 3, "max_frames": 40, "ordering": "sorted", "planning": "indexed"}
    sl.SeqLoader(src, rank=0, world_size=2, **options)
    own = sl.SeqLoader(ReturnnView(src, order_lengths=by), rank=0, world_size=2, **options)
    sl.SeqLoader(ReturnnView(src, order_lengths=by[::-1].copy()), rank=0, world_size=2, **options)
    assert len(list(folder.glob("*.seqcols"))) == 3
    monkeypatch.setattr(bucket_store, "MIN_SEQUENCES", 10**9)
    held = sl.SeqLoader(ReturnnView(src, order_lengths=by), rank=0, world_size=2, **options)
    mapped, kept = own.plan(1), held.plan(1)
    assert len(mapped) == len(kept) > 0
    assert all(np.array_equal(a, b) for a, b in zip(mapped, kept, strict=True))


def test_chunked_chains_deliver_each_chunk_once() -> None:
    """Chunked (the key's order, each sequence's chunks in turn: ``AdmittedCorpus.order_index``;
    global planning's chunk batches): every chunk once per epoch through ``W -> W' -> W''`` with
    the audit on, the sequences in the key's order."""
    inner = corpus(24, 4)
    by = (np.arange(24) * 5) % 4  # the source's own key: many ties, unrelated to the lengths
    make = loader_factory(
        ReturnnView(inner, order_lengths=by), max_seqs=3, max_frames=40, partition_epoch=2,
        audit=True, ordering="sorted", uneven="pad", chunking="3:2", min_chunk_size=1,
    )  # fmt: skip
    with make(0, 1) as loader:
        assert loader.planner.options.planning == "indexed"
        plan = loader.planner.global_plan(1, 1).batches
        assert (np.diff(by[plan.seqs]) >= 0).all()  # sorted by the key, chunk after chunk
    check_chain(make, [2, 3, 1], [2, 1], 2)


def test_selected_and_key_filtered_chains_deliver_each_chunk_once() -> None:
    """Epoch selections (RETURNN's ``subdirs``) and ``epoch_wise_filter`` by the source's own key
    on a chunked fixed order (each sub-epoch listed, selected, filtered by the key, cut):
    through ``W -> W' -> W''`` with the audit on, each planned chunk once, nothing of an epoch
    the selection leaves out delivered."""
    from seqloader.plan.selections import EpochSelection

    inner = corpus(30, 5)
    by = (np.arange(30) * 7) % 6
    keep = np.arange(30) % 3 != 0
    view = ReturnnView(
        inner, order_lengths=by, selections=(EpochSelection(1, 2, keep, "subdirs=['a']"),)
    )
    make = loader_factory(
        view, max_seqs=3, max_frames=40, partition_epoch=2, audit=True, ordering="sorted",
        uneven="pad", chunking="3:2", min_chunk_size=1,
        epoch_wise_filter={(2, 3): {"max_mean_len": 2}},
    )  # fmt: skip
    with make(0, 1) as loader:
        planner = loader.planner
        assert planner.options.planning == "indexed"
        for epoch in (1, 2):
            seqs = planner.global_plan(epoch, 1).batches.seqs
            assert keep[seqs].all() and (np.diff(by[seqs]) >= 0).all()
        assert any("max_mean_len" in reason for reason in planner.filtered(2))
    check_chain(make, [2, 3, 1], [2, 1], 3)
