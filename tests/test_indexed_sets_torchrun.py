"""The default planning (indexed) over real ranks, option set by option set: fixed orders
(``default``, ``sorted``), ``random:K``, ``sort_bin_shuffle_x2``, length filters
(``max_seq_length``/``min_seq_length``, ``epoch_wise_filter``, ``fixed_random_subset``), per-key
``max_frames`` (over the corpus with a second key, ``classes``, of other lengths: every batch
within every key's limit), and ``distribution="random_seed_offset"`` (each rank its own order of
all the data: every sequence once per rank). Also the sets both plannings refused before:
``buckets:N`` with ``batch_cost="packed"`` or with per-key ``max_frames`` and
``batch_cost="quadratic:Q"`` (every key's own quadratic cost), ``fixed_random_subset`` and
``epoch_wise_filter`` with ``distribution="files"`` (the corpus cut into 8 files),
``fixed_random_subset`` with a mix (the corpus as two corpora mixed at ``MIX_RATES``), and a mix
with ``random_seed_offset``. The sets indexed planning took over later: ``chunking`` of
``classes`` with the length key ``data`` whole (every chunk, ``TAG#CHUNK``, exactly once), and
``epoch_wise_filter`` over a sharded mix, over a mix of files and over a chunked ``laplace`` mix
(the unfiltered mix's pass less the filtered slots: the longest of the filtered sub-epoch; chunked,
every chunk of a kept slot). And one elastic resume (``files`` with ``buckets:3``): its
epoch begun on ``W - 1`` ranks, the state saved halfway and resumed on ``W``, exactly once across
both. (Orderings and limits whose loader path is one of these, e.g. ``reverse``, ``random``,
``sort_bin_shuffle``, ``batch_cost="packed"`` without buckets, ``max_packed_frames``, are
covered over real ranks by them and in process by the planning tests; ``sorted``, the fixed-order
path ``default`` runs, only in ``make chaos``: ``EXTENDED``.)

One launch runs every set in turn (``tests/dist/indexed_sets.py``: gloo, a blocking all_reduce per
step, DataLoader workers on each rank, the gathered audit on), after a launch on ``W - 1`` ranks
of the elastic set's first segment: 3 ranks (2 first) forked after one torch import with one
worker each in ``make test``; ``torchrun --standalone`` with 2 ranks (1 first) of 2 workers in
``make chaos``. Per set and sub-epoch: every rank takes the planned steps, each rank's batches
are the ones a single process plans for that rank (tags in order, fillers included), the ranks
together hold the sub-epoch of a single process planning alone (world size 1), and over the pass
every admitted sequence comes exactly once (what the filters leave out: counted by the plan and,
for length limits, the corpus's own lengths); under a mix, each admitted sequence of a corpus of
rate R comes floor(R) or ceil(R) times.
"""

from __future__ import annotations

import collections
import itertools
import json
import math
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent / "dist"))
from ddp_common import MIX_RATES, MIX_SPLIT, build_corpus, read_log, result_path
from indexed_sets import ELASTIC, EXTENDED, SETS, elastic_steps, set_corpus, set_options

import seqloader as sl
from fork_launches import run_forked
from seqloader.plan import BatchList
from seqloader.plan.chunks import chunk_counts
from test_distributed_torchrun import TIMEOUT_S, run_bounded, tail

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).parent / "dist" / "indexed_sets.py"
#: launcher -> (ranks, DataLoader workers per rank)
LAUNCHES = {"fork": (3, 1), "torchrun": (2, 2)}
CORPUS = build_corpus()
KEYED = set_corpus("max_frames_per_key")  # the same, with a second key
TAGS = [CORPUS.tag(i) for i in range(len(CORPUS))]
LENGTHS = dict(zip(TAGS, CORPUS.lengths("data").tolist()))
FILTERS = {"max_seq_length", "min_seq_length", "epoch_wise_filter", "fixed_random_subset"}


