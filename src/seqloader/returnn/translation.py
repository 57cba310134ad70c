"""RETURNN's ``TranslationDataset`` (``source.POSTFIX`` / ``target.POSTFIX`` text files, optionally
gzipped, with ``source.vocab.pkl`` / ``target.vocab.pkl``): read once, at conversion, by RETURNN's
own class in corpus order, so the word ids, postfixes and unknown-label mapping are RETURNN's; held
in memory (``MemorySource``: about 4 bytes a token) and ordered by the source length, RETURNN's
sort key. For corpora too large for memory, dump it to HDF with RETURNN's ``tools/hdf_dump.py``."""

from __future__ import annotations

from typing import Any

import numpy as np

from seqloader.errors import OptionError
from seqloader.extras import require
from seqloader.sources.memory import MemorySource

OWN = ("path", "file_postfix", "source_postfix", "target_postfix", "source_only", "unknown_label")
# the TranslationDataset's options refused, with the reason and what to do instead
REFUSED = {
    "seq_list_file": "a fixed list of line numbers that replaces the order in every epoch (with "
    "repeats); not planned: use seq_list_filter_file for a subset, or dump the listed lines",
    "search_without_reference": "for search only (no targets read); use source_only=True",
}


def translation_source(where: str, opts: dict[str, Any]) -> tuple[MemorySource, None, np.ndarray]:
    """The corpus of a ``TranslationDataset`` dict as RETURNN reads it -> (source, all of it, the
    source lengths RETURNN sorts by)."""
    for key, why in REFUSED.items():
        if opts.get(key):
            raise OptionError(f"{where}: option {key!r} is not supported: {why}")
    init_dataset = require("returnn.datasets.basic", "TranslationDataset").init_dataset
    kwargs = {k: opts[k] for k in OWN if k in opts}
    try:
        dataset = init_dataset({"class": "TranslationDataset", **kwargs, "seq_ordering": "default"})
    except (AssertionError, OSError, KeyError) as e:
        raise OptionError(
            f"{where}: RETURNN's TranslationDataset cannot read {kwargs.get('path')!r} "
            f"(file_postfix {kwargs.get('file_postfix')!r}): {type(e).__name__}: {e}"
        ) from e
    dataset.init_seq_order(epoch=1)  # 'default': corpus order
    keys = list(dataset.get_data_keys())
    data: dict[str, list[np.ndarray]] = {k: [] for k in keys}
    tags: list[str] = []
    i = 0
    while dataset.is_less_than_num_seqs(i):
        dataset.load_seqs(i, i + 1)
        tags.append(str(dataset.get_tag(i)))
        for k in keys:
            data[k].append(np.asarray(dataset.get_data(i, k), dtype=np.int32))
        i += 1
    if not tags:
        raise OptionError(f"{where}: the corpus {kwargs.get('path')!r} has no line")
    sizes = {k: int(dataset.num_outputs[k][0]) for k in keys}
    source = MemorySource(data, tags=tags, vocab_sizes=sizes)
    return source, None, np.asarray(source.lengths("data"))
