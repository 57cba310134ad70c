"""``SeqLoaderDataModule`` for the ``pytorch_lightning`` package (``import pytorch_lightning as
pl``), the name under which many code bases still import Lightning.

A ``pytorch_lightning.Trainer`` accepts only data modules derived from
``pytorch_lightning.LightningDataModule`` (one from ``lightning.pytorch`` fails in Lightning with
"Expected a parent"), so this is the same data module on that base. What it does:
``seqloader.datamodule``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from seqloader import datamodule
from seqloader.datamodule import *  # noqa: F403 (the parts of the data module, named here too)
from seqloader.datamodule import DataModuleParts
from seqloader.extras import require

if TYPE_CHECKING:
    from pytorch_lightning import LightningDataModule
else:  # imported here, so a missing package names the extra at import
    LightningDataModule = require(
        "pytorch_lightning", "seqloader.pytorch_lightning"
    ).LightningDataModule

__all__ = [*datamodule.__all__, "SeqLoaderDataModule"]


class SeqLoaderDataModule(DataModuleParts, LightningDataModule):
    """A ``pytorch_lightning.LightningDataModule`` over ``SeqLoader`` factories: see
    ``seqloader.datamodule.DataModuleParts``.

    >>> import pytorch_lightning as pl
    >>> from seqloader import MemorySource, SeqLoader
    >>> corpus = MemorySource({"data": [[1.0], [2.0, 3.0], [4.0]]})
    >>> dm = SeqLoaderDataModule(train=lambda: SeqLoader(corpus, max_seqs=3))
    >>> dm.setup("fit")
    >>> isinstance(dm, pl.LightningDataModule), len(dm.train_dataloader())
    (True, 1)
    """