@pytest.fixture(scope="module")
def launches(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return {"factory": tmp_path_factory}


def launched(
    launches: dict, launcher: str, phase: str = "sets"
) -> tuple[Path, list[dict], list[list[dict]]]:
    """A launch, once per module, launcher and ``phase`` -> (its folder, each rank's result and
    log). ``elastic``: the elastic sets' first segments on ``W - 1`` ranks (their states in
    ``states/``); ``sets``: every other set on ``W`` ranks, then the elastic sets resumed."""
    key = (launcher, phase)
    if key not in launches:
        world, workers = LAUNCHES[launcher]
        args = ["--workers", str(workers), "--phase", phase]
        if phase == "elastic":
            world -= 1
            out = launches["factory"].mktemp(f"{launcher}-{phase}")
            (out / "states").mkdir()
            args += ["--sets", ",".join(ELASTIC), "--stop-half", str(out / "states")]
        else:
            states = launched(launches, launcher, "elastic")[0] / "states"
            out = launches["factory"].mktemp(f"{launcher}-{phase}")
            args += ["--resume-sets", ",".join(ELASTIC), "--resume", str(states)]
            if launcher == "fork":  # make test: not the sets only the extended launch runs
                args += ["--sets", ",".join(s for s in SETS if s not in ELASTIC | EXTENDED)]
        args += ["--out", str(out)]
        console = out / "console.txt"
        if launcher == "fork":
            rc = run_forked([str(world), "--script", "indexed_sets", *args], console, TIMEOUT_S)
            text = tail(console)
        else:
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone"]
            cmd += [f"--nproc_per_node={world}", "--monitor-interval=0.1", str(SCRIPT), *args]
            rc, text = run_bounded(cmd, console, TIMEOUT_S)
        launches[key] = (out, rc, text, world)
    out, rc, text, world = launches[key]
    assert rc == 0, text
    results = [json.loads(result_path(out, phase, r).read_text()) for r in range(world)]
    return out, results, [read_log(out, phase, r) for r in range(world)]


def batches_of(share: BatchList) -> list[tuple[list[str], list[bool]]]:
    """A rank's planned batches as its log names them: (tags in order, ``TAG#CHUNK`` in chunked
    plans, which slots are real)."""
    names = [TAGS[i] for i in share.seqs.tolist()]
    if share.chunks is not None:
        names = [f"{t}#{c}" for t, c in zip(names, share.chunks.tolist())]
    bounds = share.bounds.tolist()
    return [(names[a:b], share.real[a:b].tolist()) for a, b in itertools.pairwise(bounds)]


def units_of(options: dict) -> list[str]:
    """Every unit of the corpus: its tags, or under chunking each sequence's chunks
    (``TAG#CHUNK``) counted from the corpus's own lengths of the chunked key."""
    if "chunking" not in options:
        return TAGS
    ((key, (size, step)),) = options["chunking"].items()
    counts = chunk_counts(KEYED.lengths(key), size, step, 0).tolist()
    return [f"{t}#{c}" for t, n in zip(TAGS, counts) for c in range(n)]


def real_tags(batches: list[tuple[list[str], list[bool]]]) -> list[str]:
    return [t for tags, real in batches for t, m in zip(tags, real) if m]


def within_key_limits(options: dict, batches: list[tuple[list[str], list[bool]]]) -> None:
    """Per-key ``max_frames``: every batch (fillers included) fits every key's limit, by the
    corpus's own lengths, under the batch cost (``quadratic:Q``: each key's own)."""
    corpus = set_corpus_lengths(options)
    q = (
        int(options["batch_cost"].split(":")[1])
        if "quadratic" in options.get("batch_cost", "")
        else 0
    )
    for tags, _ in batches:
        for key, limit in options["max_frames"].items():
            longest = max(corpus[key][TAGS.index(t)] for t in tags)
            cost = longest * q + longest * longest if q else longest
            assert len(tags) * cost <= limit * (q or 1), (key, tags)


def set_corpus_lengths(options: dict) -> dict[str, list[int]]:
    corpus = KEYED if isinstance(options.get("max_frames"), dict) else CORPUS
    return {k: corpus.lengths(k).tolist() for k in options["max_frames"]}


LAUNCHERS = ["fork", pytest.param("torchrun", marks=pytest.mark.extended)]
#: (set, launcher): every set the main launch runs, on both launchers; ``EXTENDED``: torchrun only
SET_LAUNCHES = [
    pytest.param(name, launcher, marks=[pytest.mark.extended] if extended else [])
    for name in SETS
    if name not in ELASTIC
    for launcher, extended in [("fork", False), ("torchrun", True)]
    if launcher == "torchrun" or name not in EXTENDED
]


@pytest.mark.parametrize(("name", "launcher"), SET_LAUNCHES)
def test_option_set_over_real_ranks(launches: dict, launcher: str, name: str) -> None:
    _, results, logs = launched(launches, launcher)
    world = len(results)
    options = set_options(name)
    corpus = set_corpus(name)  # the same sequences and tags as CORPUS, maybe cut in parts
    probe = sl.SeqLoader(corpus, rank=0, world_size=world, **options)  # one process plans
    alone = sl.SeqLoader(corpus, rank=0, world_size=1, **options)
    assert probe.planner.options.planning == "indexed"  # the default resolved to indexed
    # random_seed_offset: each rank its own order of all the data (an epoch covers it W times)
    own_orders = options.get("distribution") == "random_seed_offset"
    seen: collections.Counter = collections.Counter()
    first: collections.Counter = collections.Counter()  # sub-epoch 1's
    filtered = 0
    for epoch in range(1, options.get("partition_epoch", 1) + 1):
        plan = probe.planner.global_plan(epoch, world)
        one = real_tags(batches_of(alone.planner.global_plan(epoch, 1).batches))
        here = []
        for r in range(world):
            done = results[r]["sets"][name]
            assert done["planning"] == "indexed", r
            got = done["epochs"][str(epoch)]
            assert (got["steps"], got["planned_steps"]) == (plan.steps, plan.steps), r
            assert got["complete"] and got["audit"]["ok"], got
            assert got["filtered"] == probe.planner.filtered(epoch), r  # the report's counts
            log = [e for e in logs[r] if e["set"] == name and e["epoch"] == epoch]
            assert [e["step"] for e in log] == list(range(plan.steps)), f"rank {r}"
            ran = [(e["tags"], e["real"]) for e in log]
            assert ran == batches_of(plan.rank_share(r)), f"rank {r}: not the planned batches"
            if isinstance(options.get("max_frames"), dict):
                within_key_limits(options, ran)
            here += real_tags(ran)
            if own_orders:  # each rank the whole (mixed) epoch of one rank alone
                assert plan.dropped == 0 and sorted(real_tags(ran)) == sorted(one), f"rank {r}"
                if "mix" not in options:  # every sequence once on each rank
                    assert sorted(one) == sorted(TAGS), f"rank {r}"
        if own_orders:
            seen.update(one)  # what each rank took
            continue
        assert sorted(here) == sorted(one), f"epoch {epoch}: not the plan of 1 rank"
        seen.update(here)
        first.update(here if epoch == 1 else [])
        filtered += sum(probe.planner.filtered(epoch).values())
    if "mix" in options:
        if "chunking" in options:  # a chunked mix: its slots (every chunk of one comes with it)
            seen, first = slots_of(options, seen), slots_of(options, first)
        if "epoch_wise_filter" in options:
            seen = mix_less_filtered(options, corpus, seen, first, filtered)
        within_rates(seen, probe.planner.admitted_mask)
        return
    if own_orders:
        return
    units = units_of(options)
    assert max(seen.values()) == 1 and len(seen) == len(units) - filtered  # exactly once
    if "min_seq_length" in options:  # the admitted sequences from the corpus's own lengths
        lengths = CORPUS.lengths("data")
        keep = (lengths >= options["min_seq_length"]) & (lengths <= options["max_seq_length"])
        assert sorted(seen) == sorted(t for t, k in zip(TAGS, keep) if k)
        over = int((lengths > options["max_seq_length"]).sum())  # counted under its first reason
        under = int((lengths < options["min_seq_length"]).sum())
        want = {f"data longer than max_seq_length={options['max_seq_length']}": over}
        want[f"data shorter than min_seq_length={options['min_seq_length']}"] = under
        assert probe.planner.filtered(1) == {k: c for k, c in want.items() if c}
    if "fixed_random_subset" in options:
        assert len(seen) == options["fixed_random_subset"]
    if not FILTERS & set(options):
        assert sorted(seen) == sorted(units) and filtered == 0  # nothing left out


def slots_of(options: dict, seen: collections.Counter) -> collections.Counter:
    """A chunked mix's uses of each sequence from its chunks' (``TAG#CHUNK``): every chunk of a
    slot comes with it, so each of a sequence's chunks comes as often as the others."""
    chunks: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for unit, uses in seen.items():
        tag, chunk = unit.rsplit("#", 1)
        chunks[tag][int(chunk)] = uses
    whole = collections.Counter(u.rsplit("#", 1)[0] for u in units_of(options))
    for tag, got in chunks.items():
        assert sorted(got) == list(range(whole[tag])) and len(set(got.values())) == 1, (tag, got)
    return collections.Counter({tag: got[0] for tag, got in chunks.items()})


def within_rates(seen: collections.Counter, admitted) -> None:
    """A mix's pass: each admitted sequence of a corpus of rate R floor(R) or ceil(R) times."""
    for i, tag in enumerate(TAGS):
        rate = MIX_RATES["a" if i < MIX_SPLIT else "b"]
        uses = {math.floor(rate), math.ceil(rate)} if admitted is None or admitted[i] else {0}
        assert seen[tag] in uses, (tag, seen[tag], rate)


def mix_less_filtered(
    options: dict,
    corpus: sl.Source,
    seen: collections.Counter,
    first: collections.Counter,
    filtered: int,
) -> collections.Counter:
    """``epoch_wise_filter`` over a mix (sub-epoch 1 filtered; sharded, chunked or over files): the
    ranks' pass is the unfiltered mix's (one process planning it alone) less ``filtered`` slots
    of sub-epoch 1, the longest of its slots, none made up later -> the unfiltered pass's counts
    (for ``within_rates``)."""
    plain = {k: v for k, v in options.items() if k != "epoch_wise_filter"}
    alone = sl.SeqLoader(corpus, rank=0, world_size=1, **plain)
    epochs = [
        collections.Counter(real_tags(batches_of(alone.planner.global_plan(e, 1).batches)))
        for e in range(1, options["partition_epoch"] + 1)
    ]
    if "chunking" in options:
        epochs = [slots_of(options, e) for e in epochs]
    whole = sum(epochs, collections.Counter())
    assert seen - first == whole - epochs[0]  # the sub-epochs the filter leaves alone: the same
    cut = epochs[0] - first  # the slots left out: the longest of sub-epoch 1
    assert not first - epochs[0] and sum(cut.values()) == filtered > 0
    assert max(LENGTHS[t] for t in first) <= min(LENGTHS[t] for t in cut)
    return whole


@pytest.mark.parametrize("launcher", LAUNCHERS)
@pytest.mark.parametrize("name", sorted(ELASTIC))
def test_elastic_resume_over_real_ranks(launches: dict, launcher: str, name: str) -> None:
    """Epoch 1 begun on ``W - 1`` ranks and stopped halfway, its state saved (rank 0, JSON) and
    resumed on ``W`` ranks: each segment's ranks take equal steps, the planned batches (the
    resumed ones as a process that loads the state plans them), and over both segments every
    sequence of the epoch comes exactly once."""
    world = LAUNCHES[launcher][0]
    _, results, logs = launched(launches, launcher)  # the resumed segment: after the other sets
    first = launched(launches, launcher, "elastic")
    options, corpus = set_options(name), set_corpus(name)
    seen: collections.Counter = collections.Counter()
    before = sl.SeqLoader(corpus, rank=0, world_size=world - 1, **options)
    plan = before.planner.global_plan(1, world - 1)
    stop = elastic_steps(plan.steps)
    for r, log in enumerate(first[2]):
        assert first[1][r]["sets"][name]["epochs"]["1"]["steps"] == stop, r
        ran = [(e["tags"], e["real"]) for e in log if e["set"] == name]
        assert ran == batches_of(plan.rank_share(r))[:stop], f"rank {r} of {world - 1}"
        seen.update(real_tags(ran))
    probe = sl.SeqLoader(corpus, rank=0, world_size=world, **options)
    probe.load_state_dict(json.loads((first[0] / "states" / f"{name}.json").read_text()))
    plan, position = probe._state.begin(1)  # what epoch() runs: the resumed segment
    assert position.steps == 0 and plan.steps > 0
    for r, log in enumerate(logs):
        done = results[r]["sets"][name]
        assert done["planning"] == "indexed", r
        got = done["epochs"]["1"]
        assert got["steps"] == plan.steps and got["complete"] and got["audit"]["ok"], got
        ran = [(e["tags"], e["real"]) for e in log if e["set"] == name]
        assert ran == batches_of(plan.rank_share(r)), f"rank {r} of {world}"
        seen.update(real_tags(ran))
    assert max(seen.values()) == 1 and sorted(seen) == sorted(TAGS)  # exactly once, both together
