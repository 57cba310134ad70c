"""``prepare``: build the node's one-time stores for a source and loader options ahead of a job.

The first ``SeqLoader`` of a node over a large corpus builds what every other rank then maps: the
source's metadata store (built when the source is opened), the duplicate-tag verdict
(``trainer/duplicate_store.py``) and, with ``planning="indexed"``, the bucket index
(``loading/bucket_store.py``). ``prepare`` builds the same files through the same functions with
the same keys (so a later loader with the same options finds them and builds nothing), before the
job starts: on a login node, in a job's prologue, once per node.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from seqloader.loading.plan_inputs import plan_inputs
from seqloader.loading.planner_for import node_index
from seqloader.plan.options import PlanOptions
from seqloader.sources.base import Source
from seqloader.sources.columns import ColumnStore
from seqloader.sources.node_cache import NodeStore, size_text
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
    **options: Unpack[LoaderKeywords],
) -> Prepared:
    """Build (or find) the node's stores a ``SeqLoader(source, plan=..., checks=...)`` with the
    same options would build: the source's metadata (built when ``source`` was opened; reported
    here), the duplicate-tag verdict and the bucket index (``planning="indexed"``). Corpora below
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
        node_index(source, plan_inputs(source, merged.plan, lengths), stores)
    with _measured(stores):
        check_duplicate_tags(source, source.tags, merged.checks.duplicate_tags, stores)
    if merged.checks.duplicate_tags == "off":
        stores.append(NodeStore("duplicate-tag verdict", None, False, 0.0, note="not used: off"))
    return Prepared(tuple(stores))


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
