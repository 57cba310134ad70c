"""``ReturnnView``: a source as a RETURNN dataset sees it, for planning in RETURNN's own order.

RETURNN sorts OggZip corpora by ``int(duration * 100)``, not by feature frames, and applies
``seq_list_filter_file`` after ordering; OggZip's ``segment_file`` keeps a subset in corpus order
before ordering; ``DistributeFilesDataset`` orders per-sub-epoch pools of files;
``CombinedDataset`` orders itself. The view carries these as the planning hints
(``order_lengths``, ``excluded``, ``file_pools``, ``epoch_selections``, ``epoch_orders``) and
maps a subset's
indices; everything else is the wrapped source's, including its optional abilities
(``read_many``, ``prepare_workers``, ``where``, ``loader_needs``, ``length_variants`` with
``read_variant``), declared here and passed on.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import cast

import numpy as np

from seqloader.plan.orders import EpochOrders
from seqloader.plan.pools import FilePools
from seqloader.plan.selections import EpochSelection
from seqloader.sources.base import (
    HasLengthVariants,
    LoaderNeeds,
    Source,
    length_variants,
    loader_needs,
    prepare_workers,
    read_batch,
    where,
)
from seqloader.sources.forwarding import Forwarding


class ReturnnView(Forwarding):
    """``inner`` restricted to ``indices`` (None: all, in order) with planning hints; ``tags``:
    the tags to report instead of ``inner``'s (RETURNN's MetaDataset ``seq_list_file``)."""

    def __init__(
        self,
        inner: Source,
        *,
        indices: np.ndarray | None = None,
        order_lengths: np.ndarray | None = None,
        excluded: Mapping[str, np.ndarray] | None = None,
        pools: FilePools | None = None,
        selections: tuple[EpochSelection, ...] = (),
        tags: Sequence[str] | None = None,
        orders: EpochOrders | None = None,
    ) -> None:
        self._inner = inner
        self._orders = orders
        self._pools = pools
        self._selections = selections
        self._indices = None if indices is None else np.asarray(indices, dtype=np.int64)
        self._order_lengths = order_lengths
        #: the wrapped source's length variants, once taken (``length_variants``)
        self._variants: tuple[tuple[tuple[str, ...], Mapping[str, np.ndarray]] | None] | None = None
        self._excluded = dict(excluded or {})
        n = len(self)
        for what, arr in [("order_lengths", order_lengths), *self._excluded.items()]:
            if arr is not None and len(arr) != n:
                raise ValueError(f"ReturnnView {what}: got {len(arr)} entries, expected {n}")
        if tags is not None and len(tags) != n:
            raise ValueError(f"ReturnnView tags: got {len(tags)} entries, expected {n}")
        self._renamed = tags is not None  # RETURNN's MetaDataset seq list: the parent's tags
        self._tags: Sequence[str] = (
            tags
            if tags is not None
            else inner.tags
            if self._indices is None
            else [inner.tag(int(i)) for i in self._indices]
        )

    # ---- planning hints (seqloader.sources.base.PlanHints) ----
    def order_lengths(self) -> np.ndarray | None:
        return self._order_lengths

    def excluded(self) -> Mapping[str, np.ndarray]:
        return self._excluded

    def file_pools(self) -> FilePools | None:
        """RETURNN's ``DistributeFilesDataset``: the files each sub-epoch draws from
        (``seqloader.plan.pools.HasFilePools``); None for every other dataset."""
        return self._pools

    def epoch_selections(self) -> tuple[EpochSelection, ...]:
        """RETURNN's ``LibriSpeechCorpus`` ``epoch_wise_filter`` ``subdirs``: the sequences some
        epochs keep (``seqloader.plan.selections.HasEpochSelections``)."""
        return self._selections

    def epoch_orders(self) -> EpochOrders | None:
        """RETURNN's ``CombinedDataset``: its own order per sub-epoch
        (``seqloader.plan.orders.HasEpochOrders``); None for every other dataset."""
        return self._orders

    @property
    def inner(self) -> Source:
        """The wrapped source (all of it: ``indices`` not applied)."""
        return self._inner

    # ---- Source protocol ----
    def __len__(self) -> int:
        return len(self._inner) if self._indices is None else len(self._indices)

    def lengths(self, key: str) -> np.ndarray:
        full = self._inner.lengths(key)
        return full if self._indices is None else full[self._indices]

    @property
    def tags(self) -> Sequence[str]:
        return self._tags

    def tag(self, index: int) -> str:
        return self._tags[index]

    def read(self, index: int) -> dict[str, np.ndarray]:
        inner = index if self._indices is None else int(self._indices[index])
        return self._inner.read(inner)

    def fingerprint(self) -> str:
        if self._indices is None and not self._renamed:
            return self._inner.fingerprint()
        h = hashlib.sha256(self._inner.fingerprint().encode())
        if self._indices is not None:
            h.update(self._indices.tobytes())
        if self._renamed:
            h.update("\0".join(self._tags).encode())
        return h.hexdigest()[:32]

    # ---- optional abilities (seqloader.sources.base), passed on from the wrapped source ----
    def read_many(self, indices: np.ndarray) -> list[dict[str, np.ndarray]]:
        inner = np.asarray(indices, dtype=np.int64)
        if self._indices is not None:
            inner = self._indices[inner]
        return read_batch(self._inner, inner)

    def prepare_workers(self) -> None:
        prepare_workers(self._inner)

    def length_variants(self) -> tuple[tuple[str, ...], Mapping[str, np.ndarray]] | None:
        """The wrapped source's length variants (planned speed perturbation), of the listed
        sequences (taken once, kept)."""
        if self._variants is None:
            declared = length_variants(self._inner)
            if declared is not None and self._indices is not None:
                labels, table = declared
                declared = labels, {k: np.asarray(v)[:, self._indices] for k, v in table.items()}
            self._variants = (declared,)
        return self._variants[0]

    def read_variant(self, index: int, variant: int) -> dict[str, np.ndarray]:
        inner = index if self._indices is None else int(self._indices[index])
        return cast(HasLengthVariants, self._inner).read_variant(inner, variant)

    def where(self, index: int) -> str:
        return where(self._inner, index if self._indices is None else int(self._indices[index]))

    def loader_needs(self) -> LoaderNeeds:
        return loader_needs(self._inner)

    def close(self) -> None:
        close = getattr(self._inner, "close", None)
        if close is not None:
            close()

    def __repr__(self) -> str:
        subset = "" if self._indices is None else f", {len(self)} listed sequences"
        return f"ReturnnView({self._inner!r}{subset})"
