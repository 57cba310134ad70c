"""Bad options fail at construction with ``OptionError`` naming the option, what was given and what
is expected — not hours into a training."""

from __future__ import annotations

import numpy as np
import pytest

import seqloader as sl
from seqloader.errors import OptionError
from seqloader.plan import Ordering, Planner, PlanOptions


def corpus() -> sl.MemorySource:
    return sl.MemorySource({"data": [np.zeros((n, 2), np.float32) for n in (3, 5, 7)]})


@pytest.mark.parametrize(
    ("ordering", "expected"),
    [
        ("shuffle", "got 'shuffle', expected one of default"),
        ("Random", "got 'Random'"),
        ("", "got ''"),
        ("laplace:", "got 'laplace:'"),
        ("laplace:x", "got 'laplace:x'"),
        ("laplace:0", "bin count/size must be >= 1"),
        ("laplace:.0", "bin count/size must be >= 1"),
        ("random:.3", "'random' takes only :K"),
        ("random:3:2", "'random' takes only :K"),
        ("random:0", "K (epochs to keep an order) must be >= 1"),
        ("laplace:.100:0", "K (epochs to keep an order) must be >= 1"),
        ("sorted:.5", "'sorted' takes no argument"),
        ("sorted:5:2", "'sorted' takes no argument"),
        ("default_every_n:4", "drops or repeats sequences"),
        ("random_sample", "drops or repeats sequences"),
    ],
)
def test_unknown_or_malformed_ordering(ordering: str, expected: str) -> None:
    with pytest.raises(OptionError, match=r"^ordering: ") as info:
        PlanOptions(ordering=ordering)
    assert expected in str(info.value)
    with pytest.raises(OptionError):
        Ordering.parse(ordering)


def test_ordering_must_be_a_string() -> None:
    with pytest.raises(OptionError, match=r"ordering: got None, expected a string"):
        PlanOptions(ordering=None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("max_frames", 0, "max_frames: got 0, expected an int >= 1 or None"),
        ("max_frames", -5, "max_frames: got -5, expected an int >= 1 or None"),
        ("max_frames", 1.5, "max_frames: got 1.5, expected an int >= 1 or None"),
        ("max_frames", True, "max_frames: got True"),
        ("max_seqs", 0, "max_seqs: got 0, expected an int >= 1 or None"),
        ("max_seqs", "8", "max_seqs: got '8'"),
        ("max_seq_length", 0, "max_seq_length: got 0"),
        ("max_seq_length", {"data": 0}, "max_seq_length['data']: got 0"),
        ("min_seq_length", -1, "min_seq_length: got -1, expected an int >= 0"),
        ("partition_epoch", 0, "partition_epoch: got 0, expected an int >= 1"),
        ("partition_epoch", None, "partition_epoch: got None, expected an int >= 1"),
        ("seed", -1, "seed: got -1, expected an int >= 0"),
        ("uneven", "repeat", "uneven: got 'repeat', expected one of ('split', 'pad', 'drop')"),
        ("uneven", None, "uneven: got None"),
        ("distribution", "replicate", "distribution: got 'replicate', expected one of"),
        ("length_key", 3, "length_key: got 3, expected a key name or None"),
    ],
)
def test_out_of_range_plan_options(field: str, value: object, expected: str) -> None:
    with pytest.raises(OptionError) as info:
        PlanOptions(**{field: value})
    assert expected in str(info.value)
    # the same through SeqLoader's keywords
    with pytest.raises(OptionError) as info:
        sl.SeqLoader(corpus(), **{field: value})
    assert expected in str(info.value)


def test_numpy_integers_are_accepted_and_normalised() -> None:
    options = PlanOptions(
        max_seqs=np.int64(4), max_frames=np.int32(100), partition_epoch=np.int8(2)
    )
    assert options.max_seqs == 4 and type(options.max_seqs) is int
    assert options.to_json() == PlanOptions(max_seqs=4, max_frames=100, partition_epoch=2).to_json()


@pytest.mark.parametrize("epoch", [0, -1, 1.0, "1", True, None])
def test_epochs_count_from_one(epoch: object) -> None:
    planner = Planner({"data": np.array([3, 4])}, PlanOptions())
    with pytest.raises(OptionError, match="epochs count from 1") as info:
        planner.global_plan(epoch, 1)  # type: ignore[arg-type]
    assert f"epoch: got {epoch!r}" in str(info.value)
    loader = sl.SeqLoader(corpus())
    with pytest.raises(OptionError, match="epochs count from 1"):
        loader.epoch(epoch)  # type: ignore[arg-type]
    with pytest.raises(OptionError, match="epochs count from 1"):
        loader.plan(epoch)  # type: ignore[arg-type]


def test_numpy_epoch_is_fine() -> None:
    planner = Planner({"data": np.array([3, 4, 5])}, PlanOptions(ordering="random"))
    a, b = planner.global_plan(np.int64(2), 1), planner.global_plan(2, 1)
    np.testing.assert_array_equal(a.batches.seqs, b.batches.seqs)


@pytest.mark.parametrize("world_size", [0, -2, 1.5])
def test_world_size_of_a_plan(world_size: object) -> None:
    planner = Planner({"data": np.array([3, 4])}, PlanOptions())
    with pytest.raises(OptionError, match="world_size: got"):
        planner.global_plan(1, world_size)  # type: ignore[arg-type]


def test_start_position_must_lie_in_the_sub_epoch() -> None:
    planner = Planner({"data": np.array([3, 4, 5])}, PlanOptions())
    assert len(planner.global_plan(1, 1, start=3).batches) == 0  # the very end is fine
    with pytest.raises(OptionError, match=r"start: got 4, expected a sequence position 0\.\.3"):
        planner.global_plan(1, 1, start=4)


def test_unknown_seqloader_keyword_names_it_and_the_valid_ones() -> None:
    with pytest.raises(OptionError) as info:
        sl.SeqLoader(corpus(), max_frame=100, batch_size=8)
    message = str(info.value)
    assert "unknown option(s) ['batch_size', 'max_frame']" in message
    assert "'max_frames'" in message and "'num_workers'" in message  # what would be valid


def test_options_given_twice_are_refused() -> None:
    with pytest.raises(OptionError, match="either as plan= or as keywords"):
        sl.SeqLoader(corpus(), plan=PlanOptions(), max_seqs=3)
    with pytest.raises(OptionError, match="either as workers= or as keywords"):
        sl.SeqLoader(corpus(), workers=sl.WorkerOptions(), num_workers=1)


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("num_workers", -1, "num_workers: got -1"),
        ("prefetch_factor", 0, "prefetch_factor: got 0"),
        ("multiprocessing_context", "threads", "multiprocessing_context: got 'threads'"),
    ],
)
def test_bad_worker_options(field: str, value: object, expected: str) -> None:
    with pytest.raises(OptionError, match=expected):
        sl.SeqLoader(corpus(), **{field: value})


@pytest.mark.parametrize(
    ("rank", "world_size", "expected"),
    [
        (2, 2, "rank: got 2, expected 0 <= rank < world_size=2"),
        (0, 0, "world_size: got 0"),
        (1, None, "rank and world_size go together"),
    ],
)
def test_bad_topology(rank: object, world_size: object, expected: str) -> None:
    with pytest.raises(OptionError, match=expected):
        sl.SeqLoader(corpus(), rank=rank, world_size=world_size)  # type: ignore[arg-type]


def test_option_errors_are_value_errors_and_seqloader_errors() -> None:
    with pytest.raises(ValueError):
        PlanOptions(uneven="nope")
    with pytest.raises(sl.SeqLoaderError):
        PlanOptions(uneven="nope")
