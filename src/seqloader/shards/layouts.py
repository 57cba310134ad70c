"""The three shard layouts: where a shard's listing is, what one entry says, which tar member holds
an entry's data.

- **Lhotse Shar**: ``cuts.NNNNNN.jsonl[.gz]`` (one cut per line) beside ``recording.NNNNNN.tar``
  and/or ``features.NNNNNN.tar``; a data member is ``CUT_ID.EXT`` followed by ``CUT_ID.json``
  (``.nodata`` / ``.nometa`` where a cut has no such field).
- **NeMo tarred audio**: ``audio_N.tar`` with one JSON-lines manifest per shard (or one manifest
  for all, each entry naming its ``shard_id``, the N of its tar's name); an entry's
  ``audio_filepath`` is its member's name, ``NAME-subN.EXT`` a further segment (``offset`` +
  ``duration``) of member ``NAME.EXT``. Paths expand as NeMo's ``expand_sharded_filepaths``
  expands them (``nemo_paths``), buckets as NeMo's nested lists.
- **WebDataset**: ``KEY.flac`` (any audio extension) with ``KEY.json`` and/or ``KEY.txt`` inside
  the tar; the listing is the tar itself.

An entry is matched to its member by *key*: the cut id (Shar), the member name without extension
(NeMo, as NeMo matches them) or the WebDataset key (the name up to its first dot).
"""

from __future__ import annotations

import itertools
import math
import os
import re
from dataclasses import dataclass

from seqloader.audio.manifest_lines import seconds
from seqloader.errors import DataError, OptionError

AUDIO_EXTS = ("flac", "wav", "ogg", "opus", "mp3", "sph", "aiff", "aif")
FEATURE_EXTS = ("llc", "npy")
_SHARD_NUMBER = re.compile(r"\.(\d+)\.[^/]*$")


@dataclass
class Entry:
    """What a listing says about one sequence (``None``: not given)."""

    key: str
    tag: str
    line: int
    duration: float
    rate: int | None = None
    samples: int | None = None
    text: str | None = None
    frames: int | None = None
    dim: int | None = None
    shard_id: int | None = None  # NeMo: the shard an entry of a single manifest belongs to
    member: str | None = None  # the key of the member holding its data (None: ``key``)
    offset: float | None = None  # NeMo: the entry is seconds [offset, offset + duration) of it


@dataclass(frozen=True)
class Shard:
    """One shard: its data tar and, except for WebDataset, its listing (path or URL)."""

    tar: str
    listing: str | None
    number: int | None = None  # NeMo: the shard id in the tar's name (audio_N.tar)


@dataclass
class Layout:
    """A layout's name and shards, and which member kinds hold the data (``data_exts``)."""

    name: str
    shards: list[Shard]
    data_exts: tuple[str, ...]
    field: str = "recording"  # Shar: the tar field read ("recording" or "features")


def member_key(layout: str, name: str) -> tuple[str, str]:
    """(key, extension) of a member name in ``layout``; the extension lower-cased, as WebDataset
    reads it (``A.WAV`` is audio, ``A.TXT`` its text)."""
    base = name.rsplit("/", 1)[-1]
    if layout == "webdataset":
        key, _, ext = name.partition(".") if "/" not in name else _wds_split(name)
        return key, ext.lower()
    stem, dot, ext = base.rpartition(".")
    if not dot:
        return base, ""
    if layout == "shar":
        prefix = name[: len(name) - len(base)]
        return prefix + stem, ext.lower()
    return stem, ext.lower()


def _wds_split(name: str) -> tuple[str, str, str]:
    folder, base = name.rsplit("/", 1)
    key, dot, ext = base.partition(".")
    return f"{folder}/{key}", dot, ext


