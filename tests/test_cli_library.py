"""The library pieces behind the command line: ``plan.simulate`` checked against real loaders and
real DataLoader workers, the synthetic corpus, and DATA config resolution."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import get_worker_info

import seqloader as sl
from seqloader.cli.config import DataConfig, SourceSpec, load_data
from seqloader.errors import DataError, OptionError
from seqloader.plan.greedy.planner import Planner
from seqloader.plan.planners import make_planner
from seqloader.plan.simulate import load_of, simulate, worker_items
from seqloader.synthetic import SyntheticSpec, synthetic_corpus, synthetic_lengths

SMALL = SyntheticSpec(num_seqs=57, median_frames=30, max_frames=120, seed=7)


@pytest.fixture(scope="module")
def small() -> sl.MemorySource:
    return synthetic_corpus(SMALL)


def planner_of(src: sl.Source, **options) -> Planner:
    return Planner({k: src.lengths(k) for k in src.keys}, sl.PlanOptions(**options), src.tags)


# ---- simulate: against real loaders ----


@pytest.mark.parametrize(
    "options",
    [
        {"max_seqs": 4, "ordering": "random", "partition_epoch": 2},
        {"max_frames": 200, "ordering": "laplace:.10", "max_seq_length": 100, "uneven": "pad"},
        # the greedy algorithm said, so this case keeps checking it when 'auto' plans it indexed
        {"max_seqs": 1, "distribution": "random_seed_offset", "planning": "global"},
    ],
)
def test_simulation_matches_what_each_rank_loader_delivers(small, options):
    """Per rank and epoch, the simulated steps/seqs/frames/padding equal a real SeqLoader's report
    for that rank (num_workers=0; worker counts don't change content, see the next test)."""
    W = 3
    per_key = {k: small.lengths(k) for k in small.keys}
    planner = make_planner(per_key, sl.PlanOptions(**options), small.tags)  # as the loader (auto)
    epochs = [1, 2]
    sim = simulate(planner, W, 2, epochs)
    lengths = small.lengths("data")
    for e in sim.epochs:
        for rank in range(W):
            loader = sl.SeqLoader(small, rank=rank, world_size=W, **options)
            seqs = frames = padded = repeats = 0
            for batch in loader.epoch(e.epoch):
                real = batch.mask.numpy()
                idx = batch.seq_indices.numpy()
                seqs += int(real.sum())
                repeats += int((~real).sum())
                frames += int(lengths[idx[real]].sum())
                padded += len(idx) * int(lengths[idx].max())
            sim_rank = e.ranks[rank].load
            assert (sim_rank.batches, sim_rank.seqs, sim_rank.frames) == (
                loader.report().steps,
                seqs,
                frames,
            )
            assert (sim_rank.padded_frames, sim_rank.repeats) == (padded, repeats)


def test_worker_w_executes_items_w_w_plus_n(small):
    """The simulation's claim about torch's dispatch, checked with real workers: a transform
    records which worker read each sequence."""

    def stamp(seq: dict, rng: np.random.Generator) -> dict:
        info = get_worker_info()
        return {**seq, "worker": np.full(1, info.id if info else -1, dtype=np.int64)}

    N = 2
    planner = planner_of(small, max_seqs=5, ordering="random", seed=3)
    sim = simulate(planner, 1, N, [1])
    expected_items = worker_items(sim.epochs[0].steps, N)
    with sl.SeqLoader(small, max_seqs=5, ordering="random", seed=3, num_workers=N,
                      transform=stamp) as loader:  # fmt: skip
        workers = [int(b["worker"][0, 0]) for b in loader.epoch(1)]
    got = [np.flatnonzero(np.asarray(workers) == w) for w in range(N)]
    for w in range(N):
        np.testing.assert_array_equal(got[w], expected_items[w])
    per_worker_batches = [load.batches for load in sim.epochs[0].ranks[0].workers]
    assert per_worker_batches == [len(g) for g in got]


@settings(max_examples=40, deadline=None)
@given(
    n=st.integers(1, 80),
    world=st.integers(1, 6),
    workers=st.integers(0, 4),
    parts=st.integers(1, 3),
    max_seqs=st.integers(1, 9),
    uneven=st.sampled_from(["split", "pad"]),
    seed=st.integers(0, 5),
)
def test_simulation_finds_shard_plans_exactly_once(
    n, world, workers, parts, max_seqs, uneven, seed
):
    lengths = np.random.default_rng(seed).integers(1, 50, size=n)
    planner = Planner(
        {"data": lengths},
        sl.PlanOptions(
            ordering="random", max_seqs=max_seqs, partition_epoch=parts, uneven=uneven, seed=seed
        ),
    )
    sim = simulate(planner, world, workers, list(range(1, parts + 1)))
    assert sim.ok, [f.message for f in sim.findings if not f.ok]
    total_seqs = sum(r.load.seqs for e in sim.epochs for r in e.ranks)
    assert total_seqs == n
    for e in sim.epochs:
        for r in e.ranks:
            assert len(r.workers) == max(workers, 1)
            assert sum(w.batches for w in r.workers) == r.load.batches == e.steps
            assert sum(w.frames for w in r.workers) == r.load.frames


def test_simulation_checks_random_seed_offset_per_rank_and_flags_drop():
    lengths = np.arange(1, 31)
    rso = Planner({"data": lengths}, sl.PlanOptions(max_seqs=4, distribution="random_seed_offset"))
    sim = simulate(rso, 3, 1, [1])
    c1 = sim.findings[0]
    assert sim.ok and c1.ok  # each rank passes over all the data once: C1 per rank
    assert "each rank uses every admitted sequence (30) exactly once" in c1.message
    assert sum(r.load.seqs for r in sim.epochs[0].ranks) == 3 * 30
    drop = Planner({"data": lengths}, sl.PlanOptions(max_seqs=4, uneven="drop"))
    sim = simulate(drop, 3, 1, [1])
    assert not sim.ok
    assert sim.epochs[0].dropped == 30 - 6 * 4  # 8 batches, 6 kept (2 rounds of 3)
    assert "never used" in sim.findings[0].message
    # same options with world size 1: nothing to drop, nothing to flag
    assert simulate(rso, 1, 0, [1, 2]).ok and simulate(drop, 2, 0, [1]).ok


def test_partly_simulated_full_epoch_only_checks_for_repeats():
    planner = Planner({"data": np.arange(1, 41)}, sl.PlanOptions(max_seqs=3, partition_epoch=4))
    sim = simulate(planner, 2, 1, [3, 4, 5])  # parts 3-4 of full epoch 1, part 1 of full epoch 2
    assert sim.ok
    message = sim.findings[0].message
    assert "simulated part of each of full epochs 1..2" in message
    assert "exactly once" not in message  # no full epoch was simulated completely
    assert sum(r.load.seqs for e in sim.epochs for r in e.ranks) == 10 + 10 + 10
    sim = simulate(planner, 2, 1, [1, 2, 3, 4, 5])
    assert "exactly once in full epoch 1 (epochs 1..4)" in sim.findings[0].message


def test_simulate_rejects_bad_arguments(small):
    planner = planner_of(small, max_seqs=3)
    with pytest.raises(OptionError, match="world_size"):
        simulate(planner, 0, 1, [1])
    with pytest.raises(OptionError, match="num_workers"):
        simulate(planner, 1, -1, [1])
    with pytest.raises(OptionError, match="epochs"):
        simulate(planner, 1, 1, [])
    with pytest.raises(OptionError, match="epoch"):
        simulate(planner, 1, 1, [0])


def test_load_of_counts_padding_like_the_loader_report(small):
    planner = planner_of(small, max_frames=150, ordering="sorted")
    load = load_of(planner.global_plan(1, 1).batches, planner.lengths)
    with sl.SeqLoader(small, max_frames=150, ordering="sorted") as loader:
        for _ in loader.epoch(1):
            pass
        report = loader.report()
    assert (load.frames, load.seqs, load.batches) == (report.frames, report.seqs, report.steps)
    assert load.padding_ratio == pytest.approx(report.padding_ratio)
    json.dumps(simulate(planner, 2, 2, [1]).to_dict())  # JSON-able as the CLI prints it


# ---- synthetic corpus ----


def test_synthetic_corpus_is_deterministic_and_speech_shaped():
    spec = SyntheticSpec(num_seqs=200, median_frames=80, sigma=0.6, min_frames=12, max_frames=400)
    a, b = synthetic_corpus(spec), synthetic_corpus(spec)
    assert a.fingerprint() == b.fingerprint()
    assert synthetic_corpus(SyntheticSpec(num_seqs=200, seed=1)).fingerprint() != a.fingerprint()
    lengths = a.lengths("data")
    np.testing.assert_array_equal(lengths, synthetic_lengths(spec))
    assert lengths.min() >= 12 and lengths.max() <= 400
    assert 60 <= np.median(lengths) <= 100  # log-normal around the median
    assert np.mean(lengths) > np.median(lengths)  # right tail
    assert len(set(a.tags)) == 200
    for i in (0, 99, 199):
        s = a.read(i)
        assert s["data"].dtype == np.float32 and s["data"].shape == (lengths[i], 40)
        assert s["classes"].shape == (lengths[i],) and s["classes"].max() < spec.num_classes
        # labels = the alignment with repeats collapsed; neighbours differ
        keep = np.r_[True, s["classes"][1:] != s["classes"][:-1]]
        np.testing.assert_array_equal(s["labels"], s["classes"][keep])
        np.testing.assert_array_equal(b.read(i)["data"], s["data"])
    assert a.schema["classes"].sparse and a.schema["classes"].vocab_size == spec.num_classes
    assert a.schema["labels"].sparse and not a.schema["data"].sparse


def test_synthetic_features_carry_the_class():
    """Frames of one class cluster around its mean, so a model can learn the demo task."""
    spec = SyntheticSpec(num_seqs=20, noise=0.5)
    src = synthetic_corpus(spec)
    x = np.concatenate([src.read(i)["data"] for i in range(20)])
    y = np.concatenate([src.read(i)["classes"] for i in range(20)])
    means = np.stack([x[y == c].mean(0) for c in range(spec.num_classes)])
    nearest = np.argmin(((x[:, None, :] - means[None]) ** 2).sum(-1), axis=1)
    assert np.mean(nearest == y) > 0.95


@pytest.mark.parametrize(
    "bad", [{"num_seqs": 0}, {"max_frames": 5, "min_frames": 10}, {"sigma": -1.0}]
)
def test_synthetic_spec_validates(bad):
    with pytest.raises(OptionError):
        SyntheticSpec(**bad)


# ---- DATA resolution ----


def test_load_data_resolves_suffixes(tmp_path, small):
    from seqloader.sources.hdf_write import write_hdf

    h = tmp_path / "a.h5"
    write_hdf(h, small)
    cfg = load_data([h, h])
    assert cfg.source == SourceSpec("hdf", (str(h), str(h)))
    assert len(cfg.open()) == 2 * len(small)
    for name, kind in (("m.jsonl", "manifest"), ("c.zip", "oggzip")):
        (tmp_path / name).write_bytes(b"")
        assert load_data(tmp_path / name).source.kind == kind
    with pytest.raises(DataError, match="directory"):
        load_data(tmp_path)


def test_config_options_merge_and_validate(tmp_path):
    cfg = DataConfig(
        SourceSpec("synthetic", (), {"num_seqs": 5}), {"max_seqs": 3, "num_workers": 2}
    )
    assert cfg.plan_options().max_seqs == 3
    assert cfg.plan_options({"max_seqs": 7, "seed": None}).max_seqs == 7  # None: not given
    assert cfg.worker_options().num_workers == 2
    assert len(cfg.open()) == 5
    with pytest.raises(OptionError, match="max_frame"):
        DataConfig(SourceSpec("synthetic"), {"max_frame": 3})
    with pytest.raises(OptionError, match="source kind"):
        SourceSpec("parquet")
    with pytest.raises(OptionError, match="synthetic"):
        SourceSpec("synthetic", (), {"num_seq": 5}).open()


def test_audio_config_features_table(tmp_path):
    from seqloader.synthetic.audio import write_audio_corpus

    corpus = write_audio_corpus(tmp_path, 3, seconds=(0.3, 0.5), seed=1)
    cfg = tmp_path / "audio.toml"
    cfg.write_text(
        f'[source]\nmanifest = "{corpus.jsonl}"\n[source.options]\nsample_rate = 8000\n'
        "features = {n_mels = 24}\n"
    )
    src = load_data(cfg).open()
    assert src.schema["data"].feature_shape == (24,)
    raw = tmp_path / "raw.json"
    raw.write_text(
        json.dumps({"source": {"oggzip": corpus.oggzip, "options": {"features": False}}})
    )
    assert "data" not in load_data(raw).open().keys
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"source": {"oggzip": corpus.oggzip, "options": {"features": 3}}}))
    with pytest.raises(OptionError, match="LogMel"):
        load_data(bad).open()


