"""Mixed corpora through the public API on real HDF files: ``SeqLoader`` over a ``ConcatSource``
with ``mix``: per-corpus exactly-once over corpus epochs with DataLoader workers and several
ranks, ``Batch.corpus``, per-corpus reports, transform draws per use, elastic resume, bad input."""

from __future__ import annotations

import json
import math
import tempfile
from collections import Counter
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import seqloader as sl
from conftest import MIX_ORDERINGS
from seqloader.errors import OptionError

RNG = np.random.default_rng(11)
SIZES = {"libri": 14, "ted": 6}


@pytest.fixture(scope="module")
def corpora(tmp_path_factory) -> sl.ConcatSource:
    """libri: one HDF file; ted: features and alignments in two files joined by tag."""
    root = tmp_path_factory.mktemp("corpora")
    lens = RNG.integers(3, 25, SIZES["libri"])
    libri = sl.MemorySource(
        {
            "data": [RNG.standard_normal((int(n), 4)).astype(np.float32) for n in lens],
            "classes": [RNG.integers(0, 7, int(n) // 2 + 1).astype(np.int32) for n in lens],
        },
        [f"libri/{i}" for i in range(SIZES["libri"])],
        {"classes": 7},
    )
    sl.write_hdf(str(root / "libri.hdf"), libri)
    tags = [f"ted/{i}" for i in range(SIZES["ted"])]
    lens = RNG.integers(3, 25, SIZES["ted"])
    feat = sl.MemorySource(
        {"data": [RNG.standard_normal((int(n), 4)).astype(np.float32) for n in lens]}, tags
    )
    align = sl.MemorySource(
        {"data": [RNG.integers(0, 7, int(n) // 2 + 1).astype(np.int32) for n in lens][::-1]},
        tags[::-1],
        {"data": 7},
    )
    sl.write_hdf(str(root / "ted_feat.hdf"), feat)
    sl.write_hdf(str(root / "ted_align.hdf"), align)
    ted = sl.ZipSource(
        {
            "feat": sl.HDFSource(str(root / "ted_feat.hdf")),
            "align": sl.HDFSource(str(root / "ted_align.hdf")),
        },
        data_map={"data": ("feat", "data"), "classes": ("align", "data")},
    )
    return sl.ConcatSource({"libri": sl.HDFSource(str(root / "libri.hdf")), "ted": ted})


def marker(seq: dict, rng: np.random.Generator) -> dict:
    """A transform that writes one random draw into the first frame: shows which draw each use
    of a sequence got."""
    data = seq["data"].copy()
    data[0, 0] = rng.random()
    return {**seq, "data": data}


def run_epochs(loaders: list[sl.SeqLoader], epochs) -> dict[int, list]:
    """Every rank's batches of each epoch (ranks simulated in one process)."""
    return {e: [list(loader.epoch(e)) for loader in loaders] for e in epochs}


def delivered(batches) -> list[int]:
    return [i for b in batches for i, m in zip(b.seq_indices.tolist(), b.mask.tolist()) if m]


@pytest.mark.parametrize("num_workers", [0, 2])
def test_every_corpus_epoch_exactly_once_across_ranks(corpora, num_workers):
    """libri at 0.5 and ted at 1.5 over 4 epochs on 2 ranks: every libri sequence twice (2
    corpus epochs), every ted sequence 6 times (6 corpus epochs), each epoch what the plan holds;
    equal steps; the audit agrees; Batch.corpus names each sequence's corpus."""
    loaders = [
        sl.SeqLoader(
            corpora,
            mix={"libri": 0.5, "ted": 1.5},
            ordering="laplace:.4",
            max_seqs=3,
            partition_epoch=2,
            rank=r,
            world_size=2,
            num_workers=num_workers,
            audit=True,
        )
        for r in range(2)
    ]
    total: Counter = Counter()
    try:
        for e, per_rank in run_epochs(loaders, range(1, 9)).items():
            assert len({len(b) for b in per_rank}) == 1, "equal steps"
            got = [i for batches in per_rank for i in delivered(batches)]
            planned = loaders[0].planner.sub_epoch_order(e).tolist()
            assert Counter(got) == Counter(planned)
            total.update(got)
            for batches in per_rank:
                for b in batches:
                    assert b.corpus is not None and len(b.corpus) == len(b.seq_tags)
                    assert [t.split("/")[0] for t in b.seq_tags] == b.corpus
        libri = range(SIZES["libri"])
        ted = range(SIZES["libri"], SIZES["libri"] + SIZES["ted"])
        assert {total[i] for i in libri} == {2} and {total[i] for i in ted} == {6}
    finally:
        for loader in loaders:
            loader.close()


def test_two_uses_in_one_epoch_draw_differently_and_workers_do_not_matter(corpora):
    """At rate 3 every ted sequence is in an epoch three times (three corpus epochs); the
    transform's RNG is keyed by (seed, corpus epoch, sequence), so the three uses draw three
    values, the same with 0 or 2 workers."""
    draws = {}
    for workers in (0, 2):
        with sl.SeqLoader(
            corpora, mix={"ted": 3.0}, ordering="random", max_seqs=4, num_workers=workers,
            transform=marker,
        ) as loader:  # fmt: skip
            seen: dict[int, list[float]] = {}
            for b in loader.epoch(1):
                for row, i in enumerate(b.seq_indices.tolist()):
                    seen.setdefault(i, []).append(float(b["data"][row, 0, 0]))
        draws[workers] = seen
    assert draws[0] == draws[2]
    for i in range(SIZES["libri"], SIZES["libri"] + SIZES["ted"]):
        assert len(draws[0][i]) == 3 and len(set(draws[0][i])) == 3


def test_per_corpus_report(corpora):
    with sl.SeqLoader(corpora, mix={"libri": 0.5, "ted": 2.0}, max_seqs=4) as loader:
        for e in (1, 2):
            batches = list(loader.epoch(e))
            report = loader.report()
            libri, ted = report.corpora["libri"], report.corpora["ted"]
            assert (libri.seqs, ted.seqs) == (7, 12) and libri.planned_seqs == 7
            frames = sum(
                int(b.lengths["data"][row])
                for b in batches
                for row, c in enumerate(b.corpus)
                if c == "ted"
            )
            assert ted.frames == frames
            assert libri.corpus_epochs_done == 0.5 * e and ted.corpus_epochs_done == 2.0 * e
        assert (libri.corpus_epoch, libri.fraction) == (2, 0.0)
        text = report.format()
        assert "libri 7 seqs" in text and "1 corpus epochs done" in text
        d = report.to_dict()
        assert d["corpora"]["ted"]["corpus_epochs_done"] == 4.0
    with sl.SeqLoader(corpora, max_seqs=4) as plain:  # no mix: counts, no progress
        list(plain.epoch(1))
        assert plain.report().corpora["ted"].seqs == SIZES["ted"]
        assert plain.report().corpora["ted"].corpus_epochs_done is None


def test_elastic_resume_mid_epoch_with_repeats(corpora):
    """2 ranks stop mid-epoch (an epoch holding ted sequences twice), the state goes through
    JSON, 3 ranks finish: consumed + remaining = the epoch's slots, each use once."""
    options = {"mix": {"libri": 1.0, "ted": 2.0}, "ordering": "random", "max_seqs": 2}
    first = [sl.SeqLoader(corpora, rank=r, world_size=2, **options) for r in range(2)]
    consumed = []
    its = [loader.epoch(1) for loader in first]
    for _ in range(4):
        for it in its:
            consumed.extend(delivered([next(it)]))
    state = json.loads(json.dumps(first[0].state_dict()))
    assert state == json.loads(json.dumps(first[1].state_dict()))
    assert state["seqs_consumed"] == len(consumed) == 16
    second = [sl.SeqLoader(corpora, rank=r, world_size=3, **options) for r in range(3)]
    rest = []
    for loader in second:
        loader.load_state_dict(state)
        rest.append(list(loader.epoch(1)))
    assert len({len(b) for b in rest}) == 1
    got = consumed + [i for batches in rest for i in delivered(batches)]
    order = first[0].planner.sub_epoch_order(1).tolist()
    assert Counter(got) == Counter(order) and len(order) == 14 + 2 * 6


def test_bad_mixes_through_the_loader(corpora):
    with pytest.raises(
        OptionError, match=r"unknown corpus name\(s\) \['swb'\].*\['libri', 'ted'\]"
    ):
        sl.SeqLoader(corpora, mix={"swb": 1.0})
    with pytest.raises(OptionError, match="expected a number > 0"):
        sl.SeqLoader(corpora, mix={"ted": 0})
    # the attack: a rate that would make numpy allocate terabytes fails at construction, naming
    # the option and the bound, before any epoch is planned
    with pytest.raises(
        OptionError, match=r"mix\['libri'\]: got rate 1e\+09.*bound is 2,147,483,648"
    ):
        sl.SeqLoader(corpora, mix={"libri": 1e9})
    with pytest.warns(sl.DataWarning, match=r"mix\['ted'\]: rate 1e-09 gives corpus 'ted'"):
        sl.SeqLoader(corpora, mix={"ted": 1e-9})
    with pytest.raises(OptionError, match="ConcatSource"):
        sl.SeqLoader(corpora.sources["libri"], mix={"libri": 1.0})
    with pytest.raises(OptionError, match=r"corpus 'libri' has no admitted sequences \(all its 14"):
        sl.SeqLoader(corpora, mix={"ted": 1.0}, min_seq_length=1000)


def test_audit_counts_planned_uses():
    """A sequence planned twice (two corpus epochs) must arrive twice: once is a missing use,
    three times a repeat; skipped and dropped uses are allowed gaps."""
    from seqloader.trainer.audit import Stream, verify

    def run(delivered, skipped=(), dropped=0):
        order = np.array([1, 1, 2, 3])
        s = Stream(order, 0, dropped, np.array(delivered), np.array(skipped, dtype=np.int64))
        return verify([s], 5, lambda i: f"t{i}")

    assert run([1, 2, 1, 3])["missing"] == 0
    short = run([1, 2, 3])
    assert short["missing"] == 1 and "missing: sequence 1" in short["examples"][0]
    extra = run([1, 1, 1, 2, 3])
    assert extra["repeated"] == 1 and "(3 times, planned 2)" in extra["examples"][0]
    assert run([1, 2, 3], skipped=[1])["skipped"] == 1
    assert run([1, 2, 3], skipped=[1])["missing"] == 0
    assert run([1, 1, 2], dropped=1)["dropped"] == 1 and run([1, 1, 2], dropped=1)["missing"] == 0


@st.composite
def loader_mixes(draw: st.DrawFn) -> dict:
    sizes = draw(st.lists(st.integers(1, 9), min_size=2, max_size=3))
    names = [f"c{i}" for i in range(len(sizes))]
    rates = {n: draw(st.sampled_from([0.5, 0.75, 1.0, 1.5, 2.0, 2.5])) for n in names}
    partition = draw(st.integers(1, 2))
    return {
        "sizes": sizes,
        "names": names,
        "options": {
            "mix": rates,
            "partition_epoch": partition,
            "ordering": draw(st.sampled_from(MIX_ORDERINGS)),
            "max_seqs": draw(st.integers(1, 4)),
            "seed": draw(st.integers(0, 5)),
        },
        "full_epochs": draw(st.integers(1, 3)),
        "worlds": (draw(st.integers(1, 3)), draw(st.integers(1, 3))),
        "cut": (draw(st.integers(1, 3 * partition)), draw(st.floats(0, 1))),
    }


@settings(max_examples=12, deadline=None)
@given(loader_mixes())
def test_seqloader_mix_exactly_once_per_corpus_epoch_with_elastic_resume(m):
    """Through SeqLoader on HDF files: random sizes, rates, orderings, partition_epoch; W ranks
    stop mid-epoch, the state goes through JSON, W' ranks go on. Every epoch delivers its planned
    slots; over the full epochs corpus c (N sequences, rate r) delivered T = floor(F·r·N) uses:
    every sequence K = T // N or K + 1 times, exactly T % N of them K + 1 times (each corpus epoch
    once, the last one partly)."""
    with tempfile.TemporaryDirectory() as tmp:
        parts = {}
        for name, n in zip(m["names"], m["sizes"]):
            lens = RNG.integers(1, 9, n)
            src = sl.MemorySource(
                {"data": [np.ones((int(k), 2), np.float32) for k in lens]},
                [f"{name}/{i}" for i in range(n)],
            )
            sl.write_hdf(f"{tmp}/{name}.hdf", src)
            parts[name] = sl.HDFSource(f"{tmp}/{name}.hdf")
        source = sl.ConcatSource(parts)
        P = m["options"]["partition_epoch"]
        epochs = range(1, m["full_epochs"] * P + 1)
        cut_epoch, cut_at = m["cut"]
        w, w2 = m["worlds"]
        loaders = [sl.SeqLoader(source, rank=r, world_size=w, **m["options"]) for r in range(w)]
        total: Counter = Counter()
        for e in epochs:
            got = []
            if e == cut_epoch:
                its = [loader.epoch(e) for loader in loaders]
                for _ in range(int(cut_at * loaders[0].steps(e))):
                    for it in its:
                        got.extend(delivered([next(it)]))
                state = json.loads(json.dumps(loaders[0].state_dict()))
                loaders = [
                    sl.SeqLoader(source, rank=r, world_size=w2, **m["options"]) for r in range(w2)
                ]
                for loader in loaders:
                    loader.load_state_dict(state)
            per_rank = [list(loader.epoch(e)) for loader in loaders]
            assert len({len(b) for b in per_rank}) == 1, "equal steps"
            got += [i for batches in per_rank for i in delivered(batches)]
            assert Counter(got) == Counter(loaders[0].planner.sub_epoch_order(e).tolist())
            total.update(got)
        bounds = np.concatenate([[0], np.cumsum(m["sizes"])])
        for c, name in enumerate(m["names"]):
            n, r = m["sizes"][c], Fraction(m["options"]["mix"][name])
            uses = math.floor(m["full_epochs"] * r * n)
            counts = [total[i] for i in range(bounds[c], bounds[c + 1])]
            k, extra = divmod(uses, n)
            assert sum(counts) == uses and set(counts) <= {k, k + 1}
            assert counts.count(k + 1) == extra


def test_spawned_workers_open_the_joined_files_themselves(corpora):
    """ZipSource and ConcatSource hold no file handle: a spawned worker gets them pickled and
    opens every HDF file lazily in its own process; the batches equal those read in the main
    process."""

    def batches(**workers) -> list[tuple]:
        with sl.SeqLoader(corpora, mix={"ted": 2.0}, max_seqs=3, **workers) as loader:
            return [
                (b.seq_tags, b.corpus, b["data"].numpy().tobytes(), b["classes"].numpy().tobytes())
                for b in loader.epoch(1)
            ]

    assert batches(num_workers=1, multiprocessing_context="spawn") == batches(num_workers=0)
