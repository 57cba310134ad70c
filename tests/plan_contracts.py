"""One checker of the planning contracts for every plan kind (pure numpy: no torch, no I/O).

``check_plan_contracts(planner_or_factory, worlds, cuts, epochs=None, *, ordered=False,
expected=sub_epoch_units, workers=(3,), each_plan=None, each_segment=None)`` checks, for any
planner that ``make_planner`` builds
(greedy or indexed; shard, ``files``, ``random_seed_offset``, file pools; chunked; mixed), the
contracts of docs/contracts.md on the epochs asked:

- C1 exactly once: a plan's real units (a sequence; a chunk in chunked plans; a (unit, corpus
  epoch) in mixed ones) are the sub-epoch's units (``expected``), each once across all ranks;
  what is missing is exactly ``plan.dropped`` (``uneven="drop"``, sharded pools); fillers repeat
  the sub-epoch's own sequences. ``random_seed_offset``: each rank a prefix of its own order,
  the surplus of every rank counted as dropped. The sub-epochs of each full epoch asked are
  disjoint and together every admitted unit (less what was dropped; with an
  ``epoch_wise_filter``: admitted ones, none twice); mixed: every sequence once per corpus epoch
  (the mix's own check).
- C2 equal steps: every rank the same steps, from any resumed step; ``max_seqs`` kept.
- C3 independence from the workers and the rank count: a rank's share is its part of the global
  list, also when a fresh planner computes it alone (no other rank's batches asked first), and
  ``simulate`` with ``workers`` DataLoader workers splits each rank's load over them, its own
  findings holding (the real workers' batches are compared in the loader's tests).
- C4 determinism: planning again, and from a fresh planner (when a factory is given), gives the
  same arrays; so does continuing a saved position from a fresh planner.
- C5 resume chains: each epoch is run on ``worlds[0]`` ranks, stopped at ``cuts[0]``, saved
  through JSON, continued on ``worlds[1]`` ranks, ... to the end: equal steps in every segment,
  the same world size continues the uninterrupted plan, a finished epoch stays finished, the
  position counts what was consumed, and the union over segments is the sub-epoch's units once
  (``drop``: less what the last segment leaves out). A world size the kind cannot take
  mid-epoch (``random_seed_offset``) must be refused with ``ResumeError``; the chain then goes
  on with the segment's own world size. A chain of one world size resumes nothing: its epoch's
  plan, checked above, is what it consumes (``Checked.consumed``).

Arguments:

- ``planner_or_factory``: a planner, or a no-argument callable building one (then C4 also from
  fresh planners, and shares computed alone by a fresh planner).
- ``worlds``: world sizes; each epoch's plans are checked on each (and on the first epoch's
  first one, which the full-epoch checks and ``simulate`` use), the chain runs through them in
  order. Per epoch: a list of lists, one chain per epoch.
- ``cuts``: where each segment but the last stops: a float in [0, 1] is a fraction of the
  segment's remaining steps, an int that many steps (-1: to the end). Per epoch like ``worlds``.
- ``epochs``: the epochs to check (default: the first full epoch, ``1..partition_epoch``).
- ``ordered``: the real units come in ``expected``'s order (plan order; across resumes too).
- ``expected(planner, epoch, world) -> Units``: a sub-epoch's units (default
  ``sub_epoch_units``); a new kind whose sub-epoch the default does not know passes its own.
- ``workers``: the ``num_workers`` values ``simulate`` runs with (empty: skip).
- ``each_plan(planner, epoch, plan)``: a kind's own checks of every plan checked (limits,
  layouts).
- ``each_segment(planner, position, plan, consumed)``: a kind's own checks of every segment of
  a chain, with the units consumed before it.

A world size the planner refuses (``check_world`` raises ``OptionError``) must be refused by
``global_plan`` too; it is skipped and listed in the result's ``refused``. Returns ``Checked``:
what each epoch's chain consumed and the plans checked, for the caller's own extra assertions.

>>> import numpy as np
>>> from seqloader.plan import PlanOptions, make_planner
>>> lengths = {"data": np.arange(1, 41)}
>>> checked = check_plan_contracts(
...     lambda: make_planner(lengths, PlanOptions(ordering="random", max_seqs=3)), [2, 3], [0.5]
... )
>>> sorted(checked.consumed[1].seqs.tolist()) == list(range(40))
True
"""

from __future__ import annotations

import inspect
import json
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest

