"""Planning options: one frozen, validated dataclass, the ordering-string parser, and the
parsers of the options given in RETURNN's several forms (per-key ints, ``chunking``,
``fixed_random_subset``, ``epoch_wise_filter``, ``mix``, ``batch_cost``), so every option is read
in one place.

Validation raises ``OptionError`` with "got X, expected Y" so a typo in a config fails at construction,
not hours into a training.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from fractions import Fraction
from functools import partial
from typing import Literal

import numpy as np

from seqloader.errors import OptionError
from seqloader.plan.admission import EpochFilter
from seqloader.plan.chunks import ChunkSpec
from seqloader.plan.cost import BatchCost
from seqloader.plan.keyed import EVERY_KEY
from seqloader.plan.mix import mix_rate, rate_to_json
from seqloader.validate import choice_option, choices, int_option, is_int, optional_int_option

ORDERING_KINDS = (
    "default",
    "reverse",
    "random",
    "sorted",
    "sorted_reverse",
    "laplace",
    "sort_bin_shuffle",
    "sort_bin_shuffle_x2",
    "buckets",
)
Distribution = Literal["shard", "random_seed_offset", "files"]
Seeding = Literal["seqloader", "returnn"]
Uneven = Literal["split", "pad", "drop"]
Planning = Literal["auto", "global", "indexed"]
ResolvedPlanning = Literal["global", "indexed"]
PLANNINGS = choices(Planning)
DISTRIBUTIONS = choices(Distribution)
SEEDINGS = choices(Seeding)
UNEVEN_POLICIES = choices(Uneven)

#: what ``chunking`` accepts (RETURNN's forms; normalised to ``ChunkSpec`` or None)
ChunkingOption = ChunkSpec | Mapping[str, tuple[int, int]] | int | str | tuple | None
#: what ``epoch_wise_filter`` accepts (RETURNN's dict; normalised to ``EpochFilter`` or None)
EpochFilterOption = EpochFilter | Mapping | None
#: what ``mix`` accepts: ``{corpus: rate}``
MixOption = Mapping[str, float | Fraction | str] | None

#: options left out of ``to_dict`` at their default, so plans that don't use them keep the
#: fingerprints (and resume states) they had before the options existed
_DEFAULTS_LEFT_OUT: dict[str, object] = {
    "max_packed_frames": None,
    "chunking": None,
    "min_chunk_size": 0,
    "fixed_random_subset": None,
    "fixed_random_subset_seed": 42,
    "fixed_random_seed": None,
    "epoch_wise_filter": None,
    "planning": "global",
}

_ORDERING_RE = re.compile(r"^(?P<kind>[a-z_0-9]+?)(?::(?P<arg>\.?\d+))?(?::(?P<keep>\d+))?$")


@dataclass(frozen=True)
class Ordering:
    """A parsed ordering string (RETURNN's names).

    ``bins`` is the number of bins (``laplace:N``) and ``bin_size`` the approximate number of
    sequences per bin (``laplace:.N``); at most one is set. Without either, RETURNN uses 2 bins.
    ``keep_epochs`` is RETURNN's ``nth``: the same order for K consecutive full epochs
    (``random:K``, ``laplace:.N:K``, ``sort_bin_shuffle:N:K``); 1 = a new order every epoch.

    >>> Ordering.parse("laplace:.1000")
    Ordering(kind='laplace', bins=None, bin_size=1000, keep_epochs=1)
    """

    kind: str
    bins: int | None = None
    bin_size: int | None = None
    keep_epochs: int = 1

    @classmethod
    def parse(cls, text: str) -> Ordering:
        m = _ORDERING_RE.match(text.strip())
        expected = (
            "expected one of default, reverse, random, random:K, sorted, sorted_reverse, "
            "laplace:N, laplace:.N, sort_bin_shuffle:.N, sort_bin_shuffle_x2:.N, buckets:N (binned "
            "ones optionally :K; K = keep the order for K epochs)"
        )
        if not m or m["kind"] not in ORDERING_KINDS:
            hint = ""
            if m and m["kind"] in ("default_every_n", "random_sample"):
                hint = (
                    f" ({m['kind']!r} is RETURNN's, but it drops or repeats sequences, which "
                    "breaks the exactly-once epoch; not supported)"
                )
            raise OptionError(f"ordering: got {text!r}{hint}, {expected}")
        kind, arg, keep = m["kind"], m["arg"], m["keep"]
        binned = kind in ("laplace", "sort_bin_shuffle", "sort_bin_shuffle_x2", "buckets")
        if kind == "buckets" and (arg is None or arg.startswith(".")):
            raise OptionError(
                f"ordering: got {text!r}; 'buckets' takes the number of length buckets, "
                "'buckets:N' or 'buckets:N:K' (e.g. 'buckets:30')"
            )
        if kind == "random" and arg is not None:  # RETURNN: random:K keeps the order K epochs
            if arg.startswith(".") or keep is not None:
                raise OptionError(f"ordering: got {text!r}; 'random' takes only :K ({expected})")
            arg, keep = None, arg
        if arg is not None and not binned:
            raise OptionError(f"ordering: got {text!r}; {kind!r} takes no argument ({expected})")
        keep_epochs = 1 if keep is None else int(keep)
        if keep_epochs < 1:
            raise OptionError(f"ordering: got {text!r}; K (epochs to keep an order) must be >= 1")
        if arg is None:
            return cls(kind, bins=2 if binned else None, keep_epochs=keep_epochs)
        value = int(arg.lstrip("."))
        if value < 1:
            raise OptionError(f"ordering: got {text!r}; the bin count/size must be >= 1")
        if arg.startswith("."):
            return cls(kind, bin_size=value, keep_epochs=keep_epochs)
        return cls(kind, bins=value, keep_epochs=keep_epochs)

    def __str__(self) -> str:
        keep = f":{self.keep_epochs}" if self.keep_epochs != 1 else ""
        if self.bin_size is not None:
            return f"{self.kind}:.{self.bin_size}{keep}"
        if self.bins is not None and (self.bins != 2 or keep or self.kind == "buckets"):
            return f"{self.kind}:{self.bins}{keep}"
        return f"{self.kind}{keep}"

    def seed_epoch(self, full_epoch: int) -> int:
        """The full epoch (0-based) whose random order full epoch ``full_epoch`` uses: epochs
        ``0..K-1`` share one order, ``K..2K-1`` the next (RETURNN's grouping)."""
        return full_epoch // self.keep_epochs

    def num_bins(self, n: int) -> int:
        """RETURNN's rule: ``.N`` gives ``max(n // N, 2)`` bins."""
        if self.bin_size is not None:
            return max(n // self.bin_size, 2)
        return self.bins or 2

    @property
    def is_buckets(self) -> bool:
        return self.kind == "buckets"


@dataclass(frozen=True)
class PlanOptions:
    """Everything the epoch plan depends on besides the data, the epoch and the world size.

    - ``ordering``: RETURNN ordering string (see ``Ordering``).
    - ``max_seqs``: at most this many sequences per batch (None: unbounded).
    - ``max_frames``: at most this much *cost* per batch (``batch_cost``; by default padded
      frames, ``n_seqs * max_len``) of the length key; ``{key: limit}`` bounds each named key,
      ``"*"`` every key not named (RETURNN's ``batch_size`` as a ``NumbersDict``: batches follow
      the longest key). None: unbounded.
    - ``max_packed_frames``: at most this many *real* frames per batch (the sum of lengths, no
      padding), int (length key) or per key as ``max_frames``; applies together with
      ``max_frames`` (RETURNN's ``packed_batch_size`` next to ``batch_size``). None: unbounded.
    - ``max_seq_length``: sequences longer than this (on the length key, or per key with a mapping,
      ``"*"`` = every key not named) are filtered out — counted and reported, never silently.
    - ``min_seq_length``: sequences shorter than this are filtered likewise (e.g. 1 drops empties);
      int (length key) or per key.
    - ``chunking``: cut each sequence into windows planned as units of their own (RETURNN's
      ``chunking``, ``seqloader.plan.chunks``): ``size``, ``"size:step"``, ``(size, step)`` for
      every key, ``{key: size}``/``{key: (size, step)}``/``({key: size}, {key: step})`` per key;
      ``None``/``0``/``"0"``: off. ``min_chunk_size``: windows shorter than this are left out
      (int, or per key).
    - ``fixed_random_subset`` / ``fixed_random_subset_seed``: keep a fixed random subset of the
      corpus (RETURNN's OggZip option, its draws; ``seqloader.plan.admission``).
    - ``fixed_random_seed``: every epoch draws its order from this one seed (RETURNN's
      ``fixed_random_seed``: the same random order every epoch). None: a new order per epoch.
      Refused with ``distribution="files"`` under global planning (its files plans draw from
      seed and epoch: it would be ignored).
    - ``epoch_wise_filter``: RETURNN's ``{(first, last): {"max_mean_len": M}}`` curriculum filter
      (``seqloader.plan.admission``), applied per sub-epoch, counted per epoch; with
      ``distribution="files"`` (indexed planning) to each sub-epoch's files as one set, for every
      rank and world size (``seqloader.plan.indexed.files_filter``).
    - ``partition_epoch``: sub-epochs per full pass over the data.
    - ``distribution``: ``shard`` (ranks split one plan), ``random_seed_offset`` (each rank its
      own permutation of all data; an epoch then covers the data ``world_size`` times) or
      ``files`` (each (sub-)epoch gives each rank whole files of the source, balanced by frames;
      ``seqloader.plan.files``).
    - ``uneven``: the last round when batches don't divide by the world size: ``split``, ``pad``,
      ``drop``.
    - ``seeding``: ``seqloader`` (default: ``SeedSequence([seed, ...])`` streams, filters before
      ordering) or ``returnn``: RETURNN's own order for RETURNN configs — its random draws
      (``RandomState(full_epoch // K + 1 + seed)``, ``seed`` being RETURNN's
      ``random_seed_offset``; ``+ 16127 * rank`` under ``random_seed_offset`` distribution), the
      whole data ordered and cut into sub-epochs before filters drop sequences (see
      docs/migrating.md).
    - ``mix``: ``{corpus name: rate}`` over a ``ConcatSource``'s corpora (unnamed ones: 1.0); a rate
      is corpus epochs per epoch, taken exactly as written (0.7, ``Fraction(7, 10)`` and ``'7/10'``
      are all 7/10), each corpus epoch exactly once (``seqloader.plan.mix``; with
      ``planning="indexed"`` per (corpus, length bucket): ``seqloader.plan.indexed.mix``;
      docs/corpora.md). None: no mixing, every sequence once per epoch.
    - ``batch_cost``: what ``max_frames`` bounds: ``frames`` (padded frames; ``padded`` is the
      same), ``packed`` (the sum of lengths: batches for packed, padding-free layouts) or
      ``quadratic:Q`` (``n_seqs * (Lmax + Lmax**2 / Q)``; see ``seqloader.plan.cost``; with
      per-key ``max_frames``, under indexed planning, every limited key's own quadratic cost).
    - ``planning``: ``auto`` (resolved here, ``resolved_planning``: ``indexed`` wherever indexed
      planning plans the options with ``seeding="seqloader"``, ``global`` otherwise; a source's
      declarations the options cannot see, e.g. length variants or RETURNN's file pools, resolve
      it to ``global`` in ``seqloader.plan.planners.resolve_planning``), ``global`` (every rank
      plans the whole epoch: greedy batches of one global order) or ``indexed`` (histogram
      batching and keyed permutations: a rank computes only its own batches, in time and memory
      about ``n / world_size``; ``seqloader.plan.indexed.planner``, for ``laplace``/``buckets:N`` orderings, other plans than ``global``'s for the same options;
      ``default``/``reverse``/``sorted``/``sorted_reverse``: ``global``'s batches, cut once per
      node, ``seqloader.plan.indexed.fixed``; with ``files`` these and ``random``: ``global``'s
      plan, each rank's files cut greedily, ``seqloader.plan.indexed.files_cut``).

    >>> PlanOptions(max_frames=1000, chunking="100:50").chunking
    {'*': (100, 50)}
    >>> PlanOptions(max_frames={"*": 2000}, batch_cost="packed").max_frames
    {'*': 2000}
    """

    ordering: str = "default"
    max_seqs: int | None = None
    max_frames: int | Mapping[str, int] | None = None
    max_seq_length: int | Mapping[str, int] | None = None
    min_seq_length: int | Mapping[str, int] = 0
    partition_epoch: int = 1
    distribution: Distribution = "shard"
    uneven: Uneven = "split"
    seed: int = 1
    length_key: str | None = None
    seeding: Seeding = "seqloader"
    mix: MixOption = None
    batch_cost: str = "frames"
    max_packed_frames: int | Mapping[str, int] | None = None
    chunking: ChunkingOption = None
    min_chunk_size: int | Mapping[str, int] = 0
    fixed_random_subset: int | float | None = None
    fixed_random_subset_seed: int = 42
    fixed_random_seed: int | None = None
    epoch_wise_filter: EpochFilterOption = None
    planning: Planning = field(default="auto", compare=False)
    _parsed: Ordering = field(init=False, repr=False, compare=False)
    #: ``planning`` with ``auto`` resolved from the options (``resolved_planning``): what options
    #: compare by, so options that plan alike are equal (``PlanOptions(**o.to_dict()) == o``)
    _resolved: ResolvedPlanning = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if not isinstance(self.ordering, str):
            raise OptionError(f"ordering: got {self.ordering!r}, expected a string like 'random'")
        object.__setattr__(self, "_parsed", Ordering.parse(self.ordering))
        self._set_int("max_seqs", 1, optional=True)
        set_ = partial(object.__setattr__, self)
        set_("max_frames", optional_keyed_int_option("max_frames", self.max_frames, 1))
        set_(
            "max_packed_frames",
            optional_keyed_int_option("max_packed_frames", self.max_packed_frames, 1),
        )
        set_("max_seq_length", optional_keyed_int_option("max_seq_length", self.max_seq_length, 1))
        set_("min_seq_length", keyed_int_option("min_seq_length", self.min_seq_length, 0))
        set_("chunking", chunking_option(self.chunking))
        set_("min_chunk_size", min_chunk_size_option(self.min_chunk_size))
        set_("fixed_random_subset", fixed_random_subset_option(self.fixed_random_subset))
        self._set_int("fixed_random_subset_seed", 0)
        self._set_int("fixed_random_seed", 0, optional=True)
        set_("epoch_wise_filter", epoch_wise_filter_option(self.epoch_wise_filter))
        self._set_int("partition_epoch", 1)
        self._set_int("seed", 0)
        choice_option("distribution", self.distribution, DISTRIBUTIONS)
        choice_option("seeding", self.seeding, SEEDINGS)
        if self.seeding == "returnn" and self.seed >= 2**31:
            raise OptionError(
                f"seed: got {self.seed}, expected < 2**31 with seeding='returnn' (RETURNN's "
                "RandomState takes 32-bit seeds)"
            )
        choice_option("uneven", self.uneven, UNEVEN_POLICIES)
        choice_option("planning", self.planning, PLANNINGS)
        if self.length_key is not None and not isinstance(self.length_key, str):
            raise OptionError(f"length_key: got {self.length_key!r}, expected a key name or None")
        object.__setattr__(self, "mix", validate_mix(self.mix))
        refusal = self._indexed_refusal()  # auto: indexed wherever it plans the options
        indexed = self.planning == "indexed" or (self.planning == "auto" and refusal is None)
        object.__setattr__(self, "_resolved", "indexed" if indexed else "global")
        self._check_mix_and_files()
        object.__setattr__(self, "batch_cost", str(batch_cost_option(self.batch_cost)))
        self._check_combinations()
        if self.planning == "indexed" and refusal is not None:
            raise OptionError(refusal)

    def _check_mix_and_files(self) -> None:
        """A mix, and whole files per rank, refused with what they cannot be combined with."""
        if self.mix is not None and self.seeding != "seqloader":
            raise OptionError(
                f"mix: not supported with seeding={self.seeding!r} (RETURNN has no exact mixing "
                "to reproduce); use seeding='seqloader'"
            )
        if self.mix is not None and self._parsed.is_buckets and self._resolved != "indexed":
            raise OptionError(
                f"mix: not supported with ordering={self.ordering!r} yet (buckets arrange one "
                "corpus epoch's sequences; a mix repeats them); use another ordering with mix, or "
                "planning='indexed' (which buckets a mix per corpus and bucket)"
            )
        indexed = self._resolved == "indexed"  # mixes over files and per rank (each its copy)
        if self.mix is not None and self.distribution != "shard" and not indexed:
            why, fix = (
                (
                    "each rank would order its own copy of the mix, which global planning "
                    "does not plan",
                    "use planning='indexed' (each rank its own order of the same selection: "
                    "every corpus epoch once per rank), or distribution='shard'",
                )
                if self.distribution == "random_seed_offset"
                else (
                    "global planning selects a mix's sequences across files, which whole files "
                    "per rank cannot follow",
                    "use planning='indexed' (which mixes per-corpus streams of files), or "
                    "distribution='shard'",
                )
            )
            raise OptionError(
                f"mix: not supported with distribution={self.distribution!r} ({why}); {fix}"
            )
        if self.distribution == "files" and self.seeding != "seqloader":
            raise OptionError(
                f"distribution='files' is not supported with seeding={self.seeding!r} (RETURNN "
                "has no file distribution whose order could be reproduced); use "
                "seeding='seqloader', or distribution='shard'"
            )
        fixed = self.fixed_random_seed
        if self.distribution == "files" and fixed is not None and self._resolved == "global":
            # global planning's files plans draw from seed and epoch: the option would be ignored
            raise OptionError(
                f"fixed_random_seed={fixed}: not supported with distribution='files' and "
                "planning='global' (global planning draws the file shuffle and each rank's "
                "order from seed and epoch, so the option would be ignored); use "
                "planning='indexed' (which draws them from fixed_random_seed: the same plan "
                "every epoch), or drop fixed_random_seed"
            )

    def _check_combinations(self) -> None:
        """Options that work alone but not together: refused with the reason and the fix."""
        cost = batch_cost_option(self.batch_cost)
        frames = self.max_frames
        if (
            cost.quadratic is not None
            and isinstance(frames, Mapping)
            and self._resolved != "indexed"
        ):
            raise OptionError(
                f"max_frames: per-key limits {dict(frames)} are not supported with "
                f"batch_cost={self.batch_cost!r} under planning='global'; use planning='indexed' "
                "(a batch fits every key's quadratic cost), give max_frames as an int, or "
                "batch_cost='frames'/'packed'"
            )
        if cost.packed and self.max_packed_frames is not None:
            raise OptionError(
                "max_packed_frames: not needed with batch_cost='packed' (max_frames already "
                "bounds the sum of lengths); give one packed limit, or batch_cost='frames' to "
                "bound padded frames by max_frames and the sum by max_packed_frames"
            )
        global_buckets = self._parsed.is_buckets and self._resolved != "indexed"
        if global_buckets and (
            isinstance(self.max_frames, Mapping) or cost.packed or self.max_packed_frames
        ):
            raise OptionError(
                f"ordering={self.ordering!r}: not supported with per-key max_frames or packed "
                "limits under planning='global' (its buckets are cut by the length key's padded "
                "cost); use planning='indexed' (whose bucket batch sizes fit every limit), an "
                "int max_frames with batch_cost='frames' or 'quadratic:Q', or another ordering "
                "(e.g. laplace:.N)"
            )
        subset = self.fixed_random_subset is not None and self._resolved != "indexed"
        if subset and (self.mix is not None or self.distribution == "files"):
            raise OptionError(
                "fixed_random_subset: not supported with mix or distribution='files' under "
                "planning='global' (the subset re-orders the corpus); use planning='indexed' "
                "(the subset admitted, in the mix's or the files' own order), or "
                "distribution='shard' without mix"
            )
        files = self.distribution == "files" and self._resolved != "indexed"
        if self.epoch_wise_filter is not None and (global_buckets or files):
            raise OptionError(
                "epoch_wise_filter: not supported with ordering='buckets:N' or "
                "distribution='files' unless planning='indexed' (which filters each "
                "sub-epoch's files as one set); use planning='indexed', or another ordering "
                "with distribution='shard' or 'random_seed_offset'"
            )
        if self.epoch_wise_filter is not None and self.mix is not None:
            self._check_mix_filter()

    def _check_mix_filter(self) -> None:
        """``epoch_wise_filter`` with a ``mix``: planned by indexed planning (every distribution
        and ordering, chunked too: the sub-epoch's slots filtered once as one set); refused by
        name under ``planning='global'``, which selects no mixed sub-epoch set."""
        if self._resolved != "indexed":
            raise OptionError(
                "epoch_wise_filter with mix: not planned with planning='global' (it selects no "
                "mixed sub-epoch set); use planning='indexed', or drop the mix or the filter"
            )

    def _indexed_refusal(self) -> str | None:
        """Why indexed planning does not plan these options (None: it does): raised by name, with
        the fix, under ``planning="indexed"``; what resolves ``planning="auto"`` to ``global``."""
        fix = "use planning='global' for it"
        unsupported = [(self.seeding != "seqloader", f"seeding={self.seeding!r}")]
        for on, name in unsupported:
            if on:
                return f"planning='indexed': {name} is not supported; {fix}"
        return None

    def _set_int(self, name: str, minimum: int, optional: bool = False) -> None:
        value = getattr(self, name)
        checked = optional_int_option if optional else int_option
        object.__setattr__(self, name, checked(name, value, minimum))

    @property
    def parsed_ordering(self) -> Ordering:
        return self._parsed

    @property
    def resolved_planning(self) -> ResolvedPlanning:
        """``planning`` as these options resolve it: ``global`` or ``indexed`` (``auto``:
        ``indexed`` wherever indexed planning plans the options, ``global`` otherwise);
        ``seqloader.plan.planners.resolve_planning`` resolves with what the source declares:
        what plans and is recorded.

        >>> PlanOptions(planning="auto", ordering="laplace:.100").resolved_planning
        'indexed'
        >>> PlanOptions(planning="auto", seeding="returnn").resolved_planning
        'global'
        >>> PlanOptions(chunking={"classes": (2, 1)}, length_key="data").resolved_planning
        'indexed'
        """
        return self._resolved

    @property
    def cost(self) -> BatchCost:
        return batch_cost_option(self.batch_cost)

    def to_dict(self) -> dict:
        d = asdict(self)
        d.pop("_parsed", None)
        if d["seeding"] == "seqloader":
            d.pop("seeding")  # the default: fingerprints of earlier plans stay valid
        d["ordering"] = str(self._parsed)
        if d["mix"] is None:  # unmixed plans keep the fingerprints of states saved before `mix`
            del d["mix"]
        else:
            d["mix"] = {name: rate_to_json(rate) for name, rate in d["mix"].items()}
        d.pop("_resolved", None)
        d["planning"] = self._resolved  # what plans: `auto` is recorded as what it resolved to
        if d["batch_cost"] == "frames":
            d.pop("batch_cost")  # the default: fingerprints of earlier plans stay valid
        for name, off in _DEFAULTS_LEFT_OUT.items():  # options added later: absent when off
            if d[name] == off:
                del d[name]
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)


# Parsers of single options: each checks one value and returns its canonical form; the
# features' modules (keyed.py, chunks.py, admission.py, mix.py, cost.py) take that form.

_EWF_EXPECTED = (
    "expected {(first_epoch, last_epoch): {'max_mean_len': M}} with epochs ints >= 1 (first) "
    "and >= first (last), None for open ends, M > 0"
)
_BATCH_COST_EXPECTED = (
    "expected 'frames' (or 'padded'), 'packed' or 'quadratic:Q' with an int Q >= 1 "
    "(e.g. 'quadratic:2000')"
)
_QUADRATIC_RE = re.compile(r"^quadratic:(?P<q>\d+)$")
_CHUNKING_EXPECTED = (
    "expected None/0/'0' (off), size, 'size:step', (size, step), {key: size}, "
    "{key: (size, step)} or ({key: size}, {key: step}), sizes and steps ints >= 1"
)


def keyed_int_option(
    name: str, value: object, minimum: int, *, none: bool = False
) -> int | dict[str, int]:
    """``value`` as an int ``>= minimum`` or a ``{key: int}`` dict (sorted, ``"*"`` allowed);
    ``none``: the message says None is allowed too."""
    if isinstance(value, Mapping):
        if not value:
            raise OptionError(
                f"{name}: got an empty mapping, expected {{key: int >= {minimum}}} "
                f"('{EVERY_KEY}' = every key not named) or an int"
            )
        out = {}
        for key, v in value.items():
            if not isinstance(key, str):
                raise OptionError(f"{name}: got key {key!r}, expected data key names (str)")
            out[key] = int_option(f"{name}[{key!r}]", v, minimum)
        return dict(sorted(out.items()))
    expected = f"an int >= {minimum}" + (" or None" if none else "")
    expected += f", or {{key: int}} ('{EVERY_KEY}' = every key not named)"
    if is_int(value):
        return int_option(name, value, minimum, expected=expected)
    raise OptionError(f"{name}: got {value!r}, expected {expected}")


def optional_keyed_int_option(
    name: str, value: object, minimum: int
) -> int | dict[str, int] | None:
    """``keyed_int_option``, or None (no limit)."""
    return None if value is None else keyed_int_option(name, value, minimum, none=True)


def chunking_option(value: object) -> ChunkSpec | None:
    """``chunking`` in any of RETURNN's forms -> ``{key: (size, step)}`` (``"*"``: every key), or
    None when off (``None``, ``0``, ``"0"``, ``""``, RETURNN's "off" values)."""
    if value is None or (is_int(value) and value == 0) or value in ("0", "", {}):
        return None
    if isinstance(value, str):
        try:
            parts = [int(p) for p in value.split(":")]
        except ValueError:
            raise OptionError(f"chunking: got {value!r}, {_CHUNKING_EXPECTED}") from None
        if len(parts) not in (1, 2):
            raise OptionError(f"chunking: got {value!r}, {_CHUNKING_EXPECTED}")
        value = tuple(parts) if len(parts) == 2 else parts[0]
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise OptionError(f"chunking: got {value!r}, {_CHUNKING_EXPECTED}")
        size, step = value
        if isinstance(size, Mapping):
            if step in (None, 0):
                step = size
            if not isinstance(step, Mapping) or sorted(step) != sorted(size):
                raise OptionError(
                    f"chunking: got {value!r}; the step dict must name the same keys as the size "
                    f"dict ({_CHUNKING_EXPECTED})"
                )
            return _chunk_pairs({k: (size[k], step[k]) for k in size}, value)
        if step in (None, 0):
            step = size
        return _chunk_pairs({EVERY_KEY: (size, step)}, value)
    if isinstance(value, Mapping):
        pairs = {}
        for k, v in value.items():
            pairs[k] = tuple(v) if isinstance(v, (tuple, list)) else (v, v)
        return _chunk_pairs(pairs, value)
    if is_int(value):
        return _chunk_pairs({EVERY_KEY: (value, value)}, value)
    raise OptionError(f"chunking: got {value!r}, {_CHUNKING_EXPECTED}")


def _chunk_pairs(pairs: Mapping[object, object], given: object) -> ChunkSpec:
    out: ChunkSpec = {}
    for key, pair in pairs.items():
        if not isinstance(key, str) or not isinstance(pair, tuple) or len(pair) != 2:
            raise OptionError(f"chunking: got {given!r}, {_CHUNKING_EXPECTED}")
        size = int_option(f"chunking[{key!r}] size", pair[0], 1)
        step = int_option(f"chunking[{key!r}] step", pair[1], 1)
        out[key] = (size, step)
    return dict(sorted(out.items()))


def min_chunk_size_option(value: object) -> int | dict[str, int]:
    """``min_chunk_size``: an int for every chunked key, or ``{key: int}`` (others: 0)."""
    return keyed_int_option("min_chunk_size", 0 if value is None else value, 0)


def fixed_random_subset_option(value: object) -> int | float | None:
    """None/0 (off), an int >= 1 (a count) or a float in (0, 1) (a fraction of the corpus)."""
    if value is None or (is_int(value) and value == 0):
        return None
    if is_int(value) and value >= 1:
        return int(value)
    if isinstance(value, float) and 0 < value < 1:
        return value
    raise OptionError(
        f"fixed_random_subset: got {value!r}, expected None, an int >= 1 (sequences) or a "
        "fraction in (0, 1)"
    )


def epoch_wise_filter_option(value: object) -> EpochFilter | None:
    """RETURNN's ``epoch_wise_filter`` dict -> a sorted tuple of ``(first, last, max_mean_len)``."""
    if value is None or (isinstance(value, Mapping) and not value):
        return None
    if isinstance(value, tuple) and all(isinstance(r, tuple) and len(r) == 3 for r in value):
        # the canonical form itself (dataclasses.replace passes it back): checked as the dict
        value = {(first, last): {"max_mean_len": mean} for first, last, mean in value}
    if not isinstance(value, Mapping):
        raise OptionError(f"epoch_wise_filter: got {value!r}, {_EWF_EXPECTED}")
    out = []
    for key, opts in value.items():
        if not isinstance(key, tuple) or len(key) != 2:
            raise OptionError(f"epoch_wise_filter: got key {key!r}, {_EWF_EXPECTED}")
        first = 1 if key[0] is None else int_option("epoch_wise_filter first epoch", key[0], 1)
        last = (
            None
            if key[1] in (None, -1)
            else int_option("epoch_wise_filter last epoch", key[1], first)
        )
        if not isinstance(opts, Mapping):
            raise OptionError(f"epoch_wise_filter[{key!r}]: got {opts!r}, {_EWF_EXPECTED}")
        unknown = sorted(set(opts) - {"max_mean_len", "use_new_filter"})
        if unknown:
            raise OptionError(
                f"epoch_wise_filter[{key!r}]: option(s) {unknown} not supported; RETURNN's "
                "EpochWiseFilter knows only 'max_mean_len' (LibriSpeechCorpus' 'subdirs' "
                "selects corpus parts: give that corpus as its own source instead)"
            )
        mean = opts.get("max_mean_len")
        ok = isinstance(mean, (int, float, np.integer, np.floating)) and not isinstance(mean, bool)
        if not ok or mean <= 0:  # type: ignore[operator]
            raise OptionError(
                f"epoch_wise_filter[{key!r}]['max_mean_len']: got {mean!r}, expected a number > 0"
            )
        out.append((first, last, float(mean)))  # type: ignore[arg-type]
    return tuple(sorted(out, key=lambda t: (t[0], -1 if t[1] is None else t[1], t[2])))


def validate_mix(mix: object) -> dict[str, Fraction] | None:
    """The ``mix`` option, checked: ``{corpus name: exact rate > 0}`` sorted by name (None: no
    mixing). A rate is *corpus epochs per epoch* (``plan.mix.mix_rate`` says how it is read)."""
    if mix is None:
        return None
    if not isinstance(mix, Mapping):
        raise OptionError(
            f"mix: got {mix!r}, expected a mapping of corpus name to rate, e.g. "
            "{'libri': 1.0, 'ted': 3.0}"
        )
    out: dict[str, Fraction] = {}
    for name, rate in mix.items():
        if not isinstance(name, str) or not name:
            raise OptionError(f"mix: got corpus name {name!r}, expected a non-empty string")
        out[name] = mix_rate(name, rate)
    return dict(sorted(out.items()))


def batch_cost_option(text: object) -> BatchCost:
    """The ``batch_cost`` option (``'frames'``/``'padded'``, ``'packed'``, ``'quadratic:Q'``) as
    the ``BatchCost`` the planners price batches with."""
    if not isinstance(text, str):
        raise OptionError(f"batch_cost: got {text!r}, {_BATCH_COST_EXPECTED}")
    if text.strip() in ("frames", "padded"):
        return BatchCost()
    if text.strip() == "packed":
        return BatchCost(packed=True)
    m = _QUADRATIC_RE.match(text.strip())
    if not m or int(m["q"]) < 1:
        raise OptionError(f"batch_cost: got {text!r}, {_BATCH_COST_EXPECTED}")
    return BatchCost(int(m["q"]))
