"""RETURNN text datasets whose every sequence is a function of the corpus alone
(``TranslationDataset``, ``LmDataset``): read once, at conversion, by RETURNN's own class in corpus
order, so the ids, postfixes, unknown-symbol mapping and tags are RETURNN's; held in memory
(``MemorySource``: about 4 bytes a token). For corpora too large for memory, dump the dataset to
HDF with RETURNN's ``tools/hdf_dump.py`` and read that."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from seqloader.errors import OptionError
from seqloader.extras import require
from seqloader.returnn.vocab import RANDOM_VOCABS
from seqloader.sources.memory import MemorySource

Built = tuple[MemorySource, None, np.ndarray]

TRANSLATION_OWN = (
    "path",
    "file_postfix",
    "source_postfix",
    "target_postfix",
    "source_only",
    "unknown_label",
)
LM_OWN = (
    "corpus_file",
    "skip_empty_lines",
    "seq_list_file",
    "orth_vocab",
    "orth_symbols_file",
    "orth_symbols_map_file",
    "orth_replace_map_file",
    "orth_post_process",
    "word_based",
    "word_end_symbol",
    "seq_end_symbol",
    "unknown_symbol",
    "parse_orth_opts",
    "auto_replace_unknown_symbol",
    "log_auto_replace_unknown_symbols",
    "log_skipped_seqs",
    "error_on_invalid_seq",
    "add_delayed_seq_data",
    "delayed_seq_data_start_symbol",
    "dtype",
    "tag_prefix",
)
# options refused, with the reason and what to do instead
REFUSED = {
    "TranslationDataset": {
        "seq_list_file": "a fixed list of line numbers that replaces the order in every epoch "
        "(with repeats); not planned: use seq_list_filter_file for a subset, or dump the listed "
        "lines",
        "search_without_reference": "for search only (no targets read); use source_only=True",
    },
    "LmDataset": {
        "phone_info": "phoneme sequences drawn from RETURNN's RandomState per epoch in reading "
        "order; not reproducible per sequence: dump one epoch's phonemes to HDF, or map the "
        "words in a seqloader transform",
        "add_random_phone_seqs": "random sequences drawn per epoch in reading order; remove it",
    },
}


def read_translation(where: str, opts: dict[str, Any]) -> Built:
    """RETURNN's ``TranslationDataset``, ordered by the source length (its sort key)."""
    return _read(where, "TranslationDataset", opts, TRANSLATION_OWN, _source_lengths)


def read_lm(where: str, opts: dict[str, Any]) -> Built:
    """RETURNN's ``LmDataset``, ordered by each line's orthography length (its sort key)."""
    vocab = opts.get("orth_vocab")
    if isinstance(vocab, dict) and (
        vocab.get("class") in RANDOM_VOCABS or vocab.get("enable_sampling")
    ):
        raise OptionError(
            f"{where}: orth_vocab {vocab!r} samples another segmentation per epoch from RETURNN's "
            "RandomState in reading order; not supported: use the vocabulary without sampling"
        )
    return _read(where, "LmDataset", opts, LM_OWN, _orth_lengths)


def _source_lengths(dataset: Any, source: MemorySource) -> np.ndarray:
    return np.asarray(source.lengths("data"))


def _orth_lengths(dataset: Any, source: MemorySource) -> np.ndarray:
    return np.asarray(dataset._orths_lens, dtype=np.int64)  # what RETURNN's LmDataset sorts by


def _total(dataset: Any, read: int) -> int:
    """The corpus size (the count read where the class does not say: it skips nothing)."""
    try:
        return int(dataset.get_total_num_seqs())
    except NotImplementedError:  # RETURNN's OptionalNotImplementedError derives from it
        return read


def _read(
    where: str,
    kind: str,
    opts: dict[str, Any],
    own: tuple[str, ...],
    order: Callable[[Any, MemorySource], np.ndarray],
) -> Built:
    for key, why in REFUSED[kind].items():
        if opts.get(key):
            raise OptionError(f"{where}: option {key!r} is not supported: {why}")
    init_dataset = require("returnn.datasets.basic", kind).init_dataset
    kwargs = {k: opts[k] for k in own if k in opts}
    try:
        dataset = init_dataset({"class": kind, **kwargs, "seq_ordering": "default"})
        dataset.init_seq_order(epoch=1)  # 'default': corpus order
        keys = list(dataset.get_data_keys())
        data: dict[str, list[np.ndarray]] = {k: [] for k in keys}
        tags: list[str] = []
        i = 0
        while dataset.is_less_than_num_seqs(i):
            dataset.load_seqs(i, i + 1)
            tags.append(str(dataset.get_tag(i)))
            for k in keys:
                data[k].append(np.asarray(dataset.get_data(i, k)))
            i += 1
        total = _total(dataset, len(tags))
    except (AssertionError, OSError, KeyError, ValueError) as e:
        raise OptionError(
            f"{where}: RETURNN's {kind} cannot read its corpus ({kwargs}): {type(e).__name__}: {e}"
        ) from e
    if not tags:
        raise OptionError(f"{where}: the corpus has no sequence")
    if len(tags) != total:
        raise OptionError(
            f"{where}: RETURNN skipped {total - len(tags)} of {total} sequences while reading "
            "(error_on_invalid_seq=False), so its sequence indices shift with the reading order; "
            "fix the corpus, or set auto_replace_unknown_symbol=True"
        )
    sizes = {k: int(dataset.num_outputs[k][0]) for k in keys if dataset.num_outputs[k][1] == 1}
    source = MemorySource(data, tags=tags, vocab_sizes=sizes)
    return source, None, order(dataset, source)