from seqloader.errors import OptionError, ResumeError
from seqloader.plan import BatchList, EpochPlan, Position, continue_plan
from seqloader.plan.simulate import simulate

Planner = Any  # what make_planner returns (seqloader.plan's Planner protocol, plus its helpers)
#: ``each_segment(planner, position, plan, consumed)``: a kind's own check of each resumed segment
#: (``consumed``: the units consumed before it in this epoch)
SegmentCheck = Callable[[Planner, Position, EpochPlan, "Units"], None]
#: key = unit * USE_SPAN + corpus epoch: a (unit, use) pair as one int64
USE_SPAN = 1 << 20


@dataclass(frozen=True)
class Units:
    """Planned units in order: the sequence of each, its chunk (chunked plans) and its corpus
    epoch (mixed plans); all int64 ``[u]``."""

    seqs: np.ndarray
    chunks: np.ndarray | None = None
    uses: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.seqs)

    def keys(self, planner: Planner) -> np.ndarray:
        """One int64 per unit: the chunk number (``ChunkTable.unit_ids``) or the sequence, with
        the corpus epoch folded in where there is one."""
        ids = np.asarray(self.seqs, dtype=np.int64)
        if self.chunks is not None and planner.chunks is not None:
            ids = planner.chunks.unit_ids(ids, self.chunks)
        if self.uses is None:
            return ids
        uses = np.asarray(self.uses, dtype=np.int64)
        assert (uses < USE_SPAN).all()
        return ids * USE_SPAN + uses

    def take(self, mask: np.ndarray | slice) -> Units:
        pick = None if self.chunks is None else self.chunks[mask]
        return Units(self.seqs[mask], pick, None if self.uses is None else self.uses[mask])

    @staticmethod
    def concat(parts: Sequence[Units]) -> Units:
        if not parts:
            return Units(np.zeros(0, np.int64))

        def join(name: str) -> np.ndarray | None:
            arrays = [getattr(p, name) for p in parts]
            return None if arrays[0] is None else np.concatenate(arrays)

        return Units(np.concatenate([p.seqs for p in parts]), join("chunks"), join("uses"))


def slots(batches: BatchList, lo: int = 0, hi: int | None = None, real: bool = True) -> Units:
    """Units of slots ``[lo, hi)`` of ``batches`` (only the real ones with ``real``)."""
    hi = len(batches.seqs) if hi is None else hi
    mask = batches.real[lo:hi] if real else np.ones(hi - lo, bool)

    def part(a: np.ndarray | None) -> np.ndarray | None:
        return None if a is None else a[lo:hi][mask]

    return Units(batches.seqs[lo:hi][mask], part(batches.chunks), part(batches.uses))


def steps_units(plan: EpochPlan, from_step: int, to_step: int) -> Units:
    """Real units of global steps ``[from_step, to_step)`` of ``plan`` (all ranks)."""
    b, w = plan.batches, plan.world_size
    return slots(b, int(b.bounds[from_step * w]), int(b.bounds[to_step * w]))


def interleaved(shares: Sequence[BatchList]) -> Units:
    """Real units of the ranks' ``shares`` (equally many batches each) in the order of the list
    of all ranks: step after step, rank after rank."""
    parts = [slots(share, int(a), int(b)) for k in range(len(shares[0])) for share in shares
             for a, b in [share.bounds[k : k + 2]]]  # fmt: skip
    return Units.concat(parts) if parts else slots(shares[0])


def sub_epoch_units(planner: Planner, epoch: int, world: int) -> Units:
    """The units ``epoch`` plans on ``world`` ranks (its order: only ``buckets:N`` depends on the
    world size), from the planner's own answers: ``sub_epoch_slots`` (mixed),
    ``sub_epoch_units`` (chunked), ``sub_epoch_order``."""
    chunks = planner.chunks
    if planner.mix is not None:
        seqs, uses = planner.sub_epoch_slots(epoch)
        if chunks is None:
            return Units(seqs, None, uses)
        units = chunks.expand(seqs)
        return Units(units.seqs, units.chunks, np.repeat(uses, chunks.counts[seqs]))
    if chunks is not None:  # indexed planning's order depends on the world size, as buckets:N
        takes_world = "world_size" in inspect.signature(planner.sub_epoch_units).parameters
        units = (
            planner.sub_epoch_units(epoch, 0, world)
            if takes_world
            else planner.sub_epoch_units(epoch)
        )
        return Units(units.seqs, units.chunks)
    return Units(planner.sub_epoch_order(epoch, 0, world))


