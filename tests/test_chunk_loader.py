"""Chunked loading end to end: a ``SeqLoader`` over an HDF written by RETURNN's ``SimpleHDFWriter``
gives the same chunks, batches and values as RETURNN's torch pipeline over a RETURNN
``HDFDataset`` of the same file (``ReturnnDatasetIterDataPipe`` -> ``LenFilterDataPipe`` ->
``ChunkingIterDataPipe`` -> ``BatchingIterDataPipe``), for sub-epochs 1..4 of a
``partition_epoch=2`` laplace ordering, with real DataLoader workers (0 and 2); the audit checks
every chunk once; a mid-epoch resume continues with the same chunks.
"""

from __future__ import annotations

import dataclasses
import pickle
from pathlib import Path

import numpy as np
import pytest

from seqloader import HDFSource, SeqLoader
from seqloader.errors import DataError
from seqloader.loading import BatchSpec, execute
from seqloader.plan.chunks import chunk_spans

pipeline = pytest.importorskip("returnn.torch.data.pipeline")

CHUNKING = ({"data": 20, "classes": 5}, {"data": 12, "classes": 3})
MIN_CHUNK = 0  # per-key minimums would misalign the keys' chunk counts here
BATCH_SIZE = {"data": 100, "classes": 40}
MAX_SEQS = 6
MAX_LEN = {"data": 150}


