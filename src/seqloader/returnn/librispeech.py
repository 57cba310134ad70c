"""RETURNN's ``LibriSpeechCorpus`` -> ``AudioSource`` over the LibriSpeech folder as distributed
(``seqloader.audio.librispeech``): RETURNN's tags, its sequence list (sorted by part, speaker,
chapter, sequence), its sort key (the transcription's length in characters), its features
(``ReturnnFeatures``) and its targets (``ReturnnVocab``: ``targets``, ``bpe`` or ``chars``)."""

from __future__ import annotations

import itertools
import os
from dataclasses import dataclass
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
from seqloader.plan.admission import mean_len_selection
from seqloader.plan.epochs import EpochIndex, part_bounds
from seqloader.plan.options import Ordering
from seqloader.plan.ordering import order_sequences
from seqloader.plan.seeding import returnn_rng
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
    transcription lengths, order kept); both are planned. Its old filter (without
    ``use_new_filter``) re-sorts the sub-epoch: ``old_filter_orders`` plans that one."""
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


@dataclass(frozen=True)
class _Range:
    """One ``epoch_wise_filter`` range as RETURNN applies it."""

    first: int
    last: int | None
    keep: np.ndarray | None  # bool [n]: its subdirs; None: no subdirs
    max_mean_len: float | None
    new_filter: bool
    name: str

    def applies(self, epoch: int) -> bool:
        return self.first <= epoch and (self.last is None or epoch <= self.last)


@dataclass
class OldFilterOrders:
    """``LibriSpeechCorpus`` with its old ``epoch_wise_filter`` (``max_mean_len`` without
    ``use_new_filter``): RETURNN's ``init_seq_order`` exactly (``seqloader.plan.orders``). The
    corpus ordered by its ``seq_ordering`` and cut into ``partition_epoch`` parts,
    ``seq_list_filter_file`` applied, then every range that covers the epoch in sorted order: its
    ``subdirs``, then its filter; the old one sorts the sub-epoch by (transcription length, index)
    and keeps the shortest ``num`` where RETURNN's binary search over ``mean > max_mean_len``
    stops (its ``cmp`` returns a bool, so it stops at the first probe whose mean is within), in
    that sorted order; the new one keeps the order (``EpochWiseFilter``)."""

    ordering: str
    partition_epoch: int
    fixed_random_seed: int | None
    order_lengths: np.ndarray  # int64 [n]: the transcription lengths, RETURNN's sort key
    excluded: np.ndarray | None  # bool [n]: not in seq_list_filter_file
    ranges: tuple[_Range, ...]

    def identity(self) -> bytes:
        spec = (self.ordering, self.partition_epoch, self.fixed_random_seed)
        parts = [repr(spec).encode()]
        for r in self.ranges:
            parts.append(repr((r.first, r.last, r.max_mean_len, r.new_filter, r.name)).encode())
        return b"old_filter" + b"".join(parts)

    def _ordered(self, epoch: int, seed: int, order_rank: int) -> np.ndarray:
        parsed = Ordering.parse(self.ordering)
        ep = EpochIndex(epoch, self.partition_epoch)
        rng = returnn_rng(parsed.seed_epoch(ep.full_epoch), seed, order_rank)
        if self.fixed_random_seed is not None:
            rng = np.random.RandomState(self.fixed_random_seed)
        perm = order_sequences(self.order_lengths, parsed, rng)
        lo, hi = part_bounds(len(perm), self.partition_epoch, ep.part)
        part = perm[lo:hi]
        return part if self.excluded is None else part[~self.excluded[part]]

    def _filtered(
        self, epoch: int, seed: int, order_rank: int
    ) -> tuple[np.ndarray, dict[str, int]]:
        part = self._ordered(epoch, seed, order_rank)
        counts: dict[str, int] = {}
        for r in self.ranges:
            if not r.applies(epoch):
                continue
            before = len(part)
            if r.keep is not None:
                part = part[r.keep[part]]
            if r.max_mean_len and r.new_filter:
                part = part[mean_len_selection(part, self.order_lengths, r.max_mean_len)]
            elif r.max_mean_len:
                part = old_mean_len_filter(part, self.order_lengths, r.max_mean_len)
            if before > len(part):
                reason = f"epoch_wise_filter {r.name} (epoch {epoch})"
                counts[reason] = counts.get(reason, 0) + before - len(part)
        return part, counts

    def order(self, epoch: int, seed: int, order_rank: int) -> np.ndarray:
        return self._filtered(epoch, seed, order_rank)[0]

    def filtered(self, epoch: int, seed: int) -> dict[str, int]:
        return self._filtered(epoch, seed, 0)[1]


def old_mean_len_filter(part: np.ndarray, lengths: np.ndarray, max_mean_len: float) -> np.ndarray:
    """RETURNN's old ``LibriSpeechCorpus`` filter of one sub-epoch ``part`` (int64 ``[m]``): sorted
    by (length, index), the first ``num`` kept, ``num`` where ``binary_search_any`` with the bool
    ``cmp = mean(first num) > max_mean_len`` stops -> int64 ``[num]``, in that sorted order.

    >>> old_mean_len_filter(np.array([0, 1, 2, 3]), np.array([9, 1, 5, 3]), 2.5).tolist()
    [1, 3]
    """
    m = len(part)
    if m == 0:
        return part
    lens = np.asarray(lengths, dtype=np.int64)[part]
    by = np.lexsort((part, lens))  # sorted (len, idx) tuples
    prefix_mean = np.cumsum(lens[by]) / np.arange(1, m + 1)
    low, high = 1, m + 1
    while low < high:
        mid = (low + high) // 2
        if prefix_mean[min(mid, m) - 1] > max_mean_len:
            high = mid
        else:  # cmp False == 0: RETURNN returns this probe
            low = high = mid
    return np.asarray(part[by[:low]], dtype=np.int64)


def old_filter_orders(
    where: str,
    value: Any,
    opts: dict[str, Any],
    source: AudioSource,
    indices: np.ndarray | None,
    order_lengths: np.ndarray,
    excluded: np.ndarray | None,
    ordering: str,
    partition_epoch: int,
) -> OldFilterOrders | None:
    """The orders of a ``LibriSpeechCorpus`` whose ``epoch_wise_filter`` uses the old filter
    (some range with ``max_mean_len`` and without ``use_new_filter``); None otherwise (then
    ``librispeech_epoch_filter`` plans it as selections and ``epoch_wise_filter=``)."""
    if not isinstance(value, dict) or not any(
        isinstance(v, dict) and v.get("max_mean_len") and not v.get("use_new_filter")
        for v in value.values()
    ):
        return None
    ranges = []
    for key, range_opts in sorted(value.items(), key=lambda kv: _range_key(where, kv[0])):
        first, last = _range_key(where, key)
        if not isinstance(range_opts, dict):
            raise OptionError(
                f"{where}: epoch_wise_filter[{key!r}] {range_opts!r}; expected a dict"
            )
        unknown = sorted(set(range_opts) - {"subdirs", "max_mean_len", "use_new_filter"})
        if unknown:
            raise OptionError(
                f"{where}: epoch_wise_filter[{key!r}] {unknown}: not supported with the old "
                "filter (RETURNN asserts every option is read); supported: subdirs, max_mean_len, "
                "use_new_filter"
            )
        keep = None
        subdirs = range_opts.get("subdirs")
        if subdirs is not None:
            keep = _in_parts(opts, source, set(subdirs))
            keep = keep if indices is None else keep[indices]
            if not keep.any():
                raise OptionError(
                    f"{where}: epoch_wise_filter[{key!r}] subdirs {list(subdirs)} keep no "
                    "sequence (RETURNN asserts too): name parts of this prefix"
                )
        mean = range_opts.get("max_mean_len")
        new = bool(range_opts.get("use_new_filter"))
        said = [] if subdirs is None else [f"subdirs={list(subdirs)}"]
        if mean:
            said.append(f"max_mean_len={mean:g}{'' if new else ' (old filter)'}")
        name = ", ".join(said)
        ranges.append(_Range(first, last, keep, mean, new, name))
    fixed = opts.get("fixed_random_seed")
    return OldFilterOrders(
        ordering,
        partition_epoch,
        fixed,
        np.asarray(order_lengths, np.int64),
        excluded,
        tuple(ranges),
    )


def _range_key(where: str, key: Any) -> tuple[int, int | None]:
    """RETURNN's epoch range ``(start, end)``: None start is 1, None or -1 end is open."""
    if not isinstance(key, tuple) or len(key) != 2:
        raise OptionError(f"{where}: epoch_wise_filter key {key!r}; expected (first, last)")
    first = 1 if key[0] is None else key[0]
    last = None if key[1] in (None, -1) else key[1]
    if not isinstance(first, int) or (last is not None and not isinstance(last, int)):
        raise OptionError(f"{where}: epoch_wise_filter key {key!r}; expected ints")
    return first, last
