"""One validator for every option class: the same value is accepted or refused everywhere.

numpy integers count as ints (a value read from an array), bools never do (``True`` is no rank and
no count); the message is "NAME: got X, expected Y" and the choice sets come from ``Literal``
types."""

from __future__ import annotations

from typing import get_args, get_type_hints

import numpy as np
import pytest

import seqloader as sl
from conftest import index_corpus
from seqloader.errors import OptionError
from seqloader.plan.options import DISTRIBUTIONS, UNEVEN_POLICIES, Distribution, Uneven
from seqloader.trainer.checks import CheckOptions
from seqloader.validate import (
    POLICIES,
    Policy,
    bool_option,
    choice_option,
    int_option,
    optional_int_option,
    seconds_option,
)

# one int field of each option class: (build with value, read back)
INT_FIELDS = [
    ("PlanOptions.max_seqs", lambda v: sl.PlanOptions(max_seqs=v).max_seqs),
    ("PlanOptions.seed", lambda v: sl.PlanOptions(seed=v).seed),
    ("WorkerOptions.num_workers", lambda v: sl.WorkerOptions(num_workers=v).num_workers),
    (
        "WorkerOptions.prefetch_factor",
        lambda v: sl.WorkerOptions(prefetch_factor=v).prefetch_factor,
    ),
    ("Topology.rank", lambda v: sl.Topology(rank=v, world_size=4).rank),
    ("Topology.world_size", lambda v: sl.Topology(rank=0, world_size=v).world_size),
]


@pytest.mark.parametrize(("name", "build"), INT_FIELDS, ids=[n for n, _ in INT_FIELDS])
def test_numpy_ints_are_ints_everywhere(name, build) -> None:
    got = build(np.int64(2))
    assert got == 2 and type(got) is int, name  # stored as a plain int (JSON, fingerprints)


@pytest.mark.parametrize(("name", "build"), INT_FIELDS, ids=[n for n, _ in INT_FIELDS])
@pytest.mark.parametrize("value", [True, np.bool_(True), 1.0, "1"])
def test_bools_floats_and_strings_are_no_ints_anywhere(name, build, value) -> None:
    field = name.split(".")[1]
    with pytest.raises(OptionError, match=rf"^{field}: got .*, expected "):
        build(value)


def test_true_is_not_a_rank_of_the_loader() -> None:
    src = index_corpus(4)
    with pytest.raises(OptionError, match="rank: got True, expected 0 <= rank < world_size=2"):
        sl.SeqLoader(src, rank=True, world_size=2)
    assert sl.SeqLoader(src, rank=np.int64(1), world_size=np.int64(2)).topology == sl.Topology(1, 2)


def test_int_option_messages() -> None:
    assert int_option("n", np.int32(3), 1) == 3
    with pytest.raises(OptionError, match=r"^n: got 0, expected an int >= 1$"):
        int_option("n", 0, 1)
    with pytest.raises(OptionError, match=r"^n: got 5, expected an int >= 0 and < 5$"):
        int_option("n", 5, 0, below=5)
    with pytest.raises(OptionError, match=r"^n: got 0, expected an int >= 1 or None$"):
        optional_int_option("n", 0, 1)
    assert optional_int_option("n", None, 1) is None


def test_bool_seconds_and_choice_options() -> None:
    assert bool_option("b", np.bool_(False)) is False
    with pytest.raises(OptionError, match=r"^b: got 1, expected True or False$"):
        bool_option("b", 1)
    assert seconds_option("t", 0) == 0 and seconds_option("t", np.float32(1.5)) == 1.5
    with pytest.raises(OptionError, match=r"^t: got True, expected seconds >= 0 \(0: off\)$"):
        seconds_option("t", True, zero="0: off")
    assert choice_option("c", "pad", UNEVEN_POLICIES) == "pad"
    with pytest.raises(OptionError, match=r"^c: got \['pad'\], expected one of \("):
        choice_option("c", ["pad"], UNEVEN_POLICIES)  # unhashable: still a clean refusal


def test_choice_sets_are_the_literal_types() -> None:
    assert POLICIES == get_args(Policy) == ("off", "warn", "error")
    assert get_args(Distribution) == DISTRIBUTIONS
    assert get_args(Uneven) == UNEVEN_POLICIES
    hints = get_type_hints(CheckOptions)
    assert all(hints[f] == Policy for f in ("nonfinite", "empty", "duplicate_tags"))
    plan_hints = get_type_hints(sl.PlanOptions)
    assert plan_hints["distribution"] == Distribution and plan_hints["uneven"] == Uneven


def test_every_policy_option_takes_the_same_policies() -> None:
    for policy in POLICIES:
        CheckOptions(nonfinite=policy, empty=policy, duplicate_tags=policy)
    for name in ("nonfinite", "empty", "duplicate_tags"):
        with pytest.raises(OptionError, match=rf"^checks\.{name}: got 'loud', expected one of"):
            CheckOptions(**{name: "loud"})


@pytest.mark.parametrize("value", [True, np.bool_(True), 1.0, "1", -1])
def test_spec_augment_counts_go_through_the_validator(value) -> None:
    from seqloader.audio.transforms import SpecAugment

    with pytest.raises(
        OptionError, match=r"^SpecAugment\.time_masks: got .*, expected an int >= 0"
    ):
        SpecAugment(time_masks=value)
    assert SpecAugment(time_masks=np.int64(3)).time_masks == 3


def test_audio_options_go_through_the_validator() -> None:
    from typing import get_args

    from seqloader.audio.keys import ON_ERROR, OnError

    assert ON_ERROR == get_args(OnError) == ("raise", "skip")
    with pytest.raises(
        OptionError, match=r"^on_error: got 'ignore', expected one of \('raise', 'skip'\)"
    ):
        sl.AudioOptions(on_error="ignore")  # type: ignore[arg-type]
    with pytest.raises(OptionError, match=r"^sample_rate: got True, expected an int >= 1 or None"):
        sl.AudioOptions(sample_rate=True)
    with pytest.raises(OptionError, match=r"^length_tolerance_s: got -1, expected seconds >= 0"):
        sl.AudioOptions(length_tolerance_s=-1)
    with pytest.raises(OptionError, match=r"^defer_features: got 1, expected True or False"):
        sl.AudioOptions(defer_features=1, features=sl.LogMel())  # type: ignore[arg-type]


def test_synthetic_and_returnn_feature_options_go_through_the_validator() -> None:
    from seqloader.synthetic import SyntheticSpec

    with pytest.raises(OptionError, match=r"^SyntheticSpec\.num_seqs: got True, expected an int"):
        SyntheticSpec(num_seqs=True)
    with pytest.raises(
        OptionError, match=r"^SyntheticSpec\.max_frames: got 3, expected an int >= "
    ):
        SyntheticSpec(min_frames=5, max_frames=3)
    with pytest.raises(OptionError, match=r"^ReturnnFeatures\.num_feature_filters: got True"):
        sl.ReturnnFeatures("mfcc", num_feature_filters=True)
    with pytest.raises(OptionError, match=r"^ReturnnFeatures\.sample_rate: got None, expected the"):
        sl.ReturnnFeatures("mfcc", sample_rate=None)  # type: ignore[arg-type]
    assert sl.ReturnnFeatures("mfcc", with_delta=True).with_delta == 1
