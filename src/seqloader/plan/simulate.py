"""Simulating a whole job from the plan: every rank and every DataLoader worker, nothing started.

Planning is a pure function of (lengths, options, epoch, world size), so one process can compute
what each rank of a W-rank job will receive, and — because torch's DataLoader hands sampler items
to its N workers round-robin — which worker executes which batch (worker w of a rank executes items
w, w+N, ...; results come back in sampler order). ``simulate`` does that for a range of epochs and
checks the contracts C1 (exactly-once per full epoch; per rank under ``random_seed_offset``, where
every rank passes over all the data: ``simulate_ranks``), C2 (equal steps) and C4 (re-planning gives
identical arrays; the plan never sees the worker count, which is what C3 rests on — the library's
tests check C3 itself with real DataLoader workers). It also shows each worker's load.
``seqloader check`` prints the result.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np

from seqloader.errors import OptionError
from seqloader.plan.batches import BatchList
from seqloader.plan.batching import padded_frames
from seqloader.plan.epoch_plan import EpochPlan
from seqloader.plan.epochs import EpochIndex
from seqloader.plan.planned_units import PlannedUnits, SequenceUnits, units_of
from seqloader.plan.planners import Planner
from seqloader.plan.simulate_ranks import RankUses, ranks_verdict
from seqloader.validate import int_option


@dataclass(frozen=True)
class Load:
    """What a rank or a worker executes in one epoch. ``frames`` counts real sequences only;
    ``padded_frames`` the frames delivered: ``sum(n_seqs * max_len)`` over its batches, or with
    ``layout="packed"`` the sum of every slot's length (filler repeats included in both)."""

    batches: int = 0
    seqs: int = 0
    repeats: int = 0
    frames: int = 0
    padded_frames: int = 0

    @property
    def padding_ratio(self) -> float:
        return 0.0 if not self.padded_frames else 1.0 - self.frames / self.padded_frames


@dataclass(frozen=True)
class RankEpoch:
    rank: int
    load: Load
    workers: tuple[Load, ...]  # one entry per DataLoader worker (one for num_workers=0)
    files: int | None = None  # distribution="files": how many of the source's files it reads


@dataclass(frozen=True)
class EpochSim:
    epoch: int
    full_epoch: int
    part: int
    steps: int  # per rank (the global plan's)
    dropped: int  # real sequences left out (uneven="drop", random_seed_offset's shortest rank)
    ranks: tuple[RankEpoch, ...]


@dataclass(frozen=True)
class Finding:
    """One contract's verdict, with a message that says what was checked or what went wrong."""

    contract: str
    ok: bool
    message: str


@dataclass(frozen=True)
class Simulation:
    world_size: int
    num_workers: int
    num_seqs: int
    admitted: int
    filtered: dict[str, int]
    epochs: tuple[EpochSim, ...]
    findings: tuple[Finding, ...] = field(default=())

    @property
    def ok(self) -> bool:
        return all(f.ok for f in self.findings)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["ok"] = self.ok
        for e, ea in zip(d["epochs"], self.epochs):
            for r, ra in zip(e["ranks"], ea.ranks):
                r["load"]["padding_ratio"] = round(ra.load.padding_ratio, 5)
        return d


def load_of(
    batches: BatchList,
    lengths: np.ndarray,
    units: PlannedUnits | None = None,
    packed: bool = False,
) -> Load:
    """Totals of a batch list; ``lengths`` int64 ``[num_seqs]`` on the planning key; ``units``:
    the plan's (``units_of(planner)``; a chunked plan's slots are as long as their chunks),
    default sequences; ``packed``: batches laid out packed (no padding delivered)."""
    units = SequenceUnits(len(lengths)) if units is None else units
    lens = units.slot_lengths(batches, lengths)  # [slots]
    return Load(
        batches=len(batches),
        seqs=int(np.count_nonzero(batches.real)),
        repeats=int(len(batches.real) - np.count_nonzero(batches.real)),
        frames=int(lens[batches.real].sum()),
        padded_frames=int(lens.sum() if packed else padded_frames(lens, batches.bounds).sum()),
    )


def worker_items(n_items: int, num_workers: int) -> list[np.ndarray]:
    """Sampler item indices each worker executes (torch's round-robin): worker w gets
    ``w, w + N, ...``; ``num_workers=0`` means the main process executes everything."""
    n = max(num_workers, 1)
    return [np.arange(w, n_items, n, dtype=np.int64) for w in range(n)]


