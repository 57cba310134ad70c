"""``SeqLoaderDataModule`` under a real Lightning ``Trainer``, from both packages Lightning ships
as: ``lightning`` (``seqloader.lightning``) and ``pytorch_lightning`` (``seqloader.pytorch_lightning``).

The DDP test runs ``tests/dist/train_lightning.py`` with ``Trainer(accelerator="cpu", devices=2,
strategy="ddp")`` of each package on a RETURNN HDF file (2 DataLoader workers per rank), interrupted after a
mid-epoch checkpoint in epoch 2, then resumed from it with 0 workers: every epoch holds every
sequence exactly once across ranks and runs, ranks take equal steps, and the resumed run continues
with exactly the next planned batch. ``make test`` starts the two ranks as torchrun does, forked
from the session's launch server (``tests/dist/lightning_main.py``: Lightning imported once per
session); ``make chaos`` also runs them under Lightning's own launcher, which starts rank 1 by
running the script again. The in-process tests cover the module's errors and its epoch length
under an elastic resume.
"""

from __future__ import annotations

import collections
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import lightning.pytorch as pl
import numpy as np
import pytest
import torch

import seqloader as sl
from seqloader.errors import OptionError
from seqloader.lightning import EpochBatches, SeqLoaderDataModule, epoch_steps

sys.path.insert(0, str(Path(__file__).parent / "dist"))
from ddp_common import build_corpus
from train_lightning import OPTIONS, PACKAGES

from fork_launches import run_forked

SCRIPT = Path(__file__).parent / "dist" / "train_lightning.py"
TIMEOUT_S = 240


def run_script(out: Path, hdf: Path, phase: str, *args: str) -> None:
    """``train_lightning.py`` with the package and the launcher the test's folder names
    (``PACKAGE-LAUNCHER-run``): ``lightning``, Lightning's own (this process runs the script,
    Lightning starts rank 1 by running it again); ``torchrun``, both ranks as torchrun starts them,
    forked from the session's launch server (``tests/dist/lightning_main.py``)."""
    package, launcher = out.name.split("-")[:2]
    argv = ["--out", str(out), "--hdf", str(hdf), "--phase", phase, "--package", package, *args]
    console = out / f"{phase}.console.txt"
    if launcher == "torchrun":
        rc = run_forked(["2", "--script", "lightning_main", *argv], console, TIMEOUT_S)
    else:
        env = {**os.environ, "OMP_NUM_THREADS": "1"}
        with open(console, "w") as f:
            cmd = [sys.executable, str(SCRIPT), *argv]
            rc = subprocess.run(
                cmd, stdout=f, stderr=subprocess.STDOUT, env=env, timeout=TIMEOUT_S
            ).returncode
    assert rc == 0, console.read_text()[-4000:]


def records(out: Path, phase: str, kind: str, rank: int) -> list[dict]:
    path = out / f"{phase}.{kind}.rank{rank}.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()]


