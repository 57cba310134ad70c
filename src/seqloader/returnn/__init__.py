"""RETURNN migration: ``from_returnn_config(config)`` turns a RETURNN config's datasets into
``SeqLoader``s that deliver RETURNN's own order (docs/migrating.md). Needs the ``returnn`` package
to read config files and for ``targets`` vocabularies (the ``returnn`` extra).
``use_in_engine()``, called in a RETURNN config, makes RETURNN's own torch engine (``rnn.py``)
train on those loaders."""

from seqloader.returnn.config import from_returnn_config, read_config
from seqloader.returnn.engine import use_in_engine
from seqloader.returnn.view import ReturnnView
from seqloader.returnn.vocab import ReturnnVocab

__all__ = ["ReturnnView", "ReturnnVocab", "from_returnn_config", "read_config", "use_in_engine"]
