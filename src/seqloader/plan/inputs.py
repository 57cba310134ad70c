"""``PlanInputs``: everything a planner plans from, in one frozen object.

Both planners (``planning="global"`` and ``planning="indexed"``) and ``make_planner`` take it, so
the list of what planning reads (the lengths, the options and what a source declares for
planning) is written once, here. ``seqloader.loading.plan_inputs`` builds it from a source; tests
and small scripts may keep the short form ``Planner(lengths, options, tags, files=...)``, which
builds one (``PlanInputs.of``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from seqloader.errors import OptionError
from seqloader.plan.bucket_index import BucketIndex
from seqloader.plan.chunks import ChunkTable
from seqloader.plan.epochs import Admission
from seqloader.plan.mix import Corpora
from seqloader.plan.options import PlanOptions
from seqloader.plan.orders import EpochOrders
from seqloader.plan.pools import FilePools
from seqloader.plan.selections import EpochSelection
from seqloader.plan.variants import LengthVariants


@dataclass(frozen=True)
class PlanInputs:
    """What a planner plans from.

    - ``lengths``: per key, int ``[n]`` (may be memory-mapped views); ``options``: how to plan.
    - ``tags``: the sequences' names, for errors; ``origin``: the source's description, for errors
      and file headers.
    - ``order_lengths``: what sorting orderings sort by, int64 ``[n]`` (default: the length
      key's lengths; RETURNN sorts OggZip corpora by ``int(duration * 100)``).
    - ``excluded``: reason -> bool mask ``[n]`` of sequences left out like filtered ones.
    - ``corpora``: the source's named corpora (``ConcatSource``); needed by ``options.mix``.
    - ``files``: the source's file layout, int64 ``[F + 1]`` (``HasFiles``); needed by
      ``distribution="files"``, ignored otherwise.
    - ``index``: a prebuilt (e.g. memory-mapped, node-shared) bucket index for indexed planning.
    - ``pools``: per-sub-epoch file pools (RETURNN's ``DistributeFilesDataset``,
      ``seqloader.plan.pools``): each sub-epoch orders only its pool's sequences.
    - ``selections``: the sequences some epochs keep (``seqloader.plan.selections``), applied
      before ``epoch_wise_filter``.
    - ``orders``: the source's own order per sub-epoch (``seqloader.plan.orders``), taken as it
      comes.
    - ``variants``: each sequence's length variants (``seqloader.plan.variants``): every full
      epoch orders and batches by the drawn variant's lengths; ``lengths`` are then the longest
      variant's.
    - ``variant_classes``: the variants' classes prebuilt (e.g. memory-mapped, node-shared:
      ``VariantClasses.columns`` of ``node_variant_classes``) for indexed planning; the same
      plans as without them.

    >>> inputs = PlanInputs({"data": np.array([5, 3, 8])}, PlanOptions(max_seqs=2), origin="toy")
    >>> inputs.origin, inputs.files is None
    ('toy', True)
    """

    lengths: Mapping[str, np.ndarray]
    options: PlanOptions
    tags: Sequence[str] | None = None
    origin: str = ""
    order_lengths: np.ndarray | None = None
    excluded: Mapping[str, np.ndarray] | None = None
    corpora: Corpora | None = None
    files: np.ndarray | None = None
    index: BucketIndex | None = None
    pools: FilePools | None = None
    selections: Sequence[EpochSelection] = ()
    orders: EpochOrders | None = None
    variants: LengthVariants | None = None
    variant_classes: Mapping[str, np.ndarray] | None = None

    @classmethod
    def of(
        cls, given: PlanInputs | Mapping[str, np.ndarray], *more: Any, **named: Any
    ) -> PlanInputs:
        """``given`` itself, or the inputs of the short call form ``(lengths, options, tags,
        origin, ..., files=...)``: ``PlanInputs(given, *more, **named)``.

        >>> short = PlanInputs.of({"data": np.array([2, 4])}, PlanOptions(), files=None)
        >>> PlanInputs.of(short) is short
        True
        """
        if isinstance(given, PlanInputs):
            if more or named:
                raise TypeError(
                    "a planner takes PlanInputs alone, or (lengths, options, ...) without them; "
                    f"got PlanInputs and {len(more)} more arguments, {sorted(named)}"
                )
            return given
        return cls(given, *more, **named)


class PlannedInputs(Protocol):
    """What every planner shows of the inputs it took: the options, the source's description,
    the length key's lengths int ``[n]``, the chunk table, file layout and pools it plans, and
    what it admitted."""

    @property
    def options(self) -> PlanOptions: ...

    @property
    def origin(self) -> str: ...

    @property
    def lengths(self) -> np.ndarray: ...

    @property
    def chunks(self) -> ChunkTable | None: ...

    @property
    def files(self) -> np.ndarray | None: ...

    @property
    def pools(self) -> FilePools | None: ...

    @property
    def admission(self) -> Admission: ...

    @property
    def admitted_mask(self) -> np.ndarray | None: ...


def refuse_clashes(origin: str, what: str, options: Sequence[tuple[str, bool]], fix: str) -> None:
    """An error naming every option of ``options`` (name, whether set) that is set: ``what`` is
    not supported with them, and ``fix`` says what to do."""
    clash = [name for name, on in options if on]
    if clash:
        raise OptionError(
            f"{origin or 'the source'}: {what} not supported with {', '.join(clash)}: {fix}"
        )
