"""What ``SeqLoaderDataModule`` does under a Lightning ``Trainer``, without importing Lightning.

Lightning comes as two packages with the same classes, ``lightning`` (``lightning.pytorch``) and
``pytorch_lightning``, and a ``Trainer`` of one accepts only data modules derived from its own
``LightningDataModule``. So the behaviour lives here, in ``DataModuleParts``, and each package gets
its class: ``seqloader.lightning.SeqLoaderDataModule`` and
``seqloader.pytorch_lightning.SeqLoaderDataModule``.

    dm = SeqLoaderDataModule(train=lambda: SeqLoader(HDFSource(files), max_frames=20_000, ...),
                             val=lambda: SeqLoader(HDFSource(dev), ordering="sorted", ...))
    Trainer(strategy="ddp", devices=4).fit(model, datamodule=dm)

Why it looks the way it does:

- Factories, called in ``setup()``: Lightning initializes ``torch.distributed`` after the module is
  built, and a ``SeqLoader`` takes rank and world size from it when it is built.
- Lightning epoch ``n`` (0-based ``trainer.current_epoch``) runs ``loader.epoch(n + 1)`` (seqloader
  counts epochs from 1, like RETURNN).
- The ``*_dataloader()`` hooks return an ``EpochBatches`` iterable, not a ``DataLoader``: Lightning
  only injects a ``DistributedSampler`` into ``DataLoader`` objects, so the plan's own sharding
  stays (no ``use_distributed_sampler=False`` needed), and nothing re-wraps the batches.
- ``len()`` is the epoch's planned steps (equal on every rank), so Lightning fetches no batch ahead
  (without a length it prefetches one, and the loader's state would be a batch ahead) and the
  loader's consumed-step count is exactly Lightning's: a checkpoint saved after step k resumes
  with batch k + 1. Epoch lengths can differ between epochs (dynamic batches over a new
  order), so the train iterable is re-requested every epoch (``reload_dataloaders_every_n_epochs``
  is set to 1 when it is 0).
- The train loader's ``state_dict`` goes into Lightning checkpoints twice, by the same value: in
  the data module's entry, and in the fit loop's state (Lightning's own place for resumable
  iterables, which also keeps it from warning that the data loader cannot resume mid-epoch).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import Any

from seqloader.errors import OptionError
from seqloader.plan.position import Position, continue_plan
from seqloader.torch.batch import Batch
from seqloader.torch.loader import SeqLoader

__all__ = [
    "STATE_FORMAT",
    "DataModuleParts",
    "EpochBatches",
    "LoaderFactory",
    "StatefulEpochBatches",
    "epoch_steps",
]

LoaderFactory = Callable[[], SeqLoader]
STAGES = ("train", "val", "test", "predict")
STATE_FORMAT = "seqloader.lightning_datamodule"
# which loaders each Lightning stage (setup(stage)) needs
_NEEDED = {
    "fit": ("train", "val"),
    "validate": ("val",),
    "test": ("test",),
    "predict": ("predict",),
    None: STAGES,
}


class EpochBatches:
    """The batches of one ``SeqLoader`` for Lightning's current epoch, as a sized iterable.

    ``len()`` is the epoch's steps per rank, counting a loaded mid-epoch resume position (the steps
    taken before it plus the rest, also when the world size changed); it is computed from the
    loader's state without changing it (Lightning asks for it at odd times, e.g. in teardown).
    ``iter()`` plans the epoch on its first ``next()``, so an iterator Lightning makes and drops
    costs nothing and uses up no resume position. After the last batch the loader's epoch is run to
    its end (report, audit) before the batch is returned: Lightning stops asking once it has
    ``len()`` batches."""

    def __init__(self, loader: SeqLoader, epoch_of: Callable[[], int]) -> None:
        self.loader = loader
        self._epoch_of = epoch_of

    def __len__(self) -> int:
        return epoch_steps(self.loader, self._epoch_of())

    def __iter__(self) -> Iterator[Batch]:
        return self._batches(self._epoch_of())

    def _batches(self, epoch: int) -> Iterator[Batch]:
        batches = self.loader.epoch(epoch)
        report = self.loader.report()
        assert report is not None  # epoch() sets it
        left = report.planned_steps - report.resumed_at_step
        for k, batch in enumerate(batches, start=1):
            if k == left:  # finish the loader's epoch now: Lightning will not ask for more
                rest = sum(1 for _ in batches)
                if rest:
                    raise RuntimeError(f"seqloader planned {left} steps, delivered {left + rest}")
            yield batch


def epoch_steps(loader: SeqLoader, epoch: int) -> int:
    """Steps per rank of ``epoch``, counting the loader's position when it lies in ``epoch`` (a
    loaded resume state: steps before it + the rest, re-planned for this world size)."""
    state = loader.state_dict()
    if state["epoch"] != epoch:
        return loader.steps(epoch)
    plan, position = continue_plan(
        loader.planner, Position.from_fields(state), loader.topology.world_size
    )
    return position.prior_steps + plan.steps


class StatefulEpochBatches(EpochBatches):
    """``EpochBatches`` with the loader's resume state, for Lightning's fit loop checkpoints."""

    def state_dict(self) -> dict:
        return self.loader.state_dict()

    def load_state_dict(self, state: Mapping) -> None:
        if dict(state) != self.loader.state_dict():  # the data module loaded it already
            self.loader.load_state_dict(state)


class DataModuleParts:
    """The hooks of a ``LightningDataModule`` over ``SeqLoader`` factories (callables returning a
    ``SeqLoader``); mixed into each Lightning package's ``LightningDataModule`` (it comes first).

    Give any of ``train``, ``val``, ``test``, ``predict``; ``setup(stage)`` builds those the stage
    needs (once), after ``torch.distributed`` is up, and checks each loader's rank and world size
    against the trainer's. ``teardown`` stops their worker processes. See the module docstring."""

    def __init__(
        self,
        train: LoaderFactory | None = None,
        val: LoaderFactory | None = None,
        test: LoaderFactory | None = None,
        predict: LoaderFactory | None = None,
    ) -> None:
        super().__init__()
        self.factories: dict[str, LoaderFactory] = {}
        for name, factory in zip(STAGES, (train, val, test, predict)):
            if factory is None:
                continue
            if not callable(factory) or isinstance(factory, SeqLoader):
                raise OptionError(
                    f"SeqLoaderDataModule {name}=: got {factory!r}, expected a callable that "
                    "returns a SeqLoader (e.g. lambda: SeqLoader(source, ...)); it is called in "
                    "setup(), once torch.distributed is initialized, so the loader sees its rank"
                )
            self.factories[name] = factory
        if not self.factories:
            raise OptionError("SeqLoaderDataModule: give at least one of train=, val=, test=")
        self.loaders: dict[str, SeqLoader] = {}
        self._iterables: dict[str, EpochBatches] = {}
        self._loaded_state: Mapping | None = None

    # ---- building ----
    def setup(self, stage: str | None = None) -> None:
        for name in _NEEDED.get(stage, STAGES):
            if name in self.factories and name not in self.loaders:
                self.loaders[name] = self._build(name)
        if "train" in self.loaders and self._loaded_state is not None:
            self.loaders["train"].load_state_dict(self._loaded_state)
            self._loaded_state = None
        trainer: Any = getattr(self, "trainer", None)  # the LightningDataModule's
        # epoch lengths may differ: len() anew every epoch. (Lightning's data connector sets this
        # Trainer attribute at init; the class does not declare it.)
        if trainer is not None and not trainer.reload_dataloaders_every_n_epochs:
            trainer.reload_dataloaders_every_n_epochs = 1

    def _build(self, name: str) -> SeqLoader:
        loader = self.factories[name]()
        if not isinstance(loader, SeqLoader):
            raise OptionError(
                f"SeqLoaderDataModule {name}= factory returned {type(loader).__name__}, "
                "expected a SeqLoader"
            )
        trainer: Any = getattr(self, "trainer", None)  # the LightningDataModule's
        if trainer is not None:
            got = (loader.topology.rank, loader.topology.world_size)
            want = (trainer.global_rank, trainer.world_size)
            if got != want:
                raise OptionError(
                    f"SeqLoaderDataModule {name}=: the loader has rank {got[0]} of world size "
                    f"{got[1]}, but the trainer is rank {want[0]} of {want[1]}; build the loader "
                    "in the factory without rank=/world_size= (it reads torch.distributed)"
                )
        return loader

    def _iterable(self, name: str) -> EpochBatches | list:
        if name == "val" and "val" not in self.factories:
            return []  # Lightning skips validation (the hook exists on every data module)
        if name not in self.loaders:
            have = ", ".join(f"{k}=" for k in self.factories) or "none"
            raise OptionError(
                f"SeqLoaderDataModule: Lightning asked for the {name} data, but no {name}= "
                f"factory was given (given: {have}), or setup() has not run"
            )
        if name not in self._iterables:
            cls = StatefulEpochBatches if name == "train" else EpochBatches
            self._iterables[name] = cls(self.loaders[name], self._epoch)
        return self._iterables[name]

    def _epoch(self) -> int:
        trainer: Any = getattr(self, "trainer", None)  # the LightningDataModule's
        return 1 if trainer is None else trainer.current_epoch + 1

    # ---- Lightning hooks ----
    def train_dataloader(self) -> EpochBatches | list:
        return self._iterable("train")

    def val_dataloader(self) -> EpochBatches | list:
        return self._iterable("val")

    def test_dataloader(self) -> EpochBatches | list:
        return self._iterable("test")

    def predict_dataloader(self) -> EpochBatches | list:
        return self._iterable("predict")

    def state_dict(self) -> dict[str, Any]:
        if "train" not in self.loaders:
            return {}
        return {"format": STATE_FORMAT, "train": self.loaders["train"].state_dict()}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        if not state_dict:
            return
        if state_dict.get("format") != STATE_FORMAT:
            raise OptionError(
                f"SeqLoaderDataModule.load_state_dict: got format {state_dict.get('format')!r}, "
                f"expected {STATE_FORMAT!r} (a state from SeqLoaderDataModule.state_dict())"
            )
        if "train" in self.loaders:
            self.loaders["train"].load_state_dict(state_dict["train"])
        else:  # loaded before setup(): applied when the train loader is built
            self._loaded_state = state_dict["train"]

    def teardown(self, stage: str | None = None) -> None:
        for name in _NEEDED.get(stage, STAGES):
            loader = self.loaders.get(name)
            if loader is not None:
                loader.close()  # stop worker processes; the loader restarts them if used again
