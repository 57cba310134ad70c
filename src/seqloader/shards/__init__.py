"""Tar-sharded speech corpora as seqloader sources: Lhotse Shar, NeMo tarred audio, WebDataset.

``ShardSource`` (``source.py``) reads them with random access through a member index
(``index.py``, one memory-mapped ``ColumnStore`` per corpus and node) built from the listings and
the tars' headers (``layouts.py`` knows the three layouts); ``write_shards`` (``write.py``) writes
them from any source. Above the audio layer: members decode through ``seqloader.audio``. No torch.
"""

from seqloader.shards.source import ShardSource
from seqloader.shards.write import write_shards

__all__ = ["ShardSource", "write_shards"]
