"""Command-line flags shared by the commands, and their mapping onto the library's option classes.

Loader flags map one to one onto ``PlanOptions`` / ``WorkerOptions`` fields (``--max-frames`` ->
``max_frames``); a flag not given leaves the DATA config's value (or the library default) alone.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from fractions import Fraction

from seqloader.cli.config import DataConfig, load_data
from seqloader.errors import OptionError
from seqloader.plan.mix import mix_rate
from seqloader.plan.options import (
    DISTRIBUTIONS,
    PLANNINGS,
    SEEDINGS,
    UNEVEN_POLICIES,
    PlanOptions,
)
from seqloader.sources.base import Source
from seqloader.trainer.loader_options import WorkerOptions

# the batch limit used when neither the config nor the command line sets one (else one batch
# would hold the whole corpus)
DEFAULT_MAX_SEQS = 32


def _int_at_least(minimum: int):
    """An argparse type: an integer >= ``minimum``, with a "got X, expected Y" message."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < minimum:
            raise argparse.ArgumentTypeError(f"got {text!r}, expected an integer >= {minimum}")
        return value

    parse.__name__ = f"integer >= {minimum}"
    return parse


positive_int = _int_at_least(1)
non_negative_int = _int_at_least(0)


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"got {text!r}, expected a number >= 0") from None
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"got {value}, expected a number >= 0")
    return value


def _keyed_int(minimum: int):
    """An argparse type: ``N`` (the length key) or ``KEY=N[,KEY=N...]`` (``*`` = every key)."""
    count = _int_at_least(minimum)

    def parse(text: str) -> int | dict[str, int]:
        if "=" not in text:
            return count(text)
        out: dict[str, int] = {}
        for part in text.split(","):
            key, sep, value = part.partition("=")
            try:
                if not sep or not key.strip():
                    raise argparse.ArgumentTypeError("no key")
                out[key.strip()] = count(value.strip())
            except argparse.ArgumentTypeError:
                raise argparse.ArgumentTypeError(
                    f"got {text!r}, expected N or KEY=N[,KEY=N...] with integers N >= {minimum} "
                    "(KEY * = every key)"
                ) from None
        return out

    parse.__name__ = f"N or KEY=N (N >= {minimum})"
    return parse


def chunking_flag(text: str) -> str | dict[str, tuple[int, int]]:
    """``SIZE[:STEP]`` (every key) or ``KEY=SIZE[:STEP][,KEY=...]`` (those keys)."""
    if "=" not in text:
        return text  # PlanOptions parses (and refuses) RETURNN's string form itself
    out: dict[str, tuple[int, int]] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        size, _, step = value.partition(":")
        try:
            out[key.strip()] = (int(size), int(step or size))
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"got {text!r}, expected SIZE[:STEP] or KEY=SIZE[:STEP][,KEY=SIZE[:STEP]...]"
            ) from None
        if not sep or not key.strip():
            raise argparse.ArgumentTypeError(f"got {text!r}, expected KEY=SIZE[:STEP]")
    return out


def subset_size(text: str) -> int | float:
    """``N`` sequences or a fraction in (0, 1)."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"got {text!r}, expected N (sequences) or a fraction in (0, 1)"
        ) from None


def epoch_ranges(text: str) -> dict[tuple[int, int | None], dict[str, float]]:
    """``FIRST-LAST:MEAN[,...]`` (LAST empty: open) -> RETURNN's ``epoch_wise_filter``."""
    out: dict[tuple[int, int | None], dict[str, float]] = {}
    for part in text.split(","):
        epochs, _, mean = part.partition(":")
        first, _, last = epochs.partition("-")
        try:
            out[(int(first), int(last) if last.strip() else None)] = {"max_mean_len": float(mean)}
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"got {text!r}, expected FIRST-LAST:MAX_MEAN_LEN[,...] (e.g. 1-5:400,6-:800)"
            ) from None
    return out


def mix_rates(text: str) -> dict[str, Fraction]:
    """``NAME=RATE[,NAME=RATE...]`` -> ``{name: rate}`` (the ``mix`` option; rates > 0, exact as
    written: ``0.7`` and ``7/10`` are both 7/10)."""
    out: dict[str, Fraction] = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        try:
            rate: Fraction | None = mix_rate(name.strip(), value.strip())
        except OptionError:
            rate = None
        if not sep or not name.strip() or rate is None:
            raise argparse.ArgumentTypeError(
                f"got {text!r}, expected NAME=RATE[,NAME=RATE...] with rates > 0 "
                "(corpus epochs per epoch), e.g. libri=1,ted=3"
            )
        out[name.strip()] = rate
    return out


