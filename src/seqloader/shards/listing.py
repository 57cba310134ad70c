"""Shard listings (Lhotse Shar cuts, NeMo manifests) read line by line, every line checked by the
manifest helpers every reader shares (``seqloader.audio.manifest_lines``: UTF-8, JSON objects
without NaN/Infinity), ``.gz`` decompressed on the fly.

One reader: a faster one (a listing's lines parsed in groups, each group one JSON array with a
random separator, falling back to this reader) saved 4-9% of a first open's CPU (0.91-0.96x,
three runs on a 1.18 GB Shar corpus, ``docs/performance.md``), where the open takes about half a
plain read of the shards either way; not worth its intricacy, removed."""

from __future__ import annotations

import gzip
import io
import zlib
from collections.abc import Iterator
from typing import BinaryIO

from seqloader.audio.manifest_lines import json_entry, text_lines
from seqloader.errors import DataError


def json_lines(
    path: str, label: str | None = None, data: bytes | None = None
) -> Iterator[tuple[int, dict]]:
    """(line number from 1, entry) of every non-blank line of the JSON-lines file ``path`` (or of
    its bytes ``data``, a remote listing), a line at a time; a bad line is a ``DataError`` naming
    ``label`` (default ``path``), the line and the fix."""
    label = label or path
    raw: BinaryIO = open(path, "rb") if data is None else io.BytesIO(data)  # noqa: SIM115
    stream: BinaryIO = gzip.GzipFile(fileobj=raw) if path.endswith(".gz") else raw  # type: ignore[assignment]
    try:
        for number, text in text_lines(label, stream):
            if text.strip():
                yield number, json_entry(label, number, text)
    except (OSError, EOFError, zlib.error) as e:  # zlib.error: a damaged deflate stream
        raise DataError(
            f"{label}: cannot read it ({type(e).__name__}: {e}). Fix: copy it again"
        ) from e
    finally:
        stream.close()
        raw.close()
