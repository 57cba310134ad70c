"""``planning="indexed"`` through the real loader: the resume harness of ``test_resume`` (chains of
save -> JSON -> fresh loaders, elastic for ``shard`` and ``files``), real DataLoader workers (over
HDF files too), the audit, and states of the other planning refused by name."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import seqloader as sl
from conftest import index_corpus
from seqloader.errors import ResumeError
from test_indexed_options_loader import check_own_orders
from test_resume import (
    check_chain,
    corpus,
    file_bounds,
    files_corpus,
    loader_factory,
    run_all,
)

# unchunked shard plans through real DataLoader workers, resumed: the default options plan them
# indexed, test_resume.py::test_resume_with_dataloader_workers
PLAN = {"planning": "indexed", "max_seqs": 3, "max_frames": 40}
#: chunked indexed plans (chunks as planned units; ``tests/test_plan_indexed_chunks.py``)
CHUNKED = {**PLAN, "chunking": "3:2", "min_chunk_size": 1}


@settings(max_examples=45, deadline=None)
@given(
    n=st.integers(0, 45),
    seed=st.integers(0, 5),
    ordering=st.sampled_from(["laplace:.5", "laplace", "buckets:3"]),
    uneven=st.sampled_from(["split", "pad", "drop"]),
    partition_epoch=st.integers(1, 2),
    worlds=st.lists(st.integers(1, 4), min_size=1, max_size=3),
    cuts=st.lists(st.integers(0, 25), min_size=2, max_size=2),
    enter_next_epoch=st.booleans(),
    chunked=st.booleans(),
)
def test_shard_resume_chains(
    n, seed, ordering, uneven, partition_epoch, worlds, cuts, enter_next_epoch, chunked
) -> None:
    """Resuming after k steps, once or twice, elastic or not, at step 0, mid-epoch, at an epoch's
    end or across it: every sequence (chunked: every chunk, rows cut to their windows) once per
    epoch, steps numbered without gaps, and with the same world size the very same batches as
    the uninterrupted run."""
    plan = CHUNKED if chunked else PLAN
    make = loader_factory(
        corpus(n, seed), **plan, ordering=ordering, uneven=uneven, partition_epoch=partition_epoch
    )
    check_chain(make, worlds, cuts[: len(worlds) - 1], partition_epoch + 1, enter_next_epoch)


@settings(max_examples=25, deadline=None)
@given(
    n=st.integers(20, 45),
    seed=st.integers(0, 5),
    ordering=st.sampled_from(["laplace:.5", "laplace", "buckets:3"]),
    uneven=st.sampled_from(["split", "pad", "drop"]),
    worlds=st.lists(st.integers(1, 4), min_size=2, max_size=3),
    cuts=st.lists(st.integers(0, 12), min_size=2, max_size=2),
    enter_next_epoch=st.booleans(),
    chunked=st.booleans(),
)
@example(  # the same world size throughout: the very same batches as the uninterrupted run
    n=45, seed=2, ordering="buckets:3", uneven="split", worlds=[3, 3], cuts=[7, 0],
    enter_next_epoch=False, chunked=False,
)  # fmt: skip
def test_files_elastic_resume_chains(
    n, seed, ordering, uneven, worlds, cuts, enter_next_epoch, chunked
):
    """``files`` through fresh loaders and JSON states on W -> W' -> W'' ranks (at step 0,
    mid-epoch, at an epoch's end or across it): every sequence (chunked: every chunk, rows cut
    to their windows) once per epoch, equal steps, steps numbered without gaps; the state
    carries the segment history; with the same world size, the uninterrupted run's batches."""
    if len(file_bounds(n, seed)) - 1 < 2 * max(worlds):
        return  # fewer files than sub-epochs x ranks: refused (tested in test_files_plan)
    make = loader_factory(
        files_corpus(n, seed),
        **(CHUNKED if chunked else PLAN),
        ordering=ordering,
        uneven=uneven,
        distribution="files",
        partition_epoch=2,
    )
    try:
        check_chain(make, worlds, cuts[: len(worlds) - 1], 3, enter_next_epoch)
    except ResumeError as e:  # drop on more ranks than have remainders: it would cut the rest
        assert uneven == "drop" and "no batch" in str(e) and "Fix: resume on at most" in str(e)