def simulate(
    planner: Planner,
    world_size: int,
    num_workers: int,
    epochs: Sequence[int],
    on_epoch: Callable[[int], None] | None = None,
    packed: bool = False,
) -> Simulation:
    """Simulate ``world_size`` ranks with ``num_workers`` workers each over ``epochs``.
    ``on_epoch(epoch)`` is called after each epoch (progress; about 0.5 s per million sequences).
    ``packed``: batches are laid out packed (``layout="packed"``): no padding is delivered."""
    world_size = int_option("world_size", world_size, 1)
    num_workers = int_option("num_workers", num_workers, 0)
    if not epochs:
        raise OptionError("epochs: got none, expected at least one epoch (epochs count from 1)")
    own_pass = planner.options.distribution == "random_seed_offset"  # each rank its own pass
    groups = [_Uses({}, {}, {}, {}) for _ in range(world_size if own_pass else 1)]
    epochs_sim = []
    step_problems = []
    worker_problems = []
    for epoch in epochs:
        ep = EpochIndex(epoch, planner.options.partition_epoch)
        plan = planner.global_plan(epoch, world_size)
        if not _same(plan.batches, planner.global_plan(epoch, world_size).batches):
            worker_problems.append(f"epoch {epoch}: planning twice gave different batches")
        ranks = [
            _rank_epoch(planner, plan, r, num_workers, packed, groups[r % len(groups)], ep)
            for r in range(world_size)
        ]
        steps = {ra.load.batches for ra in ranks}
        if len(steps) != 1:
            per_rank = {ra.rank: ra.load.batches for ra in ranks}
            step_problems.append(f"epoch {epoch}: steps per rank differ: {per_rank}")
        epochs_sim.append(
            EpochSim(epoch, ep.full_epoch, ep.part, plan.steps, plan.dropped, tuple(ranks))
        )
        if on_epoch is not None:
            on_epoch(epoch)
    findings = (
        _once(planner, world_size, groups, epochs_sim),
        _steps_finding(step_problems, epochs_sim),
        _workers_finding(worker_problems, num_workers),
    )
    admission = planner.admission
    return Simulation(
        world_size,
        num_workers,
        len(planner.lengths),
        len(admission.admitted),
        dict(admission.filtered),
        tuple(epochs_sim),
        findings,
    )


@dataclass(frozen=True)
class _Uses:
    """What a simulation counts per full epoch (0-based): uses per planned unit int64 ``[n]``
    (``counts``), a mix's (sequences, uses) per rank and epoch (``slots``), the sub-epochs
    simulated (``parts``) and, for one rank under ``random_seed_offset``, the units its own
    orders hold (``planned``)."""

    counts: dict[int, np.ndarray]
    slots: dict[int, list[tuple[np.ndarray, np.ndarray]]]
    parts: dict[int, set[int]]
    planned: dict[int, int]


def _rank_epoch(
    planner: Planner,
    plan: EpochPlan,
    rank: int,
    num_workers: int,
    packed: bool,
    uses: _Uses,
    ep: EpochIndex,
) -> RankEpoch:
    """Rank ``rank``'s share of ``plan``: its uses added to ``uses`` (per planned unit and,
    mixed, per slot; chunked: count chunks, not sequences), its load and its workers' loads."""
    units = units_of(planner)
    share = plan.rank_share(rank)
    uses.parts.setdefault(ep.full_epoch, set()).add(ep.part)
    counts = uses.counts.setdefault(ep.full_epoch, np.zeros(units.num_units, dtype=np.int64))
    np.add.at(counts, units.of_slots(share), 1)
    if planner.options.distribution == "random_seed_offset" and planner.mix is None:
        own = len(planner.rank_order(ep.epoch, rank, plan.world_size))
        uses.planned[ep.full_epoch] = uses.planned.get(ep.full_epoch, 0) + own
    if share.uses is not None:  # a use is counted once, at its first unit
        first = units.use_starts(share)
        uses.slots.setdefault(ep.full_epoch, []).append((share.seqs[first], share.uses[first]))
    lengths = drawn_lengths(planner, share, ep.full_epoch)
    items = worker_items(len(share), num_workers)
    workers = tuple(load_of(share.take(ids), lengths, units, packed) for ids in items)
    files = None if planner.files is None else len(planner.rank_files(plan, rank))
    return RankEpoch(rank, load_of(share, lengths, units, packed), workers, files)


