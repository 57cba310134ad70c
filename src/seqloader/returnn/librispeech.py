"""RETURNN's ``LibriSpeechCorpus`` -> ``AudioSource`` over the LibriSpeech folder as distributed
(``seqloader.audio.librispeech``): RETURNN's tags, its sequence list (sorted by part, speaker,
chapter, sequence), its sort key (the transcription's length in characters), its features
(``ReturnnFeatures``) and its targets (``ReturnnVocab``: ``targets``, ``bpe`` or ``chars``)."""

from __future__ import annotations

import itertools
import os
from typing import Any

import numpy as np

from seqloader.audio.librispeech import (
    TAG_FORMAT,
    LibriSpeechPart,
    librispeech_parts,
    read_librispeech_part,
)
from seqloader.audio.manifest import ReadManifest
from seqloader.audio.returnn_features import ReturnnFeatures
from seqloader.audio.source import AudioSource
from seqloader.errors import OptionError
from seqloader.extras import require
from seqloader.plan.selections import EpochSelection
from seqloader.returnn.pre_process import pre_process_speed
from seqloader.returnn.vocab import ReturnnVocab

OWN = (
    "path",
    "prefix",
    "audio",
    "targets",
    "bpe",
    "chars",
    "orth_post_process",
    "use_zip",
    "use_ogg",
    "use_cache_manager",
    "seq_tag_format",
    "fixed_random_subset",
    "epoch_wise_filter",
)


def librispeech_source(where: str, opts: dict[str, Any]) -> tuple[AudioSource, np.ndarray]:
    """(the source, RETURNN's sort key per sequence: the transcription's length in characters)."""
    path, prefix = opts.get("path"), opts.get("prefix")
    if not isinstance(path, str | os.PathLike) or not isinstance(prefix, str):
        raise OptionError(
            f"{where}: path {path!r}, prefix {prefix!r}; expected the LibriSpeech folder and a "
            "part prefix such as 'train', 'dev-clean' (RETURNN needs both)"
        )
    if prefix.split("-")[0] not in ("train", "dev", "test"):
        raise OptionError(
            f"{where}: prefix {prefix!r}; RETURNN accepts 'train...', 'dev...' or 'test...'"
        )
    flags = {k: opts.get(k, False) for k in ("use_zip", "use_ogg", "use_cache_manager")}
    for key, value in flags.items():
        if not isinstance(value, bool):
            raise OptionError(f"{where}: {key} {value!r}, expected a bool")
    tag_format = opts.get("seq_tag_format", TAG_FORMAT)
    if not isinstance(tag_format, str):
        raise OptionError(f"{where}: seq_tag_format {tag_format!r}, expected a %-format string")
    root = os.fspath(path)
    names = librispeech_parts(root, prefix, flags["use_zip"])
    if not names:
        kind = "PREFIX*.zip files" if flags["use_zip"] else "PREFIX* folders"
        raise OptionError(
            f"{where}: no {kind} for prefix {prefix!r} in {root!r}; expected LibriSpeech's own "
            "layout (the extracted folders, or the zips with use_zip=True)"
        )
    orth = _orth_post_process(where, opts.get("orth_post_process"))
    manifests = [  # each part's transcriptions and audio headers, read once
        read_librispeech_part(
            LibriSpeechPart(root, n, flags["use_zip"], flags["use_ogg"], tag_format, orth)
        )
        for n in names
    ]
    features, speed = None, None
    audio = opts.get("audio")
    if audio is not None:
        if not isinstance(audio, dict):
            raise OptionError(f"{where}: audio {audio!r}; expected a dict of feature options")
        try:
            rate = None
            if audio.get("sample_rate") is None:  # RETURNN: the first file's rate
                rate = manifests[0].read_audio(0)[1]
                manifests[0].close()
            features = ReturnnFeatures.from_returnn(audio, sample_rate=rate)
        except OptionError as e:
            raise OptionError(f"{where}: {e}") from e
        features, speed = pre_process_speed(where, features)
    vocab = _targets(where, opts)
    keys = [k for k, on in (("data", features), ("classes", vocab)) if on is not None]
    if not keys:
        raise OptionError(
            f"{where}: neither audio nor targets: RETURNN gives only the 'raw' transcription "
            "string, which is no tensor; set audio={...} and/or targets"
        )
    source = AudioSource(
        [ReadManifest(m) for m in manifests], keys=keys, vocab=vocab, features=features, speed=speed
    )
    texts = [t for m in manifests for t in (m.texts or [])]
    return source, np.fromiter((len(t) for t in texts), dtype=np.int64, count=len(texts))