@pytest.mark.slow
@pytest.mark.parametrize(
    "package,launcher",
    [
        ("lightning", "torchrun"),
        # Lightning's own launcher (rank 1 a new interpreter running the script again): the
        # same DDP strategy, data module and checks; make chaos
        pytest.param("lightning", "lightning", marks=pytest.mark.extended),
        # the same data module (seqloader.datamodule.DataModuleParts) on the other package's
        # base class, under the same DDP strategy code: its in-process mid-epoch resume is
        # test_checkpoint_callback_resumes_mid_epoch_with_either_package; this DDP run (minutes
        # on two cores) is in make chaos
        pytest.param("pytorch_lightning", "lightning", marks=pytest.mark.extended),
    ],
)
def test_ddp_two_ranks_exactly_once_and_mid_epoch_resume(tmp_path, package, launcher):
    tmp_path = tmp_path / f"{package}-{launcher}-run"
    tmp_path.mkdir()
    corpus = build_corpus()
    hdf = tmp_path / "corpus.hdf"
    sl.write_hdf(hdf, corpus)
    all_tags = sorted(corpus.tags)
    stop_step = 5  # this rank's step index (0-based) in epoch 2 after which the job stops

    run_script(tmp_path, hdf, "run", "--workers", "2", "--stop-at", f"2:{stop_step}")
    run_script(tmp_path, hdf, "resume", "--workers", "0", "--resume")

    planner = sl.SeqLoader(sl.HDFSource(hdf), rank=0, world_size=2, **OPTIONS)
    steps = {e: planner.steps(e) for e in (1, 2)}
    by_epoch: dict[int, list[str]] = collections.defaultdict(list)
    for rank in (0, 1):
        run, resume = (
            records(tmp_path, "run", "train", rank),
            records(tmp_path, "resume", "train", rank),
        )
        for r in run + resume:
            assert r["epoch"] == r["lightning_epoch"] + 1  # Lightning epoch n runs epoch(n + 1)
            by_epoch[r["epoch"]] += r["tags"]
        # equal steps: every rank takes the planned steps of each epoch, across the two runs
        assert [r["step"] for r in run if r["epoch"] == 1] == list(range(steps[1]))
        assert [r["step"] for r in run if r["epoch"] == 2] == list(range(stop_step + 1))
        assert [r["step"] for r in resume] == list(range(stop_step + 1, steps[2]))
        # the exact planned batches, in order: the resumed run continues with the next one
        for r in run + resume:
            assert r["indices"] == planner.plan(r["epoch"], rank)[r["step"]].tolist()
    for epoch in (1, 2):
        assert sorted(by_epoch[epoch]) == all_tags, f"epoch {epoch} not exactly once"

    # validation: every sequence once per validation run (end of each epoch, and at the stop),
    # across ranks
    val_runs: dict[tuple[str, int], list[str]] = collections.defaultdict(list)
    for phase in ("run", "resume"):
        for rank in (0, 1):
            for r in records(tmp_path, phase, "val", rank):
                assert r["epoch"] == r["lightning_epoch"] + 1
                val_runs[phase, r["lightning_epoch"]] += r["tags"]
    assert set(val_runs) >= {("run", 0), ("resume", 1)}
    for key, tags in val_runs.items():
        assert sorted(tags) == all_tags, f"validation {key} not exactly once"
    done = json.loads((tmp_path / "resume.done.rank0.json").read_text())
    assert done["world_size"] == 2 and done["reload"] == 1
    assert done["trainer"].startswith(f"{package}.")  # that package's own Trainer ran
    assert done["state"]["train"]["epoch"] == 2 and done["state"]["train"]["epoch_complete"]


# ---- in process ----


def make_loader(**kw) -> sl.SeqLoader:
    return sl.SeqLoader(build_corpus(), **{**OPTIONS, **kw})


class TinyModel(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(3, 1)
        self.seen: list[tuple[int, int, list[str]]] = []

    def training_step(self, batch: sl.Batch, batch_idx: int) -> torch.Tensor:
        self.seen.append((batch.epoch, batch.step, list(batch.seq_tags)))
        return self.layer(batch["data"]).mean()

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


class ValModel(TinyModel):
    def validation_step(self, batch: sl.Batch, batch_idx: int) -> None:
        raise AssertionError("no val= factory: no validation")


@pytest.mark.parametrize("model_cls", [TinyModel, ValModel])
def test_single_process_fit_no_sampler_injected(tmp_path, model_cls):
    dm = SeqLoaderDataModule(train=lambda: make_loader(audit=True))
    model = model_cls()
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=2,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=tmp_path,
    )
    trainer.fit(model, datamodule=dm)
    assert isinstance(trainer.train_dataloader, EpochBatches)  # not a DataLoader: no sampler
    loader = dm.loaders["train"]
    for epoch in (1, 2):
        seen = [s for s in model.seen if s[0] == epoch]
        assert [s[1] for s in seen] == list(range(loader.steps(epoch)))
        assert sorted(t for s in seen for t in s[2]) == sorted(loader.source.tags)
    # the loader's epoch ran to its end (its audit ran) although Lightning stops asking
    report = loader.report()
    assert report is not None and report.epoch == 2 and report.steps == loader.steps(2)
    assert report.audit is not None and report.audit.ok