def _once(
    planner: Planner, world_size: int, groups: list[_Uses], epochs_sim: list[EpochSim]
) -> Finding:
    """C1 over all ranks together, or per rank (``groups``: one per rank, ``random_seed_offset``)."""
    if planner.options.distribution == "random_seed_offset":
        return _per_rank_once(planner, groups, epochs_sim)
    uses = groups[0]
    if planner.mix is not None:
        return mix_exactly_once(planner, uses.counts, uses.slots, uses.parts)
    return _exactly_once(planner, world_size, uses.counts, uses.parts, epochs_sim)


def _per_rank_once(planner: Planner, groups: list[_Uses], epochs_sim: list[EpochSim]) -> Finding:
    """C1 under ``random_seed_offset``: exactly once per rank (``simulate_ranks``); a mix: each
    rank every sequence once per corpus epoch of its own pass."""
    name, W = "C1 exactly-once", len(groups)
    own = f"each of the {W} ranks passes over all the data in its own order (random_seed_offset)"
    if planner.mix is not None:
        verdicts = [mix_exactly_once(planner, g.counts, g.slots, g.parts) for g in groups]
        bad = [f"rank {r}: {f.message}" for r, f in enumerate(verdicts) if not f.ok]
        if bad:
            return Finding(name, False, "; ".join(bad[:3]))
        return Finding(name, True, f"{own}; on each, {verdicts[0].message}")
    P = planner.options.partition_epoch
    units = units_of(planner)
    fulls = sorted(groups[0].counts)
    dropped = dict.fromkeys(fulls, 0)
    for e in epochs_sim:
        dropped[e.full_epoch] += e.dropped
    complete = {f: len(groups[0].parts[f]) == P for f in fulls}
    left_out = {f: _epoch_filtered(planner, f) if complete[f] else 0 for f in fulls}
    ranks = [{f: RankUses(g.counts[f], g.planned[f], complete[f]) for f in fulls} for g in groups]
    admitted = units.admitted(planner.admission.admitted)
    ok, found = ranks_verdict(units, admitted, ranks, left_out, dropped)
    return Finding(name, ok, ("" if not ok else own + ": ") + "; ".join(found))


def drawn_lengths(planner: Planner, share: BatchList, full_epoch: int) -> np.ndarray:
    """The length key's lengths ``share`` is batched and read at: with length variants each
    sequence's variant of this full epoch (an indexed plan's slots carry it, global planning
    draws it per full epoch, ``epoch_lengths``), else the source's (the longest variant's)."""
    lengths = planner.lengths
    if share.variants is not None:  # indexed: the class draw's table, or the per-sequence one's
        classes = getattr(planner, "variants", None)
        table = classes.table if classes is not None else getattr(planner, "drawn", None)
        lengths = np.array(lengths, dtype=np.int64)
        lengths[share.seqs] = np.asarray(table)[share.variants, share.seqs]
    elif getattr(planner, "variants", None) is not None and hasattr(planner, "epoch_lengths"):
        lengths = planner.epoch_lengths(full_epoch)[planner.length_key]
    return np.asarray(lengths)


def _steps_finding(step_problems: list[str], epochs_sim: list[EpochSim]) -> Finding:
    """C2: every rank took the same number of steps in every epoch."""
    return Finding(
        "C2 equal steps",
        not step_problems,
        "; ".join(step_problems)
        or "every rank takes the same number of steps in every epoch: "
        + _steps_summary(epochs_sim),
    )


def _workers_finding(worker_problems: list[str], num_workers: int) -> Finding:
    """C3/C4: planning twice gave the same plan, and workers only execute it."""
    return Finding(
        "C3/C4 worker independence",
        not worker_problems,
        "; ".join(worker_problems)
        or "re-planning every epoch gave identical arrays, and the plan takes no worker count; "
        + (
            f"with {num_workers} workers per rank, worker w executes batches w, "
            f"w+{num_workers}, ... and the DataLoader returns them in plan order"
            if num_workers
            else "with num_workers=0 the main process executes every batch in plan order"
        ),
    )


