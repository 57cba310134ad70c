"""Chunking in configs written for RETURNN's TensorFlow engine, as that engine applies it.

RETURNN picks the engine from ``backend`` (``"tensorflow"``, ``"tensorflow-net-dict"``), else from
``use_tensorflow``. Its TF engine chunks in ``Dataset.iterate_seqs``, not in the torch pipeline's
``ChunkingIterDataPipe``, and the two differ where a config notices:

- a key of length <= 1 beside longer ones (a per-sequence label: speaker, gender) is repeated
  whole in a chunk; but ``iterate_seqs`` stops a sequence as soon as any key's rest is within
  ``min_chunk_size``, the label's included, so with ``chunking="500:250"`` each such sequence
  gives exactly one chunk, its first ``500`` frames (the torch pipeline fails on such keys);
- a chunk at ``t > 0`` is kept while ``length - t > min_chunk_size`` and the first one always
  (the torch pipeline: while the chunk is ``>= min_chunk_size``);
- dev and eval are not chunked unless ``chunk_eval`` (or ``chunking == "1"``).

``tf_chunking`` turns such a config's ``chunking`` / ``min_chunk_size`` into the torch-pipeline
form that plans the same chunks, or refuses what has none."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from seqloader.errors import OptionError
from seqloader.plan.options import chunking_option


def is_tf_config(values: Mapping[str, Any]) -> bool:
    """Whether RETURNN runs ``values`` with its TF engine (its ``BackendEngine.select_engine``).

    >>> is_tf_config({"use_tensorflow": True}), is_tf_config({"backend": "torch"})
    (True, False)
    """
    backend = values.get("backend")
    if backend:
        return str(backend).startswith("tensorflow")
    return bool(values.get("use_tensorflow"))


def tf_chunking(where: str, values: Mapping[str, Any], source: Any, train: bool) -> tuple[Any, int]:
    """(``chunking``, ``min_chunk_size``) for the plan of a TF config's dataset (None: not
    chunked) that give RETURNN's TF engine's chunks."""
    chunking, min_size = values.get("chunking"), values.get("min_chunk_size") or 0
    if not train and not values.get("chunk_eval") and chunking not in ("1", 1):
        return None, 0  # RETURNN's get_default_kwargs_eval: eval data is not chunked
    spec = chunking_option(chunking)
    if spec is None:
        return None, 0
    if set(spec) != {"*"}:
        raise OptionError(
            f"{where}: chunking {chunking!r} per key in a TF-engine config: RETURNN's "
            "iterate_seqs then steps every key not named by 0 (a division by zero where lengths "
            "differ); not planned: give chunking as 'size:step' (or train with backend='torch', "
            "whose per-key chunking seqloader plans)"
        )
    if not isinstance(min_size, int) or isinstance(min_size, bool):
        raise OptionError(f"{where}: min_chunk_size {min_size!r} in a TF-engine config: an int")
    size = spec["*"][0]
    keys = source.keys
    main = "data" if "data" in keys else sorted(keys)[0]
    lengths = {k: np.asarray(source.lengths(k), dtype=np.int64) for k in keys}
    labels = [k for k in keys if k != main and bool(np.any(lengths[k] != lengths[main]))]
    for k in labels:
        long = np.flatnonzero((lengths[k] != lengths[main]) & (lengths[k] > 1))
        if len(long):
            i = int(long[0])
            raise OptionError(
                f"{where}: chunking {chunking!r}: key {k!r} has {int(lengths[k][i])} frames and "
                f"{main!r} {int(lengths[main][i])} in sequence {source.tag(i)!r}; RETURNN's TF "
                "engine chunks only keys of the main key's length (or of length <= 1) and raises "
                "on it: give chunking per key for the torch engine (backend='torch')"
            )
    if labels:  # one chunk per sequence: the first; the labels whole
        first_only = int(max(int(lengths[main].max(initial=0)), size)) + 1
        named = {k: (size, first_only) for k in keys if k not in labels}
        return (
            {k: v[0] for k, v in named.items()},
            {k: v[1] for k, v in named.items()},
        ), 0
    if min_size == 0:
        return chunking, 0
    short = np.flatnonzero((lengths[main] > 0) & (lengths[main] <= min_size))
    if size <= min_size or len(short):
        what = (
            f"sequence {source.tag(int(short[0]))!r} has {int(lengths[main][short[0]])} frames"
            if len(short)
            else f"the chunk size {size} is not above it"
        )
        raise OptionError(
            f"{where}: min_chunk_size {min_size} in a TF-engine config: RETURNN's iterate_seqs "
            "keeps a sequence's first chunk whatever its size and a later one while more than "
            f"min_chunk_size frames remain; {what}, where no torch-pipeline min_chunk_size gives "
            "the same chunks: set min_chunk_size 0, or train with backend='torch'"
        )
    return chunking, min_size + 1  # "rest > m" is "chunk >= m + 1" once every first chunk is
