"""Tar archives as random-access member stores: an index of member headers, and one ranged read
per member.

A shard's index comes from its headers only: one 512-byte ``pread`` per member header (plus
long-name / pax blocks), seeking past the data (``tar_headers``; ``tarfile``, which seeks as well
but costs 5-10x the Python per member, for unusual headers), so indexing costs one block per
member, not the shard. Lhotse's own index (``NAME.tar.idx``: little-endian uint64 offsets of each
data/metadata pair's first header plus the file size; written by ``lhotse.indexing``) is used
where present: then only the data members' headers are read.

Reading member ``m`` is one ``pread`` of its 512-byte header block and its data; the header is
checked (name, size) so a shard rewritten since its index was built is an error naming the member,
never wrong data. ``tarfile`` stops quietly where a tar was cut between two members (or inside a
header); the scan looks for the end-of-archive block there, so such a cut is never silent.
"""

from __future__ import annotations

import os
import tarfile
from dataclasses import dataclass

import numpy as np

from seqloader.errors import DataError
from seqloader.sources.tar_headers import Unusual, header_at, read_headers

BLOCK = 512


@dataclass(frozen=True)
class TarMembers:
    """The regular-file members of one tar, in archive order: names, header offsets (of the
    512-byte block right before the data), data offsets and sizes (int64 ``[m]``)."""

    names: list[str]
    header: np.ndarray
    offset: np.ndarray
    size: np.ndarray
    ended: bool = True  # False: no end-of-archive block after the last member (cut between members)


class TruncatedTar(DataError):
    """A tar whose last member ends past the end of the file (cut off in a copy or upload)."""


def scan_tar(path: str, label: str | None = None) -> TarMembers:
    """The members of the tar at ``path`` from its headers (see the module docstring). ``label``
    names the shard in errors (e.g. its URL); a truncated or unreadable tar is a ``DataError``
    naming it, the last member read and the fix."""
    label = label or path
    size = os.path.getsize(path)
    fast = read_headers(path)  # headers by seeking; None: a header for tarfile
    if fast is not None:
        members = _members(*fast)
        _check_inside(members, size, label)
        return members
    names: list[str] = []
    offs: list[int] = []
    sizes: list[int] = []
    try:
        with tarfile.open(path, "r:") as tar:
            for info in tar:
                if info.isfile():
                    names.append(info.name)
                    offs.append(info.offset_data)
                    sizes.append(info.size)
            end = tar.offset  # where tarfile looked for the next header
    except tarfile.ReadError as e:
        if names and offs[-1] + sizes[-1] > size:  # tarfile fails moving past the cut member
            last = f"inside member {names[-1]!r} (it is cut off)"
        elif names:
            last = f"after member {names[-1]!r} (the next header is cut off)"
        else:
            last = "at its start"
        raise TruncatedTar(
            f"tar shard {label!r} is damaged or truncated {last} ({e}). Fix: copy or upload the "
            "shard again (compare its size with the original), or drop it from the shard list."
        ) from e
    with open(path, "rb") as fh:  # tarfile ends quietly at a cut between members: no zero block
        block = os.pread(fh.fileno(), BLOCK, end)
    zeros = block.count(0) == len(block)
    if len(block) < BLOCK and not zeros and names:  # tarfile also passes over a cut header
        raise TruncatedTar(
            f"tar shard {label!r} is truncated after member {names[-1]!r} (the next header is cut "
            "off). Fix: copy or upload the shard again (compare its size with the original), or "
            "drop it from the shard list."
        )
    ended = bool(block) and zeros  # (a cut inside the end-of-archive blocks loses nothing)
    members = _members(names, offs, sizes, ended)
    _check_inside(members, size, label)
    return members


def lhotse_index(path: str) -> np.ndarray | None:
    """Lhotse's index of the Shar tar at ``path`` (``path + ".idx"``: uint64 offsets of each
    data/metadata pair's first header, then the file size), when it is there and describes this
    file (its last entry is the file's size), else None."""
    idx = path + ".idx"
    try:
        if os.path.getsize(idx) < 8 or os.path.getsize(idx) % 8:
            return None
        offsets = np.fromfile(idx, dtype="<u8").astype(np.int64)
    except OSError:
        return None
    if int(offsets[-1]) < os.path.getsize(path) - 2 * 10240 or int(offsets[-1]) > os.path.getsize(
        path
    ):
        return None  # written for another version of the tar
    return offsets


