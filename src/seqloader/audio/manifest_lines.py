"""Per-line checks shared by every manifest reader (JSON lines, OggZip listings, Lhotse cuts, and
any other line-per-utterance manifest): a defect is a ``DataError`` when the manifest is opened,
naming the file, the line and the fix.

Why at open: planning reads lengths from the manifest, so a bad value (a ``NaN`` duration becomes
a length of -2^63) would otherwise plan a wrong epoch and fail only when a worker reads it, or be
skipped as a read error under ``on_error="skip"`` instead of reported as what it is.

- ``text_lines``: a file's lines decoded as UTF-8; a non-UTF-8 byte names its line and column.
- ``decode_listing``: the same for a listing read whole (an OggZip's ``NAME.txt``).
- ``json_entry``: one JSON object per line; ``NaN``/``Infinity`` (which Python's ``json`` accepts)
  are refused.
- ``seconds``: a duration or offset field: a finite number >= 0, not a bool or a string.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator

from seqloader.errors import DataError

UTF8_FIX = (
    "re-encode the manifest as UTF-8 (e.g. `iconv -f latin1 -t utf-8 IN > OUT` when it was "
    "written as Latin-1)"
)


def manifest_error(where: str, what: str, fix: str) -> DataError:
    """``DataError('{where}: {what}. Fix: {fix}')``; ``where`` is e.g. ``'m.jsonl line 3'``."""
    return DataError(f"{where}: {what}. Fix: {fix}")


def _not_utf8(label: str, line_no: int, raw: bytes, err: UnicodeDecodeError) -> DataError:
    bad = raw[err.start : err.end]
    return manifest_error(
        f"{label} line {line_no}",
        f"byte {bad.hex(' ')} at column {err.start + 1} is not UTF-8 ({err.reason})",
        UTF8_FIX,
    )


def text_lines(label: str, lines: Iterable[bytes]) -> Iterator[tuple[int, str]]:
    """``(line number, text)`` of each line of a binary file (1-based), decoded as UTF-8."""
    for line_no, raw in enumerate(lines, start=1):
        try:
            yield line_no, raw.decode("utf-8")
        except UnicodeDecodeError as e:
            raise _not_utf8(label, line_no, raw, e) from None


def decode_listing(label: str, data: bytes) -> str:
    """A whole listing decoded as UTF-8; a bad byte names its line and column."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line_start = data.rfind(b"\n", 0, e.start) + 1
        line_end = data.find(b"\n", e.start)
        raw = data[line_start : line_end if line_end >= 0 else len(data)]
        shifted = UnicodeDecodeError(
            e.encoding, raw, e.start - line_start, e.end - line_start, e.reason
        )
        raise _not_utf8(label, data.count(b"\n", 0, e.start) + 1, raw, shifted) from None


def _refuse_constant(token: str) -> float:
    raise ValueError(token)


# one decoder for every line: json.loads(text, parse_constant=...) builds a new one per call
_DECODER = json.JSONDecoder(parse_constant=_refuse_constant)


def json_entry(label: str, line_no: int, text: str) -> dict:
    """One manifest line as a JSON object (a dict); anything else names the line and the fix."""
    where = f"{label} line {line_no}"
    try:
        if text.startswith("\ufeff"):  # json.loads's own check, kept with the decoder below
            raise json.JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
        entry = _DECODER.decode(text)
    except json.JSONDecodeError as e:
        raise manifest_error(
            where, f"not valid JSON ({e})", "write one JSON object per line"
        ) from None
    except ValueError as e:  # NaN, Infinity, -Infinity: not JSON, though Python writes them
        raise manifest_error(
            where,
            f"{e} is not a JSON number",
            "write finite numbers (json.dumps(..., allow_nan=False) refuses NaN when writing)",
        ) from None
    if not isinstance(entry, dict):
        raise manifest_error(
            where, f"got a JSON {type(entry).__name__}", "write one JSON object per utterance"
        )
    return entry


def seconds(where: str, field: str, value: object, *, required: bool = True) -> float | None:
    """A time field (``duration``, ``offset``) in seconds: a finite number >= 0. None when it is
    absent and not ``required``. ``where`` names the file and line."""
    if value is None and not required:
        return None
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if isinstance(value, int | float) and number and math.isfinite(value) and value >= 0:
        return float(value)
    if value is None:
        what, fix = f"no {field!r}", f"give every entry its {field} in seconds (a number >= 0)"
    elif isinstance(value, str):
        what = f"{field!r} got the string {value!r}"
        fix = f'write {field} as a number, not a string (e.g. 0.5, not "0.5")'
    elif number:
        what = f"{field!r} got {value!r}"
        fix = f"write the {field} of the audio in seconds, a finite number >= 0"
    else:
        what = f"{field!r} got {type(value).__name__} {value!r}"
        fix = f"write {field} in seconds as a number >= 0"
    if field == "duration":
        what += " (planning reads lengths from it)"
    raise manifest_error(where, what, fix)