def _targets(where: str, opts: dict[str, Any]) -> ReturnnVocab | None:
    """RETURNN's choice: a ``targets`` dict, else ``bpe`` (``targets="bpe"`` or only ``bpe``
    given), else ``chars``."""
    targets, bpe, chars = opts.get("targets"), opts.get("bpe"), opts.get("chars")
    if isinstance(targets, dict):
        if bpe is not None or chars is not None:
            raise OptionError(f"{where}: targets is a dict, so bpe/chars must not be set (RETURNN)")
        return ReturnnVocab(targets)
    if targets == "bpe" or (targets is None and bpe is not None):
        if not isinstance(bpe, dict) or chars is not None:
            raise OptionError(f"{where}: targets 'bpe' needs bpe={{...}} (and no chars)")
        return ReturnnVocab(dict(bpe))  # create_vocab picks BytePairEncoding by its bpe_file
    if targets == "chars" or (targets is None and chars is not None):
        if not isinstance(chars, dict) or bpe is not None:
            raise OptionError(f"{where}: targets 'chars' needs chars={{...}} (and no bpe)")
        return ReturnnVocab({"class": "CharacterTargets", **chars})
    if targets is None:
        return None
    raise OptionError(f"{where}: targets {targets!r}; expected a dict, 'bpe' or 'chars' (RETURNN)")


def _orth_post_process(where: str, value: Any) -> Any:
    """RETURNN's ``orth_post_process`` (names of its text functions, or a function), applied to
    every transcription at open, as RETURNN applies it when it reads them."""
    if not value:
        return None
    lm = require("returnn.datasets.lm", "LibriSpeechCorpus orth_post_process")
    try:
        return lm.get_post_processor_function(value)
    except Exception as e:  # RETURNN's own lookup error, whatever its type
        raise OptionError(
            f"{where}: orth_post_process {value!r}: RETURNN cannot use it: {e}"
        ) from e


def librispeech_epoch_filter(
    where: str, value: Any, opts: dict[str, Any], source: AudioSource, indices: np.ndarray | None
) -> tuple[Any, tuple[EpochSelection, ...]]:
    """``epoch_wise_filter`` of a ``LibriSpeechCorpus`` -> (the ``epoch_wise_filter=`` plan
    option, the epoch selections). RETURNN applies, per epoch range, ``subdirs`` (only those
    parts) and then, with ``use_new_filter``, ``EpochWiseFilter`` (``max_mean_len`` over the
    transcription lengths, order kept); both are planned. Its older filter re-sorts the epoch by
    length: refused with the fix."""
    if not isinstance(value, dict):
        return value, ()  # PlanOptions names what it expects
    means, selections, ranges = {}, [], []
    for key, range_opts in value.items():
        if not isinstance(range_opts, dict) or not isinstance(key, tuple) or len(key) != 2:
            means[key] = range_opts  # PlanOptions names what it expects
            continue
        first = 1 if key[0] is None else key[0]
        last = None if key[1] in (None, -1) else key[1]
        ranges.append((first, last))
        rest = {k: v for k, v in range_opts.items() if k != "subdirs"}
        subdirs = range_opts.get("subdirs")
        if subdirs is not None:
            if not isinstance(subdirs, list | tuple) or not all(
                isinstance(d, str) for d in subdirs
            ):
                raise OptionError(
                    f"{where}: epoch_wise_filter[{key!r}] subdirs {subdirs!r}; expected a list "
                    "of part names (RETURNN asserts a list)"
                )
            keep = _in_parts(opts, source, set(subdirs))
            if indices is not None:
                keep = keep[indices]
            if not keep.any():
                raise OptionError(
                    f"{where}: epoch_wise_filter[{key!r}] subdirs {list(subdirs)} keep no "
                    "sequence (RETURNN asserts too): name parts of this prefix"
                )
            selections.append(EpochSelection(first, last, keep, f"subdirs={list(subdirs)}"))
        if rest.get("max_mean_len") and not rest.get("use_new_filter"):
            raise OptionError(
                f"{where}: epoch_wise_filter[{key!r}] without 'use_new_filter': True is "
                "LibriSpeechCorpus' old filter, which re-sorts the epoch by transcription length "
                "(RETURNN keeps it for old setups); not supported: set 'use_new_filter': True "
                "(RETURNN's EpochWiseFilter, the order kept), or leave the filter out"
            )
        if rest.get("max_mean_len"):
            means[key] = rest
    if selections:
        spans = sorted((f, float("inf") if e is None else e) for f, e in ranges)
        if any(b[0] <= a[1] for a, b in itertools.pairwise(spans)):
            raise OptionError(
                f"{where}: epoch_wise_filter ranges {sorted(value)} overlap, with subdirs: "
                "RETURNN then interleaves the ranges' selections and filters, which seqloader "
                "does not plan; give ranges that do not overlap"
            )
    return (means or None), tuple(selections)


def _in_parts(opts: dict[str, Any], source: AudioSource, parts: set[str]) -> np.ndarray:
    """Whether each utterance of ``source`` (one manifest per part, in RETURNN's part order) is in
    one of ``parts`` -> bool ``[n]``."""
    names = librispeech_parts(os.fspath(opts["path"]), opts["prefix"], bool(opts.get("use_zip")))
    bounds = source.manifest_bounds()
    keep = np.zeros(int(bounds[-1]), dtype=bool)
    for m, name in enumerate(names):
        if name in parts:
            keep[bounds[m] : bounds[m + 1]] = True
    return keep
