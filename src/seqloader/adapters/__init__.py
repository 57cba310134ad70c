"""Adapters: data people already have, as seqloader sources.

- ``LhotseSource``: Lhotse cuts (``CutSet`` or a cuts manifest), the ``lhotse`` extra;
- ``HFSource``: a Hugging Face ``datasets.Dataset`` (Arrow), the ``hf`` extra.

Sources like the others (I/O, no torch); each imports its package lazily, on use, and names the
extra to install when it is missing (``seqloader.extras``).
"""

from seqloader.adapters.hf import HFSource
from seqloader.adapters.lhotse import LhotseSource

__all__ = ["HFSource", "LhotseSource"]