def scan_pairs(path: str, pair_headers: np.ndarray, label: str | None = None) -> TarMembers:
    """The data members of a Lhotse Shar tar from Lhotse's index: the header at each pair's
    offset (``pair_headers[:-1]``), read one block (plus long-name blocks) each. Metadata members
    are not read."""
    label = label or path
    size = os.path.getsize(path)
    names: list[str] = []
    offs: list[int] = []
    sizes: list[int] = []
    with open(path, "rb") as fh:
        tar = tarfile.TarFile(fileobj=fh, mode="r")
        for start in pair_headers[:-1].tolist():
            try:  # by seeking; tarfile where the header is unusual
                found = header_at(fh.fileno(), int(start), size)
            except Unusual:
                found = None
            if found is not None:
                names.append(found[0])
                offs.append(found[2])
                sizes.append(found[3])
                continue
            fh.seek(int(start))
            try:
                info = tarfile.TarInfo.fromtarfile(tar)
            except (tarfile.HeaderError, EOFError) as e:
                raise DataError(
                    f"tar shard {label!r}: its Lhotse index ({path}.idx) points at byte {start}, "
                    f"where no tar header is ({e}). Fix: delete the stale {path}.idx (it is "
                    "rebuilt from the headers) or rebuild it with lhotse.indexing.create_tar_index"
                ) from e
            names.append(info.name)
            offs.append(info.offset_data)
            sizes.append(info.size)
    members = _members(names, offs, sizes)
    _check_inside(members, size, label)
    return members


def _members(names: list[str], offs: list[int], sizes: list[int], ended: bool = True) -> TarMembers:
    offset = np.asarray(offs, dtype=np.int64)
    return TarMembers(names, offset - BLOCK, offset, np.asarray(sizes, dtype=np.int64), ended)


def _check_inside(members: TarMembers, size: int, label: str) -> None:
    ends = members.offset + members.size
    if len(ends) and int(ends.max()) > size:
        k = int(np.flatnonzero(ends > size)[0])
        raise TruncatedTar(
            f"tar shard {label!r} is truncated: member {members.names[k]!r} needs bytes up to "
            f"{int(ends[k])}, the file has {size}. Fix: copy or upload the shard again, or drop "
            "it from the shard list."
        )


def read_member(fd: int, header: int, size: int, name: str, label: str) -> bytes:
    """Member ``name``'s data: one ``pread`` of its header block and data, the header checked
    against the index (name where it fits the header, and size)."""
    return bytes(read_member_view(fd, header, size, name, label))


def read_member_view(fd: int, header: int, size: int, name: str, label: str) -> memoryview:
    """``read_member`` without copying the data out of the block read (a view of it): for a
    decoder that takes any buffer (a member of 50 KB is copied in ~1-5 µs, most of it cache
    misses, per utterance)."""
    blob = os.pread(fd, BLOCK + size, header)
    if len(blob) < BLOCK + size:
        raise DataError(
            f"tar shard {label!r}: member {name!r} is cut off (read {len(blob)} of "
            f"{BLOCK + size} bytes at {header}); the shard changed or was truncated since its "
            "index was built. Fix: restore the shard, then open the source again (the index is "
            "rebuilt)."
        )
    stored = blob[:100].split(b"\0", 1)[0].decode("utf-8", "surrogateescape")
    try:
        stored_size = int(blob[124:136].split(b"\0", 1)[0].strip() or b"0", 8)
    except ValueError:
        stored_size = -1
    name_ok = stored == name or len(name.encode()) >= 100 or stored.startswith("././@")
    if not name_ok or stored_size != size:
        raise DataError(
            f"tar shard {label!r}: at byte {header} the index expects member {name!r} of {size} "
            f"bytes, the shard holds {stored!r} of {stored_size}; the shard changed since its "
            "index was built. Fix: open the source again (the index is rebuilt), and do not "
            "rewrite shards while training reads them."
        )
    return memoryview(blob)[BLOCK:]