@pytest.mark.parametrize("planning", ["global", "indexed"])
@pytest.mark.parametrize("parts", [1, 2])
def test_sequences_an_epoch_wise_filter_leaves_out_are_not_never_used(planning, parts):
    # the filter keeps a set of its own per epoch: what it leaves out is counted, not missing
    lengths = {"data": np.random.default_rng(0).integers(5, 200, 300)}
    wise = {
        "epoch_wise_filter": {(1, 2): {"max_mean_len": 60}},
        "partition_epoch": parts,
        "ordering": "laplace:.20",
    }
    opts = sl.PlanOptions(max_seqs=6, max_frames=800, planning=planning, **wise)
    planner = make_planner(lengths, opts)
    epochs = list(range(1, 2 * parts + 1))
    sim = simulate(planner, 2, 1, epochs)
    left_out = sum(
        sum(planner.filtered(e).values()) - sum(planner.admission.filtered.values()) for e in epochs
    )
    assert left_out > 0
    assert sim.ok, [f.message for f in sim.findings]
    assert (
        f"({left_out} sequences left out by them) is used exactly once" in sim.findings[0].message
    )
    # a plan that loses sequences besides the filter's is still caught by the count
    dropping = make_planner(lengths, sl.PlanOptions(max_seqs=6, uneven="drop", **wise))
    sim = simulate(dropping, 4, 1, epochs)
    assert sum(e.dropped for e in sim.epochs) > 0
    c1 = sim.findings[0]
    assert not c1.ok and "but the epochs' own filters keep" in c1.message


def test_chunks_of_sequences_an_epoch_wise_filter_leaves_out_are_not_never_used():
    lengths = {"data": np.random.default_rng(1).integers(5, 60, 200)}
    opts = sl.PlanOptions(
        max_seqs=6, chunking=(20, 10), epoch_wise_filter={(1, 1): {"max_mean_len": 25}}
    )
    sim = simulate(make_planner(lengths, opts), 2, 1, [1, 2])
    assert sim.ok, [f.message for f in sim.findings]
    assert "sequences left out by them) is used exactly once" in sim.findings[0].message
