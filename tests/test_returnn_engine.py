"""``seqloader.returnn.use_in_engine()`` with RETURNN's real engine: ``python -m returnn CONFIG``
(rnn.py's entry) trains a tiny torch model (``get_model`` / ``train_step``) on CPU on HDF files
written by RETURNN's ``SimpleHDFWriter``; ``train_step`` appends each batch's sequence tags,
lengths and data sum to a file. The reference is RETURNN's own pipeline, run in the same test
(the same config without the one line). Each run is RETURNN's ``python -m returnn`` entry forked
from the session's launch server (``tests/fork_launches.py``; ``tests/dist/returnn_main.py``
imports RETURNN and torch once per session and gives each rank the environment of a plain run or
of ``torchrun --standalone``).

- one process, 0 workers: train (3 sub-epochs), dev and an ``eval_datasets`` entry get exactly
  RETURNN's batches (tags, order, values), and seqloader's epoch report is in RETURNN's log;
- 2 DataLoader workers: the same batches again (slow: worker processes);
- 2 ranks as torchrun starts them (gloo), ``dataset_distribution: "shard"``: every sequence exactly once per
  full epoch over the ranks, equal steps per rank (slow);
- killed by its own recorder mid sub-epoch 2, restarted (same and, in ``make chaos``, another
  number of ranks): the next sub-epochs are exactly an uninterrupted run's batches (slow);
- a MetaDataset and an OggZip corpus (features to float rounding): RETURNN's batches (slow);
- a sub-epoch whose plan gives some rank a step of filler repeats only is refused on every
  rank before its first batch (one rank failing mid-epoch left the others in the engine's
  all-reduce); otherwise ``num_seqs`` and ``complete_frac`` are the plan's, counted once;
- refusals: untested RETURNN versions, a second call, a call outside a RETURNN config, an
  extern_data key the loader lacks.
"""

from __future__ import annotations

import collections
import json
import os
import re
import shutil
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from seqloader.errors import OptionError

pytest.importorskip("returnn.torch.engine")
from fork_launches import run_forked
from seqloader.returnn import engine as hook
from test_distributed_torchrun import tail
from test_returnn_config import write_hdf

SRC = Path(__file__).resolve().parents[1] / "src"
HANG_BOUND_S = 300  # a hang fails the test instead of blocking the suite; nothing waits on it
N_SEQS = 37

