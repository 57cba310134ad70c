"""C1 when every rank passes over the data on its own (``distribution="random_seed_offset"``).

There each rank orders the whole admitted data with its own seed (RETURNN's meaning), so an epoch
on W ranks covers the data W times and exactly-once holds *per rank*: each rank uses every unit
of its own order (a sequence; a chunk in chunked plans) once, none twice, nothing filtered, and in
a full epoch without filters of its own its orders are every admitted unit. All ranks keep as
many batches as the shortest rank's plan, so what lies beyond its last step is left out of the
other ranks and counted in ``plan.dropped``: the units the ranks miss must be exactly those.
``simulate`` counts each rank's uses apart and asks this module for the verdict.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from seqloader.plan.planned_units import PlannedUnits


@dataclass(frozen=True)
class RankUses:
    """One rank's uses per unit in one full epoch (int64 ``[num_units]``), the units its own
    orders of the simulated sub-epochs hold, and whether every sub-epoch was simulated."""

    counts: np.ndarray
    planned: int
    complete: bool


def ranks_verdict(
    units: PlannedUnits,
    admitted: np.ndarray,
    ranks: Sequence[Mapping[int, RankUses]],
    left_out: Mapping[int, int],
    dropped: Mapping[int, int],
) -> tuple[bool, list[str]]:
    """-> (ok, what was found per full epoch). ``admitted``: bool per unit, the units a full epoch
    uses; ``ranks``: per rank, full epoch (0-based) -> its uses; ``left_out``: sequences the full
    epoch's own filters leave out (0 where not all its sub-epochs were simulated); ``dropped``:
    units its simulated plans count as dropped."""
    problems: list[str] = []
    said: list[str] = []
    for full in sorted(ranks[0]):
        found, shortfall = [], 0
        for r, per_full in enumerate(ranks):
            got = per_full[full]
            problems_r = _rank_problems(got, admitted, left_out[full], units.noun)
            found += [f"rank {r}: {p}" for p in problems_r]
            shortfall += got.planned - int(got.counts.sum())
        if shortfall != dropped[full]:
            found.append(
                f"the ranks miss {shortfall} {units.noun}s of their own orders, but the plans "
                f"count {dropped[full]} as dropped"
            )
        if found:
            problems.append(f"full epoch {full + 1}: " + "; ".join(found[:3]))
        else:
            said.append(_summary(full, ranks[0][full].complete, admitted, left_out, dropped, units))
    return (False, problems) if problems else (True, said)


def _rank_problems(got: RankUses, admitted: np.ndarray, left_out: int, noun: str) -> list[str]:
    """A unit used twice, a filtered one used, more uses than its orders hold (wrong in any part
    of a full epoch); in a complete full epoch without filters of its own, orders that do not
    hold every admitted unit."""
    counts, out = got.counts, []
    twice = np.flatnonzero(counts > 1)
    if len(twice):
        i = int(twice[0])
        out.append(f"{len(twice)} {noun}s used more than once (e.g. #{i} {int(counts[i])} times)")
    extra = int(np.count_nonzero(~admitted & (counts > 0)))
    if extra:
        out.append(f"{extra} filtered {noun}s used")
    used = int(counts.sum())
    if got.planned < used:
        out.append(f"{used} uses, but its own orders hold {got.planned} {noun}s")
    if got.complete and not left_out and got.planned != int(admitted.sum()):
        missing = np.flatnonzero(admitted & (counts == 0))
        example = f" (e.g. #{int(missing[0])} never used)" if len(missing) else ""
        out.append(
            f"its own orders hold {got.planned} {noun}s of the {int(admitted.sum())} "
            f"admitted{example}"
        )
    return out


def _summary(
    full: int,
    complete: bool,
    admitted: np.ndarray,
    left_out: Mapping[int, int],
    dropped: Mapping[int, int],
    units: PlannedUnits,
) -> str:
    noun = units.noun
    beyond = (
        f", but for the {dropped[full]} {noun}s beyond the shortest rank's last step (counted "
        "as dropped)"
        if dropped[full]
        else ""
    )
    if not complete:
        return (
            f"full epoch {full + 1}: no {noun} is used twice on any rank in its simulated part, "
            f"each rank uses its own order's {noun}s once{beyond} (simulate all its sub-epochs "
            "to check that none is missing)"
        )
    which = (
        f"every admitted {noun} ({int(admitted.sum())})"
        if not left_out[full]
        else f"every {noun} its own orders keep of the {int(admitted.sum())} admitted (the "
        "epochs' own filters leave some out)"
    )
    return f"full epoch {full + 1}: each rank uses {which} exactly once{beyond}"
