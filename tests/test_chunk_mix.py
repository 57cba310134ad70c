"""Chunking in mixed epochs (``mix``): every chunk of every selected slot is a planned unit that
carries its slot's corpus epoch. As properties over random corpora, rates, chunkings, orderings,
world sizes, ``partition_epoch`` and resume chains (W -> W' -> W''): consumed chunks are the
sub-epoch's (slot, chunk) units in order, each once, and per corpus every sequence is used
exactly once per corpus epoch; through ``SeqLoader``, workers change nothing and a transform
draws once per use (the chunks of one use share the draw, two uses differ)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import seqloader as sl
from plan_contracts import check_plan_contracts
from seqloader.plan import Planner, PlanOptions
from seqloader.plan.simulate import simulate
from test_mix_plan import mixes

pytestmark = [
    pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning"),
    pytest.mark.filterwarnings("ignore:mix.*sequences per epoch:seqloader.errors.DataWarning"),
]


def chunked(planner: Planner, chunking: str) -> Planner:
    """The same mix with ``chunking``."""
    options = PlanOptions(**{**planner.options.to_dict(), "chunking": chunking})
    return Planner({"data": planner.lengths}, options, corpora=planner.corpora)


# the same mixes unchunked: test_mix_plan.py; indexed planning's chunked mixes:
# test_plan_indexed_mix_chunks.py
@settings(max_examples=60, deadline=None)
@given(mixes(), st.sampled_from(["4:2", "5:5", "3:1", "7"]))
def test_every_chunk_of_every_use_once_across_resumes(m: dict, chunking: str) -> None:
    """Every chunk of every slot consumed over the resumes, in plan order, carrying its slot's
    corpus epoch; per corpus every sequence once per corpus epoch (the contracts)."""
    planner = chunked(m["planner"], chunking)
    assert planner.chunks is not None and planner.mix is not None
    check_plan_contracts(
        lambda: chunked(m["planner"], chunking),
        m["worlds"],
        m["cuts"],
        range(1, m["epochs"] + 1),
        ordered=True,
    )


@settings(max_examples=30, deadline=None)
@given(mixes(), st.integers(1, 4))
def test_check_simulates_a_chunked_mix(m: dict, world: int) -> None:
    """``seqloader check``'s simulation verifies C1 per chunk and per corpus epoch."""
    planner = chunked(m["planner"], "4:3")
    P = planner.options.partition_epoch
    sim = simulate(planner, world, 2, list(range(1, 2 * P + 1)))
    assert sim.ok, [f.message for f in sim.findings if not f.ok]


def mixed_source() -> sl.ConcatSource:
    def corpus(prefix: str, lengths: range) -> sl.MemorySource:
        data = [np.full((n, 1), i, "float32") for i, n in enumerate(lengths)]
        return sl.MemorySource({"data": data}, [f"{prefix}{i}" for i in range(len(lengths))])

    return sl.ConcatSource({"a": corpus("a", range(3, 30)), "b": corpus("b", range(5, 20))})


def noise(seq: dict, rng: np.random.Generator) -> dict:
    """A transform drawing one offset per call (per use of a sequence)."""
    return {"data": seq["data"] + np.float32(rng.integers(1, 10**6))}


def rows(loader: sl.SeqLoader, epoch: int) -> list[tuple[int, int, int, float]]:
    """(sequence, chunk, first frame, offset drawn) of every real row of an epoch."""
    out = []
    for batch in loader.epoch(epoch):
        assert batch.chunks is not None
        spans = batch.spans["data"].numpy()
        for j in range(batch.size):
            if not bool(batch.mask[j]):
                continue
            i = int(batch.seq_indices[j])
            offset = float(batch["data"][j, 0, 0]) - loader.source.read(i)["data"][0, 0]
            out.append((i, int(batch.chunks[j]), int(spans[j, 0]), offset))
    return out


def test_mixed_chunks_through_workers_draw_once_per_use() -> None:
    options = {"mix": {"a": 1.5, "b": 0.5}, "chunking": "6:4", "max_frames": 30, "seed": 2}
    got = {}
    for workers in (0, 2):
        with sl.SeqLoader(
            mixed_source(), transform=noise, num_workers=workers, audit=True, **options
        ) as loader:
            got[workers] = rows(loader, 1)
            audit = loader.report().audit
            assert audit is not None and audit.ok, audit.format()
            planner = loader.planner
    assert got[0] == got[2]  # workers change nothing (C3)
    order, uses = planner.sub_epoch_slots(1)
    assert planner.chunks is not None
    want_uses = np.repeat(uses, planner.chunks.counts[order])
    offsets: dict[tuple[int, int], set[float]] = {}
    for (i, _, _, offset), use in zip(got[0], want_uses.tolist(), strict=True):
        offsets.setdefault((i, use), set()).add(offset)
    assert all(len(v) == 1 for v in offsets.values())  # a use's chunks share one draw
    twice = {i for i, _ in offsets if sum(1 for j, _ in offsets if j == i) > 1}
    assert twice  # rate 1.5: some sequences are used twice in the epoch
    for i in twice:  # ... and draw anew per use
        draws = [next(iter(v)) for (j, _), v in offsets.items() if j == i]
        assert len(set(draws)) == len(draws)
