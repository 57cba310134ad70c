"""Data checks that catch broken data before it silently becomes a broken model.

- at open (cheap, from tags and lengths only): duplicate sequence tags (e.g. the same file listed
  twice: every sequence would be trained on twice per epoch) and empty sequences that the options
  admit;
- per batch: NaN/Inf in float features, after the transform (log-mel of silence gives -inf). The
  worker that executes the batch screens each sequence (``seqloader.loading.screen``) and the batch
  carries one message per bad sequence; here the trainer only applies the policy to them.

They run where ``SeqLoader`` runs them: at start-up and per delivered batch.

Each check has a policy: ``"error"`` raises ``DataError``, ``"warn"`` warns (``DataWarning``) and
counts it in the epoch report, ``"off"`` skips it.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

import numpy as np

from seqloader.errors import EXAMPLES, DataError, DataWarning
from seqloader.plan.planners import Planner
from seqloader.sources.base import HashedTags, Source, declares, where
from seqloader.sources.hdf_layout import PackedTags
from seqloader.sources.node_cache import NodeStore
from seqloader.sources.repeats import repeated_values
from seqloader.trainer.duplicate_store import node_duplicate_tags
from seqloader.validate import Policy, policy_option

if TYPE_CHECKING:
    from seqloader.trainer.report import EpochReport


@dataclass(frozen=True)
class CheckOptions:
    """What to do about suspicious data: each field is ``"off"``, ``"warn"`` or ``"error"``.

    - ``nonfinite``: NaN/Inf values in float features of a delivered batch.
    - ``empty``: admitted sequences with 0 frames in some key (``min_seq_length=1`` filters empty
      ones on the length key, counted in the report).
    - ``duplicate_tags``: two sequences with the same tag (the same file given twice, or files
      that overlap).
    - ``audit``: the epoch audit (``seqloader.trainer.audit``): did the loop receive every planned
      sequence exactly once? Off by default (it records every delivered batch);
      ``SeqLoader(audit=True)`` is the shorthand of ``audit="error"``.

    >>> src = sl.MemorySource({"x": [np.zeros((2, 1), "float32")] * 2}, tags=["a", "a"])
    >>> loader = sl.SeqLoader(src, max_seqs=2, checks=CheckOptions(duplicate_tags="off"))
    >>> loader.checks.duplicate_tags
    'off'
    """

    nonfinite: Policy = "warn"
    empty: Policy = "warn"
    duplicate_tags: Policy = "error"
    audit: Policy = "off"

    def __post_init__(self) -> None:
        for name in ("nonfinite", "empty", "duplicate_tags", "audit"):
            policy_option(f"checks.{name}", getattr(self, name))


def _act(policy: str, message: str) -> None:
    if policy == "error":
        raise DataError(message)
    if policy == "warn":
        warnings.warn(message, DataWarning, stacklevel=3)


# ---- at open ----
def duplicate_tags(tags: Sequence[str]) -> dict[str, list[int]]:
    """Tags used more than once -> their indices (all of them; empty dict if none).

    Tag containers with ``hashes()`` (``HashedTags``, e.g. ``PackedTags``) are screened by hash
    first, so only tags whose hashes collide are decoded and compared: 10M tags cost seconds, not a
    10M-entry dict."""
    candidates: Sequence[int] = range(len(tags))
    if declares(tags, HashedTags):
        candidates = _colliding(cast(HashedTags, tags))
    first: dict[str, int] = {}
    dups: dict[str, list[int]] = {}
    for i in candidates:
        t = tags[i]
        j = first.setdefault(t, i)
        if j != i:
            dups.setdefault(t, [j]).append(i)
    return dups


def _colliding(tags: HashedTags, block: int = 1 << 22) -> list[int]:
    """The indices of tags whose hash another tag shares (equal tags among them): the repeated
    hash values (``sources/repeats.py``: sorted in cache-sized parts, or kept by a metadata
    store that found them as it wrote the hashes); only if there are any, the hashes are
    screened in blocks for those values."""
    if isinstance(tags, PackedTags):
        repeated = tags.repeats()
    else:
        repeated = repeated_values(tags.hashes())
    if not len(repeated):
        return []
    h = tags.hashes()
    found: list[int] = []
    for a in range(0, len(h), block):
        part = h[a : a + block]
        at = np.minimum(np.searchsorted(repeated, part), len(repeated) - 1)
        found.extend((np.flatnonzero(repeated[at] == part) + a).tolist())
    return found


def check_duplicate_tags(
    source: Source, tags: Sequence[str], policy: str, stores: list[NodeStore] | None = None
) -> dict[str, list[int]]:
    """Act on ``policy`` about repeated tags; a large corpus is checked once per node
    (``seqloader.trainer.duplicate_store``), every other rank reads the verdict. ``stores``
    collects the verdict's file, built or found."""
    if policy == "off":
        return {}
    data_time = getattr(source, "data_mtime", None)  # recorded where the source knows it
    dups = node_duplicate_tags(
        tags, source.fingerprint, duplicate_tags, origin=repr(source), stores=stores,
        data_time=data_time,
    )  # fmt: skip
    if dups:
        examples = list(dups.items())[:EXAMPLES]
        shown = "; ".join(
            f"tag {t!r} at sequences {idx[:4]} ({where(source, idx[0])} and "
            f"{where(source, idx[1])})"
            for t, idx in examples
        )
        n = sum(len(v) - 1 for v in dups.values())
        _act(
            policy,
            f"{n} sequence(s) repeat a tag of an earlier sequence in {source!r}: {shown}. An "
            "epoch would train on them more than once. Fix: remove the duplicate file from the "
            "list (or the overlapping sequences); if the repeats are intended, pass "
            "checks=CheckOptions(duplicate_tags='warn' or 'off').",
        )
    return dups


