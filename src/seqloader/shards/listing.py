"""Shard listings read line by line (Lhotse Shar cuts, NeMo manifests), every line checked by the
manifest helpers every reader shares (``seqloader.audio.manifest_lines``: UTF-8, JSON objects
without NaN/Infinity), ``.gz`` decompressed on the fly."""

from __future__ import annotations

import gzip
import io
from collections.abc import Iterator
from typing import BinaryIO

from seqloader.audio.manifest_lines import json_entry, text_lines
from seqloader.errors import DataError


def json_lines(
    path: str, label: str | None = None, data: bytes | None = None
) -> Iterator[tuple[int, dict]]:
    """(line number from 1, entry) of every non-blank line of the JSON-lines file ``path`` (or of
    its bytes ``data``, a remote listing); a bad line is a ``DataError`` naming ``label`` (default
    ``path``), the line and the fix."""
    label = label or path
    raw: BinaryIO = open(path, "rb") if data is None else io.BytesIO(data)  # noqa: SIM115
    stream: BinaryIO = gzip.GzipFile(fileobj=raw) if path.endswith(".gz") else raw  # type: ignore[assignment]
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