def per_rank(planner: Planner, world: int) -> bool:
    """Whether each rank plans its own order (``random_seed_offset``; sharded file pools)."""
    return planner.options.distribution == "random_seed_offset" or planner.per_rank_pools(world)


@dataclass
class Checked:
    """What the checker saw: per epoch the units its resume chain consumed, in order; the plans
    it checked by (epoch, world size); the world sizes refused."""

    consumed: dict[int, Units] = field(default_factory=dict)
    plans: dict[tuple[int, int], EpochPlan] = field(default_factory=dict)
    refused: set[int] = field(default_factory=set)
    #: the plans' batch lists (an indexed plan draws its list anew on each ``.batches``)
    batches: dict[tuple[int, int], BatchList] = field(default_factory=dict)


def check_plan_contracts(
    planner_or_factory: Planner | Callable[[], Planner],
    worlds: Sequence[int] | Sequence[Sequence[int]],
    cuts: Sequence[float] | Sequence[Sequence[float]],
    epochs: Sequence[int] | None = None,
    *,
    ordered: bool = False,
    expected: Callable[[Planner, int, int], Units] = sub_epoch_units,
    workers: Sequence[int] = (3,),
    each_plan: Callable[[Planner, int, EpochPlan], None] | None = None,
    each_segment: SegmentCheck | None = None,
) -> Checked:
    """Check C1-C5 for ``epochs`` on ``worlds`` with resume chains cut at ``cuts`` (see the
    module's docstring for every argument)."""
    fresh = planner_or_factory if callable(planner_or_factory) else None
    planner = fresh() if fresh is not None else planner_or_factory
    parts = planner.options.partition_epoch
    epochs = list(range(1, parts + 1)) if epochs is None else list(epochs)
    chains = _per_epoch(worlds, epochs)
    cut_lists = _per_epoch(cuts, epochs)
    out = Checked()
    memo: dict[tuple[int, int], Units] = {}

    def expect(planner: Planner, epoch: int, world: int) -> Units:
        if (epoch, world) not in memo:
            memo[epoch, world] = expected(planner, epoch, world)
        return memo[epoch, world]

    every_world = sorted({w for chain in chains.values() for w in chain})
    base = chains[epochs[0]][0]  # planned on every epoch: the full epochs' checks
    worlds_of = {e: sorted({base, *chains[e]}) for e in epochs}
    for world in every_world:
        try:
            planner.check_world(world)
        except OptionError:
            out.refused.add(world)
            with pytest.raises(OptionError):
                planner.global_plan(epochs[0], world)
    for epoch in epochs:
        for world in worlds_of[epoch]:
            if world not in out.refused:
                plan, batches = check_plan(planner, fresh, epoch, world, expect, ordered)
                out.plans[epoch, world], out.batches[epoch, world] = plan, batches
                if each_plan is not None:
                    each_plan(planner, epoch, plan)
    if base not in out.refused:
        check_full_epochs(planner, out, epochs, base)
        if workers:
            check_workers(planner, base, epochs, workers)
    for epoch in epochs:
        listed = out.batches.get((epoch, chains[epoch][0]))
        if len(chains[epoch]) == 1 and listed is not None and each_segment is None:
            # one segment from step 0 resumes nothing: it consumes the plan checked above (its
            # real units in list order, as a run of its shares interleaved would)
            out.consumed[epoch] = slots(listed)
            continue
        got = check_chain(
            planner,
            fresh,
            epoch,
            chains[epoch],
            cut_lists[epoch],
            expect,
            ordered,
            each_segment,
            out.batches,
        )
        if got is not None:
            out.consumed[epoch] = got
    return out


def _per_epoch(values: Sequence, epochs: Sequence[int]) -> dict[int, list]:
    """One list per epoch: ``values`` itself, or its entry per epoch when it holds lists."""
    if values and isinstance(values[0], (list, tuple)):
        assert len(values) == len(epochs), "one list per epoch"
        return {e: list(v) for e, v in zip(epochs, values)}
    return {e: list(values) for e in epochs}


