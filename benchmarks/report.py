"""Medians, ratios of side-by-side runs, the issue's targets, a table and a plot."""

from __future__ import annotations

import statistics
from collections import defaultdict

METRICS = (
    "seqs_per_s",
    "frames_per_s",
    "ttfb_s",
    "main_cpu_ms_per_batch",
    "peak_rss_bytes",
    "private_bytes",
)
REFERENCES = {"torch": "torch/chunked/w{w}", "returnn": "returnn/chunked/w{w}"}


def label(spec: dict) -> str:
    return f"{spec['pipeline']}/{spec['layout']}/w{spec['workers']}"


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def summarize(result: dict) -> dict:
    """Per configuration: medians over repetitions, failures, and per-repetition ratios."""
    by_label: dict[str, list[dict]] = defaultdict(list)
    for run in result["runs"]:
        by_label[label(run["spec"])].append(run)
    summary: dict[str, dict] = {}
    for name, runs in by_label.items():
        ok = [r for r in runs if "error" not in r]
        entry: dict = {"spec": runs[0]["spec"], "reps_ok": len(ok), "reps": len(runs)}
        entry["errors"] = [r["error"] for r in runs if "error" in r]
        for m in METRICS:
            entry[m] = _median([r[m] for r in ok if r.get(m) is not None])
        steps = sorted({s for r in ok for s in r["computation_pct"]}, key=float)
        entry["computation_pct"] = {
            s: _median([r["computation_pct"][s] for r in ok if s in r["computation_pct"]])
            for s in steps
        }
        entry["wait_ms"] = {  # per-batch wait distribution, median over repetitions
            s: {
                q: _median([r["wait_ms"][s][q] for r in ok if s in r.get("wait_ms", {})])
                for q in ("median", "p90", "max")
            }
            for s in steps
        }
        summary[name] = entry
    # ratios within a repetition (side by side), then the median
    for name, entry in summary.items():
        w = entry["spec"]["workers"]
        entry["ratios"] = {
            ref_name: ratio(result, name, pattern.format(w=w))
            for ref_name, pattern in REFERENCES.items()
        }
    return summary


def _by_rep(result: dict) -> dict[int, dict[str, dict]]:
    reps: dict[int, dict[str, dict]] = defaultdict(dict)
    for run in result["runs"]:
        if "error" not in run:
            reps[run["rep"]][label(run["spec"])] = run
    return reps


def ratio(result: dict, a: str, b: str) -> float | None:
    """Median over repetitions of (sequences/s of ``a``) / (that of ``b``) in the same repetition."""
    vals = [
        runs[a]["seqs_per_s"] / runs[b]["seqs_per_s"]
        for runs in _by_rep(result).values()
        if a in runs and b in runs
    ]
    return _median(vals)


def targets(result: dict, summary: dict) -> list[dict]:
    """The issue's targets, each with its measured value (None: not measured in this run)."""
    out = []

    def ratio_target(name: str, a: str, b: str, need: float) -> None:
        value = ratio(result, a, b)
        out.append(
            {
                "target": name,
                "value": value,
                "need": need,
                "unit": "x",
                "met": None if value is None else value >= need,
            }
        )

    ratio_target(
        "seqloader 0 workers >= 2x RETURNN's pipeline (sequences/s)",
        "seqloader/chunked/w0",
        "returnn/chunked/w0",
        2.0,
    )
    ratio_target(
        "seqloader 0 workers >= 1.5x hand-written DataLoader (sequences/s)",
        "seqloader/chunked/w0",
        "torch/chunked/w0",
        1.5,
    )
    ratio_target(
        "seqloader on a contiguous file >= 3x the bare h5py loop on the RETURNN-written file",
        "seqloader/contiguous/w0",
        "h5py/chunked/w0",
        3.0,
    )
    for step, need in (("10.0", 98.0), ("20.0", 99.0)):
        comp = summary.get("seqloader/chunked/w1", {}).get("computation_pct", {}).get(step)
        out.append(
            {
                "target": f"seqloader computation time >= {need:g}% with a {float(step):g} ms "
                "step and 1 worker (loop-side)",
                "value": comp,
                "need": need,
                "unit": "%",
                "met": None if comp is None else comp >= need,
            }
        )
    ttfb = summary.get("seqloader/chunked/w2", {}).get("ttfb_s")
    out.append(
        {
            "target": "seqloader time to first batch with 2 workers < 0.5 s",
            "value": ttfb,
            "need": 0.5,
            "unit": "s",
            "met": None if ttfb is None else ttfb < 0.5,
        }
    )
    # informational: the same contiguous file read by the bare loop
    ratio_target(
        "(info) seqloader vs the bare h5py loop, both on the contiguous file",
        "seqloader/contiguous/w0",
        "h5py/contiguous/w0",
        1.0,
    )
    return out