def _full_epochs(fulls: list[int], P: int) -> str:
    """'full epoch 2 (epochs 3..4)' or 'each of full epochs 1..3 (epochs 1..6)' (0-based in)."""
    a, b = fulls[0], fulls[-1]
    epochs = f"epochs {a * P + 1}..{b * P + P}"
    if len(fulls) == 1:
        return f"full epoch {a + 1} ({epochs})"
    if fulls == list(range(a, b + 1)):
        return f"each of full epochs {a + 1}..{b + 1} ({epochs})"
    return "each of full epochs " + ", ".join(str(f + 1) for f in fulls)


def _steps_summary(epochs: list[EpochSim]) -> str:
    shown = ", ".join(f"epoch {e.epoch}: {e.steps}" for e in epochs[:6])
    return shown + (f", ... ({len(epochs)} epochs)" if len(epochs) > 6 else "")


def _same(a: BatchList, b: BatchList) -> bool:
    return (
        np.array_equal(a.seqs, b.seqs)
        and np.array_equal(a.bounds, b.bounds)
        and np.array_equal(a.real, b.real)
        and _same_variants(a.variants, b.variants)
    )


def _same_variants(a: np.ndarray | None, b: np.ndarray | None) -> bool:
    """Both without length variants, or the same variant in every slot."""
    return (a is None and b is None) or (a is not None and b is not None and np.array_equal(a, b))


def _exactly_once(
    planner: Planner,
    world_size: int,
    use_counts: dict[int, np.ndarray],
    parts_seen: dict[int, set[int]],
    epochs_sim: list[EpochSim],
) -> Finding:
    """C1: per full epoch (all its sub-epochs simulated), every admitted sequence is used exactly
    once and nothing else is; for a partly simulated full epoch, no sequence is used twice."""
    name = "C1 exactly-once"
    units = units_of(planner)
    admitted, noun = units.admitted(planner.admission.admitted), units.noun
    P = planner.options.partition_epoch
    problems: list[str] = []
    complete_ok: list[int] = []
    partial_ok: list[int] = []
    filtered_by_epoch = 0
    for full, counts in sorted(use_counts.items()):
        complete = len(parts_seen[full]) == P
        left_out = _epoch_filtered(planner, full) if complete else 0
        found = _use_problems(counts, admitted, complete and left_out == 0, noun)
        if complete and left_out and not found:
            found = _kept_problems(counts, admitted, left_out, units)
        filtered_by_epoch += left_out
        if not found:
            (complete_ok if complete else partial_ok).append(full)
            continue
        label = f"full epoch {full + 1} (epochs {full * P + 1}..{full * P + P})"
        problems.append(f"{label}: " + ", ".join(found))
    if not problems:
        said = []
        if complete_ok:
            said.append(
                f"every admitted {noun} ({int(admitted.sum())}) is used exactly once in "
                + _full_epochs(complete_ok, P)
                if not filtered_by_epoch
                else f"every {noun} of the {int(admitted.sum())} admitted that the epochs' own "
                f"filters keep ({filtered_by_epoch} sequences left out by them) is used exactly "
                "once in " + _full_epochs(complete_ok, P)
            )
        if partial_ok:
            said.append(
                f"no {noun} is used twice in the simulated part of {_full_epochs(partial_ok, P)} "
                "(simulate all its sub-epochs to check that none is missing)"
            )
        return Finding(name, True, "; ".join(said))
    why = _why_not_once(planner, world_size, sum(e.dropped for e in epochs_sim))
    if len(problems) > 2:
        problems = [*problems[:1], f"and likewise in {len(problems) - 1} more full epochs"]
    return Finding(name, False, "; ".join(problems) + (". Why: " + "; ".join(why) if why else ""))


def _use_problems(counts: np.ndarray, admitted: np.ndarray, complete: bool, noun: str) -> list[str]:
    """What is wrong with one full epoch's uses per unit (``counts``; ``admitted``: bool, the
    units that must be used; ``complete``: all its sub-epochs simulated): [] when nothing is."""
    dup = int(np.count_nonzero(counts > 1))
    missing = int(np.count_nonzero(admitted & (counts == 0))) if complete else 0
    extra = int(np.count_nonzero(~admitted & (counts > 0)))
    parts = []
    if dup:
        i = int(np.flatnonzero(counts > 1)[0])
        parts.append(
            f"{dup} {noun}s used more than once (e.g. #{i} {int(counts[i])} times, max "
            f"{int(counts.max())})"
        )
    if missing:
        i = int(np.flatnonzero(admitted & (counts == 0))[0])
        parts.append(f"{missing} admitted {noun}s never used (e.g. #{i})")
    if extra:
        parts.append(f"{extra} filtered sequences used")
    return parts