def check_plan(
    planner: Planner,
    fresh: Callable[[], Planner] | None,
    epoch: int,
    world: int,
    expected: Callable[[Planner, int, int], Units],
    ordered: bool,
) -> tuple[EpochPlan, BatchList]:
    """C1-C4 on one plan of ``epoch`` with ``world`` ranks -> (the plan, its batch list)."""
    plan = planner.global_plan(epoch, world)
    # C3/C4: each rank's share computed alone, last rank first and before any list of all ranks
    # (by a fresh planner given a factory, else by planning again) is its part of the list
    again = (fresh() if fresh is not None else planner).global_plan(epoch, world)
    shares = {r: again.rank_share(r) for r in reversed(range(world))}
    b = plan.batches
    assert plan.world_size == world
    assert len(b) == plan.steps * world, "ranks take different numbers of steps"
    sizes = np.diff(b.bounds)
    assert (sizes >= 1).all(), "an empty batch"
    if planner.options.max_seqs is not None and len(sizes):
        assert sizes.max() <= planner.options.max_seqs
    assert plan.real_total() == int(b.real.sum())
    assert plan.repeats == int((~b.real).sum())
    for r in range(world):
        same_batches(shares[r], b.take(np.arange(r, len(b), world)))
    if per_rank(planner, world):
        check_rank_orders(planner, plan, epoch)
        return plan, b
    want = expected(planner, epoch, world)
    want_keys = want.keys(planner)
    real = slots(b).keys(planner)
    assert len(np.unique(real)) == len(real), "a unit twice in a plan"
    assert not Counter(real.tolist()) - Counter(want_keys.tolist()), "a unit not of the sub-epoch"
    assert len(want_keys) - len(real) == plan.dropped
    assert planner.order_size(epoch, world) == len(want)
    assert np.isin(b.seqs, want.seqs).all(), "a filler from outside the sub-epoch"
    if ordered:
        np.testing.assert_array_equal(real, want_keys[: len(real)])
    return plan, b


def same_batches(got: BatchList, want: BatchList) -> None:
    for name in ("seqs", "bounds", "real", "chunks", "uses"):
        a, b = getattr(got, name), getattr(want, name)
        assert (a is None) == (b is None), name
        if a is not None:
            np.testing.assert_array_equal(a, b, err_msg=name)


def after(batches: BatchList, k: int) -> BatchList:
    """``batches`` without its first ``k`` batches."""
    lo = int(batches.bounds[k])

    def tail(a: np.ndarray | None) -> np.ndarray | None:
        return None if a is None else a[lo:]

    seqs, real = batches.seqs[lo:], batches.real[lo:]
    return BatchList(seqs, batches.bounds[k:] - lo, real, tail(batches.uses), tail(batches.chunks))


def check_rank_orders(planner: Planner, plan: EpochPlan, epoch: int) -> None:
    """Ranks ordering alone: each rank's real slots are a prefix of its own order, none twice;
    each rank's surplus is counted as dropped; across ranks disjoint unless every rank orders
    the whole sub-epoch (``random_seed_offset``)."""
    world, surplus, seen = plan.world_size, 0, []
    for r in range(world):
        share = plan.rank_share(r)
        mine = share.seqs[share.real]
        order = planner.rank_order(epoch, r, world)
        np.testing.assert_array_equal(mine, order[: len(mine)])
        assert len(np.unique(slots(share).keys(planner))) == len(mine), "a unit twice on a rank"
        surplus += len(order) - len(mine)
        seen.append(slots(share).keys(planner))
    assert plan.dropped == surplus
    if planner.options.distribution != "random_seed_offset":
        every = np.concatenate(seen)
        assert len(np.unique(every)) == len(every), "a unit on two ranks"


def admitted_units(planner: Planner) -> np.ndarray:
    """Every admitted unit's key: chunk numbers, or admitted sequences."""
    if planner.chunks is not None:
        return np.arange(planner.chunks.num_units)
    return np.asarray(planner.admission.admitted, dtype=np.int64)


