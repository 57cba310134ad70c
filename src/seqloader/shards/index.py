"""The shard index: every sequence's metadata and member position in one ``ColumnStore``.

Built once per corpus and node from the listings (lengths, texts, ids: never decoding audio) and
the tars' headers (member offsets and sizes), keyed by the identity of every file read (size and
``mtime_ns``, or size and ETag for URLs). Columns, one row per sequence in shard order:

- ``tags``, ``member`` (strings: the sequence's tag and its data member's name)
- ``duration`` (float64 s), ``rate`` (int32 Hz, 0: not given), ``samples`` (int64, -1: not given),
  ``frames`` / ``dim`` (int32 feature frames and features per frame, -1: not given)
- ``text`` (strings; ``meta["texts"]`` says whether every entry has one), ``line`` (int64, the
  listing line, 0 for WebDataset)
- ``want`` (strings: the key of the member an entry reads; NeMo's ``-subN`` entries share their
  recording's), ``offset`` (float64 s: NeMo's segment start in its member, -1: the whole member)
- ``header`` / ``size`` (int64: the member's header block offset and data size; -1: no member,
  -2: not indexed yet, for a remote shard indexed when its copy arrives)
- ``bounds`` (int64 ``[F + 1]``: shard f holds rows ``[bounds[f], bounds[f + 1])``)

Rates are the audio's own: Lhotse's cuts carry them, and NeMo and WebDataset members' headers are
read (their first 4 KiB, more where that does not hold it); a listing's rate is never trusted. Problems (an entry without
member, a member without entry, a key twice, a tar cut off between members, NeMo entries of a
shard whose tar is not given) raise a ``DataError``
naming the shard, the member and the fix, or under ``on_error="skip"`` are counted in
``meta["problems"]`` (with an example each) and reported by the source; an entry without its member
stays in the plan and is skipped when read, counted in the epoch report.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from seqloader.audio.manifest import import_soundfile
from seqloader.errors import DataError, OptionError
from seqloader.shards.layouts import (
    AUDIO_EXTS,
    Entry,
    Layout,
    member_key,
    nemo_entry,
    shar_entry,
)
from seqloader.shards.listing import json_lines
from seqloader.sources.columns import Column, StringColumn
from seqloader.sources.tar_index import TarMembers, lhotse_index, read_member, scan_pairs, scan_tar

FIXES = {
    "entry without member": "restore the member in the tar, or remove the entry from the listing",
    "member without entry": "add an entry for it to the listing, or remove it from the tar",
    "duplicate key": "give every sequence a unique id (cut id / audio_filepath / key)",
    "duplicate member": "re-create the tar with each member once",
    "tar cut off between members": "copy or upload the shard again (compare its size with the "
    "original); its end-of-archive blocks are missing, so members after the cut are lost",
    "entry of a shard not given": "give every tar the manifest's shard_ids name (audio_N.tar for "
    "shard_id N), or one manifest per tar",
}


class Problems:
    """What the index found wrong, counted per kind, with the first example of each; raises at
    the first one unless ``skip``."""

    def __init__(self, skip: bool) -> None:
        self.skip = skip
        self.counts: dict[str, int] = {}
        self.examples: dict[str, str] = {}

    def add(self, kind: str, where: str) -> None:
        if not self.skip:
            raise DataError(
                f"{where}: {kind}. Fix: {FIXES[kind]}; or open the source with on_error='skip' "
                "to leave such sequences out (counted and reported)."
            )
        self.left_out(kind, where)

    def left_out(self, kind: str, where: str) -> None:
        """Count what is left out by the format's own convention (never an error)."""
        self.counts[kind] = self.counts.get(kind, 0) + 1
        self.examples.setdefault(kind, where)


SKIPME = "entry marked _skipme (NeMo's reader leaves it out)"


