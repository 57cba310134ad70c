"""Planning a mix of corpora against planning one corpus of the same size, and the tag join.

    python -m benchmarks.mix_planning [--seqs 1000000] [--reps 7] [--quick]

Side by side in one process, in rotating order every repetition (so load from other users of the
shared machine hits every variant alike); medians of the repetitions, as ratios:

- ``single``: one corpus of N sequences (lengths uniform in 50..2000, max_seqs 200, max_frames
  20000, world size 8), ``global_plan`` of epochs 1, 2 and 3;
- ``mix A``: three corpora of N/2, 3N/10, N/5 sequences at rates 1.0, 0.5, 2.0 (full corpus epochs
  need no permutation; the 0.5 corpus needs one per epoch) — 1.05 N slots per epoch;
- ``mix B``: the same corpora at rates 0.7, 1.3, 1.0 (partial corpus epochs at both ends of most
  spans: up to two permutations per corpus and epoch) — 0.94 N slots per epoch;

for the orderings ``laplace:.1000`` and ``random``. The acceptance line is mix / single <= 1.5.
Also the tag join of ``ZipSource`` (N control tags against a shuffled copy less 0.1%, both packed as
an ``HDFSource`` holds them) against decoding them into a Python dict and looking each up, CPU time. Results: ``benchmarks/results/mix_planning.json`` (``--quick``:
``benchmarks/out/``, git-ignored).
"""

from __future__ import annotations

import functools
import os

import numpy as np

from benchmarks.side_by_side import run_planning, time_rotated
from seqloader.plan import Planner, PlanOptions
from seqloader.plan.mix import Corpora
from seqloader.sources.hdf_layout import PackedTags
from seqloader.sources.tag_join import join, take

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results", "mix_planning.json")
QUICK_RESULTS = os.path.join(HERE, "out", "mix_planning.json")
ORDERINGS = ("laplace:.1000", "random")
EPOCHS = (1, 2, 3)
WORLD_SIZE = 8
SHARES = (0.5, 0.3, 0.2)
MIXES = {"mix A": (1.0, 0.5, 2.0), "mix B": (0.7, 1.3, 1.0)}


def planners(n: int, ordering: str) -> dict[str, Planner]:
    lengths = {"data": np.random.default_rng(0).integers(50, 2001, n)}
    opts = {"ordering": ordering, "max_seqs": 200, "max_frames": 20_000}
    sizes = [int(n * s) for s in SHARES]
    sizes[-1] = n - sum(sizes[:-1])
    corpora = Corpora(("a", "b", "c"), np.concatenate([[0], np.cumsum(sizes)]))
    out = {"single": Planner(lengths, PlanOptions(**opts))}
    for name, rates in MIXES.items():
        mix = dict(zip(corpora.names, rates))
        out[name] = Planner(lengths, PlanOptions(**opts, mix=mix), corpora=corpora)
    return out


def plan_epochs(planner: Planner) -> int:
    return sum(planner.global_plan(e, WORLD_SIZE).batches.bounds[-1] for e in EPOCHS)


def bench_planning(n: int, reps: int) -> dict:
    out = {}
    for ordering in ORDERINGS:
        ps = planners(n, ordering)
        slots = {name: int(plan_epochs(p)) // len(EPOCHS) for name, p in ps.items()}  # warm-up
        times = time_rotated({k: functools.partial(plan_epochs, p) for k, p in ps.items()}, reps)
        med_w, med_c = times.median_wall(), times.median_cpu()
        out[ordering] = {
            "slots_per_epoch": slots,
            "median_wall_s": med_w,
            "median_cpu_s": med_c,
            "ratio_wall": {k: round(med_w[k] / med_w["single"], 3) for k in MIXES},
            "ratio_cpu": {k: round(med_c[k] / med_c["single"], 3) for k in MIXES},
            "wall_s": times.wall,
            "cpu_s": times.cpu,
        }
    return out


def bench_join(n: int, reps: int) -> dict:
    rng = np.random.default_rng(1)
    tags = PackedTags.from_array(
        np.array([f"corpus/rec{i // 7}/seg{i % 7}".encode() for i in range(n)])
    )
    other = take(tags, rng.permutation(n)[: n - n // 1000])

    def with_dict() -> list[int]:  # what a join without tag_join does: decode, dict, look up
        index = {t: i for i, t in enumerate(other)}
        return [index.get(t, -1) for t in tags]

    assert join(tags, other).tolist() == with_dict()
    med = time_rotated({"join": lambda: join(tags, other), "dict": with_dict}, reps).median_cpu()
    return {"tags": n, "median_cpu_s": med, "dict_over_join": round(med["dict"] / med["join"], 2)}


def main(argv: list[str] | None = None) -> None:
    result, path = run_planning(
        "python -m benchmarks.mix_planning",
        __doc__,
        argv,
        {"world_size": WORLD_SIZE, "epochs": EPOCHS},
        lambda n, reps: {"planning": bench_planning(n, reps), "tag_join": bench_join(n, reps)},
        (RESULTS, QUICK_RESULTS),
    )
    for ordering, r in result["planning"].items():
        for name in MIXES:
            print(
                f"{ordering:>14} {name}: {r['slots_per_epoch'][name]} slots/epoch vs "
                f"{r['slots_per_epoch']['single']}; planning time mix/single = "
                f"{r['ratio_cpu'][name]:.2f} (CPU), {r['ratio_wall'][name]:.2f} (wall); "
                f"single {r['median_cpu_s']['single']:.3f} s CPU for {len(EPOCHS)} epochs"
            )
    j = result["tag_join"]
    print(
        f"tag join of {j['tags']} tags: dict / vectorised = {j['dict_over_join']:.2f} "
        f"(CPU {j['median_cpu_s']['dict']:.2f} s vs {j['median_cpu_s']['join']:.2f} s)"
    )
    print(f"results: {path}")


if __name__ == "__main__":
    main()