def check_full_epochs(planner: Planner, out: Checked, epochs: Sequence[int], world: int) -> None:
    """C1 over each full epoch all of whose sub-epochs were asked: disjoint sub-epochs that
    together are every admitted unit, less what was dropped (mixed: the mix's own check)."""
    parts = planner.options.partition_epoch
    full = sorted({(e - 1) // parts for e in epochs})
    full = [f for f in full if all(f * parts + p + 1 in epochs for p in range(parts))]
    if not full or planner.options.distribution == "random_seed_offset":
        return
    if planner.mix is not None:
        asked = [e for f in full for e in range(f * parts + 1, (f + 1) * parts + 1)]
        units = [slots(out.batches[e, world]) for e in asked]
        dropped = sum(out.plans[e, world].dropped for e in asked)
        if not dropped:
            got = Units.concat(units)
            if got.chunks is not None:  # each use once: its first chunk
                got = got.take(got.chunks == 0)
            assert got.uses is not None
            check = planner.mix.check(full, got.seqs, got.uses)
            assert check.ok, check.problems
        return
    admitted = admitted_units(planner)
    # an epoch_wise_filter admits a set of its own per epoch: then no unit twice, all admitted;
    # epoch selections (subdirs) and a source's own orders too, and what they leave out is what
    # filtered(epoch) counts
    every = not planner.options.epoch_wise_filter
    selecting = (
        bool(getattr(planner, "selections", ())) or getattr(planner, "orders", None) is not None
    )
    base = sum(planner.admission.filtered.values())
    for f in full:
        sub = range(f * parts + 1, (f + 1) * parts + 1)
        real = np.concatenate([slots(out.batches[e, world]).keys(planner) for e in sub])
        assert len(np.unique(real)) == len(real), "a unit twice in a full epoch"
        assert np.isin(real, admitted).all()
        dropped = sum(out.plans[e, world].dropped for e in sub)
        if selecting:
            counted = sum(sum(planner.filtered(e).values()) - base for e in sub)
            if planner.chunks is None:
                assert len(admitted) - len(real) == dropped + counted, "left out, not counted"
            elif not dropped:  # chunked: selections and filters leave out (count) sequences
                seen = np.unique(np.concatenate([slots(out.batches[e, world]).seqs for e in sub]))
                whole = len(planner.admission.admitted)
                assert whole - len(seen) == counted, "left out, not counted"
        elif every:
            assert len(admitted) - len(real) == dropped


def check_workers(
    planner: Planner, world: int, epochs: Sequence[int], workers: Sequence[int]
) -> None:
    """C3 as ``seqloader check`` shows it: for every ``num_workers``, each rank's workers' loads
    add up to its load, and the simulation's own findings hold. (That the load itself does not
    depend on ``num_workers`` is structural: planning takes no worker count and ``simulate``
    computes a rank's load from its share before splitting it, so comparing loads across values
    would assert nothing; real workers are compared batch for batch in the loader's tests.)"""
    for n in workers:
        sim = simulate(planner, world, n, list(epochs))
        # its C1 finding reports what the documented behaviour leaves out (drops, sharded
        # pools): that is checked above, exactly; random_seed_offset's pass per rank holds there
        own_pass = planner.options.distribution == "random_seed_offset"
        loose = not own_pass and (any(e.dropped for e in sim.epochs) or per_rank(planner, world))
        bad = [f.message for f in sim.findings if not f.ok]
        assert not bad or (
            loose and [f.contract[:2] for f in sim.findings if not f.ok] == ["C1"]
        ), bad
        for ep in sim.epochs:
            for rank in ep.ranks:
                assert len(rank.workers) == max(n, 1)
                for name in ("batches", "seqs", "repeats", "frames", "padded_frames"):
                    total = sum(getattr(w, name) for w in rank.workers)
                    assert total == getattr(rank.load, name), name


def check_chain(
    planner: Planner,
    fresh: Callable[[], Planner] | None,
    epoch: int,
    worlds: Sequence[int],
    cuts: Sequence[float],
    expected: Callable[[Planner, int, int], Units],
    ordered: bool,
    each_segment: SegmentCheck | None = None,
    checked: Mapping[tuple[int, int], BatchList] | None = None,
) -> Units | None:
    """C5: run ``epoch`` on ``worlds[0]`` ranks, stop at ``cuts[0]``, save the position as JSON,
    continue on ``worlds[1]``, ... to the end -> the units consumed, in order (None: a world
    size is refused before anything was consumed)."""
    position = Position(epoch, 0, worlds[0], 0)
    consumed: list[Units] = []
    ranks: dict[tuple[int, int], list[Units]] = {}  # (world size, rank) -> consumed (per rank)
    done = False  # the epoch finished
    plan = None
    for i, world in enumerate(worlds):
        try:
            planner.check_world(world)
        except OptionError:
            if not position.steps and not position.history:
                return None  # nothing consumed yet: a fresh start, refused (checked apart)
        world, (plan, position) = resume(planner, position, world)
        if done:  # a finished epoch stays finished, whatever the new world size
            assert plan.steps == position.steps
        w, start = plan.world_size, position.steps
        if each_segment is not None:
            each_segment(planner, position, plan, Units.concat(consumed))
        listed = (checked or {}).get((epoch, w))
        if i == 0 and listed is not None:  # the epoch's plan, whose shares check_plan compared
            shares = [listed.take(np.arange(r, len(listed), w)) for r in range(w)]
        else:
            shares = [plan.rank_share(r, start) for r in range(w)]
        assert {len(x) for x in shares} == {plan.steps - start}, "ranks take different steps"
        stop = plan.steps
        if i < len(worlds) - 1 and i < len(cuts):
            stop = stop_at(cuts[i], start, plan.steps)
        taken = [shares[r].first(stop - start) for r in range(w)]
        consumed.append(interleaved(taken))
        for r in range(w):
            ranks.setdefault((w, r), []).append(slots(taken[r]))
        position = position.advanced(stop - start)
        if not per_rank(planner, w):
            assert position.seq_offset(plan) == sum(len(c) for c in consumed)
        position = Position.from_fields(json.loads(json.dumps(position.to_fields())))
        if stop < plan.steps:  # (a finished segment: the next one checks it stays finished)
            # C4/C5: the saved position re-plans its segment alike (from a fresh planner given
            # a factory): the same world size continues the plan
            again, at = continue_plan(fresh() if fresh is not None else planner, position, w)
            assert at == position
            for r in range(w):
                same_batches(again.rank_share(r, stop), after(shares[r], stop - start))
        done = position.steps == plan.steps
    assert plan is not None
    got = Units.concat(consumed)
    if per_rank(planner, plan.world_size):
        check_rank_chains(planner, epoch, ranks, plan if done else None)
        return got
    keys = got.keys(planner)
    assert len(np.unique(keys)) == len(keys), "a unit consumed twice"
    want = expected(planner, epoch, worlds[0]).keys(planner)
    assert not Counter(keys.tolist()) - Counter(want.tolist()), "a unit not of the sub-epoch"
    assert len(want) - len(keys) == plan.dropped, "a unit lost"
    if ordered:
        np.testing.assert_array_equal(keys, want[: len(keys)])
    return got


def check_rank_chains(
    planner: Planner,
    epoch: int,
    ranks: Mapping[tuple[int, int], list[Units]],
    last: EpochPlan | None,
) -> None:
    """Ranks ordering alone resume mid-epoch only on their own world size: each rank consumed a
    prefix of its own order over the chain, none twice; at the end (``last``) every rank's
    surplus is what the plan counts as dropped."""
    active = {w for (w, _), parts in ranks.items() if sum(len(p) for p in parts)}
    assert len(active) <= 1, "ranks ordering alone consumed on two world sizes"
    if not active:
        return
    world = active.pop()
    surplus = 0
    for r in range(world):
        got = Units.concat(ranks[world, r])
        order = planner.rank_order(epoch, r, world)
        np.testing.assert_array_equal(got.seqs, order[: len(got)])
        keys = got.keys(planner)
        assert len(np.unique(keys)) == len(keys), "a unit consumed twice on a rank"
        surplus += len(order) - len(got)
    if last is not None and last.world_size == world:
        assert surplus == last.dropped


def stop_at(cut: float, start: int, steps: int) -> int:
    """The step a segment running ``[start, steps)`` stops at for ``cut`` (module docstring)."""
    if isinstance(cut, (int, np.integer)) and not isinstance(cut, bool):
        return steps if cut < 0 else min(start + int(cut), steps)
    return start + int(cut * (steps - start))


def resume(
    planner: Planner, position: Position, world: int
) -> tuple[int, tuple[EpochPlan, Position]]:
    """``continue_plan`` on ``world`` ranks; where the kind refuses another world size in an
    unfinished epoch (``ResumeError``), it must be a kind whose ranks order alone, or indexed
    ``files`` with ``uneven="drop"`` on more ranks than have remainders left (drop would cut
    the whole rest), and the segment goes on with its own world size."""
    try:
        return world, continue_plan(planner, position, world)
    except ResumeError as e:
        o = planner.options
        idle_drop = o.distribution == "files" and o.uneven == "drop" and "no batch" in str(e)
        assert per_rank(planner, position.segment_world_size) or idle_drop, "a resume refused"
        world = position.segment_world_size
        return world, continue_plan(planner, position, world)