# ---- Lhotse Shar ----
def shar_layout(in_dir_or_fields: object, field_name: str | None) -> Layout:
    """Shards of a Shar directory (``in_dir``) or of Lhotse's ``fields`` dict (``{"cuts": [...],
    "recording": [...], ...}``, the argument of ``CutSet.from_shar``)."""
    if isinstance(in_dir_or_fields, dict):
        fields = {k: [os.fspath(p) for p in v] for k, v in in_dir_or_fields.items()}
        where = "the fields given"
    elif isinstance(in_dir_or_fields, str | os.PathLike):
        folder = os.fspath(in_dir_or_fields)
        fields = _discover_shar(folder)
        where = folder
    else:
        raise OptionError(
            f"ShardSource.lhotse_shar: got {type(in_dir_or_fields).__name__}, expected a Shar "
            "directory or a dict of field -> shard paths (as CutSet.from_shar(fields=...))"
        )
    if "cuts" not in fields:
        raise OptionError(
            f"ShardSource.lhotse_shar: {where} has no 'cuts' shards (cuts.NNNNNN.jsonl.gz); "
            "write the corpus with lhotse's SharWriter or seqloader convert --to shar"
        )
    tar_fields = [k for k in fields if k != "cuts"]
    if field_name is None:
        field_name = "features" if "features" in tar_fields else "recording"
    if field_name not in fields:
        raise OptionError(
            f"ShardSource.lhotse_shar: {where} has no {field_name!r} shards; fields present: "
            f"{sorted(fields)}"
        )
    cuts, tars = fields["cuts"], fields[field_name]
    if len(cuts) != len(tars):
        raise DataError(
            f"ShardSource.lhotse_shar: {len(cuts)} cuts shards but {len(tars)} {field_name!r} "
            f"shards in {where}; every cuts shard needs its tar. Fix: restore the missing shards"
        )
    exts = FEATURE_EXTS if field_name == "features" else AUDIO_EXTS
    return Layout("shar", [Shard(t, c) for t, c in zip(tars, cuts)], exts, field_name)


def _discover_shar(folder: str) -> dict[str, list[str]]:
    if "://" in folder:
        raise OptionError(
            f"ShardSource.lhotse_shar: {folder!r} is a URL; remote Shar corpora are given as "
            "fields={'cuts': [urls], 'recording': [urls]} (a bucket cannot be listed reliably)"
        )
    if not os.path.isdir(folder):
        raise DataError(f"ShardSource.lhotse_shar: {folder!r} is not a directory")
    fields: dict[str, list[str]] = {}
    for path in sorted(os.listdir(folder)):
        if path.endswith((".idx", ".tmp")) or path.startswith("."):
            continue
        name = path.split(".", 1)[0]
        numbered = _SHARD_NUMBER.search(path) and (".jsonl" in path or path.endswith(".tar"))
        whole = path in (f"{name}.jsonl", f"{name}.jsonl.gz", f"{name}.tar")  # shard_size=None
        if numbered or whole:
            fields.setdefault(name, []).append(os.path.join(folder, path))
    return fields


def shar_entry(line: int, cut: dict, where: str, field_name: str) -> Entry:
    """An entry from one Shar cut (a ``MonoCut`` dict)."""
    cut_id = cut.get("id")
    if not isinstance(cut_id, str):
        raise DataError(
            f"{where} line {line}: expected a Lhotse cut with an 'id', got keys {sorted(cut)[:8]}"
        )
    duration = cut.get("duration")
    if type(duration) is not float or not 0.0 <= duration < math.inf:  # NaN fails both
        duration = seconds(f"{where} line {line}", "duration", duration)  # else: what it returns
    texts = [s.get("text") for s in cut.get("supervisions") or [] if s.get("text")]
    rec = cut.get("recording") or {}
    feats = cut.get("features") or {}
    return Entry(
        key=cut_id,
        tag=cut_id,
        line=line,
        duration=duration or 0.0,
        rate=int(rec["sampling_rate"]) if "sampling_rate" in rec else None,
        samples=int(rec["num_samples"]) if "num_samples" in rec else None,
        text=" ".join(texts) if texts else None,
        frames=int(feats["num_frames"]) if "num_frames" in feats else None,
        dim=int(feats["num_features"]) if "num_features" in feats else None,
    )


