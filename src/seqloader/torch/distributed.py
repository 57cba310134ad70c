"""Contract C7: all ranks must plan from the same data and options.

One ``all_gather_object`` of a small description at the first epoch; no collective per step.
"""

from __future__ import annotations

from collections.abc import Mapping

from seqloader.errors import DistributedMismatchError


def process_group_active() -> bool:
    import torch.distributed as dist

    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def check_same_plan(description: Mapping[str, str]) -> None:
    """Gather ``description`` (e.g. {"plan": fp, "source": fp, "options": json}) from every rank
    and raise on every rank if they differ, naming the ranks and the fields that differ."""
    if not process_group_active():
        return
    import torch.distributed as dist

    gathered: list[dict | None] = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, dict(description))
    message = mismatch_message(gathered)  # type: ignore[arg-type]
    if message:
        raise DistributedMismatchError(message)


def mismatch_message(descriptions: list[Mapping[str, str]]) -> str | None:
    """None if all ranks agree, else a message grouping ranks by what they hold."""
    reference = descriptions[0]
    differing = [r for r, d in enumerate(descriptions) if d != reference]
    if not differing:
        return None
    fields = sorted(
        {k for r in differing for k in reference if descriptions[r].get(k) != reference.get(k)}
    )
    groups: dict[str, list[int]] = {}
    for r, d in enumerate(descriptions):
        groups.setdefault(repr(sorted(d.items())), []).append(r)
    lines = [
        f"ranks disagree on the data/plan ({', '.join(fields)} differ): rank(s) {differing} differ "
        f"from rank 0. Every rank must open the same files in the same order with the same options "
        "and seed, or they would train on different epochs."
    ]
    for ranks in groups.values():
        d = descriptions[ranks[0]]
        shown = {
            k: (v if len(str(v)) <= 200 else str(v)[:200] + "...")
            for k, v in d.items()
            if k in fields
        }
        lines.append(f"  ranks {ranks}: {shown}")
    return "\n".join(lines)