def listing_entries(
    layout: Layout,
    shard: int,
    data: bytes | None,
    label: str,
    problems: Problems,
    skipped: list[Entry],
) -> list[Entry]:
    """The entries of shard ``shard``'s listing (Shar cuts or NeMo manifest). NeMo entries with
    a true ``_skipme`` are left out, as NeMo's reader leaves them out, and counted; they go to
    ``skipped`` (their shard's member is no "member without entry")."""
    path = layout.shards[shard].listing
    assert path is not None
    out: list[Entry] = []
    for line, item in json_lines(path, label, data):
        if layout.name == "shar":
            out.append(shar_entry(line, item, label, layout.field))
            continue
        entry = nemo_entry(line, item, label)
        if item.get("_skipme"):
            problems.left_out(SKIPME, f"{label} line {line} (key {entry.key!r})")
            skipped.append(entry)
        else:
            out.append(entry)
    return out


def match(
    layout: Layout,
    keys: list[str],
    lines: list[int],
    members: TarMembers,
    label: str,
    listing: str,
    problems: Problems,
    wants: list[str] | None = None,
    skipped: set[str] | frozenset[str] = frozenset(),
) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Each entry's data member (entry i has key ``keys[i]``, listing line ``lines[i]`` and wants
    the member of key ``wants[i]``, default its own key; NeMo's ``-subN`` entries share one):
    (names, header offsets, sizes), -1 where it has none. Members of ``skipped`` keys belong to
    entries left out by the format's convention (NeMo's ``_skipme``)."""
    check_ended(members, label, problems)
    wants = keys if wants is None else wants
    by_key: dict[str, int] = {}
    absent: set[str] = set()
    for m, name in enumerate(members.names):
        key, ext = member_key(layout.name, name)
        if ext == "nodata":  # Shar: this cut has no such field
            absent.add(key)
            continue
        if ext not in layout.data_exts:
            continue
        if key in by_key:
            problems.add("duplicate member", f"tar shard {label!r} member {name!r}")
            continue
        by_key[key] = m
    n = len(keys)
    names = [""] * n
    header = np.full(n, -1, dtype=np.int64)
    size = np.full(n, -1, dtype=np.int64)
    seen: set[str] = set()
    used: set[str] = set()
    for i, key in enumerate(keys):
        at = f"{listing} line {lines[i]}, " if lines[i] else ""
        want = wants[i]
        of = f", its member {want!r} + any audio extension" if want != key else ""
        where = f"tar shard {label!r} ({at}key {key!r}{of})"
        if key in seen:
            problems.add("duplicate key", where)
            continue
        seen.add(key)
        found = by_key.get(want)
        if found is None:
            problems.add("entry without member", where + (" (.nodata)" if want in absent else ""))
            continue
        used.add(want)
        names[i] = members.names[found]
        header[i] = members.header[found]
        size[i] = members.size[found]
    for key, m in by_key.items():
        if key not in used and key not in skipped:
            problems.add("member without entry", f"tar shard {label!r} member {members.names[m]!r}")
    return names, header, size


def check_ended(members: TarMembers, label: str, problems: Problems) -> None:
    """A tar without its end-of-archive blocks was cut off between two members: members after
    the cut are lost, which no listing can show for WebDataset."""
    if not members.ended:
        last = f"after member {members.names[-1]!r}" if members.names else "at its start"
        problems.add("tar cut off between members", f"tar shard {label!r} ends {last}")


def index_members(layout: Layout, local_tar: str, label: str) -> TarMembers:
    """A tar's members: from Lhotse's own index where a Shar tar has a valid one, else from its
    headers."""
    if layout.name == "shar":
        pairs = lhotse_index(local_tar)
        if pairs is not None:
            return scan_pairs(local_tar, pairs, label)
    return scan_tar(local_tar, label)


def webdataset_entries(
    members: TarMembers, local_tar: str, label: str, problems: Problems
) -> list[Entry]:
    """Entries of a WebDataset tar, from its ``KEY.json`` (``duration``, ``text``) and ``KEY.txt``
    members (small reads). The rate is always the audio's own (its header), never a JSON field;
    a key without a duration gets it from the whole audio member's header (soundfile's ``info``,
    no decoding)."""
    groups: dict[str, dict[str, int]] = {}
    order: list[str] = []
    for m, name in enumerate(members.names):
        key, ext = member_key("webdataset", name)
        if key not in groups:
            groups[key] = {}
            order.append(key)
        if ext in groups[key]:
            problems.add("duplicate member", f"tar shard {label!r} member {name!r}")
            continue
        groups[key][ext] = m
    out: list[Entry] = []
    with open(local_tar, "rb") as fh:
        fd = fh.fileno()

        def read(m: int) -> bytes:
            return read_member(
                fd, int(members.header[m]), int(members.size[m]), members.names[m], label
            )

        for key in order:
            exts = groups[key]
            info: dict[str, Any] = {}
            if "json" in exts:
                try:
                    info = json.loads(read(exts["json"]))
                except ValueError as e:
                    raise DataError(
                        f"tar shard {label!r} member {members.names[exts['json']]}: not valid "
                        f"JSON ({e}). Fix: re-create the member"
                    ) from e
                if not isinstance(info, dict):
                    info = {}
            text = info.get("text")
            if "txt" in exts:
                text = read(exts["txt"]).decode("utf-8", "surrogateescape").strip()
            audio = next((x for x in exts if x in AUDIO_EXTS), None)
            duration, rate, samples = info.get("duration"), None, None
            if audio is not None:
                m = exts[audio]
                whole = not isinstance(duration, int | float)
                rate, frames = audio_header(fd, members, m, label, whole)
                if whole:
                    samples = frames
                    duration = frames / rate
            out.append(
                Entry(
                    key=key,
                    tag=key,
                    line=0,
                    duration=float(duration) if isinstance(duration, int | float) else 0.0,
                    rate=rate,
                    samples=samples,
                    text=text if isinstance(text, str) else None,
                )
            )
    return out


HEADER_BYTES = (1 << 12, 1 << 16)  # a WAV / FLAC header's rate; Ogg Opus may need more


def audio_header(fd: int, members: TarMembers, m: int, label: str, whole: bool) -> tuple[int, int]:
    """(rate, frames) of audio member ``m`` from its header (soundfile's ``info``): its first
    ``HEADER_BYTES`` give the rate (more when they do not); ``whole`` reads all of it, for the
    frames too (a prefix's frame count is not the member's)."""
    sf = import_soundfile()
    size, name = int(members.size[m]), members.names[m]
    for n in [size] if whole else [*(b for b in HEADER_BYTES if b < size), size]:
        blob = os.pread(fd, n, int(members.offset[m]))
        rate = None if whole else header_rate(blob)
        if rate:
            return rate, -1
        try:
            meta = sf.info(io.BytesIO(blob))
            return int(meta.samplerate), int(meta.frames)
        except Exception as e:
            if n == size:
                raise DataError(
                    f"tar shard {label!r} member {name!r}: cannot read its audio header "
                    f"({type(e).__name__}: {e}). Fix: re-create the member"
                ) from e
    raise AssertionError("unreachable")


def header_rate(head: bytes) -> int | None:
    """The sample rate in a FLAC or WAV header (the first bytes of the file), read where the
    format puts it: FLAC's STREAMINFO (always the first metadata block; 20 bits at byte 18),
    WAV's ``fmt `` chunk (uint32 at byte 4 of its body). None for anything else (soundfile's
    ``info`` reads it then, at 30x the cost)."""
    if head[:4] == b"fLaC" and len(head) >= 21 and head[4] & 0x7F == 0:
        rate = (head[18] << 12) | (head[19] << 4) | (head[20] >> 4)
        return rate or None
    if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
        at = 12
        while at + 8 <= len(head):
            size = int.from_bytes(head[at + 4 : at + 8], "little")
            if head[at : at + 4] == b"fmt ":
                body = head[at + 8 : at + 8 + size]
                rate = int.from_bytes(body[4:8], "little") if len(body) >= 8 else 0
                return rate or None
            at += 8 + size + (size & 1)
    return None


def member_rates(
    local_tar: str, members: TarMembers, header: np.ndarray, label: str, problems: Problems
) -> np.ndarray:
    """The audio rate of each entry's member (``header``: the member each entry has, -1 none),
    from the members' headers: never assumed from a listing. 0 where a header cannot be read
    under ``on_error="skip"`` (that sequence fails, counted, when read)."""
    at = {int(h): i for i, h in enumerate(members.header.tolist())}
    rates = np.zeros(len(header), dtype=np.int64)
    known: dict[int, int] = {}
    with open(local_tar, "rb") as fh:
        for i, h in enumerate(header.tolist()):
            if h < 0:
                continue
            if h not in known:
                try:
                    known[h] = audio_header(fh.fileno(), members, at[h], label, False)[0]
                except DataError:
                    if not problems.skip:
                        raise
                    known[h] = 0
            rates[i] = known[h]
    return rates


class Collector:
    """Gathers entries and member positions shard by shard into the index's columns."""

    def __init__(self) -> None:
        self.entries: list[Entry] = []
        self.names: list[str] = []
        self.header: list[np.ndarray] = []
        self.size: list[np.ndarray] = []
        self.bounds = [0]

    def add(
        self, entries: list[Entry], names: list[str], header: np.ndarray, size: np.ndarray
    ) -> None:
        self.entries += entries
        self.names += names
        self.header.append(header)
        self.size.append(size)
        self.bounds.append(self.bounds[-1] + len(entries))

    def columns(self) -> dict[str, Column]:
        es = self.entries

        def ints(values: Iterable[int | None], dtype: type, missing: int) -> np.ndarray:
            return np.fromiter(
                (missing if v is None else v for v in values), dtype=dtype, count=len(es)
            )

        texts = [e.text for e in es]
        return {
            "tags": StringColumn.from_strings(e.tag for e in es),
            "member": StringColumn.from_strings(self.names),
            "duration": np.fromiter((e.duration for e in es), dtype=np.float64, count=len(es)),
            "rate": ints((e.rate for e in es), np.int32, 0),
            "samples": ints((e.samples for e in es), np.int64, -1),
            "frames": ints((e.frames for e in es), np.int32, -1),
            "dim": ints((e.dim for e in es), np.int32, -1),
            "text": StringColumn.from_strings(t or "" for t in texts),
            "line": ints((e.line for e in es), np.int64, 0),
            "want": StringColumn.from_strings(e.key if e.member is None else e.member for e in es),
            "offset": np.fromiter(
                (-1.0 if e.offset is None else e.offset for e in es),
                dtype=np.float64,
                count=len(es),
            ),
            "header": _cat(self.header),
            "size": _cat(self.size),
            "bounds": np.asarray(self.bounds, dtype=np.int64),
        }

    def all_texts(self) -> bool:
        return bool(self.entries) and all(e.text is not None for e in self.entries)


