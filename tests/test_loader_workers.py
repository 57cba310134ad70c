"""C3 worker independence with real DataLoader workers: what a rank receives (indices, tags, masks,
lengths and the padded tensors' bytes) is identical for ``num_workers`` 0..3, fork and spawn, any
``prefetch_factor``, with a random transform; persistent workers serve epoch after epoch, also after
an epoch abandoned midway. Ranks are simulated with ``rank=``/``world_size=``."""

from __future__ import annotations

import multiprocessing as mp
from collections import Counter
from itertools import islice

import numpy as np
import pytest

import seqloader as sl
from conftest import batch_record
from seqloader.loading.execute import transform_rng
from seqloader.trainer.checks import CheckOptions

# 3 workers on a 2-core machine is deliberate here (more workers than cores must not change data)
pytestmark = pytest.mark.filterwarnings("ignore:This DataLoader will create:UserWarning")

SEED = 7
PLAN = {"ordering": "laplace:.6", "max_seqs": 5, "max_frames": 120, "seed": SEED}
QUIET = CheckOptions(empty="off")  # the empty sequence is deliberate


def corpus(n: int = 41) -> sl.MemorySource:
    """Two keys of different lengths and dtypes, one empty sequence."""
    rng = np.random.default_rng(0)
    lens = rng.integers(1, 30, size=n)
    lens[5] = 0
    feats = [rng.standard_normal((t, 3)).astype(np.float32) for t in lens]
    labels = [rng.integers(0, 50, size=max(1, t // 3)).astype(np.int32) for t in lens]
    return sl.MemorySource({"data": feats, "classes": labels}, tags=[f"utt-{i}" for i in range(n)])


def jitter(seq: dict, rng: np.random.Generator) -> dict:
    """A random transform: noise and a random gain, drawn from the per-sequence RNG."""
    data = seq["data"]
    noise = rng.standard_normal(data.shape).astype(np.float32)
    return {**seq, "data": data * np.float32(rng.uniform(0.5, 2.0)) + noise}


def run(
    epochs: tuple[int, ...], rank: int = 0, world_size: int = 1, transform=jitter, **options
) -> dict[int, list[tuple]]:
    """Records of every batch of ``epochs`` for one rank (one loader, persistent workers)."""
    with sl.SeqLoader(
        corpus(),
        rank=rank,
        world_size=world_size,
        transform=transform,
        checks=QUIET,
        **{**PLAN, **options},
    ) as loader:
        return {e: [batch_record(b) for b in loader.epoch(e)] for e in epochs}


# ---- worker counts, prefetch, start methods ----

WORKER_SETTINGS = [
    {"num_workers": 1},
    {"num_workers": 2, "prefetch_factor": 1},
    {"num_workers": 3, "prefetch_factor": 4},
]


@pytest.mark.parametrize(
    ("world_size", "uneven", "ordering", "planning"),
    [
        (1, "split", PLAN["ordering"], "auto"),
        (3, "split", PLAN["ordering"], "auto"),
        (1, "pad", PLAN["ordering"], "auto"),
        (3, "pad", PLAN["ordering"], "global"),  # the greedy algorithm's plans through workers
        (3, "split", "buckets:3", "auto"),  # synced length buckets, quadratic cost
    ],
)
def test_every_rank_gets_the_same_batches_for_any_worker_setting(
    world_size, uneven, ordering, planning
):
    epochs = (1, 2, 3)  # partition_epoch=2: epochs 1+2 are one full epoch, 3 starts the next
    options = {
        "partition_epoch": 2,
        "uneven": uneven,
        "multiprocessing_context": "fork",
        "ordering": ordering,
        "planning": planning,
    }
    if ordering.startswith("buckets"):
        options["batch_cost"] = "quadratic:40"
    per_rank = {}
    for rank in range(world_size):
        reference = run(epochs, rank, world_size, num_workers=0, **options)
        for setting in WORKER_SETTINGS:
            assert run(epochs, rank, world_size, **setting, **options) == reference, setting
        per_rank[rank] = reference
    # union over ranks: every sequence exactly once per full epoch (real entries), equal steps
    for epoch in epochs:
        assert len({len(per_rank[r][epoch]) for r in range(world_size)}) == 1
    full_epoch = Counter(
        i
        for r in range(world_size)
        for e in (1, 2)
        for _, _, seqs, _, mask, _, _ in per_rank[r][e]
        for i, real in zip(seqs, mask)
        if real
    )
    assert full_epoch == Counter(range(len(corpus())))


def test_spawned_workers_give_the_same_batches():
    """Spawn is slow (every worker imports torch): one loader, one spawned worker, a rank's share
    of epoch 1 and the head of epoch 2, whose state resumes exactly the rest without workers.
    Global planning (the greedy plan pickled; indexed plans reach spawned workers in the sources'
    tests); two workers splitting the work: the fork tests above."""
    options = {"world_size": 2, "rank": 1, "planning": "global"}
    reference = run((1, 2), **options, num_workers=0)
    spawn = {"num_workers": 1, "multiprocessing_context": "spawn", "persistent_workers": True}
    with sl.SeqLoader(corpus(), transform=jitter, checks=QUIET, **PLAN, **options, **spawn) as ld:
        assert ld.planner.options.planning == "global"
        assert [batch_record(b) for b in ld.epoch(1)] == reference[1]
        head = [batch_record(b) for b in islice(ld.epoch(2), 3)]
        state = ld.state_dict()
    assert (state["epoch"], state["steps"], state["epoch_complete"]) == (2, 3, False)
    with sl.SeqLoader(corpus(), transform=jitter, checks=QUIET, **PLAN, **options) as fresh:
        fresh.load_state_dict(state)
        assert head + [batch_record(b) for b in fresh.epoch(2)] == reference[2]


def test_random_transform_is_keyed_by_seed_epoch_and_index():
    """The transform's RNG is a function of (seed, epoch, sequence index): the same for any worker,
    new in every epoch."""
    src = corpus()
    records = run((1, 2), num_workers=2, ordering="default", max_seqs=1, max_frames=None)
    for epoch in (1, 2):
        for _, _, (i,), _, _, _, tensors in records[epoch]:
            expected = jitter(src.read(i), transform_rng(SEED, epoch, i))["data"]
            data = dict((key, raw) for key, _, _, raw in tensors)["data"]
            assert data == expected.astype(np.float32).tobytes()
    # each sequence (with frames) is augmented differently in epoch 2 than in epoch 1
    differ = [a[6] != b[6] for a, b in zip(records[1], records[2]) if a[5][1][1][0] > 0]
    assert all(differ) and len(differ) == len(src) - 1


# ---- persistent workers over epochs ----


def test_persistent_workers_serve_each_epochs_new_plan():
    src = corpus()
    with sl.SeqLoader(src, num_workers=2, transform=jitter, checks=QUIET, **PLAN) as loader:
        first = [batch_record(b) for b in loader.epoch(1)]
        workers = {p.pid for p in mp.active_children()}
        assert len(workers) >= 2
        later = {e: [batch_record(b) for b in loader.epoch(e)] for e in (2, 3, 4)}
        assert workers <= {p.pid for p in mp.active_children()}  # the same processes
        for epoch, got in {1: first, **later}.items():
            planned = [tuple(x.tolist()) for x in loader.plan(epoch)]
            assert [r[2] for r in got] == planned
            assert [r[1] for r in got] == list(range(len(planned)))
    # the random ordering really gave new plans, and a fresh main-process run agrees
    assert len({tuple(r[2] for r in got) for got in {1: first, **later}.values()}) == 4
    assert run((1, 2, 3, 4), num_workers=0) == {1: first, **later}


@pytest.mark.parametrize(("num_workers", "prefetch_factor"), [(0, None), (2, 1), (2, 3), (3, 4)])
def test_an_abandoned_epoch_does_not_leak_into_the_next(num_workers, prefetch_factor):
    """Break out of epoch 1 after 2 batches (workers have prefetched more), then run epochs 2 and
    3, and epoch 1 again: each equals an uninterrupted run's."""
    reference = run((1, 2, 3), num_workers=0)
    kw = {"num_workers": num_workers, "prefetch_factor": prefetch_factor}
    with sl.SeqLoader(corpus(), transform=jitter, checks=QUIET, **PLAN, **kw) as loader:
        partial = [batch_record(b) for b in islice(loader.epoch(1), 2)]
        assert partial == reference[1][:2]
        assert [batch_record(b) for b in loader.epoch(2)] == reference[2]
        for b in loader.epoch(3):  # abandoned after its first batch
            assert batch_record(b) == reference[3][0]
            break
        assert [batch_record(b) for b in loader.epoch(1)] == reference[1]
        assert [batch_record(b) for b in loader.epoch(3)] == reference[3]