# ---- NeMo ----
def expand_braces(pattern: str, escape: bool = False) -> list[str]:
    """Bash-style brace expansion, as the ``braceexpand`` package does it (which NeMo and
    WebDataset call): ``{a,b}`` alternatives, ``{1..10}`` / ``{a..e}`` ranges with an optional
    step (``{0..10..2}``), descending too, zero padding kept (``{008..010}``), nesting; a group
    without a comma or range stays literal (``{x}``). ``escape``: a backslash quotes the next
    character (WebDataset; NeMo passes ``escape=False``).

    >>> expand_braces("audio_{08..10}.tar")
    ['audio_08.tar', 'audio_09.tar', 'audio_10.tar']
    >>> expand_braces("{a,b{1..2}}/x")
    ['a/x', 'b1/x', 'b2/x']
    """
    pieces: list[list[str]] = []
    literal, depth, start, i = "", 0, 0, 0
    while i < len(pattern):
        c = pattern[i]
        if escape and c == "\\":
            if depth == 0:
                literal += pattern[i + 1 : i + 2]
            i += 2
            continue
        if c == "{":
            if depth == 0:
                pieces.append([literal])
                literal, start = "", i
            depth += 1
        elif c == "}":
            if depth == 0:
                raise OptionError(f"unbalanced braces in {pattern!r}")
            depth -= 1
            if depth == 0:
                pieces.append(_brace_group(pattern[start + 1 : i], escape))
        elif depth == 0:
            literal += c
        i += 1
    if depth:
        raise OptionError(f"unbalanced braces in {pattern!r}")
    pieces.append([literal])
    return ["".join(p) for p in itertools.product(*pieces)]


_INT_RANGE = re.compile(r"(-?\d+)\.\.(-?\d+)(?:\.\.-?(\d+))?")
_CHAR_RANGE = re.compile(r"([A-Za-z])\.\.([A-Za-z])(?:\.\.-?(\d+))?")
_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"


def _brace_group(body: str, escape: bool) -> list[str]:
    """The expansions of one ``{body}``."""
    m = _INT_RANGE.fullmatch(body)
    if m:
        a, b, step = m.group(1), m.group(2), int(m.group(3) or 1) or 1
        padded = any(x.lstrip("-").startswith("0") and x.lstrip("-") != "0" for x in (a, b))
        width = max(len(a), len(b)) if padded else 0
        lo, hi = int(a), int(b)
        numbers = range(lo, hi + 1, step) if lo < hi else range(lo, hi - 1, -step)
        return [f"{n:0{width}d}" for n in numbers]
    m = _CHAR_RANGE.fullmatch(body)
    if m:
        step = int(m.group(3) or 1) or 1
        x, y = _LETTERS.index(m.group(1)), _LETTERS.index(m.group(2))
        return list(
            _LETTERS[x : y + 1 : step] if x < y else _LETTERS[x : (y - 1 if y else None) : -step]
        )
    parts = _split_top(body, ",", escape)
    if len(parts) == 1:  # no alternatives: the braces stay
        return ["{" + x + "}" for x in expand_braces(body, escape)]
    return [x for part in parts for x in expand_braces(part, escape)]


def _split_top(text: str, sep: str, escape: bool = False) -> list[str]:
    """``text`` split at the ``sep`` characters outside braces."""
    parts, depth, start, i = [], 0, 0, 0
    while i < len(text):
        c = text[i]
        if escape and c == "\\":
            i += 2
            continue
        depth += (c == "{") - (c == "}")
        if c == sep and depth == 0:
            parts.append(text[start:i])
            start = i + 1
        i += 1
    return [*parts, text[start:]]


_OPEN, _CLOSE = ("(", "[", "<", "_OP_"), (")", "]", ">", "_CL_")


def nemo_brackets(path: str) -> str:
    """NeMo's brace spellings made braces: ``(``, ``[``, ``<`` and ``_OP_`` open, ``)``, ``]``,
    ``>`` and ``_CL_`` close (as NeMo's ``expand_sharded_filepaths``, anywhere in the string)."""
    for o in _OPEN:
        path = path.replace(o, "{")
    for c in _CLOSE:
        path = path.replace(c, "}")
    return path


def nemo_paths(given: str) -> list[str]:
    """The files one NeMo path string names: brackets as braces, split at commas outside braces
    (NeMo's comma-separated lists), each part brace-expanded (``escape=False``, as NeMo)."""
    return [p for part in _split_top(nemo_brackets(given), ",") for p in expand_braces(part)]