# (flag, dest, argparse keywords); dest is the option class's field name
PLAN_FLAGS: tuple[tuple[str, str, dict], ...] = (
    (
        "--ordering",
        "ordering",
        {
            "metavar": "ORD",
            "help": "sequence ordering (RETURNN names): "
            "default, reverse, random, sorted, sorted_reverse, laplace:N, laplace:.N, "
            "sort_bin_shuffle[_x2]:.N; or buckets:N (length buckets, synced steps)",
        },
    ),
    (
        "--max-seqs",
        "max_seqs",
        {"type": positive_int, "metavar": "N", "help": "at most N sequences per batch"},
    ),
    (
        "--max-frames",
        "max_frames",
        {
            "type": _keyed_int(1),
            "metavar": "N|KEY=N,..",
            "help": "at most N padded frames (n_seqs * max_len) per batch, of the length key or "
            "per key (* = every key)",
        },
    ),
    (
        "--max-packed-frames",
        "max_packed_frames",
        {
            "type": _keyed_int(1),
            "metavar": "N|KEY=N,..",
            "help": "also at most N real frames (the sum of lengths) per batch",
        },
    ),
    (
        "--batch-cost",
        "batch_cost",
        {
            "metavar": "COST",
            "help": "what --max-frames bounds: frames (padded, the default), packed (the sum "
            "of lengths) or quadratic:Q (n_seqs * (Lmax + Lmax^2/Q), for attention)",
        },
    ),
    (
        "--chunking",
        "chunking",
        {
            "type": chunking_flag,
            "metavar": "SIZE:STEP|KEY=SIZE:STEP,..",
            "help": "plan windows of each sequence as units (RETURNN's chunking; 0: off)",
        },
    ),
    (
        "--min-chunk-size",
        "min_chunk_size",
        {
            "type": _keyed_int(0),
            "metavar": "N|KEY=N,..",
            "help": "leave out (count) windows shorter than N",
        },
    ),
    (
        "--fixed-random-subset",
        "fixed_random_subset",
        {
            "type": subset_size,
            "metavar": "N|F",
            "help": "keep RETURNN's fixed random subset of N sequences (or a fraction F)",
        },
    ),
    (
        "--fixed-random-subset-seed",
        "fixed_random_subset_seed",
        {"type": non_negative_int, "metavar": "S", "help": "the subset's seed (default 42)"},
    ),
    (
        "--fixed-random-seed",
        "fixed_random_seed",
        {
            "type": non_negative_int,
            "metavar": "S",
            "help": "draw every epoch's order from this one seed (the same order every epoch)",
        },
    ),
    (
        "--epoch-wise-filter",
        "epoch_wise_filter",
        {
            "type": epoch_ranges,
            "metavar": "FIRST-LAST:MEAN,..",
            "help": "RETURNN's curriculum: in those epochs keep the shortest sequences whose "
            "mean length is about MEAN (counted)",
        },
    ),
    (
        "--max-seq-length",
        "max_seq_length",
        {
            "type": _keyed_int(1),
            "metavar": "N|KEY=N,..",
            "help": "filter (and count) sequences longer than N on the length key, or per key",
        },
    ),
    (
        "--min-seq-length",
        "min_seq_length",
        {
            "type": _keyed_int(0),
            "metavar": "N|KEY=N,..",
            "help": "filter (and count) sequences shorter than N, on the length key or per key",
        },
    ),
    (
        "--partition-epoch",
        "partition_epoch",
        {"type": positive_int, "metavar": "P", "help": "sub-epochs per full pass over the data"},
    ),
    ("--seed", "seed", {"type": non_negative_int, "metavar": "S", "help": "planning seed"}),
    (
        "--distribution",
        "distribution",
        {
            "choices": DISTRIBUTIONS,
            "help": "shard: ranks split one plan; random_seed_offset: each rank its own pass; "
            "files: each rank whole files per sub-epoch",
        },
    ),
    (
        "--uneven",
        "uneven",
        {
            "choices": UNEVEN_POLICIES,
            "help": "last round when batches don't divide by the world size",
        },
    ),
    (
        "--seeding",
        "seeding",
        {
            "choices": SEEDINGS,
            "help": "returnn: RETURNN's own order (its RandomState draws, filters after ordering; "
            "--seed is its random_seed_offset)",
        },
    ),
    (
        "--planning",
        "planning",
        {
            "choices": PLANNINGS,
            "help": "auto (default): indexed wherever it plans the options, else global; global: "
            "every rank plans the whole epoch (the greedy algorithm); indexed: each rank draws "
            "only its own batches (docs/planning.md)",
        },
    ),
    (
        "--mix",
        "mix",
        {
            "type": mix_rates,
            "metavar": "NAME=RATE,..",
            "help": "mix named corpora (a corpora config): corpus epochs per epoch, each corpus "
            "epoch exactly once (docs/corpora.md)",
        },
    ),
    (
        "--length-key",
        "length_key",
        {
            "metavar": "KEY",
            "help": "the key whose lengths batches are planned on (default: data, else the first)",
        },
    ),
)
WORKER_FLAGS: tuple[tuple[str, str, dict], ...] = (
    (
        "--prefetch-factor",
        "prefetch_factor",
        {"type": positive_int, "metavar": "N", "help": "batches each worker prepares ahead"},
    ),
    (
        "--pin-memory",
        "pin_memory",
        {"action": "store_true", "default": None, "help": "pin batches in page-locked memory"},
    ),
    (
        "--mp-context",
        "multiprocessing_context",
        {"choices": ("fork", "spawn", "forkserver"), "help": "worker start method"},
    ),
    (
        "--layout",
        "layout",
        {
            "choices": ("padded", "packed"),
            "help": "padded [B, T, ...] or packed [sum T, ...] with offsets (no padding)",
        },
    ),
    (
        "--features-on",
        "features_on",
        {
            "metavar": "DEVICE",
            "help": "compute an audio source's deferred features (defer_features) on this device "
            "after collation instead of in the workers, e.g. cuda",
        },
    ),
)
NUM_WORKERS_HELP = "DataLoader worker processes per rank"


