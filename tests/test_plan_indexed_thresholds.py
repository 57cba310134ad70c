"""Every golden digest of indexed planning with each size threshold of its code paths moved down,
so the paths that only large corpora take (large mix draws, blocks of the random and mix cuts,
windows drawn in blocks, per-rank sums of a files table, chunked scans) plan the golden cases.

The goldens' corpora (300 sequences) stay below every threshold, so they pin the small paths
alone; a "same plans" change to a large path was checked by nothing in the suite (pure numpy).
"""

from __future__ import annotations

import importlib
import inspect

import pytest

from seqloader.plan.indexed import (
    files_cut,
    files_distribution,
    fixed,
    fixed_chunks,
    histogram,
    mix,
    mix_cuts,
    mix_kind,
    plan,
    planner,
    random_order,
    units,
)

pytestmark = pytest.mark.filterwarnings("ignore::seqloader.errors.DataWarning")  # tiny rates

#: (test module, golden test) of every indexed golden table
GOLDENS = [
    ("test_plan_indexed", "test_indexed_golden_plans_are_pinned_to_their_algorithm_version"),
    ("test_plan_indexed_random", "test_random_golden_plans_are_pinned"),
    ("test_plan_indexed_sort_bins", "test_sort_bins_golden_plans_are_pinned"),
    ("test_plan_indexed_mix_cuts", "test_mix_cut_golden_plans_are_pinned"),
    ("test_plan_indexed_files_mix_cut", "test_files_mix_cut_golden_plans_are_pinned"),
    ("test_plan_indexed_fixed", "test_fixed_golden_plans_are_pinned"),
    ("test_plan_indexed_fixed_chunks", "test_chunked_fixed_golden_plans_are_pinned"),
    ("test_plan_indexed_files_cut", "test_files_cut_golden_plans_are_pinned"),
    ("test_plan_indexed_own_sort_key", "test_own_key_golden_plans_are_pinned"),
    ("test_plan_indexed_options", "test_golden_plans_of_the_admission_options"),
    ("test_plan_indexed_options", "test_since_refused_golden_plans_are_pinned"),
    ("test_plan_indexed_files_filter", "test_newly_planned_golden_plans_are_pinned"),
    ("test_plan_indexed_unchunked_key", "test_unchunked_key_golden_plans_are_pinned"),
]


def _small_blocks(patch: pytest.MonkeyPatch, fn, value: int) -> None:
    """``fn``'s default ``block`` argument set to ``value``."""
    params = [p for p in inspect.signature(fn).parameters.values() if p.default is not p.empty]
    defaults = [value if p.name == "block" else p.default for p in params]
    patch.setattr(fn, "__defaults__", tuple(defaults))


def move_thresholds_down(patch: pytest.MonkeyPatch) -> None:
    """Every size threshold small enough that the golden cases take the large paths."""
    for m in (mix_cuts, files_cut, units, random_order):
        patch.setattr(m, "RANDOM_BLOCK", 5)
    for m in (mix_cuts, mix_kind):
        patch.setattr(m, "MIX_BLOCK", 7)
    patch.setattr(mix_cuts, "DENSE", 0)
    patch.setattr(mix, "BIG", 1)
    patch.setattr(files_distribution, "_PER_RANK", 0)
    patch.setattr(files_distribution, "_ROWS", 2)
    patch.setattr(files_distribution, "_CHUNK", 3)
    patch.setattr(files_distribution, "_TABLE_MAX", 0)
    patch.setattr(planner, "_CHUNK", 3)
    patch.setattr(planner, "_ROWS", 2)
    patch.setattr(units, "_CHUNK", 3)
    patch.setattr(histogram, "_CHUNK", 3)
    _small_blocks(patch, plan.SortedWindows.__init__, 1)
    for m in (fixed, fixed_chunks):
        for _, fn in inspect.getmembers(m, inspect.isfunction):
            if fn.__module__ == m.__name__ and "block" in inspect.signature(fn).parameters:
                _small_blocks(patch, fn, 3)


@pytest.mark.parametrize(("module", "test"), GOLDENS)
def test_golden_plans_hold_on_the_large_paths(module: str, test: str) -> None:
    """The same digests with every threshold moved down (each golden test asserts its own)."""
    check = getattr(importlib.import_module(module), test)
    with pytest.MonkeyPatch.context() as patch:
        move_thresholds_down(patch)
        check()