CONFIG = textwrap.dedent(
    """\
    #!rnn.py
    import json, os, signal
    import torch

    _dir = os.path.dirname(os.path.abspath(__file__))
    _out = os.environ["SL_OUT"]
    if os.environ.get("SL_USE") == "1":
        import seqloader.returnn
        seqloader.returnn.use_in_engine()

    backend = "torch"
    task = "train"
    device = "cpu"
    log = [os.path.join(_out, "returnn.%s.log" % os.environ.get("RANK", "0"))]
    log_verbosity = 4
    model = os.path.join(_out, "model")
    num_epochs = 3
    _hdf = lambda name: {"class": "HDFDataset", "files": [os.path.join(_dir, name)], "cache_byte_size": 0}
    train = {
        "class": "HDFDataset", "files": [os.path.join(_dir, n) for n in ("a.hdf", "b.hdf")],
        "cache_byte_size": 0, "seq_ordering": "laplace:.4", "partition_epoch": 2,
    }
    if os.environ.get("SL_TRAIN") == "meta":  # the same files, joined by tag, in another order
        train = {
            "class": "MetaDataset",
            "datasets": {"feat": {**train, "seq_ordering": "default", "partition_epoch": 1},
                         "align": {**train, "files": train["files"][::-1]}},
            "data_map": {"data": ("feat", "data"), "classes": ("align", "classes")},
            "seq_order_control_dataset": "align",
        }
    dev = _hdf("b.hdf")
    eval_datasets = {"other": {**_hdf("a.hdf"), "seq_ordering": "random", "random_seed_offset": 3}}
    extern_data = {"data": {"dim": 5}, "classes": {"dim": 7, "sparse": True}}
    if os.environ.get("SL_TRAIN") == "oggzip":  # audio -> log-mel features, words, transcription
        train = {
            "class": "OggZipDataset", "path": os.environ["SL_OGGZIP"],
            "audio": {"features": "log_mel_filterbank", "num_feature_filters": 5,
                      "sample_rate": 16000},
            "targets": {"class": "Vocabulary", "vocab_file": os.environ["SL_VOCAB"]},
            "seq_ordering": "laplace:.3", "partition_epoch": 2,
        }
        dev = None
        eval_datasets = {}
        extern_data = {"data": {"dim": 5}, "classes": {"dim": 13, "sparse": True},
                       "orth": {"dim": 256, "sparse": True, "dtype": "uint8"}}
    batch_size = 120
    max_seqs = 5
    torch_dataloader_opts = {"num_workers": int(os.environ.get("SL_WORKERS", "0"))}
    if os.environ.get("SL_DIST"):
        torch_distributed = {"dataset_distribution": os.environ["SL_DIST"], "backend": "gloo"}
    optimizer = {"class": "sgd"}
    learning_rate = 0.01
    behavior_version = 21

    def get_model(*, epoch, step, **_):
        return torch.nn.Linear(5, 7)

    _written = []

    def train_step(*, model, extern_data, **_):
        import returnn.frontend as rf

        ctx = rf.get_run_ctx()
        x = extern_data["data"].raw_tensor
        y = extern_data["classes"].raw_tensor.long()
        if y.shape[1] == x.shape[1]:  # frame-wise classes
            loss = torch.nn.functional.cross_entropy(model(x).transpose(1, 2), y, reduction="none")
        else:
            loss = model(x).tanh()  # bounded: log-mel features are large
        ctx.mark_as_loss(loss.sum(), "ce")
        record = {
            "epoch": int(ctx.epoch), "train": bool(ctx.train_flag),
            "tags": [str(t) for t in extern_data["seq_tag"].raw_tensor.tolist()],
            "lens": extern_data["data"].dims[1].dyn_size_ext.raw_tensor.tolist(),
            "sum": float(x.double().sum()), "classes": int(y.sum()),
        }
        if "orth" in extern_data.data:
            record["orth"] = int(extern_data["orth"].raw_tensor.long().sum())
        rank = os.environ.get("RANK", "0")
        with open(os.path.join(_out, "batches.%s.jsonl" % rank), "a") as f:
            f.write(json.dumps(record) + "\\n")
        _written.append(record)
        kill_after = int(os.environ.get("SL_KILL_AFTER", "0"))
        if kill_after and record["train"] and record["epoch"] == 2:
            if sum(r["train"] and r["epoch"] == 2 for r in _written) == kill_after:
                os.kill(os.getpid(), signal.SIGKILL)  # the job dies mid sub-epoch 2
    """
)


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("returnn_engine")
    rng = np.random.default_rng(5)
    tags = [f"seq-{i}" for i in range(N_SEQS)]
    write_hdf(folder / "a.hdf", tags[:20], rng)
    write_hdf(folder / "b.hdf", tags[20:], rng)
    (folder / "train.config").write_text(CONFIG)
    return folder


def run_returnn(
    setup: Path, out: Path, *, nproc: int = 1, expect_kill: bool = False, **env: str
) -> dict[str, list[dict]]:
    """``python -m returnn CONFIG`` (``nproc`` > 1: as under ``torchrun --standalone``): each
    rank's records. The run is forked from the session's launch server, which imports RETURNN
    once (``tests/dist/returnn_main.py``); a hang is killed after ``HANG_BOUND_S``."""
    out.mkdir(exist_ok=True)
    path = os.pathsep.join([str(SRC), os.environ.get("PYTHONPATH", "")])
    env = {"PYTHONPATH": path, "SL_OUT": str(out), **env}
    console = out / f"console.{len(list(out.glob('console.*.txt')))}.txt"
    args = [str(nproc), "--script", "returnn_main", "--cwd", str(out), str(setup / "train.config")]
    rc = run_forked(args, console, HANG_BOUND_S, env)
    text = tail(console)
    if expect_kill:
        assert rc != 0, text
    else:
        assert rc == 0, text
    return {
        p.name.split(".")[1]: [json.loads(line) for line in p.read_text().splitlines()]
        for p in sorted(out.glob("batches.*.jsonl"))
    }


def batches(records: list[dict], epoch: int, train: bool = True) -> list[dict]:
    return [r for r in records if r["epoch"] == epoch and r["train"] == train]