def test_files_elastic_state_carries_the_history_and_continues_on_load() -> None:
    make = loader_factory(files_corpus(97, 2), **PLAN, ordering="laplace:.5", distribution="files")
    with make(0, 2) as loader:
        batches = loader.epoch(1)
        next(batches)
        state = loader.state_dict()
        batches.close()
    assert state["planning"] == "indexed"
    resumed = make(1, 3)
    resumed.load_state_dict(state)
    assert resumed.state_dict() == {**state, "world_size": 3}  # loaded, not started: as saved
    batches = resumed.epoch(1)
    assert resumed.state_dict()["segment_history"] == [[2, 1]]
    next(batches)
    later = resumed.state_dict()
    batches.close()
    assert later["segment_world_size"] == 3 and later["steps"] == 2
    assert later["segment_start"] == state["seqs_consumed"] < later["seqs_consumed"]


def test_states_of_the_other_planning_are_refused_by_name() -> None:
    src = corpus(40, 1)
    indexed = sl.SeqLoader(src, ordering="laplace", **PLAN)
    plain = sl.SeqLoader(src, ordering="laplace", max_seqs=3, max_frames=40, planning="global")
    with pytest.raises(ResumeError, match="planning='global'"):
        indexed.load_state_dict(plain.state_dict())
    with pytest.raises(ResumeError, match="planning='indexed'"):
        plain.load_state_dict(indexed.state_dict())
    assert "planning" not in plain.state_dict()  # global states keep their format


def test_states_of_another_indexed_algorithm_are_refused_by_name() -> None:
    """A state saved by ``seqloader-plan-indexed/2`` (no ``plan_algorithm`` field; its plan
    fingerprint differs) or by another version is refused naming both algorithms."""
    from seqloader.plan.indexed.planner import INDEXED_ALGORITHM

    loader = sl.SeqLoader(corpus(40, 1), ordering="laplace", **PLAN)
    state = loader.state_dict()
    assert state["plan_algorithm"] == INDEXED_ALGORITHM
    old = {k: v for k, v in state.items() if k != "plan_algorithm"}
    old["plan_fingerprint"] = "0" * 32
    now = re.escape(INDEXED_ALGORITHM)
    with pytest.raises(ResumeError, match=rf"'seqloader-plan-indexed/2' or earlier.*{now}"):
        loader.load_state_dict(old)
    other = {**state, "plan_algorithm": "seqloader-plan-indexed/14", "plan_fingerprint": "0" * 32}
    with pytest.raises(ResumeError, match="'seqloader-plan-indexed/14'"):
        loader.load_state_dict(other)
    prior = {**state, "plan_algorithm": "seqloader-plan-indexed/12", "plan_fingerprint": "0" * 32}
    with pytest.raises(ResumeError, match=rf"'seqloader-plan-indexed/12'.*{now}.*Resume with"):
        loader.load_state_dict(prior)  # the algorithm before /13's per-rank random mix slots
    with pytest.raises(ResumeError, match="plan fingerprint"):  # same algorithm: other data
        loader.load_state_dict({**state, "plan_fingerprint": "0" * 32})


def test_audit_and_report_of_an_indexed_epoch() -> None:
    src = corpus(60, 3)
    loader = sl.SeqLoader(src, ordering="buckets:3", audit=True, min_seq_length=2, **PLAN)
    seen = [
        i for b in loader.epoch(1) for i, m in zip(b.seq_indices.tolist(), b.mask.tolist()) if m
    ]
    report = loader.report()
    assert report is not None and report.planned_seqs == len(seen)
    assert sorted(seen) == sorted(loader.planner.sub_epoch_order(1).tolist())
    assert sum(report.filtered.values()) + len(seen) == 60


@pytest.mark.slow
def test_files_elastic_resume_with_workers_over_hdf_files(tmp_path) -> None:
    """``files`` over 10 RETURNN HDF files: loaders with 2 DataLoader workers each, stopped
    mid-epoch on 3 ranks, resumed on 2, then on 4 (through JSON states): each epoch exactly once,
    and the stages on the first world size are the uninterrupted run without workers (C3, C5)."""
    whole = index_corpus(60, seed=5, max_len=20, dim=1)
    paths = []
    for f in range(10):
        part = range(6 * f, 6 * f + 6)
        data = [whole.read(i)["data"] for i in part]
        path = tmp_path / f"part-{f}.hdf"
        sl.write_hdf(path, sl.MemorySource({"data": data}, [whole.tags[i] for i in part]))
        paths.append(path)
    options = {**PLAN, "ordering": "laplace:.5", "distribution": "files", "partition_epoch": 2}
    reference = run_all(loader_factory(sl.HDFSource(paths), **options), 3, 3)
    make = loader_factory(sl.HDFSource(paths), **options, num_workers=2)
    check_chain(make, [3, 2, 4], [2, 3], 3, reference=reference)


