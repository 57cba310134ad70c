"""RETURNN migration: ``from_returnn_config(config)`` turns a RETURNN config's datasets into
``SeqLoader``s that deliver RETURNN's own order (docs/migrating.md). Needs the ``returnn`` package
to read config files and for ``targets`` vocabularies (the ``returnn`` extra)."""

from seqloader.returnn.config import from_returnn_config, read_config
from seqloader.returnn.view import ReturnnView
from seqloader.returnn.vocab import ReturnnVocab

__all__ = ["ReturnnView", "ReturnnVocab", "from_returnn_config", "read_config"]