def train_tags(records: list[dict], epochs: range) -> list[str]:
    return [t for e in epochs for r in batches(records, e) for t in r["tags"]]


@pytest.fixture(scope="module")
def own(setup: Path, tmp_path_factory) -> list[dict]:
    """RETURNN's own pipeline: the config without the one line, 0 workers, 3 sub-epochs."""
    return run_returnn(setup, tmp_path_factory.mktemp("own"), SL_USE="0")["0"]


@pytest.fixture(scope="module")
def ours(setup: Path, tmp_path_factory) -> tuple[list[dict], Path]:
    """The same config with ``use_in_engine()``: its records and its output folder."""
    out = tmp_path_factory.mktemp("ours")
    return run_returnn(setup, out, SL_USE="1")["0"], out


def test_engine_trains_on_returnns_own_batches(
    own: list[dict], ours: tuple[list[dict], Path]
) -> None:
    """0 workers, one process: train (sub-epochs 1 to 3), dev and eval_datasets batch for batch
    as RETURNN's own pipeline (tags, order, lengths, data), every sequence once per full epoch."""
    records, out = ours
    assert records == own
    assert all(len(batches(records, e)) > 2 for e in (1, 2, 3))
    assert sorted(train_tags(records, range(1, 3))) == sorted(f"seq-{i}" for i in range(N_SEQS))
    assert len(batches(records, 1, train=False)) > 2  # dev and other were evaluated on ours too
    log = (out / "returnn.0.log").read_text()
    assert "RETURNN's 'train' data loader is seqloader's" in log
    assert "RETURNN's 'other' data loader is seqloader's" in log
    for name in ("train", "dev", "other"):
        assert f"seqloader {name}: epoch 1 rank 0/1" in log  # the epoch report, in RETURNN's log
    assert "padding" in log and "computation" in log


@pytest.mark.slow
def test_engine_batches_do_not_depend_on_num_workers(
    setup: Path, tmp_path: Path, own: list[dict]
) -> None:
    """torch_dataloader_opts num_workers 2 (RETURNN's own would give every sequence twice at
    this behavior_version): RETURNN's 0-worker batches again."""
    assert run_returnn(setup, tmp_path / "ours", SL_USE="1", SL_WORKERS="2")["0"] == own


@pytest.mark.slow
def test_engine_trains_a_meta_dataset_on_returnns_own_batches(setup: Path, tmp_path: Path) -> None:
    """train a MetaDataset (features and alignments from HDF files listed in other orders,
    joined by tag, ordered by one of them): RETURNN's own batches again."""
    own = run_returnn(setup, tmp_path / "own", SL_USE="0", SL_TRAIN="meta")["0"]
    ours = run_returnn(setup, tmp_path / "ours", SL_USE="1", SL_TRAIN="meta")["0"]
    assert ours == own
    assert sorted(train_tags(ours, range(1, 3))) == sorted(f"seq-{i}" for i in range(N_SEQS))
    assert "MetaDataset, sequences: 37" in (tmp_path / "ours" / "returnn.0.log").read_text()


@pytest.mark.slow
def test_engine_trains_an_oggzip_corpus_on_returnns_own_batches(
    setup: Path, tmp_path: Path
) -> None:
    """train an OggZip corpus (audio -> RETURNN's log-mel features, a word vocabulary, the
    transcription as RETURNN's ``orth``): RETURNN's own batches (tags, order, lengths, word and
    byte ids; the features equal to float rounding, as RETURNN's own feature code is not ours)."""
    pytest.importorskip("librosa")
    from seqloader.synthetic.audio import WORDS, write_audio_corpus

    corpus = write_audio_corpus(tmp_path, 16, formats=("ogg", "flac"), seconds=(0.3, 0.9), seed=2)
    vocab = tmp_path / "words.txt"
    vocab.write_text("\n".join([*WORDS, "UNK"]) + "\n")
    env = {"SL_TRAIN": "oggzip", "SL_OGGZIP": str(corpus.oggzip), "SL_VOCAB": str(vocab)}
    own = run_returnn(setup, tmp_path / "own", SL_USE="0", **env)["0"]
    ours = run_returnn(setup, tmp_path / "ours", SL_USE="1", **env)["0"]
    assert [{**r, "sum": 0} for r in ours] == [{**r, "sum": 0} for r in own]
    assert [r["sum"] for r in ours] == pytest.approx([r["sum"] for r in own], rel=1e-4)
    assert len(train_tags(ours, range(1, 3))) == 16 and all("orth" in r for r in ours)