def test_int32_memory_mapped_lengths_are_not_copied(tmp_path) -> None:
    from seqloader.plan import PlanOptions
    from seqloader.plan.indexed.planner import IndexedPlanner
    from seqloader.sources.columns import write_store

    lengths = np.random.default_rng(0).integers(1, 100, 1000).astype(np.int32)
    store = write_store(tmp_path / "l.cols", "x", {"len.data": lengths}, {})
    view = store.column("len.data")
    options = PlanOptions(ordering="laplace", max_frames=500, planning="indexed")
    planner = IndexedPlanner({"data": view}, options)
    assert planner.lengths is view or np.shares_memory(planner.lengths, view)
    share = planner.global_plan(1, 4).rank_share(1)
    assert len(share) == planner.global_plan(1, 4).steps


def test_large_corpora_share_one_bucket_index_file_per_node(tmp_path, monkeypatch) -> None:
    """Above ``MIN_SEQUENCES`` the loader maps the node's bucket index from one file (built by the
    first loader, mapped by the next), and plans exactly what an in-memory index plans."""
    from seqloader.loading import bucket_store

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(bucket_store, "MIN_SEQUENCES", 10)
    src = corpus(60, 2)
    first = sl.SeqLoader(src, ordering="buckets:3", rank=1, world_size=2, **PLAN)
    files = list((tmp_path / "seqloader" / "buckets").glob("*.seqcols"))
    assert len(files) == 1
    mtime = files[0].stat().st_mtime_ns
    second = sl.SeqLoader(src, ordering="buckets:3", rank=0, world_size=2, **PLAN)
    assert files[0].stat().st_mtime_ns == mtime  # mapped, not built again
    assert isinstance(second.planner.index.members, np.ndarray)
    assert not second.planner.index.members.flags.writeable  # a view of the mapped file
    other = sl.SeqLoader(src, ordering="buckets:4", rank=0, world_size=2, **PLAN)
    assert other.planner.index is not None
    assert len(list((tmp_path / "seqloader" / "buckets").glob("*.seqcols"))) == 2  # other options
    monkeypatch.setattr(bucket_store, "MIN_SEQUENCES", 10**9)
    in_memory = sl.SeqLoader(src, ordering="buckets:3", rank=1, world_size=2, **PLAN)
    mapped, held = first.plan(1), in_memory.plan(1)
    assert len(mapped) == len(held) > 0
    assert all(np.array_equal(a, b) for a, b in zip(mapped, held, strict=True))


def test_audit_of_a_chunked_indexed_epoch() -> None:
    """The audit checks each delivered row's chunk and window; the report counts chunks, and the
    sequences without a chunk as filtered."""
    loader = sl.SeqLoader(
        corpus(60, 3), ordering="buckets:3", audit=True, **CHUNKED, min_seq_length=2
    )
    rows = [
        (i, c, int(n))
        for b in loader.epoch(1)
        for i, c, n, m in zip(
            b.seq_indices.tolist(), b.chunks.tolist(), b.lengths["data"], b.mask.tolist()
        )
        if m
    ]
    units = loader.planner.sub_epoch_units(1)
    assert sorted((i, c) for i, c, _ in rows) == sorted(
        zip(units.seqs.tolist(), units.chunks.tolist())
    )
    assert all(1 <= n <= 3 for _, _, n in rows)  # windows of 3, the last ones shorter
    report = loader.report()
    assert report is not None and report.planned_seqs == len(rows)