def model_class(package):
    """A tiny model on ``package``'s LightningModule that records its batches and stops the run
    after global step ``stop_after`` (an interrupted job)."""

    class Recorder(package.LightningModule):
        def __init__(self, stop_after: int | None = None) -> None:
            super().__init__()
            self.layer = torch.nn.Linear(3, 1)
            self.seen: list[tuple[int, int, list[str]]] = []
            self.stop_after = stop_after

        def training_step(self, batch: sl.Batch, batch_idx: int) -> torch.Tensor:
            self.seen.append((batch.epoch, batch.step, list(batch.seq_tags)))
            return self.layer(batch["data"]).mean()

        def on_train_batch_end(self, outputs, batch, batch_idx) -> None:
            if self.trainer.global_step == self.stop_after:
                self.trainer.should_stop = True

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.01)

    return Recorder


@pytest.mark.parametrize("package", sorted(PACKAGES))
def test_checkpoint_callback_resumes_mid_epoch_with_either_package(tmp_path, package):
    """What a user does: a Trainer of either package, ModelCheckpoint(save_last=True,
    every_n_train_steps=1) (a default Trainer writes no last.ckpt), the job stopped in epoch 2,
    then fit(..., ckpt_path="last") in a new Trainer: it continues with exactly the next batch,
    and each epoch holds every sequence once over both runs."""
    pl = importlib.import_module(PACKAGES[package][0])
    data_module = importlib.import_module(PACKAGES[package][1]).SeqLoaderDataModule
    first_epoch_steps = make_loader().steps(1)
    stop_after = first_epoch_steps + 3  # global steps: 3 batches into epoch 2

    def trainer() -> object:
        ckpt = pl.callbacks.ModelCheckpoint(
            dirpath=tmp_path, save_last=True, every_n_train_steps=1, save_top_k=0
        )
        return pl.Trainer(
            accelerator="cpu",
            devices=1,
            max_epochs=2,
            callbacks=[ckpt],
            logger=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            default_root_dir=tmp_path,
        )

    Recorder = model_class(pl)
    first, second = Recorder(stop_after), Recorder()
    trainer().fit(first, datamodule=data_module(train=make_loader))
    assert (tmp_path / "last.ckpt").exists()
    trainer().fit(second, datamodule=data_module(train=make_loader), ckpt_path="last")
    assert second.seen[0][:2] == (2, 3)  # the next batch after the checkpoint
    loader = make_loader()
    for epoch in (1, 2):
        runs = [s for s in first.seen[:stop_after] + second.seen if s[0] == epoch]
        assert [s[1] for s in runs] == list(range(loader.steps(epoch)))
        assert sorted(t for s in runs for t in s[2]) == sorted(loader.source.tags)


def test_a_data_module_of_the_other_package_is_refused_by_lightning():
    """Why there are two classes: a Trainer takes only its own package's data modules."""
    pytorch_lightning = importlib.import_module("pytorch_lightning")
    from seqloader.pytorch_lightning import SeqLoaderDataModule as PLDataModule

    assert isinstance(PLDataModule(train=make_loader), pytorch_lightning.LightningDataModule)
    assert not isinstance(
        SeqLoaderDataModule(train=make_loader), pytorch_lightning.LightningDataModule
    )
    assert not isinstance(PLDataModule(train=make_loader), pl.LightningDataModule)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({}, "at least one"),
        ({"train": 3}, "expected a callable"),
        ({"train": "make"}, "expected a callable"),
    ],
)
def test_bad_factories(kwargs, match):
    with pytest.raises(OptionError, match=match):
        SeqLoaderDataModule(**kwargs)