@pytest.fixture(scope="module")
def two_ranks(setup: Path, tmp_path_factory) -> dict[str, list[dict]]:
    """An uninterrupted torchrun run, 2 ranks, shard distribution, 3 sub-epochs."""
    out = tmp_path_factory.mktemp("two_ranks")
    return run_returnn(setup, out, nproc=2, SL_USE="1", SL_DIST="shard")


@pytest.mark.slow
def test_torchrun_every_sequence_once_with_equal_steps(two_ranks: dict[str, list[dict]]) -> None:
    """Equal steps on both ranks (the engine's per-step "has data" all-reduce ends no rank
    early), every sequence exactly once per full epoch (sub-epochs 1 and 2) over the ranks."""
    assert sorted(two_ranks) == ["0", "1"]
    for epoch in (1, 2, 3):
        steps = {rank: len(batches(records, epoch)) for rank, records in two_ranks.items()}
        assert len(set(steps.values())) == 1 and steps["0"] > 1, (epoch, steps)
    full_epoch = [t for records in two_ranks.values() for t in train_tags(records, range(1, 3))]
    assert collections.Counter(full_epoch) == collections.Counter(f"seq-{i}" for i in range(N_SEQS))
    dev = [r for r in two_ranks["0"] if not r["train"]]
    assert dev and not [r for r in two_ranks["1"] if not r["train"]]  # RETURNN: rank 0 evaluates


@pytest.mark.slow
def test_torchrun_random_seed_offset_gives_each_rank_all_data_with_equal_steps(
    setup: Path, tmp_path: Path
) -> None:
    """RETURNN's default distribution: each rank reads the data in its own order (as in
    RETURNN), with equal steps on both ranks; no sequence twice on a rank per full epoch, and
    what lies past the shortest rank's last step is what the epoch reports count as dropped."""
    ranks = run_returnn(setup, tmp_path, nproc=2, SL_USE="1", SL_DIST="random_seed_offset")
    for epoch in (1, 2, 3):
        steps = {rank: len(batches(records, epoch)) for rank, records in ranks.items()}
        assert len(set(steps.values())) == 1 and steps["0"] > 1, (epoch, steps)
    full_epochs = [train_tags(records, range(1, 3)) for records in ranks.values()]
    assert all(len(set(tags)) == len(tags) for tags in full_epochs)
    assert full_epochs[0] != full_epochs[1]  # each rank its own order
    log = next(tmp_path.glob("returnn.0*.log")).read_text()
    dropped = [re.search(rf"seqloader train: epoch {e} .*?dropped (\d+)", log) for e in (1, 2)]
    missing = sum(N_SEQS - len(tags) for tags in full_epochs)
    assert missing == sum(int(m.group(1)) if m else 0 for m in dropped)


@pytest.fixture(scope="module")
def killed(setup: Path, tmp_path_factory) -> tuple[list[dict], Path]:
    """One process, killed by its recorder right after the 2nd batch of sub-epoch 2."""
    out = tmp_path_factory.mktemp("killed")
    records = run_returnn(setup, out, expect_kill=True, SL_USE="1", SL_KILL_AFTER="2")["0"]
    assert len(batches(records, 2)) == 2
    for p in out.glob("batches.*.jsonl"):
        p.rename(p.with_suffix(".killed"))
    return records, out