def test_audit_of_an_indexed_epoch_with_the_length_key_unchunked() -> None:
    """Chunking only ``classes`` (``data``, the length key, whole in every chunk): the audit
    checks each delivered row's chunk and window, every row's ``data`` is its whole sequence,
    and the delivered chunks are the planned ones."""
    lengths = np.random.default_rng(3).integers(1, 12, 30)
    source = sl.MemorySource(
        {
            "data": [np.full((int(t), 1), i, np.float32) for i, t in enumerate(lengths)],
            "classes": [np.full(-(-int(t) // 2), i, np.int32) for i, t in enumerate(lengths)],
        }
    )
    loader = sl.SeqLoader(source, ordering="buckets:3", chunking={"classes": (2, 1)}, audit=True,
                          max_seqs=3, max_frames=40)  # fmt: skip
    assert loader.planner.options.planning == "indexed"
    rows = []
    for b in loader.epoch(1):
        for i, c, whole, n, m in zip(
            b.seq_indices.tolist(),
            b.chunks.tolist(),
            b.lengths["data"].tolist(),
            b.lengths["classes"].tolist(),
            b.mask.tolist(),
        ):
            if m:
                rows.append((i, c))
                assert whole == lengths[i] and 1 <= n <= 2
    units = loader.planner.sub_epoch_units(1)
    assert sorted(rows) == sorted(zip(units.seqs.tolist(), units.chunks.tolist()))
    report = loader.report()
    assert report is not None and report.planned_seqs == len(rows)


@pytest.mark.slow
def test_chunked_same_batches_with_dataloader_workers() -> None:
    """C3 for chunked indexed plans: 2 real worker processes deliver the batches (rows cut to
    their windows) of the run without workers, resumed on the same and on another world size."""
    options = {**CHUNKED, "ordering": "buckets:3", "partition_epoch": 2}
    reference = run_all(loader_factory(corpus(47, seed=4), **options), 2, 3)
    make = loader_factory(corpus(47, seed=4), **options, num_workers=2)
    check_chain(make, [2, 2], [4], 3, reference=reference)
    check_chain(make, [2, 3, 1], [5, 3], 3, reference=reference)


@pytest.mark.slow
def test_chunked_files_same_batches_with_dataloader_workers() -> None:
    """C3 for chunked ``files``: 2 worker processes deliver the batches of the run without
    workers, resumed on the same and on other world sizes (the segment history replayed)."""
    options = {**CHUNKED, "ordering": "laplace:.5", "distribution": "files", "partition_epoch": 2}
    options["audit"] = True  # each rank's rows against the planned chunks, resumed too
    reference = run_all(loader_factory(files_corpus(60, seed=3), **options), 2, 3)
    make = loader_factory(files_corpus(60, seed=3), **options, num_workers=2)
    check_chain(make, [2, 2], [4], 3, reference=reference)
    check_chain(make, [2, 3, 1], [3, 2], 3, reference=reference)


@settings(max_examples=15, deadline=None)
@given(
    n=st.integers(0, 40),
    seed=st.integers(0, 5),
    ordering=st.sampled_from(["laplace:.5", "buckets:3"]),
    partition_epoch=st.integers(1, 2),
    world=st.integers(1, 3),
    cuts=st.lists(st.integers(0, 25), min_size=2, max_size=2),
)
def test_chunked_random_seed_offset_resumes_batch_for_batch(
    n, seed, ordering, partition_epoch, world, cuts
) -> None:
    """Chunked ``random_seed_offset``: each rank delivers its own order of the sub-epoch's chunks
    (audited), and a chain of saves and loads on the same world size delivers the uninterrupted
    run's batches."""
    make = loader_factory(
        corpus(n, seed),
        **CHUNKED,
        ordering=ordering,
        partition_epoch=partition_epoch,
        distribution="random_seed_offset",
        audit=True,
    )
    check_own_orders(make, world, cuts, partition_epoch + 1)


@settings(max_examples=20, deadline=None)
@given(
    n=st.integers(0, 45),
    seed=st.integers(0, 5),
    ordering=st.sampled_from(["laplace:.5", "buckets:3"]),
    uneven=st.sampled_from(["split", "pad", "drop"]),
    worlds=st.lists(st.integers(1, 4), min_size=1, max_size=3),
    cuts=st.lists(st.integers(0, 25), min_size=2, max_size=2),
    partition_epoch=st.integers(1, 2),
)
def test_chunked_epoch_wise_filter_resume_chains(
    n, seed, ordering, uneven, worlds, cuts, partition_epoch
) -> None:
    """Chunked with ``epoch_wise_filter`` on epoch 1 (not the next): the kept sequences' chunks
    once per epoch through fresh loaders and JSON states, elastic or not (with sub-epochs: each
    a set of whole sequences)."""
    make = loader_factory(
        corpus(n, seed),
        **CHUNKED,
        ordering=ordering,
        uneven=uneven,
        partition_epoch=partition_epoch,
        epoch_wise_filter={(1, 1): {"max_mean_len": 7}},
    )
    check_chain(make, worlds, cuts[: len(worlds) - 1], partition_epoch + 1)


@pytest.mark.slow
def test_chunked_random_seed_offset_with_dataloader_workers() -> None:
    """C3 for chunked ``random_seed_offset``: 2 worker processes deliver each rank's own batches
    of the run without workers, resumed on the same world size."""
    options = {**CHUNKED, "ordering": "laplace:.5", "partition_epoch": 2}
    options["distribution"] = "random_seed_offset"
    reference = run_all(loader_factory(corpus(47, seed=4), **options), 2, 3)
    make = loader_factory(corpus(47, seed=4), **options, num_workers=2)
    assert run_all(make, 2, 3) == reference
    check_own_orders(make, 2, [4, 3], 3)


def test_chunked_files_plans_map_the_nodes_chunk_table(tmp_path, monkeypatch) -> None:
    """Chunked ``files``: the node's file holds the chunks per (file, chunk bucket), mapped by
    the next loader, which plans what an in-memory index plans."""
    from seqloader.loading import bucket_store

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(bucket_store, "MIN_SEQUENCES", 10)
    src = files_corpus(60, 2)
    options = {**CHUNKED, "ordering": "laplace:.5", "distribution": "files"}
    sl.SeqLoader(src, rank=1, world_size=2, **options)
    mapped = sl.SeqLoader(src, rank=1, world_size=2, **options)
    table = mapped.planner.index.file_counts
    assert not table.flags.writeable  # a view of the node's mapped file
    assert table.shape == (len(file_bounds(60, 2)) - 1, len(mapped.planner.bucket_counts))
    monkeypatch.setattr(bucket_store, "MIN_SEQUENCES", 10**9)
    in_memory = sl.SeqLoader(src, rank=1, world_size=2, **options)
    a, b = (x.planner.global_plan(1, 2).rank_share(1) for x in (mapped, in_memory))
    np.testing.assert_array_equal(a.seqs, b.seqs)
    np.testing.assert_array_equal(a.chunks, b.chunks)


def test_chunked_plans_map_the_nodes_length_index(tmp_path, monkeypatch) -> None:
    """Chunked: the node's file holds the sequences grouped by length (its own file, keyed by
    the chunking), mapped by the next loader, and plans what an in-memory index plans."""
    from seqloader.loading import bucket_store

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setattr(bucket_store, "MIN_SEQUENCES", 10)
    src, options = corpus(60, 2), {**CHUNKED, "ordering": "buckets:3"}
    first = sl.SeqLoader(src, rank=1, world_size=2, **options)
    sl.SeqLoader(src, rank=1, world_size=2, **{**options, "chunking": "4:2"})
    assert len(list((tmp_path / "seqloader" / "buckets").glob("*.seqcols"))) == 2
    second = sl.SeqLoader(src, rank=1, world_size=2, **options)
    assert not second.planner.index.members.flags.writeable  # a view of the mapped file
    monkeypatch.setattr(bucket_store, "MIN_SEQUENCES", 10**9)
    in_memory = sl.SeqLoader(src, rank=1, world_size=2, **options)
    for loader in (first, second):
        a, b = (
            loader.planner.global_plan(1, 2).rank_share(1),
            in_memory.planner.global_plan(1, 2).rank_share(1),
        )
        np.testing.assert_array_equal(a.seqs, b.seqs)
        np.testing.assert_array_equal(a.chunks, b.chunks)


@settings(max_examples=12, deadline=None)
@given(
    n=st.integers(0, 40),
    seed=st.integers(0, 5),
    limits=st.sampled_from(
        [
            {"max_frames": {"*": 40}},
            {"max_frames": 40, "batch_cost": "packed"},
            {"max_frames": 40, "max_packed_frames": 30},
        ]
    ),
    worlds=st.lists(st.integers(1, 4), min_size=2, max_size=3),
    cuts=st.lists(st.integers(0, 20), min_size=2, max_size=2),
)
def test_bucket_limits_resume_elastically(n, seed, limits, worlds, cuts) -> None:
    """``buckets:N`` with per-key ``max_frames``, ``batch_cost="packed"`` or ``max_packed_frames``
    (the plans of ``test_plan_indexed_bucket_limits``) through the real loader: save -> JSON ->
    fresh loaders on ``W -> W' -> W''`` continue the plan, each unit of an epoch delivered once
    (the resume harness)."""
    make = loader_factory(corpus(n, seed), ordering="buckets:3", max_seqs=3, **limits)
    assert make(0, 1).planner.options.planning == "indexed"
    check_chain(make, worlds, cuts[: len(worlds) - 1], 2)