def check_empty(
    source: Source,
    lengths: Mapping[str, np.ndarray],
    admitted: np.ndarray | None,
    tags: Sequence[str],
    length_key: str,
    policy: str,
) -> dict[str, int]:
    """Admitted sequences with 0 frames, per key -> count (and act on ``policy``).
    ``admitted``: bool mask ``[n]`` of the admitted sequences (None: all)."""
    if policy == "off":
        return {}
    found: dict[str, int] = {}
    for key in sorted(lengths):
        empty = empty_admitted(lengths[key], admitted)
        if not len(empty):
            continue
        found[key] = len(empty)
        i = int(empty[0])
        fix = (
            "set min_seq_length=1 to filter them (counted in the report)"
            if key == length_key
            else f"filter them from the data (key {key!r} is not the length key {length_key!r})"
        )
        _act(
            policy,
            f"{len(empty)} admitted sequence(s) have 0 frames of {key!r}, e.g. sequence {i} "
            f"(tag {tags[i]!r}) in {where(source, i)}: they are delivered as empty rows, which "
            f"many models cannot take. Fix: {fix}, or pass checks=CheckOptions(empty='off') if "
            "empty sequences are intended.",
        )
    return found


def check_source(source: Source, planner: Planner, options: CheckOptions) -> None:
    """The open-time checks of a ``SeqLoader``: duplicate tags, then admitted empty sequences."""
    tags = source.tags
    check_duplicate_tags(source, tags, options.duplicate_tags)
    if options.empty != "off":
        lengths = {k: source.lengths(k) for k in source.keys}
        if any(has_zero(lengths[k]) for k in lengths):  # else nothing to look up
            mask = planner.admitted_mask
            check_empty(source, lengths, mask, tags, planner.length_key, options.empty)


def has_zero(lengths: np.ndarray, block: int = 1 << 22) -> bool:
    """Whether some length is 0, in blocks (no array of ``n`` besides the lengths themselves,
    which may be a memory-mapped view; each block counted in place, with no mask of it made:
    two thirds of the CPU time of comparing it to 0, every rank scans them at open)."""
    return any(
        np.count_nonzero(part) != len(part)
        for part in (lengths[a : a + block] for a in range(0, len(lengths), block))
    )


def empty_admitted(
    lengths: np.ndarray, admitted: np.ndarray | None, block: int = 1 << 22
) -> np.ndarray:
    """The admitted sequences of length 0 -> int64 indices, ascending: in blocks, so nothing of
    size ``n`` is made besides the result (``admitted``: bool mask ``[n]``, None: all)."""
    found = []
    for a in range(0, len(lengths), block):
        zero = np.asarray(lengths[a : a + block]) == 0
        if admitted is not None:
            zero &= admitted[a : a + block]
        found.append(np.flatnonzero(zero) + a)
    return np.concatenate(found) if found else np.zeros(0, np.int64)


# ---- per batch (what the workers found: seqloader.loading.screen) ----
@dataclass
class BatchChecks:
    """Applies the policies to what the workers found in one delivered batch, and keeps the
    epoch's counts in the report (``nonfinite``: sequences; ``nonfinite_examples``)."""

    source: Source
    options: CheckOptions = field(default_factory=CheckOptions)

    @property
    def screen(self) -> bool:
        """Whether workers should look for NaN/Inf (``WorkerSpec.screen``)."""
        return self.options.nonfinite != "off"

    def check(self, nonfinite: Sequence[str], report: EpochReport) -> list[str]:
        """Apply the policy to one batch's NaN/Inf messages (``Batch.nonfinite``)."""
        found = list(nonfinite)
        if not found or not self.screen:
            return []
        if self.options.nonfinite == "error":
            more = f" ({len(found) - 1} more in this batch)" if len(found) > 1 else ""
            raise DataError(
                f"{found[0]}{more}. Fix: clean or filter the data, or pass "
                "checks=CheckOptions(nonfinite='warn') to train on it and only report it."
            )
        examples = report.nonfinite_examples
        for m in found[: max(0, EXAMPLES - len(examples))]:
            examples.append(m)
            warnings.warn(
                f"{m}; delivered as is (checks=CheckOptions(nonfinite='error') fails instead)",
                DataWarning,
                stacklevel=3,
            )
        report.nonfinite += len(found)
        return found
