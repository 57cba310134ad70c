"""Chunking and per-key / packed batch limits in the plan, as properties.

Every contract for chunks: each chunk of an epoch exactly once across ranks, equal steps,
determinism, sub-epochs that form the full epoch, every batch within its limits, and the resume
harness over chunked epochs (exact and elastic: positions count chunks); the chunking option's
forms, chunk counts, and what is counted or refused. The chunks and batches are compared with
RETURNN's own torch pipeline in test_chunk_returnn (it needs torch; this module does not).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plan_contracts import check_plan_contracts
from seqloader.errors import OptionError, SequenceTooLongError
from seqloader.plan import EpochPlan, Planner, PlanOptions
from seqloader.plan.chunks import chunk_counts
from seqloader.plan.options import chunking_option

UNEVEN = ["split", "pad", "drop"]


def test_chunking_forms_and_off_values() -> None:
    assert chunking_option(None) is None
    assert chunking_option(0) is None
    assert chunking_option("0") is None
    assert chunking_option(50) == {"*": (50, 50)}
    assert chunking_option("50:25") == {"*": (50, 25)}
    assert chunking_option((50, None)) == {"*": (50, 50)}
    assert chunking_option(({"data": 40, "classes": 10}, None)) == {
        "classes": (10, 10),
        "data": (40, 40),
    }
    assert chunking_option({"data": (40, 20)}) == {"data": (40, 20)}
    for bad in ("x:y", (0, 5), ({"data": 4}, {"classes": 4}), "1:2:3", 1.5):
        with pytest.raises(OptionError, match="chunking"):
            chunking_option(bad)
    with pytest.raises(OptionError, match="'labels' is not in the data"):
        Planner({"data": np.array([5])}, PlanOptions(chunking={"labels": 3}))


@pytest.mark.parametrize("min_size", [0, 1, 3, 5, 9])
def test_chunk_counts_match_a_direct_count(min_size: int) -> None:
    lengths = np.arange(0, 40)
    for size, step in ((5, 5), (5, 2), (3, 7)):
        want = [sum(1 for s in range(0, n, step) if min(size, n - s) >= min_size) for n in lengths]
        assert chunk_counts(lengths, size, step, min_size).tolist() == want


def test_sequences_without_chunks_are_counted() -> None:
    lengths = {"data": np.array([0, 10, 2, 7])}
    planner = Planner(lengths, PlanOptions(chunking="5:5", min_chunk_size=3))
    assert planner.admission.filtered == {"no chunk (empty or shorter than min_chunk_size=3)": 2}
    assert planner.admission.admitted.tolist() == [1, 3]
    b = planner.global_plan(1, 1).batches
    assert list(zip(b.seqs.tolist(), b.chunks.tolist())) == [(1, 0), (1, 1), (3, 0)]


def test_overlong_chunk_names_sequence_key_and_fix() -> None:
    lengths = {"data": np.array([10, 30]), "classes": np.array([3, 40])}
    with pytest.raises(SequenceTooLongError) as info:
        Planner(lengths, PlanOptions(chunking={"data": 10}, max_frames={"*": 20}))
    message = str(info.value)
    assert "sequence 1" in message and "'classes'" in message and "max_seq_length" in message


@st.composite
def contract_cases(draw: st.DrawFn) -> tuple[Planner, int]:
    n = draw(st.integers(1, 200))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    data = rng.integers(0, draw(st.sampled_from([20, 300])), size=n).astype(np.int64)
    size = draw(st.integers(1, 60))
    options = PlanOptions(
        ordering=draw(st.sampled_from(["default", "random", "laplace:.7", "sorted", "random:2"])),
        chunking=(size, draw(st.integers(1, 60))),
        min_chunk_size=draw(st.sampled_from([0, 1, 5])),
        max_seqs=draw(st.one_of(st.none(), st.integers(1, 16))),
        max_frames=draw(st.one_of(st.none(), st.integers(60, 400))),
        batch_cost=draw(st.sampled_from(["frames", "packed"])),
        partition_epoch=draw(st.integers(1, 3)),
        uneven=draw(st.sampled_from(UNEVEN)),
        seed=draw(st.integers(0, 100)),
    )
    return Planner({"data": data}, options), draw(st.integers(1, 6))


def check_chunk_limits(planner: Planner, epoch: int, plan: EpochPlan) -> None:
    """Every batch within ``max_seqs`` and ``max_frames``, each chunk costing its window."""
    o, b = planner.options, plan.batches
    assert planner.chunks is not None and b.chunks is not None
    for k in range(len(b)):
        seqs, _ = b.batch(k)
        lens = planner.chunks.window("data", planner.lengths[seqs], b.chunks_of(k))
        if o.max_seqs is not None:
            assert len(seqs) <= o.max_seqs
        if o.max_frames is not None and len(seqs) > 1:
            cost = lens.sum() if o.cost.packed else len(seqs) * lens.max()
            assert cost <= o.max_frames


@settings(max_examples=60, deadline=None)
@given(contract_cases(), st.lists(st.integers(1, 5), max_size=2),
       st.lists(st.floats(0, 1), min_size=2, max_size=2))  # fmt: skip
def test_every_chunk_exactly_once_with_equal_steps(
    case: tuple[Planner, int], worlds: list[int], cuts: list[float]
) -> None:
    """The contracts for chunks over a full epoch: every chunk of a sub-epoch exactly once, in
    order (``drop``: a prefix, the rest counted), equal steps, determinism, the sub-epochs
    together every admitted sequence's chunks; each batch within its limits; and the resume
    harness W -> W' -> W'' through JSON (positions count chunks)."""
    planner, world = case
    assert planner.chunks is not None
    check_plan_contracts(
        lambda: Planner({"data": planner.lengths}, planner.options),
        [world, *worlds],
        cuts[: len(worlds)],
        ordered=True,
        each_plan=check_chunk_limits,
    )


def test_chunks_of_a_sequence_stay_consecutive_in_order() -> None:
    lengths = {"data": np.array([12, 3, 7, 20])}
    planner = Planner(lengths, PlanOptions(ordering="sorted", chunking="5:3"))
    b = planner.global_plan(1, 1).batches
    pairs = list(zip(b.seqs.tolist(), b.chunks.tolist()))
    # sorted by the whole sequences' lengths, then each sequence's chunks in order
    assert pairs == [(1, 0), (2, 0), (2, 1), (2, 2), (0, 0), (0, 1), (0, 2), (0, 3)] + [
        (3, c) for c in range(7)
    ]
