"""JSON-lines manifests read line by line, every problem named by file and line.

Shared by the sources that read JSON-lines listings (shard manifests: Lhotse Shar cuts, NeMo
tarred-audio manifests). ``.gz`` files are decompressed on the fly; ``text`` is an already-read
file (a remote manifest fetched through the cache).
"""

from __future__ import annotations

import gzip
import io
import json
from collections.abc import Iterator

from seqloader.errors import DataError


def json_lines(
    path: str, label: str | None = None, data: bytes | None = None
) -> Iterator[tuple[int, dict]]:
    """(line number from 1, entry) of every non-blank line of the JSON-lines file ``path`` (or of
    its bytes ``data``); a line that is not a JSON object is a ``DataError`` naming ``label``
    (default ``path``) and the line."""
    label = label or path
    raw: io.BufferedIOBase | gzip.GzipFile
    if data is None:
        raw = open(path, "rb")  # noqa: SIM115 - closed below
    else:
        raw = io.BytesIO(data)
    if path.endswith(".gz"):
        raw = gzip.GzipFile(fileobj=raw)
    try:
        for number, line in enumerate(raw, start=1):
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                raise DataError(
                    f"{label} line {number}: not valid JSON ({e}). Fix: repair or regenerate the "
                    "manifest (one JSON object per line)."
                ) from e
            if not isinstance(entry, dict):
                raise DataError(
                    f"{label} line {number}: got {type(entry).__name__}, expected a JSON object "
                    "per line"
                )
            yield number, entry
    except (OSError, EOFError) as e:
        raise DataError(
            f"{label}: cannot read it ({type(e).__name__}: {e}); re-copy the file"
        ) from e
    finally:
        raw.close()
