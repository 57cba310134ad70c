"""``simulate`` (what ``seqloader check`` runs) under ``distribution="random_seed_offset"``: every
rank passes over all the admitted data in its own order, so C1 is exactly once *per rank* (as
``tests/plan_contracts.py`` checks it), for both plannings, chunked, filtered by epoch, mixed;
a plan that repeats or loses a unit on one rank is still reported."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from seqloader.plan import GlobalPlan, PlanOptions, make_planner
from seqloader.plan.mix import Corpora
from seqloader.plan.simulate import simulate

LENGTHS = {"data": np.random.default_rng(0).integers(5, 200, 240)}
CORPORA = Corpora(("a", "b"), np.array([0, 160, 240]))
WISE = {"partition_epoch": 2, "epoch_wise_filter": {(1, 2): {"max_mean_len": 60}}}
SETS = {
    "plain": {},
    "chunked": {"chunking": (50, 25)},
    "filtered": WISE,
    "chunked, filtered": {"chunking": (50, 25), **WISE},
}


def planner_of(planning: str, **options):
    mixed = "mix" in options
    opts = PlanOptions(
        **{"ordering": "laplace:.20", "max_frames": 1500, "planning": planning, **options},
        distribution="random_seed_offset",
    )
    return make_planner(LENGTHS, opts, **({"corpora": CORPORA} if mixed else {}))


@pytest.mark.parametrize("planning", ["global", "indexed"])
@pytest.mark.parametrize("name", list(SETS))
def test_each_rank_uses_every_unit_once(planning, name):
    planner = planner_of(planning, **SETS[name])
    epochs = list(range(1, 2 * planner.options.partition_epoch + 1))  # two full epochs
    sim = simulate(planner, 3, 1, epochs)
    assert sim.ok, [f.message for f in sim.findings if not f.ok]
    c1 = sim.findings[0].message
    assert "each of the 3 ranks passes over all the data in its own order" in c1
    assert "exactly once" in c1 and "full epoch 2" in c1
    dropped = sum(e.dropped for e in sim.epochs)  # beyond the shortest rank: counted, said
    assert ("beyond the shortest rank's last step" in c1) == bool(dropped)
    # every rank took its whole pass (less what the plan counts as dropped)
    noun_units = sum(r.load.seqs for e in sim.epochs for r in e.ranks)
    planned = sum(len(planner.rank_order(e, r, 3)) for e in epochs for r in range(3))
    assert planned - noun_units == dropped


@pytest.mark.parametrize("chunked", [False, True])
def test_each_rank_passes_over_a_mix_once_per_corpus_epoch(chunked):
    extra = {"chunking": (50, 25)} if chunked else {}
    planner = planner_of("indexed", mix={"a": 0.5, "b": 2.0}, **extra)
    sim = simulate(planner, 3, 0, [1, 2])
    assert sim.ok, [f.message for f in sim.findings if not f.ok]
    c1 = sim.findings[0].message
    assert "on each, per corpus, every sequence exactly once per corpus epoch" in c1
    assert "b: 320 uses = stream 0..320 of 80 seqs" in c1  # one rank's pass, not three


class Mutated:
    """A planner whose plans are another's with ``change(batches) -> batches`` applied."""

    def __init__(self, planner, change):
        self._planner, self._change = planner, change

    def __getattr__(self, name):
        return getattr(self._planner, name)

    def global_plan(self, epoch, world_size, *args, **kwargs):
        plan = self._planner.global_plan(epoch, world_size, *args, **kwargs)
        return GlobalPlan(self._change(plan.batches), world_size, dropped=plan.dropped)


def twice(batches):  # the first real slot of rank 1 (batch 1) repeats its batch's second one
    seqs, chunks, lo = batches.seqs.copy(), batches.chunks, int(batches.bounds[1])
    seqs[lo] = seqs[lo + 1]
    if chunks is not None:
        chunks = chunks.copy()
        chunks[lo] = chunks[lo + 1]
    return dataclasses.replace(batches, seqs=seqs, chunks=chunks)


def lost(batches):  # rank 1's first slot becomes a filler: its unit is never used there
    real = batches.real.copy()
    real[int(batches.bounds[1])] = False
    return dataclasses.replace(batches, real=real)


@pytest.mark.parametrize("planning", ["global", "indexed"])
@pytest.mark.parametrize("name", ["plain", "chunked, filtered"])
def test_a_rank_using_a_unit_twice_or_missing_one_fails(planning, name):
    planner = planner_of(planning, **SETS[name])
    epochs = list(range(1, planner.options.partition_epoch + 1))
    assert simulate(planner, 3, 0, epochs).ok
    sim = simulate(Mutated(planner, twice), 3, 0, epochs)
    c1 = sim.findings[0]
    assert not sim.ok and not c1.ok
    assert "rank 1: " in c1.message and "used more than once" in c1.message
    sim = simulate(Mutated(planner, lost), 3, 0, epochs)
    c1 = sim.findings[0]
    assert not c1.ok and "of their own orders, but the plans count" in c1.message


def test_a_mix_rank_using_a_sequence_twice_fails():
    planner = planner_of("indexed", mix={"a": 0.5, "b": 2.0})
    c1 = simulate(Mutated(planner, twice), 3, 0, [1, 2]).findings[0]
    assert not c1.ok and c1.message.startswith("rank 1: ")