def write_hdf(path: Path, n: int, seed: int) -> None:
    """``data``: 4-dim float features; ``classes``: one label per 4 frames (ceil), so chunks of
    (20, 12) frames and (5, 3) labels stay aligned."""
    from returnn.datasets.hdf import SimpleHDFWriter

    rng = np.random.default_rng(seed)
    writer = SimpleHDFWriter(str(path), dim=4, ndim=2)
    for i in range(n):
        frames = int(rng.integers(0, 180))
        x = rng.standard_normal((1, frames, 4)).astype(np.float32)
        y = rng.integers(0, 9, size=(1, -(-frames // 4))).astype(np.int32)
        writer.insert_batch(x, [frames], [f"utt-{i}"], extra={"classes": y})
    writer.close()


@pytest.fixture(scope="module")
def hdf(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("chunked") / "corpus.hdf"
    write_hdf(path, 40, seed=3)
    return path


def returnn_epochs(path: Path, epochs: range) -> dict[int, list[list[tuple[str, dict]]]]:
    """RETURNN's batches per sub-epoch: each row (tag, {key: values})."""
    from returnn.datasets.basic import init_dataset
    from returnn.torch.data import returnn_dataset_wrapper as wrapper

    dataset = init_dataset(
        {
            "class": "HDFDataset",
            "files": [str(path)],
            "seq_ordering": "laplace:.6",
            "partition_epoch": 2,
            "random_seed_offset": 0,
        }
    )
    out = {}
    for epoch in epochs:
        dataset.init_seq_order(epoch=epoch)
        pipe = wrapper.ReturnnDatasetIterDataPipe(
            dataset, reset_callback=wrapper.ReturnnDatasetResetNoOpCallback()
        )
        pipe = pipeline.LenFilterDataPipe(pipe, max_seq_length=MAX_LEN)
        pipe = pipeline.ChunkingIterDataPipe(pipe, CHUNKING, min_chunk_size=MIN_CHUNK)
        pipe = pipeline.BatchingIterDataPipe(pipe, batch_size=BATCH_SIZE, max_seqs=MAX_SEQS)
        out[epoch] = [
            [(str(d["seq_tag"]), {k: np.asarray(d[k]) for k in ("data", "classes")}) for d in b]
            for b in pipe
        ]
    return out


def loader_for(path: Path, num_workers: int, audit: bool = True) -> SeqLoader:
    return SeqLoader(
        HDFSource(path),
        ordering="laplace:.6",
        partition_epoch=2,
        seeding="returnn",
        seed=0,
        chunking=CHUNKING,
        min_chunk_size=MIN_CHUNK,
        max_frames=BATCH_SIZE,
        max_seqs=MAX_SEQS,
        max_seq_length=MAX_LEN,
        num_workers=num_workers,
        audit=audit,
        rank=0,
        world_size=1,
    )


def rows(batch) -> list[tuple[str, dict]]:
    out = []
    for j, tag in enumerate(batch.seq_tags):
        values = {}
        for key in ("data", "classes"):
            n = int(batch.lengths[key][j])
            values[key] = batch[key][j, :n].numpy()
        out.append((tag, values))
    return out


@pytest.mark.parametrize("num_workers", [0, 2])
def test_chunked_loader_gives_returnns_chunks_batches_and_values(hdf: Path, num_workers: int):
    epochs = range(1, 5)
    want = returnn_epochs(hdf, epochs)
    loader = loader_for(hdf, num_workers)
    try:
        for epoch in epochs:
            got = [rows(b) for b in loader.epoch(epoch)]
            assert [[t for t, _ in b] for b in got] == [[t for t, _ in b] for b in want[epoch]]
            for gb, wb in zip(got, want[epoch]):
                for (_tag, gv), (_, wv) in zip(gb, wb):
                    for key in ("data", "classes"):
                        np.testing.assert_array_equal(gv[key], wv[key].reshape(gv[key].shape))
            report = loader.report()
            assert report.audit is not None and report.audit.ok
        filtered = loader.planner.admission.filtered
        assert sum(filtered.values()) >= 1  # long ones by max_seq_length, empty ones: no chunk
    finally:
        loader.close()


def test_chunk_spans_and_mid_epoch_resume(hdf: Path) -> None:
    loader = loader_for(hdf, 0)
    batches = list(loader.epoch(1))
    b = batches[0]
    assert b.chunks is not None and set(b.spans) == {"data", "classes"}
    starts = b.spans["data"][:, 0].numpy()
    np.testing.assert_array_equal(starts, b.chunks.numpy() * 12)
    # resume after 3 steps: the rest are the same chunks, batch for batch
    again = loader_for(hdf, 0)
    it = again.epoch(1)
    for _ in range(3):
        next(it)
    state = again.state_dict()
    it.close()
    resumed = loader_for(hdf, 0)
    resumed.load_state_dict(state)
    rest = list(resumed.epoch(1))
    assert [list(x.seq_tags) for x in rest] == [list(x.seq_tags) for x in batches[3:]]
    assert [x.chunks.tolist() for x in rest] == [x.chunks.tolist() for x in batches[3:]]
    for x in (loader, again, resumed):
        x.close()


def test_worker_spec_carries_the_planners_windows(hdf: Path) -> None:
    """The loader builds one frozen ``WorkerSpec`` (it pickles, for spawned workers); the windows
    workers cut are ``chunk_spans`` of the planner's table, and chunks without chunking refuse."""
    loader = loader_for(hdf, 0)
    table = loader.planner.chunks
    assert table is not None
    worker = loader._execution.worker
    assert worker.chunk_spec == table.spec
    assert pickle.loads(pickle.dumps(worker)) == worker
    with pytest.raises(dataclasses.FrozenInstanceError):
        worker.seed = 1  # type: ignore[misc]
    seqs = np.flatnonzero(table.counts > 1)[:3]
    chunks = table.counts[seqs].astype(np.int64) - 1  # each sequence's last (shortest) window
    spec = BatchSpec(1, 0, seqs, np.ones(len(seqs), dtype=bool), chunks=chunks)
    got = execute(loader.source, spec, worker)
    whole = {key: table.whole[key][seqs] for key in table.spec}
    want = chunk_spans(table.spec, whole, chunks)
    assert set(got.spans) == set(want)
    for key in want:
        np.testing.assert_array_equal(got.spans[key], want[key])
    with pytest.raises(DataError, match="given no chunking"):
        execute(loader.source, spec, dataclasses.replace(worker, chunking=()))
    loader.close()


@pytest.mark.parametrize("num_workers", [0, 2])
def test_packed_layout_and_budget(hdf: Path, num_workers: int) -> None:
    """``batch_cost="packed"`` with ``layout="packed"``: each key is its rows concatenated, no
    padding, ``offsets`` its cu_seqlens; the same rows as the padded layout of the same plan; every
    batch's real frames within the budget (RETURNN's ``packed_batch_size``)."""

    def make(layout: str) -> SeqLoader:
        return SeqLoader(
            HDFSource(hdf),
            ordering="random",
            chunking=CHUNKING,
            batch_cost="packed",
            max_frames={"data": 300, "classes": 90},
            layout=layout,  # type: ignore[arg-type]
            num_workers=num_workers,
            rank=0,
            world_size=1,
        )

    packed, padded = make("packed"), make("padded")
    try:
        for p, q in zip(packed.epoch(1), padded.epoch(1), strict=True):
            assert p.seq_tags == q.seq_tags
            for key, limit in (("data", 300), ("classes", 90)):
                lens = p.lengths[key]
                offsets = p.offsets[key]
                assert offsets.dtype.is_signed and offsets.tolist()[0] == 0
                assert offsets.tolist()[1:] == lens.cumsum(0).tolist()
                assert p[key].shape[0] == int(lens.sum()) <= limit or len(lens) == 1
                for j in range(len(lens)):
                    a, b = int(offsets[j]), int(offsets[j + 1])
                    np.testing.assert_array_equal(p[key][a:b].numpy(), q[key][j, : b - a].numpy())
            assert not q.offsets
        # the report counts what was delivered: every row's frames packed, no padding
        p_report, q_report = packed.report(), padded.report()
        assert p_report.frames == q_report.frames > 0
        assert p_report.padded_frames == p_report.frames and p_report.padding_ratio == 0.0
        assert q_report.padded_frames > q_report.frames
    finally:
        packed.close()
        padded.close()


def test_report_counts_chunks_and_their_cost(hdf: Path) -> None:
    """The epoch report of a chunked epoch: steps as planned, each slot's cost its window."""
    loader = loader_for(hdf, 0, audit=False)
    try:
        batches = list(loader.epoch(1))
        report = loader.report()
        assert report.steps == len(batches) == loader.steps(1)
        plan = loader.global_plan(1)
        costs = loader.planner.slot_costs(plan.batches)
        spans = np.concatenate([b.spans["data"].numpy() for b in batches])
        np.testing.assert_array_equal(costs, spans[:, 1] - spans[:, 0])
    finally:
        loader.close()


# make chaos: the chunking reaches a spawned worker in the WorkerSpec, whose pickle round trip
# test_worker_spec_carries_the_planners_windows checks; a spawned worker building a plan's batches
# is test_loader_workers.py::test_spawned_workers_give_the_same_batches; chunks through (forked)
# workers: the 2-worker runs above
@pytest.mark.slow
@pytest.mark.extended
def test_spawned_workers_cut_the_same_chunks(hdf: Path) -> None:
    """Workers started with ``spawn`` (the chunking reaches them pickled) build the same batches,
    bytes included, as the main process."""

    def batches(**workers: object) -> list[tuple]:
        loader = SeqLoader(
            HDFSource(hdf),
            ordering="random",
            chunking=CHUNKING,
            max_frames=BATCH_SIZE,
            rank=0,
            world_size=1,
            **workers,  # type: ignore[arg-type]
        )
        try:
            return [
                (b.seq_tags, b.chunks.tolist(), b["data"].numpy().tobytes())
                for b in loader.epoch(1)
            ]
        finally:
            loader.close()

    # one spawned worker (each imports torch): the pickling is the point; two workers: fork tests
    assert batches(num_workers=1, multiprocessing_context="spawn") == batches(num_workers=0)


def test_a_sequence_is_read_and_transformed_once_per_batch() -> None:
    """Chunks of one sequence share a batch: it is read and transformed once, then cut; the
    transform's output is what is chunked (RETURNN chunks what its dataset yields)."""
    import seqloader as sl

    data = [np.arange(n, dtype=np.float32)[:, None] for n in (23, 5, 40, 17)]
    calls: list[int] = []

    def double(seq: dict, rng: np.random.Generator) -> dict:
        calls.append(int(seq["data"][-1, 0]) if len(seq["data"]) else -1)
        return {"data": seq["data"] * 2}

    source = sl.MemorySource({"data": data}, [f"s{i}" for i in range(4)])
    loader = SeqLoader(source, chunking="6:4", max_seqs=64, transform=double, rank=0, world_size=1)
    try:
        (batch,) = list(loader.epoch(1))  # one batch: every chunk of every sequence
        assert sorted(calls) == [4, 16, 22, 39]  # each sequence once
        for j, (i, c) in enumerate(zip(batch.seq_indices.tolist(), batch.chunks.tolist())):
            n = int(batch.lengths["data"][j])
            want = 2 * data[i][c * 4 : c * 4 + 6]
            np.testing.assert_array_equal(batch["data"][j, :n].numpy(), want)
    finally:
        loader.close()