def _epoch_filtered(planner: Planner, full: int) -> int:
    """Sequences an epoch's own filter (``epoch_wise_filter``, epoch selections, a source's
    curriculum) leaves out of the sub-epochs of full epoch ``full`` (0-based): each sub-epoch
    keeps a set of its own, so they are not 'never used'."""
    P = planner.options.partition_epoch
    always = sum(planner.admission.filtered.values())
    epochs = range(full * P + 1, full * P + P + 1)
    return sum(sum(planner.filtered(e).values()) - always for e in epochs)


def _kept_problems(
    counts: np.ndarray, admitted: np.ndarray, left_out: int, units: PlannedUnits
) -> list[str]:
    """A full epoch whose sub-epochs filter ``left_out`` admitted sequences by epoch: the
    sequences used must be the admitted less those (duplicates and filtered uses are checked
    before). Chunked plans: each sequence with all its chunks used or none."""
    used, total, partly = units.sequences_used(counts, admitted)
    problems = [f"{partly} sequences with only some of their {units.noun}s used"] if partly else []
    if used != total - left_out:
        problems.append(
            f"{used} sequences used, but the epochs' own filters keep {total - left_out} of "
            f"the {total} admitted"
        )
    return problems


def _why_not_once(planner: Planner, world_size: int, dropped: int) -> list[str]:
    """The options that explain a plan that is not exactly once (``dropped``: sequences left
    out over the simulated epochs)."""
    opts = planner.options
    why = []
    if planner.per_rank_pools(world_size) and dropped:
        why.append(
            f"the file pools are sharded over the {world_size} ranks (RETURNN's "
            "DistributeFilesDataset with distrib_shard_files, or torch_distributed 'shard'): "
            "each rank reads its own files and, as RETURNN's torch engine, every sub-epoch ends "
            f"when the first rank runs out, so {dropped} sequences of the other ranks were "
            "dropped (counted in each epoch's report); leave the sharding out for one pass over "
            "all data per full epoch"
        )
    if opts.uneven == "drop" and dropped:
        why.append(
            f"uneven='drop' left {dropped} sequences out of the last round; use uneven='split' "
            "(re-splits the last round so every rank gets a batch)"
        )
    return why


def mix_exactly_once(
    planner: Planner,
    use_counts: dict[int, np.ndarray],
    slots: dict[int, list[tuple[np.ndarray, np.ndarray]]],
    parts_seen: dict[int, set[int]],
) -> Finding:
    """C1 for a mix: per complete full epoch, every planned slot used once (a sequence as often
    as the selection holds it); over the complete full epochs, per corpus, every sequence exactly
    once per corpus epoch (``EpochMix.check``)."""
    name = "C1 exactly-once"
    mix = planner.mix
    assert mix is not None
    P = planner.options.partition_epoch
    units = units_of(planner)
    complete = sorted(f for f, parts in parts_seen.items() if len(parts) == P)
    problems = []
    for f in complete:  # every unit of a selected slot, once per use
        want = np.bincount(units.of_seqs(mix.select(f).seqs), minlength=units.num_units)
        off = np.flatnonzero(use_counts[f] != want)
        if len(off):
            i = int(off[0])
            problems.append(
                f"full epoch {f + 1}: {len(off)} {units.noun}s used another number of times than "
                f"planned (e.g. #{i}: {int(use_counts[f][i])} uses, planned {int(want[i])})"
            )
    said = []
    runs: list[list[int]] = []
    for f in complete:  # runs of consecutive complete full epochs
        if runs and runs[-1][-1] == f - 1:
            runs[-1].append(f)
        else:
            runs.append([f])
    for run in runs:
        parts = [p for f in run for p in slots.get(f, [])]
        seqs = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, np.int64)
        uses = np.concatenate([p[1] for p in parts]) if parts else np.zeros(0, np.int64)
        check = mix.check(run, seqs, uses)
        problems.extend(f"{_full_epochs(run, P)}: {p}" for p in check.problems)
        said.append(f"{_full_epochs(run, P)}: {check.summary()}")
    if not complete:
        said.append("no full epoch simulated completely (simulate all its sub-epochs)")
    if problems:
        return Finding(name, False, "; ".join(problems[:3]))
    return Finding(
        name, True, "per corpus, every sequence exactly once per corpus epoch; " + "; ".join(said)
    )
