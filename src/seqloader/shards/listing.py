"""Shard listings read line by line (Lhotse Shar cuts, NeMo manifests), every line checked by the
manifest helpers every reader shares (``seqloader.audio.manifest_lines``: UTF-8, JSON objects
without NaN/Infinity), ``.gz`` decompressed on the fly.

Why two readers: a first open parses every listing line of the corpus, about half of its CPU.
``json_lines`` first reads a listing in 1 MiB pieces, each decoded once, its lines parsed in
groups of about 16 KiB, each group as one JSON array (``_fast_pieces``); that skips the per-line
``readline``, UTF-8 decode, decoder call and generator hops of the careful reader
(``_checked_lines``), and makes each group's keys once. A
listing the fast reader does not accept exactly as the careful one would (bad UTF-8, a BOM, not
JSON, NaN, a line that is not one object, a read error) makes it give up, and the careful reader
reads the listing again and raises its error naming the file, the line and the fix: both accept
the same listings, with the same entries."""

from __future__ import annotations

import gzip
import io
import itertools
import os
from collections.abc import Generator, Iterator
from typing import BinaryIO

from seqloader.audio.manifest_lines import _DECODER, json_entry, text_lines
from seqloader.errors import DataError

PIECE = 1 << 20  # bytes read at a time by the fast reader (a listing's bytes are never held whole)
GROUP = 1 << 14  # characters of lines parsed by one decoder call (see ``_fast_pieces``)


class _GiveUp(Exception):
    """A listing the fast reader leaves to the careful one."""


def _open(path: str, data: bytes | None) -> tuple[BinaryIO, BinaryIO]:
    raw: BinaryIO = open(path, "rb") if data is None else io.BytesIO(data)  # noqa: SIM115
    stream: BinaryIO = gzip.GzipFile(fileobj=raw) if path.endswith(".gz") else raw  # type: ignore[assignment]
    return raw, stream


def json_lines(
    path: str, label: str | None = None, data: bytes | None = None
) -> Iterator[tuple[int, dict]]:
    """(line number from 1, entry) of every non-blank line of the JSON-lines file ``path`` (or of
    its bytes ``data``, a remote listing); a bad line is a ``DataError`` naming ``label`` (default
    ``path``), the line and the fix."""
    done = 0  # entries handed on by the fast reader
    pieces = _fast_pieces(path, data)
    try:
        for piece in pieces:  # a piece at a time: never every entry of a long manifest at once
            yield from piece
            done += len(piece)
        return
    except _GiveUp:
        pass
    finally:
        pieces.close()
    # the careful reader judges the rest (and names the bad line): the entries it reads again
    # up to there are the ones already handed on (both read them alike), not handed on twice
    yield from itertools.islice(_checked_lines(path, label or path, data), done, None)


def _fast_lines(path: str, data: bytes | None) -> list[tuple[int, dict]]:
    """Every line's entry, or ``_GiveUp`` where the careful reader must judge the listing."""
    return [entry for piece in _fast_pieces(path, data) for entry in piece]


def _fast_pieces(path: str, data: bytes | None) -> Generator[list[tuple[int, dict]], None, None]:
    """Each piece's entries, or ``_GiveUp`` where the careful reader must judge the rest.

    A piece is decoded once and its lines are parsed in groups of about ``GROUP`` characters, each
    group as one JSON array, ``[line, SEP, line, SEP, ..., line]``: one call, and the objects'
    keys are made once per group instead of once per line (the decoder's memo). Groups, not the
    whole 1 MiB piece: a piece's thousands of fresh dicts at once cost more than they save (cold
    in the cache by the time they are used, and the garbage collector's passes over them); a
    Shar listing of 2,000 cuts was read slower than line by line that way. ``SEP`` is a string
    drawn at random for each group (``os.urandom``): the array holds every line as its own
    object exactly when it
    alternates object, ``SEP``, object, ... A line holding two values, or one object spread over
    two lines, moves a separator into or out of an object; only a listing that knows the random
    ``SEP`` could put one back (then it is read by the careful reader too). A line split over two
    groups leaves each of them not JSON."""
    decode = _DECODER.decode
    number = 0

    def parse(numbers: list[int], lines: list[str]) -> list[tuple[int, dict]]:
        sep = os.urandom(16).hex()
        got = decode("[" + f',"{sep}",'.join(lines) + "]")
        objects = got[0::2]
        if (
            len(got) != 2 * len(lines) - 1
            or got[1::2].count(sep) != len(lines) - 1
            or not all(type(o) is dict for o in objects)
        ):
            raise _GiveUp
        return list(zip(numbers, objects))

    def groups(text: str) -> Iterator[list[tuple[int, dict]]]:
        nonlocal number
        numbers: list[int] = []
        lines: list[str] = []
        size = 0
        for line in text.split("\n"):
            number += 1
            if line.strip():
                numbers.append(number)
                lines.append(line)
                size += len(line)
                if size >= GROUP:
                    yield parse(numbers, lines)
                    numbers, lines, size = [], [], 0
        if lines:
            yield parse(numbers, lines)

    try:
        raw, stream = _open(path, data)
    except OSError:
        raise _GiveUp from None
    try:
        rest = b""
        while piece := stream.read(PIECE):
            rest += piece
            end = rest.rfind(b"\n")
            if end >= 0:
                text = rest[:end].decode("utf-8")
                rest = rest[end + 1 :]
                yield from groups(text)
        if rest:
            yield from groups(rest.decode("utf-8"))
    except (ValueError, OSError, EOFError):  # JSONDecodeError, NaN, UTF-8 errors are ValueErrors
        raise _GiveUp from None
    finally:
        stream.close()
        raw.close()


def _checked_lines(path: str, label: str, data: bytes | None) -> Iterator[tuple[int, dict]]:
    """The careful reader: one line at a time, each defect a ``DataError`` naming its line."""
    raw, stream = _open(path, data)
    try:
        for number, text in text_lines(label, stream):
            if text.strip():
                yield number, json_entry(label, number, text)
    except (OSError, EOFError) as e:
        raise DataError(
            f"{label}: cannot read it ({type(e).__name__}: {e}). Fix: copy it again"
        ) from e
    finally:
        stream.close()
        raw.close()