def _nemo_group(given: object, what: str) -> list[str]:
    """One bucket's paths: a string expanded (``nemo_paths``); a list taken literally, as NeMo
    takes lists, except a one-element list, which NeMo unwraps to its string."""
    if isinstance(given, str | os.PathLike):
        return nemo_paths(os.fspath(given))
    if isinstance(given, list | tuple) and all(isinstance(p, str | os.PathLike) for p in given):
        if len(given) == 1:
            return nemo_paths(os.fspath(given[0]))
        return [os.fspath(p) for p in given]
    raise OptionError(
        f"ShardSource.nemo: {what}: got {given!r}, expected a path string (patterns and commas "
        "as NeMo: {0..9}, _OP_0..9_CL_, [0..9], (0..9), <0..9>) or a list of paths"
    )


def _nemo_buckets(given: object, what: str) -> list[object] | None:
    """NeMo's bucket lists: ``[[bucket 1 paths], [bucket 2 paths], ...]`` (a list of lists) or
    the same as one string ``"[[...],[...]]"``; None when ``given`` is one bucket."""
    if isinstance(given, list | tuple):
        nested = [isinstance(g, list | tuple) for g in given]
        if any(nested) and not all(nested):
            raise OptionError(
                f"ShardSource.nemo: {what} mixes lists and paths; give a list of paths, or a "
                "list of lists (one per bucket), as NeMo's bucketing"
            )
        return list(given) if given and all(nested) else None
    if isinstance(given, str):
        text = nemo_brackets(given)
        if text.startswith("{{") and text.endswith("}}") and _split_top(text, ",") == [text]:
            groups = _split_top(text[1:-1], ",")
            if all(g.startswith("{") and g.endswith("}") for g in groups):
                return [g[1:-1] for g in groups]
    return None


_NEMO_NUMBER = {
    "tar": re.compile(r"audio[^/]*_(\d+)[^/]*\.tar"),
    "manifest": re.compile(r"manifest[^/]*_(\d+)[^/]*\.json"),
}


def shard_number(path: str, kind: str) -> int | None:
    """The shard id in a NeMo tar's or manifest's name: NeMo's own pattern (``audio_N.tar``,
    ``manifest_N.json``, with anything between), else the last number in the file name."""
    m = _NEMO_NUMBER[kind].search(path)
    if m:
        return int(m.group(1))
    digits = re.findall(r"\d+", path.rsplit("/", 1)[-1])
    return int(digits[-1]) if digits else None


def nemo_layout(manifest_filepaths: object, tarred_audio_filepaths: object) -> Layout:
    """Shards of NeMo's ``(manifest_filepaths, tarred_audio_filepaths)``: one manifest per tar
    (paired by the shard id in their names), or one manifest for several tars whose entries carry
    ``shard_id``; buckets as NeMo's nested lists, one after another."""
    mb = _nemo_buckets(manifest_filepaths, "manifest_filepaths")
    tb = _nemo_buckets(tarred_audio_filepaths, "tarred_audio_filepaths")
    if (mb is None) != (tb is None) or (mb is not None and tb is not None and len(mb) != len(tb)):
        raise OptionError(
            f"ShardSource.nemo: manifest_filepaths has {len(mb) if mb else 1} bucket(s), "
            f"tarred_audio_filepaths {len(tb) if tb else 1}; give both as lists of lists, one "
            "inner list per bucket (as NeMo's bucketing)"
        )
    pairs = list(zip(mb, tb)) if mb is not None and tb is not None else None
    groups = pairs or [(manifest_filepaths, tarred_audio_filepaths)]
    shards: list[Shard] = []
    for m, t in groups:
        shards += _pair(
            _nemo_group(m, "manifest_filepaths"), _nemo_group(t, "tarred_audio_filepaths")
        )
    return Layout("nemo", shards, AUDIO_EXTS)


