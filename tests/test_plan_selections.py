"""Epoch selections (``seqloader.plan.selections``: RETURNN's ``epoch_wise_filter`` ``subdirs``) as
properties: in the epochs of its range a sub-epoch holds exactly its order's selected sequences,
once each, in the order's sequence (nothing re-ordered), the rest counted per epoch; outside the
range nothing changes; steps stay equal on every rank."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from plan_contracts import check_plan_contracts
from seqloader.errors import OptionError
from seqloader.plan.greedy.planner import Planner
from seqloader.plan.options import PlanOptions
from seqloader.plan.pools import FilePools
from seqloader.plan.selections import EpochSelection


@settings(max_examples=80, deadline=None)
@given(
    lengths=st.lists(st.integers(1, 50), min_size=2, max_size=60),
    parts=st.integers(1, 3),
    seeding=st.sampled_from(["seqloader", "returnn"]),
    world_size=st.integers(1, 3),
    data=st.data(),
)
def test_selected_epochs_keep_exactly_the_selection(lengths, parts, seeding, world_size, data):
    n = len(lengths)
    keep = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    keep[0] = True
    options = PlanOptions(ordering="laplace:3", max_frames=120, partition_epoch=parts,
                          seeding=seeding, seed=3)  # fmt: skip
    arrays = {"data": np.array(lengths)}
    selection = EpochSelection(1, parts, keep, "subdirs=['a']")
    planner = Planner(arrays, options, selections=[selection])
    plain = Planner(arrays, options)
    for epoch in range(1, 2 * parts + 1):
        order, whole = planner.sub_epoch_order(epoch), plain.sub_epoch_order(epoch)
        if epoch <= parts:
            np.testing.assert_array_equal(order, whole[keep[whole]])
            dropped = int(np.count_nonzero(~keep[whole]))
            assert (
                planner.filtered(epoch).get(f"epoch_wise_filter subdirs=['a'] (epoch {epoch})", 0)
                == dropped
            )
        else:
            np.testing.assert_array_equal(order, whole)
    # each epoch's plan is its order once, steps equal, shares alone, what is left out counted
    check_plan_contracts(planner, [world_size], [], range(1, 2 * parts + 1), workers=())


def test_selections_are_refused_where_they_cannot_hold() -> None:
    arrays = {"data": np.arange(1, 7)}
    sel = [EpochSelection(1, 2, np.ones(6, dtype=bool), "subdirs=['a']")]
    with pytest.raises(OptionError, match=r"epoch selections .*distribution='files'"):
        Planner(arrays, PlanOptions(distribution="files"), files=np.array([0, 3, 6]),
                selections=sel)  # fmt: skip
    pools = FilePools(np.array([0, 3, 6]), np.array([1, 1]))
    with pytest.raises(OptionError, match=r"epoch selections .*file pools"):
        Planner(arrays, PlanOptions(seeding="returnn"), pools=pools, selections=sel)
    bad = [EpochSelection(1, 2, np.ones(5, dtype=bool), "subdirs=['a']")]
    with pytest.raises(OptionError, match=r"expected bool \[6\]"):
        Planner(arrays, PlanOptions(), selections=bad)