def test_a_loader_instead_of_a_factory_is_refused():
    with make_loader() as loader, pytest.raises(OptionError, match="called in setup"):
        SeqLoaderDataModule(train=loader)


def test_factory_must_return_a_seqloader():
    dm = SeqLoaderDataModule(train=lambda: build_corpus())
    with pytest.raises(OptionError, match="returned MemorySource, expected a SeqLoader"):
        dm.setup("fit")


def test_missing_stage_names_what_was_given():
    dm = SeqLoaderDataModule(train=make_loader)
    dm.setup("fit")
    with pytest.raises(OptionError, match=r"asked for the test data.*given: train="):
        dm.test_dataloader()
    assert dm.val_dataloader() == []  # no validation


def test_loader_rank_must_match_the_trainer():
    dm = SeqLoaderDataModule(train=lambda: make_loader(rank=1, world_size=2))
    dm.trainer = pl.Trainer(accelerator="cpu", devices=1, logger=False)
    with pytest.raises(
        OptionError, match=r"rank 1 of world size 2, but the trainer is rank 0 of 1"
    ):
        dm.setup("fit")


def test_state_round_trip_before_setup():
    """A state loaded before setup() is applied to the train loader once it is built."""
    src = SeqLoaderDataModule(train=make_loader)
    src.setup("fit")
    it = iter(src.loaders["train"].epoch(1))
    for _ in range(3):
        next(it)
    state = json.loads(json.dumps(src.state_dict()))
    dst = SeqLoaderDataModule(train=make_loader)
    dst.load_state_dict(state)
    dst.setup("fit")
    assert dst.state_dict() == state
    rest = [b.seq_indices.tolist() for b in dst.loaders["train"].epoch(1)]
    assert rest == [b.tolist() for b in src.loaders["train"].plan(1)[3:]]
    with pytest.raises(OptionError, match=r"expected 'seqloader\.lightning_datamodule'"):
        dst.load_state_dict({"format": "other"})


@pytest.mark.parametrize("world_size", [2, 3])
def test_epoch_length_counts_an_elastic_resume(world_size):
    """Saved by 2 ranks after 4 steps, resumed by ``world_size`` ranks: len() = 4 + the steps each
    rank now takes, and iterating yields exactly those."""
    saver = make_loader(rank=0, world_size=2)
    it = iter(saver.epoch(1))
    for _ in range(4):
        next(it)
    state = saver.state_dict()
    steps_per_rank = []
    for rank in range(world_size):
        loader = make_loader(rank=rank, world_size=world_size)
        loader.load_state_dict(state)
        batches = EpochBatches(loader, lambda: 1)
        total = len(batches)
        assert epoch_steps(loader, 1) == total  # asking does not use up the resume position
        got = list(batches)
        assert total == 4 + len(got)
        steps_per_rank.append(len(got))
        assert len(batches) == total  # after the epoch: the finished epoch's length
    assert len(set(steps_per_rank)) == 1
    assert epoch_steps(make_loader(), 2) == make_loader().steps(2)


def test_dropped_iterator_uses_no_resume_position():
    """Lightning makes iterators it never advances; they must not consume the loaded position."""
    saver = make_loader()
    it = iter(saver.epoch(1))
    first = [next(it).seq_indices.tolist() for _ in range(2)]
    loader = make_loader()
    loader.load_state_dict(saver.state_dict())
    batches = EpochBatches(loader, lambda: 1)
    iter(batches)  # dropped
    rest = [b.seq_indices.tolist() for b in batches]
    plan = [b.tolist() for b in loader.plan(1)]
    assert first + rest == plan
    assert np.array_equal(sorted(np.concatenate(plan)), np.arange(len(loader.source)))