def _fmt(x: float | None, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def table(result: dict, summary: dict) -> str:
    """Computation time first (the share of wall time the training loop spends outside
    ``next()``, timed in the loop itself), then throughput, start-up, CPU and memory."""
    steps = result["settings"]["plan"]["step_ms"]
    head = (
        f"{'configuration':26s} "
        + " ".join(f"{'comp@' + format(s, 'g') + 'ms':>10s}" for s in steps)
        + f" {'seq/s':>8s} {'x torch':>8s} {'x returnn':>9s} {'1st batch':>9s} "
        f"{'CPU/batch':>9s} {'private':>9s} {'peak RSS':>9s}"
    )
    lines = [head, "-" * len(head)]
    for name in sorted(summary, key=_order):
        e = summary[name]
        if not e["reps_ok"]:
            lines.append(f"{name:26s} FAILED ({e['errors'][0].strip().splitlines()[-1][:80]})")
            continue
        rss = None if e["peak_rss_bytes"] is None else e["peak_rss_bytes"] / 2**20
        private = None if e.get("private_bytes") is None else e["private_bytes"] / 2**20
        comps = " ".join(f"{_fmt(e['computation_pct'].get(str(float(s))), '9.1f')}%" for s in steps)
        lines.append(
            f"{name:26s} {comps} {_fmt(e['seqs_per_s'], '8,.0f')} "
            f"{_fmt(e['ratios'].get('torch'), '7.2f')}x {_fmt(e['ratios'].get('returnn'), '8.2f')}x "
            f"{_fmt(e['ttfb_s'], '8.2f')}s {_fmt(e['main_cpu_ms_per_batch'], '7.2f')}ms "
            f"{_fmt(private, '7,.0f')}MB {_fmt(rss, '7,.0f')}MB"
        )
    bw = result["memory_bandwidth"]
    lines.append(
        f"memory bandwidth (numpy copy of the same bytes): {bw['gb_per_s']:.1f} GB/s = "
        f"{bw['seqs_per_s']:,.0f} sequences/s (physical limit)"
    )
    lines.append(
        "comp@: computation time %, timed in the loop (wall time outside next()); private: "
        "anonymous + shared memory of trainer and workers (Pss_Anon + Pss_Shmem, each page once); "
        "peak RSS also counts mapped file pages (page cache) once per process"
    )
    return "\n".join(lines)


def format_targets(rows: list[dict]) -> str:
    lines = []
    for t in rows:
        mark = {True: "MET   ", False: "NOT MET", None: "n/a   "}[t["met"]]
        value = "-" if t["value"] is None else f"{t['value']:.2f}{t['unit']}"
        lines.append(f"  [{mark}] {t['target']}: {value}")
    return "\n".join(lines)


_PIPE_ORDER = {"h5py": 0, "torch": 1, "returnn": 2, "seqloader": 3}


def _order(name: str) -> tuple:
    p, layout, w = name.split("/")
    return (_PIPE_ORDER.get(p, 9), layout != "chunked", int(w[1:]))


def plot(result: dict, summary: dict, path: str) -> None:
    """Throughput per configuration (log scale, with the memory-copy limit) and computation time
    vs step length."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [n for n in sorted(summary, key=_order) if summary[n]["reps_ok"]]
    fig, (ax2, ax1) = plt.subplots(1, 2, figsize=(14, 5.5))  # computation time first
    colors = {
        "h5py/chunked": "tab:gray",
        "h5py/contiguous": "silver",
        "torch/chunked": "tab:blue",
        "returnn/chunked": "tab:orange",
        "seqloader/chunked": "tab:green",
        "seqloader/contiguous": "yellowgreen",
    }

    def color(name: str) -> str:
        return colors.get(name.rsplit("/", 1)[0], "tab:purple")

    vals = [summary[n]["seqs_per_s"] for n in names]
    ax1.barh(
        range(len(names)),
        vals,
        color=[color(n) for n in names],
    )
    ax1.set_yticks(range(len(names)), names, fontsize=8)
    ax1.invert_yaxis()
    ax1.set_xscale("log")
    bw = result["memory_bandwidth"]["seqs_per_s"]
    ax1.axvline(bw, color="red", linestyle="--", label=f"numpy copy: {bw:,.0f} seq/s")
    ax1.set_xlabel("sequences/s (log scale; median of repetitions)")
    ax1.legend(loc="lower right", fontsize=8)
    ax1.set_title("Throughput, consumer as fast as possible")
    for n in names:
        e = summary[n]
        if e["spec"]["workers"] == 0 or not e["computation_pct"]:
            continue
        steps = sorted(e["computation_pct"], key=float)
        ax2.plot(
            [float(s) for s in steps],
            [e["computation_pct"][s] for s in steps],
            marker="o",
            label=n,
            color=color(n),
            linestyle="-" if e["spec"]["workers"] == 1 else ":",
        )
    ax2.axhline(98, color="red", linestyle="--", linewidth=0.8, label="98% target")
    ax2.set_xlabel("simulated accelerator step (ms, sleep per batch)")
    ax2.set_ylabel("computation time % (timed in the training loop)")
    ax2.set_title("Computation time with workers (solid: 1, dotted: 2+)")
    ax2.legend(fontsize=7)
    m = result["machine"]
    fig.suptitle(
        f"seqloader benchmark — {m['cpu']} ({m['cpus']} CPUs), "
        f"{result['settings']['corpus_seqs']} seqs, max_seqs {result['settings']['max_seqs']}",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
