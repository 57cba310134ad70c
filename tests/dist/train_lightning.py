"""A tiny Lightning training on ``SeqLoaderDataModule``, run by ``tests/test_lightning.py`` as

    python tests/dist/train_lightning.py --out DIR --hdf FILE [--stop-at EPOCH:STEP] [--resume]
        [--package lightning|pytorch_lightning]

with ``Trainer(accelerator="cpu", devices=2, strategy="ddp")`` of the package given (``lightning``,
imported as ``lightning.pytorch``, or ``pytorch_lightning``, with seqloader's data module for it):
Lightning's launcher starts rank 1 by running this script again. Every training step appends (epoch, step, rank, sequence indices, tags)
to a per-rank log; validation batches go to another. ``--stop-at`` saves a checkpoint after that
step (all ranks) and stops the run there, as an interrupted job; ``--resume`` continues from it.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from pathlib import Path

import torch

import seqloader as sl

OPTIONS = {"ordering": "laplace:.8", "max_seqs": 4, "max_frames": 120, "seed": 5}
# Lightning package -> (its module as users import it, seqloader's data module for it)
PACKAGES = {
    "lightning": ("lightning.pytorch", "seqloader.lightning"),
    "pytorch_lightning": ("pytorch_lightning", "seqloader.pytorch_lightning"),
}


def package_arg() -> str:
    """``--package`` (read before the classes are defined: they derive from its module)."""
    args = sys.argv[1:]
    return args[args.index("--package") + 1] if "--package" in args else "lightning"


pl = importlib.import_module(PACKAGES[package_arg()][0])
SeqLoaderDataModule = importlib.import_module(PACKAGES[package_arg()][1]).SeqLoaderDataModule


class Model(pl.LightningModule):
    def __init__(self, out: Path, phase: str, stop_at: tuple[int, int] | None, ckpt: Path) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(3, 1)
        self.out, self.phase, self.stop_at, self.ckpt = out, phase, stop_at, ckpt

    def _log(self, kind: str, batch: sl.Batch) -> None:
        rank = self.trainer.global_rank
        record = {
            "lightning_epoch": self.trainer.current_epoch,
            "epoch": batch.epoch,
            "step": batch.step,
            "indices": batch.seq_indices[batch.mask].tolist(),
            "tags": [t for t, m in zip(batch.seq_tags, batch.mask.tolist()) if m],
        }
        with open(self.out / f"{self.phase}.{kind}.rank{rank}.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")

    def training_step(self, batch: sl.Batch, batch_idx: int) -> torch.Tensor:
        assert isinstance(batch, sl.Batch), type(batch)  # no re-collation by Lightning
        self._log("train", batch)
        x = batch["data"]  # [B, T, 3]
        return self.layer(x).mean()

    def validation_step(self, batch: sl.Batch, batch_idx: int) -> None:
        self._log("val", batch)

    def on_train_batch_end(self, outputs, batch: sl.Batch, batch_idx: int) -> None:
        if self.stop_at == (batch.epoch, batch.step):
            self.trainer.save_checkpoint(self.ckpt)
            self.trainer.should_stop = True  # the interrupted job ends after this step

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--hdf", type=Path, required=True)
    p.add_argument("--phase", default="run")
    p.add_argument("--epochs", type=int, default=2)
    p.add_argument("--workers", type=int, default=0)
    p.add_argument("--stop-at", help="EPOCH:STEP (seqloader's epoch, this rank's step)")
    p.add_argument("--resume", action="store_true")
    p.add_argument("--package", choices=sorted(PACKAGES), default="lightning")
    args = p.parse_args()
    stop_at = tuple(int(v) for v in args.stop_at.split(":")) if args.stop_at else None
    ckpt = args.out / "mid.ckpt"

    def train() -> sl.SeqLoader:
        return sl.SeqLoader(sl.HDFSource(args.hdf), num_workers=args.workers, **OPTIONS)

    def val() -> sl.SeqLoader:
        return sl.SeqLoader(sl.HDFSource(args.hdf), ordering="sorted", max_seqs=8)

    dm = SeqLoaderDataModule(train=train, val=val)
    model = Model(args.out, args.phase, stop_at, ckpt)  # type: ignore[arg-type]
    trainer = pl.Trainer(
        accelerator="cpu",
        devices=2,
        strategy="ddp",
        max_epochs=args.epochs,
        num_sanity_val_steps=0,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    trainer.fit(model, datamodule=dm, ckpt_path=ckpt if args.resume else None)
    rank = trainer.global_rank
    summary = {
        "world_size": trainer.world_size,
        "reload": trainer.reload_dataloaders_every_n_epochs,
        "state": dm.state_dict(),
        "pid": os.getpid(),
        "trainer": type(trainer).__module__,
    }
    (args.out / f"{args.phase}.done.rank{rank}.json").write_text(json.dumps(summary))


if __name__ == "__main__":
    main()
