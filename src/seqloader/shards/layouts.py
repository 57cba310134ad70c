"""The three shard layouts: where a shard's listing is, what one entry says, which tar member holds
an entry's data.

- **Lhotse Shar**: ``cuts.NNNNNN.jsonl[.gz]`` (one cut per line) beside ``recording.NNNNNN.tar``
  and/or ``features.NNNNNN.tar``; a data member is ``CUT_ID.EXT`` followed by ``CUT_ID.json``
  (``.nodata`` / ``.nometa`` where a cut has no such field).
- **NeMo tarred audio**: ``audio_N.tar`` with one JSON-lines manifest per shard (or one manifest
  for all, each entry naming its ``shard_id``); an entry's ``audio_filepath`` is its member's name.
- **WebDataset**: ``KEY.flac`` (any audio extension) with ``KEY.json`` and/or ``KEY.txt`` inside
  the tar; the listing is the tar itself.

An entry is matched to its member by *key*: the cut id (Shar), the member name without extension
(NeMo, as NeMo matches them) or the WebDataset key (the name up to its first dot).
"""

from __future__ import annotations

import glob
import itertools
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


@dataclass(frozen=True)
class Shard:
    """One shard: its data tar and, except for WebDataset, its listing (path or URL)."""

    tar: str
    listing: str | None


@dataclass
class Layout:
    """A layout's name and shards, and which member kinds hold the data (``data_exts``)."""

    name: str
    shards: list[Shard]
    data_exts: tuple[str, ...]
    field: str = "recording"  # Shar: the tar field read ("recording" or "features")


def member_key(layout: str, name: str) -> tuple[str, str]:
    """(key, extension) of a member name in ``layout``."""
    base = name.rsplit("/", 1)[-1]
    if layout == "webdataset":
        key, _, ext = name.partition(".") if "/" not in name else _wds_split(name)
        return key, ext
    stem, dot, ext = base.rpartition(".")
    if not dot:
        return base, ""
    if layout == "shar":
        prefix = name[: len(name) - len(base)]
        return prefix + stem, ext
    return stem, ext


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
        if _SHARD_NUMBER.search(path) and (".jsonl" in path or path.endswith(".tar")):
            fields.setdefault(name, []).append(os.path.join(folder, path))
    return fields


def shar_entry(line: int, cut: dict, where: str, field_name: str) -> Entry:
    """An entry from one Shar cut (a ``MonoCut`` dict)."""
    cut_id = cut.get("id")
    if not isinstance(cut_id, str):
        raise DataError(
            f"{where} line {line}: expected a Lhotse cut with an 'id', got keys {sorted(cut)[:8]}"
        )
    duration = seconds(f"{where} line {line}", "duration", cut.get("duration"))
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
def expand_braces(pattern: str) -> list[str]:
    """NeMo's shard patterns: ``_OP_`` / ``_CL_`` stand for ``{`` / ``}``; ``{a..b}`` is a numeric
    range (zero padding kept), ``{x,y}`` a list; several braces expand as a product."""
    text = pattern.replace("_OP_", "{").replace("_CL_", "}")
    parts = re.split(r"(\{[^{}]*\})", text)
    choices: list[list[str]] = []
    for part in parts:
        if part.startswith("{") and part.endswith("}"):
            body = part[1:-1]
            m = re.fullmatch(r"(\d+)\.\.(\d+)", body)
            if m:
                a, b = m.group(1), m.group(2)
                width = len(a) if a.startswith("0") and len(a) > 1 else 0
                choices.append([str(i).zfill(width) for i in range(int(a), int(b) + 1)])
            else:
                choices.append(body.split(","))
        else:
            choices.append([part])
    return ["".join(c) for c in itertools.product(*choices)]


def _paths(given: object, what: str) -> list[str]:
    if isinstance(given, str | os.PathLike):
        items = [os.fspath(given)]
    elif isinstance(given, list | tuple):
        items = [os.fspath(p) for p in given]
    else:
        raise OptionError(f"ShardSource.nemo: {what}: got {type(given).__name__}, expected paths")
    out: list[str] = []
    for item in items:
        expanded = expand_braces(item)
        for p in expanded:
            if "://" not in p and any(c in p for c in "*?[") and not os.path.exists(p):
                out.extend(sorted(glob.glob(p)))
            else:
                out.append(p)
    if not out:
        raise OptionError(f"ShardSource.nemo: {what} {given!r} names no files")
    return out


def nemo_layout(manifest_filepaths: object, tarred_audio_filepaths: object) -> Layout:
    """Shards of NeMo's ``(manifest_filepaths, tarred_audio_filepaths)``: one manifest per tar,
    or a single manifest whose entries carry ``shard_id``."""
    manifests = _paths(manifest_filepaths, "manifest_filepaths")
    tars = _paths(tarred_audio_filepaths, "tarred_audio_filepaths")
    if len(manifests) == len(tars):
        return Layout("nemo", [Shard(t, m) for t, m in zip(tars, manifests)], AUDIO_EXTS)
    if len(manifests) == 1:
        return Layout("nemo", [Shard(t, manifests[0]) for t in tars], AUDIO_EXTS)
    raise OptionError(
        f"ShardSource.nemo: {len(manifests)} manifests for {len(tars)} tars; expected one "
        "manifest per tar (sharded manifests) or one manifest with shard_id in every entry"
    )


def nemo_entry(line: int, item: dict, where: str) -> Entry:
    """An entry of a NeMo tarred-audio manifest (``audio_filepath``, ``duration``, ``text``)."""
    name = item.get("audio_filepath")
    if not isinstance(name, str) or not name:
        raise DataError(f"{where} line {line}: missing 'audio_filepath' (the member's name)")
    duration = seconds(f"{where} line {line}", "duration", item.get("duration"))
    text = item.get("text", item.get("pred_text"))
    if text is not None and not isinstance(text, str):
        raise DataError(f"{where} line {line}: 'text' got {type(text).__name__}, expected str")
    shard_id = item.get("shard_id")
    key = member_key("nemo", name)[0]
    return Entry(
        key=key,
        tag=key,
        line=line,
        duration=duration or 0.0,
        text=text,
        shard_id=int(shard_id) if isinstance(shard_id, int) else None,
    )


def webdataset_layout(urls: object) -> Layout:
    """Shards of WebDataset tars (brace patterns ``{000..099}`` accepted)."""
    tars = _paths(urls, "urls")
    return Layout("webdataset", [Shard(t, None) for t in tars], AUDIO_EXTS)