def add_command(
    sub: argparse._SubParsersAction, name: str, summary: str, details: str = "", data: bool = False
) -> argparse.ArgumentParser:
    """The subcommand ``name``: ``summary`` in ``seqloader --help``'s list, and atop its own
    ``--help`` followed by ``details`` (one rule for every command's texts); ``data``: it reads
    DATA (``add_data_argument``, its first argument).

    >>> sub = argparse.ArgumentParser(prog="seqloader").add_subparsers()
    >>> add_command(sub, "x", "do x", "Slowly.").description
    'do x. Slowly.'
    """
    description = f"{summary}. {details}" if details else f"{summary}."
    parser = sub.add_parser(name, help=summary, description=description)
    if data:
        add_data_argument(parser)
    return parser


def add_data_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "data",
        nargs="+",
        metavar="DATA",
        help="RETURNN HDF file(s), a .txt list of HDF files, an audio manifest (.jsonl), an "
        "OggZip (.zip), a .toml/.json config, or a RETURNN config (.config; see docs/cli.md)",
    )
    parser.add_argument(
        "--dataset",
        metavar="NAME",
        default=None,
        help="with a RETURNN config: its dataset (train, dev, eval, an eval_datasets entry; "
        "default train)",
    )
    parser.add_argument(
        "--stub-modules",
        action="store_true",
        help="with a RETURNN config: stub the modules it imports that are not installed (its "
        "model code), named in a warning",
    )


def add_loader_options(
    parser: argparse.ArgumentParser, workers: bool = True, num_workers_default: int | None = None
) -> None:
    group = parser.add_argument_group("loader options (override the DATA config)")
    for flag, dest, kw in PLAN_FLAGS:
        group.add_argument(flag, dest=dest, **({"default": None} | kw))
    group.add_argument(
        "--num-workers",
        dest="num_workers",
        type=non_negative_int,
        default=num_workers_default,
        metavar="N",
        help=NUM_WORKERS_HELP,
    )
    for flag, dest, kw in WORKER_FLAGS:
        if workers or dest == "layout":  # the layout decides the padding a plan delivers
            group.add_argument(flag, dest=dest, **({"default": None} | kw))


def add_output_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object for scripts")
    parser.add_argument(
        "--no-progress", action="store_true", help="no progress bars (off anyway when not a tty)"
    )


def loader_overrides(args: argparse.Namespace) -> dict[str, object]:
    """The loader flags given on the command line, by option field name."""
    names = [d for _, d, _ in PLAN_FLAGS] + [d for _, d, _ in WORKER_FLAGS] + ["num_workers"]
    return {n: getattr(args, n) for n in names if getattr(args, n, None) is not None}


@dataclass(frozen=True)
class Opened:
    """DATA opened: its config, the source, and the effective options."""

    config: DataConfig
    source: Source
    plan: PlanOptions
    workers: WorkerOptions
    notes: tuple[str, ...] = ()  # what the human should know (printed with the output)

    def header(self, options: bool = True) -> dict[str, object]:
        """What every command's output says first of DATA: its description, the notes and the
        effective plan options (as ``PlanOptions.to_dict``), so scripts read it in one form."""
        out: dict[str, object] = {"data": self.config.source.describe(), "notes": list(self.notes)}
        if options:
            out["options"] = self.plan.to_dict()
        return out


def open_data(args: argparse.Namespace, default_limit: bool = True) -> Opened:
    """Resolve DATA, merge flags over the config, validate options, then open the source."""
    dataset, stub = getattr(args, "dataset", None), getattr(args, "stub_modules", False)
    config = load_data(args.data, dataset=dataset, stub_modules=stub)
    if dataset is not None and config.source.kind != "returnn":
        raise OptionError(
            f"--dataset {dataset!r} is for RETURNN configs (.config); DATA is not one"
        )
    overrides = loader_overrides(args)
    plan = config.plan_options(overrides)  # validate options before opening anything
    workers = config.worker_options(overrides)
    source = config.open()
    notes: list[str] = []
    if default_limit and plan.max_seqs is None and plan.max_frames is None:
        notes.append(f"no --max-seqs/--max-frames given: using --max-seqs {DEFAULT_MAX_SEQS}")
        plan = config.plan_options({**overrides, "max_seqs": DEFAULT_MAX_SEQS})
    return Opened(config, source, plan, workers, tuple(notes))
