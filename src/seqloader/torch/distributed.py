"""Contract C7: all ranks must plan from the same data, options and position.

Every rank computes the whole global plan locally, so no collective is needed per step or at the
epoch's end (equal steps, C2, is what keeps DDP from hanging). The one collective is a single
``all_gather_object`` of a small description at the first epoch: if ranks opened other files, used
another seed or loaded different loader states, they would silently train on different epochs — so
every rank raises instead, with a message that names the ranks and what differs.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Mapping, Sequence

from seqloader.errors import DistributedMismatchError

_SHOWN_CHARS = 160


def process_group_active() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def check_same_plan(description: Mapping[str, str], shown: Mapping[str, str] | None = None) -> None:
    """Gather ``description`` (e.g. plan fingerprint, source fingerprint, options, resume position)
    from every rank of the default process group and raise ``DistributedMismatchError`` on every
    rank if they differ. ``shown``: per field, a readable form to print next to a differing value
    without comparing it (e.g. the source's file names, which may differ between nodes that hold
    the same data). A no-op without an initialized process group of more than one rank.

    With the NCCL backend, torch gathers objects through the current CUDA device: call
    ``torch.cuda.set_device(local_rank)`` before the first epoch, as for DDP itself.
    """
    if not process_group_active():
        return
    import torch.distributed as dist

    mine = {"host": socket.gethostname(), "compared": dict(description), "shown": dict(shown or {})}
    gathered: list[dict | None] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, mine)
    every = [g for g in gathered if g is not None]  # all_gather_object fills every slot
    message = mismatch_message(
        [g["compared"] for g in every],
        hosts=[g["host"] for g in every],
        this_rank=dist.get_rank(),
        shown=[g["shown"] for g in every],
    )
    if message:
        raise DistributedMismatchError(message)


def mismatch_message(
    descriptions: Sequence[Mapping[str, str]],
    hosts: Sequence[str] | None = None,
    this_rank: int | None = None,
    shown: Sequence[Mapping[str, str]] | None = None,
) -> str | None:
    """None if all ranks agree, else a message naming the ranks that differ from rank 0 and, per
    differing field, which ranks hold which value (options are compared option by option)."""
    reference = descriptions[0]
    differing = [r for r, d in enumerate(descriptions) if dict(d) != dict(reference)]
    if not differing:
        return None
    keys = sorted({k for d in descriptions for k in d})
    fields = [k for k in keys if len({str(d.get(k)) for d in descriptions}) > 1]
    lines = [
        f"ranks disagree on the data or the plan: rank(s) {differing} differ from rank 0 in "
        f"{', '.join(fields)}"
        + (f" (this is rank {this_rank})" if this_rank is not None else "")
        + ". Every rank must open the same files in the same order, with the same options and "
        "seed, and load the same loader state; otherwise they would train on different epochs."
    ]
    for key in fields:
        values = [d.get(key) for d in descriptions]
        option_diff = _json_diff(values)
        if option_diff is not None:
            for sub, sub_values in option_diff.items():
                lines.append(f"  {key}.{sub}: {_by_value(sub_values, hosts)}")
            continue
        if shown is not None:
            values = [
                f"{v} ({s[key]})" if key in s else v for v, s in zip(values, shown, strict=True)
            ]
        lines.append(f"  {key}: {_by_value(values, hosts)}")
    return "\n".join(lines)


def _by_value(values: Sequence[object], hosts: Sequence[str] | None) -> str:
    """``ranks [0, 2] (host a): X; ranks [1] (host b): Y``."""
    groups: dict[str, list[int]] = {}
    for rank, value in enumerate(values):
        groups.setdefault(_short(value), []).append(rank)
    parts = []
    for shown, ranks in groups.items():
        where = ""
        if hosts is not None:
            where = f" (host {', '.join(sorted({hosts[r] for r in ranks}))})"
        parts.append(f"ranks {ranks}{where}: {shown}")
    return "; ".join(parts)


def _json_diff(values: Sequence[object]) -> dict[str, list[object]] | None:
    """If every value is a JSON object, the keys whose values differ -> per-rank values."""
    texts = [v for v in values if isinstance(v, (str, bytes, bytearray))]
    if len(texts) != len(values):
        return None
    try:
        parsed = [json.loads(v) for v in texts]
    except ValueError:
        return None
    if not all(isinstance(p, dict) for p in parsed):
        return None
    keys = sorted({k for p in parsed for k in p})
    return {
        k: [p.get(k, "<missing>") for p in parsed]
        for k in keys
        if len({json.dumps(p.get(k), sort_keys=True) for p in parsed}) > 1
    }


def _short(value: object) -> str:
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return text if len(text) <= _SHOWN_CHARS else text[:_SHOWN_CHARS] + "..."


def gather_objects(payload: dict, world_size: int) -> list[dict]:
    """All ranks' payloads (one ``all_gather_object``) if torch.distributed is initialized with
    ``world_size`` ranks (the loader's, the same on every rank, C7), else only this rank's. The
    epoch audit's: payloads carry the loader's rank, so two processes that both think they are
    rank 0 show up as repeats."""
    import torch.distributed as dist

    if (
        world_size > 1
        and dist.is_available()
        and dist.is_initialized()
        and dist.get_world_size() == world_size
    ):
        out: list[dict | None] = [None] * world_size
        dist.all_gather_object(out, payload)
        return [p for p in out if p is not None]
    return [payload]