def _cat(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def split_by_shard_id(
    entries: list[Entry], numbers: list[int | None], label: str, tars: list[str], problems: Problems
) -> list[list[Entry]]:
    """NeMo's manifest for several tars: its entries per tar, matched by ``shard_id`` to the shard
    id in each tar's name (``numbers``; ``audio_12.tar`` holds shard 12, wherever it is in the
    list). Entries of shards whose tar is not given are counted (``on_error="skip"``) or raise."""
    slot: dict[int, int] = {}
    for f, (n, tar) in enumerate(zip(numbers, tars)):
        if n is None or n in slot:
            why = "has no shard id in its name" if n is None else f"repeats shard id {n}"
            raise OptionError(
                f"ShardSource.nemo: tar {tar!r} {why}; the manifest {label} serves several tars, "
                "whose entries' shard_id name their tar by the number in its name (audio_N.tar)"
            )
        slot[n] = f
    out: list[list[Entry]] = [[] for _ in numbers]
    for e in entries:
        if e.shard_id is None:
            raise DataError(
                f"{label} line {e.line}: no shard_id; one manifest for {len(numbers)} tars needs "
                f"shard_id in every entry, one of {sorted(slot)} (or give one manifest per tar)"
            )
        f = slot.get(e.shard_id, -1)
        if f < 0:
            problems.add(
                "entry of a shard not given",
                f"{label} line {e.line} (key {e.key!r}, shard_id {e.shard_id}; the tars given "
                f"hold shards {sorted(slot)[:8]}{'...' if len(slot) > 8 else ''})",
            )
            continue
        out[f].append(e)
    return out


ReadListing = Callable[[int], tuple[bytes | None, str]]
