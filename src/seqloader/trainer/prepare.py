"""``prepare``: build the node's one-time stores for a source and loader options ahead of a job.

The first ``SeqLoader`` of a node over a large corpus builds what every other rank then maps: the
source's metadata store (built when the source is opened), the duplicate-tag verdict
(``trainer/duplicate_store.py``) and, with ``planning="indexed"``, the bucket index
(``loading/bucket_store.py``). ``prepare`` builds the same files through the same functions with
the same keys (so a later loader with the same options finds them and builds nothing), before the
job starts: on a login node, in a job's prologue, once per node.

It also screens every float dataset of an HDF source for NaN/Inf and keeps the node's verdicts
(``sources/screen_verdicts.py``): a file never screened costs a 0-worker first epoch one more read
of every copied row (measured 0.83-0.90x a numpy memmap loop instead of 1.02-1.14x with the
verdict); here it costs one ``dot`` per MiB of the file, at the memory's speed when the file is in
the page cache (``screen=False`` skips it).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from seqloader.loading.plan_inputs import plan_inputs
from seqloader.loading.planner_for import node_index, node_variants
from seqloader.plan.options import PlanOptions
from seqloader.sources.base import Source
from seqloader.sources.columns import ColumnStore
from seqloader.sources.node_cache import NodeStore, size_text
from seqloader.sources.screen_verdicts import KIND as SCREEN_KIND
from seqloader.sources.step_meter import StepMeter
from seqloader.trainer.checks import CheckOptions, check_duplicate_tags
from seqloader.trainer.loader_options import merge_options

if TYPE_CHECKING:
    import sys

    if sys.version_info >= (3, 11):
        from typing import Unpack
    else:
        from typing_extensions import Unpack

    from seqloader.trainer.loader_options import LoaderKeywords

METADATA = "source metadata"


@dataclass(frozen=True)
class Prepared:
    """What ``prepare`` built or found: one ``NodeStore`` per store a loader needs."""

    stores: tuple[NodeStore, ...]

    @property
    def built(self) -> tuple[NodeStore, ...]:
        """The stores this call built (empty when everything was there)."""
        return tuple(s for s in self.stores if s.built and s.path is not None)

    def lines(self) -> list[str]:
        """One line per store: kind, built/found, path, size, time (or why it is not a file)."""
        out = []
        for s in self.stores:
            if s.path is None:
                out.append(f"{s.kind}: {s.note}")
                continue
            verb = "built" if s.built else "found"
            took = "" if s.seconds < 0 else f", {s.seconds:.2f} s"
            if s.private_peak >= 0:
                took += f", {size_text(s.private_peak)} private memory at its peak"
            out.append(f"{s.kind}: {verb} {s.path} ({size_text(s.nbytes)}{took})")
        return out


def prepare(
    source: Source,
    *,
    plan: PlanOptions | None = None,
    checks: CheckOptions | None = None,
    screen: bool = True,
    **options: Unpack[LoaderKeywords],
) -> Prepared:
    """Build (or find) the node's stores a ``SeqLoader(source, plan=..., checks=...)`` with the
    same options would build: the source's metadata (built when ``source`` was opened; reported
    here), the duplicate-tag verdict, the bucket index (``planning="indexed"``; with length
    variants their classes too) and, unless ``screen=False``, the NaN/Inf screen's verdict of
    each float dataset of its HDF files (read whole once here, so that no first epoch screens
    them). Corpora below
    a million sequences need no files (each process builds what it needs in milliseconds): their
    entries say so. Repeated tags are acted on as the loader would (``checks.duplicate_tags``,
    default an error naming them).

    >>> src = sl.MemorySource({"data": [np.ones((n, 2), "float32") for n in (3, 5, 2, 4)]})
    >>> report = sl.prepare(src, ordering="buckets:2", max_seqs=2, planning="indexed")
    >>> [s.kind for s in report.stores]
    ['bucket index', 'duplicate-tag verdict']
    >>> report.built  # below a million sequences: nothing kept on disk
    ()
    """
    merged = merge_options(plan, None, checks, None, options)
    stores: list[NodeStore] = list(_source_stores(source))
    lengths = {k: source.lengths(k) for k in source.keys}
    with _measured(stores):  # each step's time and peak private memory in its entry
        inputs = plan_inputs(source, merged.plan, lengths)
        node_index(source, inputs, stores)
    if inputs.variants is not None:  # length variants: their classes, once per node too
        with _measured(stores):
            node_variants(source, inputs, stores)
    with _measured(stores):
        check_duplicate_tags(source, source.tags, merged.checks.duplicate_tags, stores)
    if merged.checks.nonfinite == "off":
        stores.append(NodeStore(SCREEN_KIND, None, False, 0.0, note="not used: off"))
    elif screen:
        with _measured(stores):
            stores += _screen_stores(source)
    if merged.checks.duplicate_tags == "off":
        stores.append(NodeStore("duplicate-tag verdict", None, False, 0.0, note="not used: off"))
    return Prepared(tuple(stores))


_NOT_KEPT = {
    "nonfinite": "holds NaN/Inf: no verdict, its batches are screened (and reported) each epoch",
    "small": "under 64 MiB: screened in each process (cheaper than writing a verdict)",
    "none": "no verdict may be kept (a file changed under 2 s ago, values outside the file, "
    "sequences not covering the dataset, or no index folder): screened in each process",
    "remote": "a remote file: screened as its batches are read",
}


def _screen_stores(source: Source) -> list[NodeStore]:
    """The NaN/Inf verdicts of every float dataset of the HDF files of ``source`` (and the parts
    of a ``ConcatSource``): found, or screened now and kept (``HDFSource.screen_files``)."""
    out: list[NodeStore] = []
    parts = getattr(source, "sources", None)
    for part in [source, *(parts.values() if isinstance(parts, dict) else ())]:
        screen_files = getattr(part, "screen_files", None)
        if not callable(screen_files):
            continue
        for s in screen_files():
            kind = f"{SCREEN_KIND} ({s.key!r} of {s.path})"
            if s.store is None:
                out.append(NodeStore(kind, None, False, s.seconds, note=_NOT_KEPT[s.outcome]))
            else:
                size = os.path.getsize(s.store) if os.path.exists(s.store) else 0
                out.append(NodeStore(kind, s.store, s.outcome == "kept", s.seconds, size))
    return out


@contextlib.contextmanager
def _measured(stores: list[NodeStore]) -> Iterator[None]:
    """The entries the block adds to ``stores`` get its peak private memory (and, where they
    say no time, its time)."""
    first = len(stores)
    with StepMeter() as step:
        yield
    for i in range(first, len(stores)):
        s = stores[i]
        seconds = s.seconds if s.seconds >= 0 else step.seconds
        stores[i] = replace(s, seconds=seconds, private_peak=step.peak_private)


def _source_stores(source: Source) -> Sequence[NodeStore]:
    """The metadata stores ``source`` (and the parts of a ``ConcatSource``) mapped when opened."""
    out: list[NodeStore] = []
    parts = getattr(source, "sources", None)
    for part in [source, *(parts.values() if isinstance(parts, dict) else ())]:
        store = getattr(part, "store", None)
        if isinstance(store, ColumnStore):
            built = bool(getattr(part, "index_built", False))
            entry = NodeStore.of(METADATA, store, built, -1.0)
            step = getattr(part, "index_step", None)  # (seconds, peak private) of the open
            if isinstance(step, tuple):
                entry = replace(entry, seconds=float(step[0]), private_peak=int(step[1]))
            out.append(entry)
    return out