# restarted on 2 ranks: make chaos; make test keeps the engine's restart on 1 rank (the same kill,
# save and reload) and killed runs resumed on another number of ranks
# (test_distributed_torchrun.py::test_sigkill_then_resume_exactly_once, 2 -> 3 and 3 -> 2)
@pytest.mark.slow
@pytest.mark.parametrize("restart_ranks", [1, pytest.param(2, marks=pytest.mark.extended)])
def test_killed_mid_sub_epoch_restarts_on_the_uninterrupted_batches(
    setup: Path,
    tmp_path: Path,
    killed: tuple[list[dict], Path],
    ours: tuple[list[dict], Path],
    two_ranks: dict[str, list[dict]],
    restart_ranks: int,
) -> None:
    """RETURNN restarts the killed job from its sub-epoch 1 save, with 1 or 2 ranks: sub-epochs
    2 and 3 are exactly the batches of an uninterrupted run with that many ranks."""
    before, folder = killed
    uninterrupted = {"0": ours[0]} if restart_ranks == 1 else two_ranks
    assert batches(before, 1) == batches(ours[0], 1)
    out = tmp_path / "restart"
    shutil.copytree(folder, out)
    dist = {"SL_DIST": "shard"} if restart_ranks > 1 else {}
    restarted = run_returnn(setup, out, nproc=restart_ranks, SL_USE="1", **dist)
    assert sorted(restarted) == sorted(uninterrupted)
    for rank, records in uninterrupted.items():
        assert not batches(restarted[rank], 1)  # from the save of sub-epoch 1
        for epoch in (2, 3):
            assert batches(restarted[rank], epoch) == batches(records, epoch), (rank, epoch)


def test_extern_data_keys_the_loader_lacks_are_named_at_start_up() -> None:
    assert hook.returnn_names(["data", "text"], ["data", "orth", "raw"]) == {"text": "orth"}
    assert hook.returnn_names(["data", "text"], ["data", "text"]) == {}
    hook.check_extern_data({"data": {}, "orth": {}}, "train", ["data", "orth"])
    with pytest.raises(OptionError, match=r"declares \['raw'\], which the dev dataset"):
        hook.check_extern_data({"data": {}, "raw": {}}, "dev", ["data", "orth"])


def test_untested_returnn_versions_are_refused_by_name() -> None:
    hook.check_version("1.20261022.211313")
    for version in ("1.20250101.101010", "1.20270101.000000", "2.0.0"):
        with pytest.raises(OptionError, match=f"this is RETURNN {version}.*pin returnn=="):
            hook.check_version(version)


