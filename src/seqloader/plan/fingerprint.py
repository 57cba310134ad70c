"""The plan fingerprint, written once for every planner: what all ranks (and a resumed run) must
agree on. Each planner passes its own algorithm id, so a seqloader that plans differently never
mixes in."""

from __future__ import annotations

import hashlib

from seqloader.plan.options import PlanOptions


def plan_fingerprint(
    algorithm: str, source_fingerprint: str, options: PlanOptions, length_key: str, extra: bytes
) -> str:
    """32 hex digits of sha256 over the algorithm id, the data, the options, the length key (each
    followed by a NUL byte) and the planner's extra bytes (order lengths, exclusions, files, ...).

    >>> a = plan_fingerprint("algo/1", "data", PlanOptions(), "data", b"")
    >>> len(a), a == plan_fingerprint("algo/2", "data", PlanOptions(), "data", b"")
    (32, False)
    """
    h = hashlib.sha256()  # a mix: its rates are in the options, its corpora in the source's
    for part in (algorithm, source_fingerprint, options.to_json(), length_key):
        h.update(part.encode())
        h.update(b"\0")
    h.update(extra)
    return h.hexdigest()[:32]
