"""``SeqLoaderDataModule`` for the ``lightning`` package (``import lightning.pytorch as pl``).

For ``import pytorch_lightning as pl`` use ``seqloader.pytorch_lightning.SeqLoaderDataModule``: a
``Trainer`` accepts only data modules of its own package. What the module does:
``seqloader.datamodule``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from seqloader import datamodule
from seqloader.datamodule import *  # noqa: F403 (the parts of the data module, named here too)
from seqloader.datamodule import DataModuleParts
from seqloader.extras import require

if TYPE_CHECKING:
    from lightning.pytorch import LightningDataModule
else:  # imported here, so a missing package names the extra at `import seqloader.lightning`
    LightningDataModule = require("lightning.pytorch", "seqloader.lightning").LightningDataModule

__all__ = [*datamodule.__all__, "SeqLoaderDataModule"]


class SeqLoaderDataModule(DataModuleParts, LightningDataModule):
    """A ``lightning.pytorch.LightningDataModule`` over ``SeqLoader`` factories: see
    ``seqloader.datamodule.DataModuleParts``.

    >>> import seqloader as sl
    >>> src = sl.MemorySource({"data": [[1.0, 2.0], [3.0]]})
    >>> dm = SeqLoaderDataModule(train=lambda: sl.SeqLoader(src, max_seqs=2))
    >>> dm.setup("fit"); len(dm.train_dataloader())
    1
    """
