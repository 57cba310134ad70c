"""Per-key integer options: one value for the length key, or ``{key: value}`` with ``"*"`` for
every key not named (RETURNN's ``NumbersDict``: a dict plus a broadcast value).

``max_frames``, ``max_packed_frames``, ``max_seq_length``, ``min_seq_length`` and
``min_chunk_size`` take this form, so a limit can follow every key of the data (targets longer than
inputs, as in machine translation) and not only the key planning measures by default.
``plan.options.keyed_int_option`` reads the option; ``resolve_keyed`` applies it to the data's keys.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from seqloader.errors import OptionError

#: the key of a mapping that stands for every key not named in it
EVERY_KEY = "*"

KeyedInt = int | Mapping[str, int]


def resolve_keyed(
    name: str, value: KeyedInt | None, keys: Sequence[str], length_key: str
) -> dict[str, int]:
    """The limit of each key it applies to: an int applies to ``length_key``; a mapping to the
    keys it names, and ``"*"`` to all other ``keys``. A named key missing from the data is an
    ``OptionError`` (a typo would otherwise mean no limit)."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        return {length_key: int(value)}
    unknown = sorted(set(value) - set(keys) - {EVERY_KEY})
    if unknown:
        named = ", ".join(repr(k) for k in unknown)
        raise OptionError(
            f"{name}: key {named} is not in the data; keys: {sorted(keys)} "
            f"('{EVERY_KEY}' = every key)"
        )
    out = {k: int(v) for k, v in value.items() if k != EVERY_KEY}
    if EVERY_KEY in value:
        for k in keys:
            out.setdefault(k, int(value[EVERY_KEY]))
    return {k: out[k] for k in keys if k in out}  # in the data's key order
