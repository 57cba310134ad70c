"""``seqloader stats``: what is in DATA (counts, hours, length percentiles, keys) and what batching
costs under each ordering — padding, steps and step-cost imbalance over W ranks, from the plan
alone; optionally a PNG of both."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import numpy as np

from seqloader.cli.options import (
    add_command,
    add_loader_options,
    add_output_options,
    open_data,
    positive_int,
)
from seqloader.cli.output import (
    human,
    planning_text,
    print_header,
    print_json,
    progress,
)
from seqloader.cli.rates import FrameRate, frame_rate
from seqloader.errors import OptionError
from seqloader.extras import require
from seqloader.loading.plan_inputs import plan_inputs
from seqloader.loading.planner_for import planner_for
from seqloader.plan.epoch_plan import list_imbalance
from seqloader.plan.inputs import PlanInputs
from seqloader.plan.mix import Corpora
from seqloader.plan.options import Ordering, PlanOptions
from seqloader.plan.planned_units import units_of
from seqloader.plan.planners import INDEXED_KINDS, Planner, resolve_planning
from seqloader.plan.simulate import drawn_lengths, load_of

HELP = (
    "sequences, hours, length percentiles, keys; padding, steps and step imbalance per ordering "
    "(--plot FILE.png)"
)
PERCENTILES = (0, 5, 10, 25, 50, 75, 90, 95, 99, 100)
DEFAULT_ORDERINGS = (
    "default,random,sorted,laplace:.100,laplace:.1000,sort_bin_shuffle:.100,buckets:10,buckets:30"
)
EPOCHS_SHOWN = 4  # epochs whose per-corpus slot counts stats shows for a mix


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = add_command(sub, "stats", HELP, data=True)
    p.add_argument(
        "--frame-rate",
        type=float,
        default=None,
        metavar="HZ",
        help="frames per second of the length key, for hours (default: what the source declares, "
        "e.g. an audio manifest's rate, or 16000 for 1-dim float data of audio length; otherwise "
        "hours are not shown). E.g. 100 for 10 ms frames, the sample rate for raw audio",
    )
    p.add_argument(
        "--orderings",
        default=DEFAULT_ORDERINGS,
        metavar="ORD,..",
        help=f"orderings to compare (default {DEFAULT_ORDERINGS})",
    )
    p.add_argument(
        "--ranks",
        type=positive_int,
        default=8,
        metavar="W",
        help="world size for steps and step-cost imbalance (max/mean batch cost over ranks, "
        "mean over steps; default 8)",
    )
    p.add_argument(
        "--plot",
        type=Path,
        metavar="FILE.png",
        help="write a length histogram and the padding ratio per ordering to this PNG",
    )
    add_loader_options(p, workers=False)
    add_output_options(p)
    return p


def _indexed_takes(options: PlanOptions, ordering: str) -> bool:
    """Whether indexed planning plans ``ordering`` with the other ``options`` (e.g. a fixed
    order is refused with ``distribution="files"``)."""
    return Ordering.parse(ordering).kind in INDEXED_KINDS and _takes(options, ordering)


def _indexed_plans(given: PlanInputs, options: PlanOptions, ordering: str) -> bool:
    """Whether indexed planning plans ``ordering`` with the other ``options`` and what the
    source declares (e.g. its own sort key is refused with a chunked ``sorted``)."""
    if not _indexed_takes(options, ordering):
        return False
    auto = replace(given, options=replace(options, ordering=ordering, planning="auto"))
    return resolve_planning(auto).options.planning == "indexed"


def _takes(options: PlanOptions, ordering: str) -> bool:
    """Whether ``ordering`` goes with the other ``options`` (``planning="auto"`` resolves per
    ordering: e.g. ``buckets:N`` with a mix where indexed planning plans it, refused where not)."""
    try:
        replace(options, ordering=ordering)
    except OptionError:
        return False
    return True


def run(args: argparse.Namespace) -> int:
    if args.frame_rate is not None and not args.frame_rate > 0:
        raise OptionError(f"--frame-rate: got {args.frame_rate}, expected a number > 0")
    orderings = [o.strip() for o in args.orderings.split(",") if o.strip()]
    for o in orderings:
        Ordering.parse(o)  # validate before any work
    if args.plot is not None and args.plot.suffix.lower() != ".png":
        raise OptionError(f"--plot: got {str(args.plot)!r}, expected a file name ending in .png")
    if args.plot is not None:
        require("matplotlib", "seqloader stats --plot")  # before any work
    opened = open_data(args)
    src = opened.source
    lengths = {k: np.asarray(src.lengths(k)) for k in src.keys}
    given = plan_inputs(src, opened.plan, lengths)
    corpora = given.corpora
    planner = planner_for(src, opened.plan, lengths)
    key = planner.length_key
    padding = {}
    for o in progress(orderings, not args.no_progress, "planning orderings"):
        global_mix = opened.plan.mix is not None and opened.plan.planning == "global"
        if (global_mix or given.pools is not None) and Ordering.parse(o).is_buckets:
            continue  # refused with a global mix or file pools (PlanOptions/Planner say why)
        if given.orders is not None and Ordering.parse(o).kind != "default":
            continue  # the source orders itself (RETURNN's CombinedDataset; Planner says why)
        if opened.plan.planning == "indexed" and not _indexed_plans(given, opened.plan, o):
            continue  # refused with these options or what the source declares (planner says why)
        if opened.plan.planning == "auto" and not _takes(opened.plan, o):
            continue  # refused with these options whatever the planning (PlanOptions says why)
        ordered = planner_for(src, replace(opened.plan, ordering=o), lengths)
        plan = ordered.global_plan(1, args.ranks)
        packed = opened.workers.layout == "packed"  # no padding delivered
        # each slot at the length variant it is planned in (epoch 1: full epoch 0)
        lengths_at = drawn_lengths(ordered, plan.batches, 0)
        load = load_of(plan.batches, lengths_at, units_of(planner), packed)
        # a slot costs its sequence (at its variant: chunking is refused with variants), or
        # its chunk's window
        costs = ordered.slot_costs(plan.batches)
        if given.variants is not None:
            costs = ordered.options.cost.units(lengths_at[plan.batches.seqs])
        imbalance = list_imbalance(plan, 0, costs, per_slot=True)
        padding[o] = {
            "planning": planning_text(opened.plan.planning, ordered.options.planning),
            "batches": load.batches,
            "padded_frames": load.padded_frames,
            "padding_ratio": round(load.padding_ratio, 5),
            "steps": plan.steps,
            "step_imbalance": round(imbalance, 5),
        }
    total = int(lengths[key].sum())
    rate = frame_rate(args.frame_rate, src, key, lengths[key])
    out = {
        **opened.header(options=False),
        "sequences": len(src),
        "length_key": key,
        "total_frames": total,
        "frame_rate": rate.hz,
        "frame_rate_from": rate.source,
        "frame_rate_note": rate.note,
        "hours": rate.hours(total),
        "keys": {
            k: {
                "shape": spec.describe(),
                "dtype": np.dtype(spec.dtype).name,
                "feature_shape": list(spec.feature_shape),
                "sparse": spec.sparse,
                "vocab_size": spec.vocab_size,
                "total_length": int(lengths[k].sum()),
                "percentiles": _percentiles(lengths[k]),
            }
            for k, spec in src.schema.items()
        },
        "batching": {
            "max_seqs": opened.plan.max_seqs,
            "max_frames": opened.plan.max_frames,
            "batch_cost": str(opened.plan.cost),
            "ranks": args.ranks,
            "filtered": dict(planner.admission.filtered),
        },
        "padding_by_ordering": padding,
    }
    if corpora is not None:
        out["corpora"] = corpus_stats(planner, corpora, lengths[key], rate)
        out["mix"] = {name: float(rate) for name, rate in (opened.plan.mix or {}).items()}
    if args.plot is not None:
        plot(args.plot, lengths[key], key, padding)
        out["plot"] = str(args.plot)
    if args.json:
        print_json(out)
    else:
        print_text(out)
    return 0


def corpus_stats(
    planner: Planner, corpora: Corpora, lengths: np.ndarray, rate: FrameRate
) -> dict[str, dict]:
    """Per corpus: sequences, frames and hours; with a mix also its rate, admitted sequences, the
    slots the first epochs take from it and its share of epoch 1 (``seqloader.plan.mix``)."""
    mix = planner.mix
    first = mix.epoch_counts(0) if mix is not None else None
    members = mix.members if mix is not None else []  # once: an indexed mix gathers them
    out: dict[str, dict] = {}
    for c, name in enumerate(corpora.names):
        lo, hi = int(corpora.bounds[c]), int(corpora.bounds[c + 1])
        frames = int(lengths[lo:hi].sum())
        info: dict = {"sequences": hi - lo, "frames": frames}
        info["hours"] = rate.hours(frames)
        if mix is not None and first is not None:
            admitted = members[c]
            info["rate"] = float(mix.rates[c])
            info["admitted"] = len(admitted)
            info["slots_per_epoch"] = [mix.epoch_counts(f)[c] for f in range(EPOCHS_SHOWN)]
            info["share_of_epoch_1"] = round(first[c] / max(sum(first), 1), 4)
            per_epoch = float(mix.rates[c]) * int(lengths[admitted].sum())
            info["hours_per_epoch"] = rate.hours(per_epoch)
        out[name] = info
    return out


def _percentiles(values: np.ndarray) -> dict[str, float]:
    if len(values) == 0:
        return {}
    q = np.percentile(values, PERCENTILES)
    return {f"p{p}": float(v) for p, v in zip(PERCENTILES, q)}


def print_text(out: dict) -> None:
    print_header(out)
    hours = "" if out["hours"] is None else f" = {out['hours']:.3f} h "
    print(
        f"{out['sequences']} sequences, {human(out['total_frames'])} frames of "
        f"{out['length_key']!r}{hours}{out['frame_rate_note']}"
    )
    for k, info in out["keys"].items():
        pct = " ".join(f"{name}={v:g}" for name, v in info["percentiles"].items())
        print(f"  {k}: {info['shape']}, total length {human(info['total_length'])}; {pct}")
    for name, c in out.get("corpora", {}).items():
        line = f"  corpus {name}: {c['sequences']} sequences, {_amount(c['frames'], c['hours'])}"
        if "rate" in c:
            per_epoch = _amount(c["rate"] * c["frames"], c["hours_per_epoch"])
            line += (
                f"; rate {c['rate']:g} corpus epochs per epoch = {per_epoch}, "
                f"{100 * c['share_of_epoch_1']:.1f}% of epoch 1; slots in epochs 1..."
                f"{len(c['slots_per_epoch'])}: {c['slots_per_epoch']}"
            )
        print(line)
    b = out["batching"]
    filtered = sum(b["filtered"].values())
    print(
        f"per ordering, epoch 1 on {b['ranks']} rank(s) (max_seqs={b['max_seqs']}, "
        f"max_frames={b['max_frames']}, batch_cost={b['batch_cost']}, filtered {filtered}):"
    )
    for o, p in out["padding_by_ordering"].items():
        print(
            f"  {o:<24} {100 * p['padding_ratio']:5.1f}% padding, {p['steps']} steps, "
            f"imbalance {p['step_imbalance']:.3f}, planning {p['planning']}"
        )
    print(
        "  (padding: share of padded frames; imbalance: mean over steps of the slowest rank's "
        "batch cost / the mean)"
    )
    if "plot" in out:
        print(f"plot: {out['plot']}")


def _amount(frames: float, hours: float | None) -> str:
    """Hours where the frame rate is known, else frames."""
    return f"{human(frames)} frames" if hours is None else f"{hours:.3f} h"


def plot(path: Path, lengths: np.ndarray, key: str, padding: dict) -> None:
    """Length histogram (with the median) and padding ratio per ordering, side by side."""
    matplotlib = require("matplotlib", "seqloader stats --plot")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4), constrained_layout=True)
    ax1.hist(lengths, bins=min(60, max(len(lengths) // 5, 5)), color="tab:blue")
    if len(lengths):
        ax1.axvline(float(np.median(lengths)), color="k", linestyle="--", label="median")
        ax1.legend()
    ax1.set(xlabel=f"length of {key!r} (frames)", ylabel="sequences", title="length histogram")
    names = list(padding)
    ax2.barh(names, [100 * padding[n]["padding_ratio"] for n in names], color="tab:orange")
    ax2.invert_yaxis()
    ax2.set(xlabel="padding (% of padded frames)", title="padding per ordering")
    fig.savefig(path, dpi=100)
    plt.close(fig)
