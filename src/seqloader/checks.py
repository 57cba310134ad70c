"""Data checks that catch broken data before it silently becomes a broken model.

- at open (cheap, from tags and lengths only): duplicate sequence tags (e.g. the same file listed
  twice: every sequence would be trained on twice per epoch) and empty sequences that the options
  admit;
- per delivered batch: NaN/Inf in float features. The screen is one ``sum`` per key (a sum is finite
  only if every element is), so the usual clean batch costs a fraction of a millisecond in the
  trainer; only a batch that fails it is scanned to name the sequences.

Each check has a policy: ``"error"`` raises ``DataError``, ``"warn"`` warns (``DataWarning``) and
counts it in the epoch report, ``"off"`` skips it.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from seqloader.errors import DataError, DataWarning, OptionError

POLICIES = ("off", "warn", "error")
_EXAMPLES = 5


@dataclass(frozen=True)
class CheckOptions:
    """What to do about suspicious data: each field is ``"off"``, ``"warn"`` or ``"error"``.

    - ``nonfinite``: NaN/Inf values in float features of a delivered batch.
    - ``empty``: admitted sequences with 0 frames in some key (``min_seq_length=1`` filters empty
      ones on the length key, counted in the report).
    - ``duplicate_tags``: two sequences with the same tag (the same file given twice, or files
      that overlap).
    """

    nonfinite: str = "warn"
    empty: str = "warn"
    duplicate_tags: str = "error"

    def __post_init__(self) -> None:
        for name in ("nonfinite", "empty", "duplicate_tags"):
            value = getattr(self, name)
            if value not in POLICIES:
                raise OptionError(f"checks.{name}: got {value!r}, expected one of {POLICIES}")


def where(source: object, index: int) -> str:
    """Where sequence ``index`` lives, as precisely as the source can say (file and local index)."""
    locate, paths = getattr(source, "locate", None), getattr(source, "paths", None)
    if locate is not None and paths:
        try:
            f, j = locate(int(index))
            return f"file {paths[f]!r} (sequence {j} of that file)"
        except Exception:  # a broken source should not hide the original finding
            pass
    return repr(source)


def _act(policy: str, message: str) -> None:
    if policy == "error":
        raise DataError(message)
    if policy == "warn":
        warnings.warn(message, DataWarning, stacklevel=3)


# ---- at open ----
def duplicate_tags(tags: Sequence[str]) -> dict[str, list[int]]:
    """Tags used more than once -> their indices (all of them; empty dict if none)."""
    first: dict[str, int] = {}
    dups: dict[str, list[int]] = {}
    for i, t in enumerate(tags):
        j = first.setdefault(t, i)
        if j != i:
            dups.setdefault(t, [j]).append(i)
    return dups


def check_duplicate_tags(source: object, tags: Sequence[str], policy: str) -> dict[str, list[int]]:
    if policy == "off":
        return {}
    dups = duplicate_tags(tags)
    if dups:
        examples = list(dups.items())[:_EXAMPLES]
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
    source: object,
    lengths: Mapping[str, np.ndarray],
    admitted: np.ndarray,
    tags: Sequence[str],
    length_key: str,
    policy: str,
) -> dict[str, int]:
    """Admitted sequences with 0 frames, per key -> count (and act on ``policy``)."""
    if policy == "off":
        return {}
    found: dict[str, int] = {}
    for key in sorted(lengths):
        empty = admitted[lengths[key][admitted] == 0]
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


def check_source(source: object, planner: object, options: CheckOptions) -> None:
    """The open-time checks of a ``SeqLoader``: duplicate tags, then admitted empty sequences."""
    tags = source.tags  # type: ignore[attr-defined]
    check_duplicate_tags(source, tags, options.duplicate_tags)
    if options.empty != "off":
        lengths = {k: source.lengths(k) for k in source.keys}  # type: ignore[attr-defined]
        admitted = planner.admission.admitted  # type: ignore[attr-defined]
        check_empty(source, lengths, admitted, tags, planner.length_key, options.empty)  # type: ignore[attr-defined]


# ---- per batch ----
@dataclass(frozen=True)
class NonFinite:
    """Sequence ``row`` of a batch has ``count`` NaN/Inf values in ``key``, first at ``frame``."""

    key: str
    row: int
    seq_index: int
    tag: str
    count: int
    frame: int


def find_nonfinite(batch: object) -> list[NonFinite]:
    """Rows with NaN/Inf in float keys of a ``Batch``. A finite per-key sum proves the key clean
    (NaN and Inf propagate through a sum), so a clean batch costs one reduction per key."""
    import torch

    found: list[NonFinite] = []
    for key, t in batch.data.items():  # type: ignore[attr-defined]
        if not t.is_floating_point() or t.numel() == 0 or bool(torch.isfinite(t.sum())):
            continue
        bad = ~torch.isfinite(t.reshape(t.shape[0], t.shape[1], -1)).cpu()  # [B, T, F]
        per_frame = bad.any(dim=2)  # [B, T]
        for row in torch.nonzero(per_frame.any(dim=1)).flatten().tolist():
            idx = int(batch.seq_indices[row])  # type: ignore[attr-defined]
            found.append(
                NonFinite(
                    key,
                    row,
                    idx,
                    batch.seq_tags[row],  # type: ignore[attr-defined]
                    int(bad[row].sum()),
                    int(torch.nonzero(per_frame[row])[0]),
                )
            )
    return found


@dataclass
class BatchChecks:
    """Runs the per-batch checks of one loader and keeps the epoch's counts."""

    source: object
    options: CheckOptions = field(default_factory=CheckOptions)

    def check(self, batch: object, report: object) -> list[NonFinite]:
        """Check one delivered batch; counts go to ``report.nonfinite`` (sequences) and its first
        examples to ``report.nonfinite_examples``."""
        if self.options.nonfinite == "off":
            return []
        found = find_nonfinite(batch)
        if not found:
            return []
        messages = [self.describe(f, batch) for f in found]
        if self.options.nonfinite == "error":
            raise DataError(
                messages[0]
                + (f" ({len(found) - 1} more in this batch)" if len(found) > 1 else "")
                + ". Fix: clean or filter the data, or pass checks=CheckOptions(nonfinite='warn') "
                "to train on and only report it."
            )
        seqs = {f.seq_index for f in found}
        examples = report.nonfinite_examples  # type: ignore[attr-defined]
        if len(examples) < _EXAMPLES:
            new = messages[: _EXAMPLES - len(examples)]
            examples.extend(new)
            for m in new:
                warnings.warn(
                    m + " (delivered as is; checks=CheckOptions(nonfinite='error') fails instead)",
                    DataWarning,
                    stacklevel=2,
                )
        report.nonfinite += len(seqs)  # type: ignore[attr-defined]
        return found

    def describe(self, f: NonFinite, batch: object) -> str:
        return (
            f"sequence {f.seq_index} (tag {f.tag!r}) in {where(self.source, f.seq_index)}: key "
            f"{f.key!r} has {f.count} NaN/Inf value(s), first at frame {f.frame} (epoch "
            f"{batch.epoch} step {batch.step})"  # type: ignore[attr-defined]
        )
