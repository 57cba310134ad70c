"""``ShardSource`` on real ranks (forked after one torch import by ``tests/dist/launch_fork.py``:
gloo, one all_reduce per step, a DataLoader worker per rank; torchrun's own environment is
``test_distributed_torchrun.py``'s) over the DDP corpus written as 12 Lhotse Shar shards: every
rank opens the corpus at the same time (the shard index is built once, the others wait and map
it), ``distribution="files"`` gives each rank whole shards (disjoint), all ranks take the planned
number of steps, and every sequence comes once per epoch."""

from __future__ import annotations

import collections
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "dist"))
from ddp_common import LOADER_OPTIONS, build_corpus, read_log

import seqloader as sl
from seqloader.shards import write_shards
from test_distributed_torchrun import ALL_TAGS, launch

pytestmark = pytest.mark.slow

N_SHARDS = 12


@pytest.mark.parametrize("world", [2, 3])
def test_ranks_over_shar_shards(tmp_path: Path, world: int) -> None:
    corpus = build_corpus()
    shard_size = -(-len(corpus) // N_SHARDS)
    write_shards(corpus, tmp_path / "shar", "shar", shard_size=shard_size, feature_format="numpy")
    args = ["--workers", "1", "--distribution", "files", "--partition-epoch", "2"]
    args += ["--epochs", "2", "--shar", str(tmp_path / "shar")]
    rc, console = launch("fork", world, tmp_path, "shar", *args)
    assert rc == 0, console
    stores = sorted(p.name for p in (tmp_path / "shard-index").glob("*.cols"))
    # built once, whatever the number of ranks: the index and the planned lengths beside it
    assert len(stores) == 2, stores
    index, planned = sorted(stores, key=len)
    assert planned.startswith(index.removesuffix(".cols") + "-planned-")
    source = sl.ShardSource.lhotse_shar(tmp_path / "shar", index_dir=tmp_path / "shard-index")
    assert not source.index_built
    bounds = source.file_layout()
    shard_of = {
        source.tags[i]: int(f) for f in range(N_SHARDS) for i in range(bounds[f], bounds[f + 1])
    }
    seen: collections.Counter = collections.Counter()
    for epoch in (1, 2):
        loader = sl.SeqLoader(
            source, rank=0, world_size=world, distribution="files", partition_epoch=2,
            **LOADER_OPTIONS,
        )  # fmt: skip
        steps = loader.steps(epoch)
        shards = []
        for r in range(world):
            log = [e for e in read_log(tmp_path, "shar", r) if e["epoch"] == epoch]
            assert [e["step"] for e in log] == list(range(steps)), f"rank {r} epoch {epoch}"
            tags = [t for e in log for t in e["tags"]]
            seen.update(tags)
            shards.append({shard_of[t] for t in tags})
        for a in range(world):
            for b in range(a + 1, world):
                assert not shards[a] & shards[b], f"epoch {epoch}: ranks {a}, {b} share a shard"
    assert seen == collections.Counter({t: 1 for t in ALL_TAGS})  # epochs 1 + 2 = one full epoch