def test_outside_a_returnn_config_and_twice_are_errors(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a plain process: an error naming the fix. In a config RETURNN reads (its own
    ``Config.load_file``): the first call replaces the engine's loader factory, the second is an
    error."""
    from returnn.config import Config
    from returnn.torch.engine import Engine

    with pytest.raises(OptionError, match="must be called in a RETURNN config"):
        hook.use_in_engine()
    original = Engine._create_data_loader
    monkeypatch.setattr(Engine, "_create_data_loader", original)  # restored after the test
    config = tmp_path / "twice.config"
    config.write_text(
        "#!rnn.py\nimport seqloader.returnn\nseqloader.returnn.use_in_engine()\n"
        "seqloader.returnn.use_in_engine()\n"
    )
    with pytest.raises(OptionError, match="called twice"):
        Config().load_file(str(config))
    assert Engine._create_data_loader is not original


@pytest.mark.parametrize(
    "packing", [None, {}, {"gap": 2, "align": 4, "per_key": {"classes": {"packed": False}}}]
)
def test_raw_batches_are_returnns_collate(packing: dict | None) -> None:
    """What the engine gets per batch is what RETURNN's ``collate_batch`` makes of the same
    sequences: padded (or, with ``packed_tensors``, packed) tensors, ``<key>:seq_len``,
    ``seq_tag``, dtypes included."""
    from returnn.datasets.util.strings import str_to_numpy_array
    from returnn.torch.data.pipeline import collate_batch

    import seqloader as sl

    rng = np.random.default_rng(3)
    lengths = [4, 9, 2, 7, 5]
    data = [rng.standard_normal((n, 3)).astype(np.float32) for n in lengths]
    classes = [rng.integers(0, 7, n).astype(np.int32) for n in lengths]
    tags = [f"utt-{i}" for i in range(len(lengths))]
    source = sl.MemorySource({"data": data, "classes": classes}, tags=tags)
    for batch in sl.SeqLoader(source, max_seqs=3, ordering="default").epoch(1):
        ours = hook.raw_batch(batch, packing, first_idx=7)
        seqs = [
            {"data": data[i], "classes": classes[i], "seq_tag": str_to_numpy_array(tags[i])}
            for i in batch.seq_indices.tolist()
        ]
        theirs = collate_batch(seqs, packing=packing)
        assert sorted(ours) == sorted([*theirs, "seq_idx"])
        for key, value in theirs.items():
            if isinstance(value, np.ndarray):
                assert value.tolist() == ours[key].tolist(), key
            elif isinstance(value, dict):
                assert ours[key] == value, key
            else:
                assert ours[key].dtype == value.dtype and torch.equal(ours[key], value), key
        assert ours["seq_idx"].tolist() == list(range(7, 7 + batch.size))


def _every_rank(
    lengths: list[int], world_size: int, epoch: int = 1, **options: object
) -> list[list[dict] | OptionError]:
    """``engine_epoch`` on each rank's own loader (each rank plans alone, as under the engine):
    per rank its raw batches, or the error its first ``next()`` raised."""
    import seqloader as sl

    source = sl.MemorySource({"data": [np.ones((n, 2), "float32") for n in lengths]})
    results: list[list[dict] | OptionError] = []
    for rank in range(world_size):
        loader = sl.SeqLoader(source, rank=rank, world_size=world_size, **options)  # type: ignore[arg-type]
        raws = hook.engine_epoch(loader, epoch, None)
        try:
            first = next(raws, None)  # an empty sub-epoch: none
        except OptionError as e:
            results.append(e)
            continue
        results.append([] if first is None else [first, *raws])
    return results


def test_a_step_of_only_filler_repeats_on_one_rank_is_refused_on_every_rank() -> None:
    """3 sequences, 1 per batch, 2 ranks: rank 1's step 1 holds only a filler repeat, rank 0's
    steps are all real. Rank 1 used to fail at that step alone while rank 0 waited for it in the
    engine's per-step all-reduce (a hang); now both ranks raise the same error before their
    first batch."""
    import seqloader as sl

    source = sl.MemorySource({"data": [np.ones((n, 2), "float32") for n in (3, 5, 2)]})
    plan = sl.SeqLoader(source, max_seqs=1, rank=0, world_size=2).global_plan(1)
    assert plan.rank_share(0).real.all()
    assert plan.rank_share(1).batch(1)[1].tolist() == [False]
    results = _every_rank([3, 5, 2], 2, max_seqs=1)
    assert all(isinstance(r, OptionError) for r in results), results
    assert len({str(r) for r in results}) == 1
    assert "sub-epoch 1 has 3 sequences for 2 steps x 2 ranks: rank 1 at step 1" in str(results[0])
    assert "Fix: fewer ranks, or a smaller partition_epoch" in str(results[0])


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(1, 9), min_size=1, max_size=24),
    st.integers(1, 4),
    st.integers(1, 4),
    st.integers(1, 3),
    st.integers(1, 3),
)
def test_every_rank_gets_the_plans_counts_or_the_same_refusal(
    lengths: list[int], max_seqs: int, world_size: int, partition_epoch: int, epoch: int
) -> None:
    """Each rank's loader planned once per sub-epoch: every rank refuses it alike exactly when
    the plan gives some rank a step of filler repeats only; else every rank runs the plan's
    steps with ``num_seqs`` its real sequences and ``complete_frac`` all ranks' real sequences
    through the step over the sub-epoch's (``EpochPlan.consumed_seqs``, as before)."""
    import seqloader as sl

    options = {"max_seqs": max_seqs, "partition_epoch": partition_epoch, "ordering": "random"}
    source = sl.MemorySource({"data": [np.ones((n, 2), "float32") for n in lengths]})
    plan = sl.SeqLoader(source, rank=0, world_size=world_size, **options).global_plan(epoch)  # type: ignore[arg-type]
    shares = [plan.rank_share(r) for r in range(world_size)]
    filler_step = any(not s.batch(k)[1].any() for s in shares for k in range(len(s)))
    results = _every_rank(lengths, world_size, epoch, **options)
    if filler_step:
        assert all(isinstance(r, OptionError) for r in results), results
        assert len({str(r) for r in results}) == 1
        return
    total = max(plan.real_total(), 1)
    for share, raws in zip(shares, results, strict=True):
        assert isinstance(raws, list) and len(raws) == plan.steps
        assert [int(r["num_seqs"]) for r in raws] == [share.real_count()] * plan.steps
        expected = [np.float32(plan.consumed_seqs(s + 1) / total) for s in range(plan.steps)]
        assert [r["complete_frac"].item() for r in raws] == [e.item() for e in expected]
        assert [int(r["epoch"]) for r in raws] == [epoch] * plan.steps