def _pair(manifests: list[str], tars: list[str]) -> list[Shard]:
    """Each tar with its manifest (one bucket)."""
    numbers = [shard_number(t, "tar") for t in tars]
    if len(manifests) == 1:
        return [Shard(t, manifests[0], n) for t, n in zip(tars, numbers)]
    ids = [shard_number(m, "manifest") for m in manifests]
    known = [n for n in numbers if n is not None]
    known_ids = [n for n in ids if n is not None]
    if len(known) == len(numbers) and len(known_ids) == len(ids):
        if len(set(known_ids)) == len(ids) and sorted(known_ids) == sorted(known):
            by_id = dict(zip(known_ids, manifests))
            return [Shard(t, by_id[n], n) for t, n in zip(tars, known)]
        raise OptionError(
            f"ShardSource.nemo: the manifests' shard ids {sorted(known_ids)} (from their names, "
            f"e.g. {manifests[0]!r}) are not the tars' {sorted(known)} (e.g. {tars[0]!r}); give "
            "one manifest per tar (manifest_N.json with audio_N.tar), or one manifest for all"
        )
    if len(manifests) == len(tars):  # names without shard ids: paired in the order given
        return [Shard(t, m, n) for t, m, n in zip(tars, manifests, numbers)]
    raise OptionError(
        f"ShardSource.nemo: {len(manifests)} manifests for {len(tars)} tars; expected one "
        "manifest per tar (sharded manifests) or one manifest with shard_id in every entry"
    )


_SUB = re.compile(r"^(?P<stem>.+)-sub\d+(?P<ext>\.\w+)?$")


def nemo_entry(line: int, item: dict, where: str) -> Entry:
    """An entry of a NeMo tarred-audio manifest (``audio_filepath``, ``duration``, ``text``,
    optional ``offset`` and ``shard_id``). NeMo's converter names the second, third, ... segment of
    one recording ``NAME-sub1.EXT``, ``NAME-sub2.EXT`` (its member stays ``NAME.EXT``), each with
    its ``offset``; the entry is ``audio[offset : offset + duration]`` of the member, as NeMo
    reads it. Members are matched by stem. Tags are the names' stems, and for a segment
    (``offset`` given) NeMo's segment id ``STEM-OOOOOO-DDDDDD`` (offset and duration in
    centiseconds): a recording split over shards is ``NAME.EXT`` in each, and ``-subN`` numbers
    depend on how the converter sorted the shard."""
    at = f"{where} line {line}"
    name = item.get("audio_filepath")
    if not isinstance(name, str) or not name:
        raise DataError(f"{at}: missing 'audio_filepath' (the member's name)")
    duration = seconds(at, "duration", item.get("duration"))
    offset = seconds(at, "offset", item.get("offset"), required=False)
    text = item.get("text", item.get("pred_text"))
    if text is not None and not isinstance(text, str):
        raise DataError(f"{at}: 'text' got {type(text).__name__}, expected str")
    shard_id = item.get("shard_id")
    sub = _SUB.match(name)
    member = member_key("nemo", sub.group("stem") + (sub.group("ext") or "") if sub else name)[0]
    key = member_key("nemo", name)[0]
    if offset is not None:  # NeMo's segment id: stable however the converter numbered -subN
        key = f"{member}-{round(offset * 100):06d}-{round((duration or 0.0) * 100):06d}"
    return Entry(
        key=key,
        tag=key,
        line=line,
        duration=duration or 0.0,
        text=text,
        shard_id=int(shard_id) if isinstance(shard_id, int) else None,
        member=member,
        offset=offset,
    )


def webdataset_layout(urls: object) -> Layout:
    """Shards of WebDataset tars, as WebDataset expands ``urls``: a string split at ``::``,
    each part brace-expanded (``{000..099}``, backslash escapes); a list taken as it is."""
    if isinstance(urls, str | os.PathLike):
        tars = [t for u in os.fspath(urls).split("::") for t in expand_braces(u, escape=True)]
    elif isinstance(urls, list | tuple) and all(isinstance(u, str | os.PathLike) for u in urls):
        tars = [os.fspath(u) for u in urls]
    else:
        raise OptionError(f"ShardSource.webdataset: urls {urls!r}, expected a string or paths")
    return Layout("webdataset", [Shard(t, None) for t in tars], AUDIO_EXTS)
