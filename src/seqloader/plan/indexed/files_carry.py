"""What a state saved mid-epoch by indexed ``files`` carries, so that a resume does less than a
fresh start.

An elastic resume of ``files`` needs the units of the world size the sub-epoch started with (the
old ranks' LPT assignment of the files, their sequences per bucket, cut into runs: a fresh
start's work) and what every unit's consumption was where the state was saved (a replay of each
segment's order, more work on top). The saver has both at hand (``seqs_consumed`` is that
replay), so the state carries them in one field (``FIELD``): the assignment of the files to the
old ranks, each unit's counts and the units' consumption before and in the saved segment. A
resume that finds it plans the same segments from it without the LPT, the per-rank bucket counts,
the runs or the replay (``seqloader.plan.indexed.files_distribution.Files.carry``).

The field is a cache carried in the state, never the state's meaning: the position fields stay
what is checked and replayed. It is compressed (zlib) and sealed by a digest of its bytes keyed
by the plan it is of (``plan``: the planner's options, files and their admitted counts and
frames, ``Files.plan_id``), which the field does not name. Every count check of the loader holds
for an edit that moves sequences between one old rank's units, and such an edit, resealed by a
plain digest (as anyone holding the state could do), was used: the resume planned other batches
than its position says. Keyed, a field edited without the plan's identity (without the data)
fails its seal, and so does a field taken from another loader's state; a field that fails its
seal, its shapes, or the counts the loader checks it against is set aside (with a warning
naming it) and the resume plans from counts as without it: the same plan. A state without it
(saved before it existed, or by global planning) resumes as before, as does one sealed without
a key by an earlier seqloader (set aside with the warning).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import zlib
from dataclasses import dataclass

import numpy as np

from seqloader.plan.indexed.files import Units

#: the state's field (absent where nothing is carried)
FIELD = "files_units"
#: the field's own format (a loader of another format sets it aside: planned from counts); /3
#: packs the files' old ranks in as many bits as the ranks need and keeps each unit's count and
#: level as their difference to its size and to the unit before's top (``pack_units``); /4 is
#: /3 sealed by a digest keyed by the plan's identity, which it no longer names (the unkeyed
#: seals of /2 and /3 are not trusted: anyone could make them)
_FORMAT = "seqloader-files-units/4"
_DIGEST = 16  # bytes of blake2b
#: the per-unit arrays, and what ``Units`` holds them as
_UNIT_ARRAYS = {"count": np.int64, "size": np.int32, "level": np.int32, "top": np.int32}
_NAMES = {"rank_of", "rank_of.bits", "per_rank", "count", "size", "level", "top", "start", "used"}


@dataclass(frozen=True)
class Carried:
    """A saved segment's units and consumption (the module doc).

    - ``key``: the sub-epoch and first world size the units are of (``Files._kept_key``).
    - ``history``, ``world_size``, ``steps``: the saved segment (after the segments of
      ``history``, on ``world_size`` ranks) and the steps its ranks consumed.
    - ``rank_of`` ``[f]``: the old rank of each of the sub-epoch's files (or file pieces).
    - ``per_rank`` ``[W0]``: units per old rank; ``count``, ``size``, ``level``, ``top``
      ``[U]``: ``Units``'s.
    - ``start`` ``[U]``: consumed before the saved segment; ``used`` ``[U]``: by its steps.
    - ``plan``: the plan the units are of (``Files.plan_id``: options, files, their counts and
      frames): the seal's key, not written into the field."""

    key: tuple[int, ...]
    history: tuple[tuple[int, int], ...]
    world_size: int
    steps: int
    rank_of: np.ndarray
    per_rank: np.ndarray
    count: np.ndarray
    size: np.ndarray
    level: np.ndarray
    top: np.ndarray
    start: np.ndarray
    used: np.ndarray
    plan: str = ""

    @classmethod
    def of(
        cls,
        key: tuple[int, ...],
        history: tuple[tuple[int, int], ...],
        world_size: int,
        steps: int,
        units: Units,
        start: np.ndarray,
        used: np.ndarray,
        plan: str = "",
    ) -> Carried:
        per_rank = np.bincount(units.rank, minlength=units.world0)
        return cls(
            tuple(key), tuple(history), world_size, steps, units.rank_of, per_rank,
            units.count, units.size, units.level, units.top, start, used, plan,
        )  # fmt: skip

    @property
    def after(self) -> tuple[tuple[int, int], ...]:
        """The history of the segment that continues the saved one."""
        return (*self.history, (self.world_size, self.steps))

    def units(self, part: np.ndarray, member_words: tuple[int, ...]) -> Units:
        """The ``Units`` these counts are of (``part``, ``member_words``: the loader's own)."""
        world0 = len(self.per_rank)
        rank = np.repeat(np.arange(world0, dtype=np.int32), self.per_rank)
        firsts = np.cumsum(self.per_rank) - self.per_rank
        group = np.arange(len(rank), dtype=np.int64) - np.repeat(firsts, self.per_rank)
        return Units(
            part, self.rank_of, rank, group.astype(np.int32), self.count, self.size,
            self.level, self.top, world0, member_words,
        )  # fmt: skip

    def consistent(self, admitted: np.ndarray | None, files: int | None = None) -> bool:
        """Shapes and bounds hold (``files``: the sub-epoch's files or file pieces, one old rank
        each), and (``admitted``: int64 ``[f]`` units of each file, where the loader counts them)
        each old rank's units hold its files' sequences."""
        u, world0 = len(self.count), len(self.per_rank)
        if files is not None and len(self.rank_of) != files:
            return False
        arrays = (self.size, self.level, self.top, self.start, self.used)
        if any(len(a) != u for a in arrays) or int(self.per_rank.sum()) != u:
            return False
        if (
            len(self.rank_of)
            and not 0 <= int(self.rank_of.min()) <= int(self.rank_of.max()) < world0
        ):
            return False
        if u and (
            int(self.size.min()) < 1 or int(self.start.min()) < 0 or int(self.used.min()) < 0
        ):
            return False
        if bool((self.start + self.used > self.count).any()):
            return False
        if admitted is None:
            return True
        if len(admitted) != len(self.rank_of):
            return False
        return self.holds(np.bincount(self.rank_of, weights=admitted, minlength=world0))

    def holds(self, held: np.ndarray) -> bool:
        """Each old rank's units hold ``held[rank]`` units (its files' or pieces' admitted
        ones, as the loader counts them)."""
        world0 = len(self.per_rank)
        rank = np.repeat(np.arange(world0), self.per_rank)
        return bool(np.array_equal(held, np.bincount(rank, weights=self.count, minlength=world0)))


def encode(c: Carried, units_part: bytes | None = None) -> str:
    """``c`` as the state's field: text (JSON-able), compressed and sealed by a digest keyed by
    ``c.plan``. ``units_part``: ``pack_units(c)`` where kept (the same for every state of a
    segment)."""
    units = pack_units(c) if units_part is None else units_part
    head = {"history": [list(h) for h in c.history], "world_size": c.world_size, "steps": c.steps}
    run = _pack(head, {"start": c.start, "used": c.used}, 1)  # each state's own: fast
    sealed = len(units).to_bytes(4, "little") + units + run
    return base64.b64encode(_seal(sealed, c.plan) + sealed).decode("ascii")


def _seal(sealed: bytes, plan: str) -> bytes:
    """The digest of ``sealed`` keyed by the plan's identity (blake2b's key: at most 64 bytes)."""
    key = hashlib.blake2b(plan.encode(), digest_size=32).digest()
    return hashlib.blake2b(sealed, digest_size=_DIGEST, key=key).digest()


def pack_units(c: Carried) -> bytes:
    """The part of ``c`` every state of its segment shares: the units and the files' ranks. The
    ranks in ``bits`` bits each (10 for 1,024 ranks: they are spread evenly and hardly compress);
    a unit's count as its difference to its size (often one batch: 39% of them) and its level as its
    difference to the top of the unit before on its rank (they follow on): at 10^8 sequences
    over 10^5 files and 1,024 ranks, 0.29 MB -> 0.24 MB before base64."""
    rank_of = np.asarray(c.rank_of, dtype=np.int64)
    bits = max(1, int(rank_of.max(initial=0)).bit_length())
    ranks = {"rank_of.bits": _to_bits(rank_of, bits)} if bits <= 32 and not (
        len(rank_of) and int(rank_of.min()) < 0
    ) else {"rank_of": rank_of}  # fmt: skip
    arrays = {
        **ranks, "per_rank": c.per_rank, "count": _zigzag(c.count - c.size), "size": c.size,
        "level": _zigzag(c.level - _top_before(c.top, c.per_rank)), "top": c.top,
    }  # fmt: skip
    head = {"format": _FORMAT, "key": list(c.key), "bits": bits}  # the plan: the seal's key
    return _pack({**head, "files": len(rank_of)}, arrays, 1)


def decode(field: object, plan: str) -> Carried | None:
    """The field back, if sealed for ``plan`` (``Files.plan_id``), else None: not one this
    loader reads whole (damaged, edited or of another plan: its seal fails; its compression or
    layout fails; another format)."""
    if not isinstance(field, str):
        return None
    try:
        raw = base64.b64decode(field.encode("ascii"), validate=True)
        digest, sealed = raw[:_DIGEST], raw[_DIGEST:]
        if not hmac.compare_digest(_seal(sealed, plan), digest):
            return None
        n = int.from_bytes(sealed[:4], "little")
        units, units_head = _unpack(sealed[4 : 4 + n])
        run, head = _unpack(sealed[4 + n :])
        if units_head.get("format") != _FORMAT:
            return None
        if "rank_of.bits" in units:  # pack_units's differences and bits undone
            bits, files = int(units_head["bits"]), int(units_head["files"])
            units["rank_of"] = _from_bits(units.pop("rank_of.bits"), bits, files)
        units["count"] = _unzigzag(units["count"]) + units["size"]
        units["level"] = _unzigzag(units["level"]) + _top_before(units["top"], units["per_rank"])
        units = {k: a.astype(_wide(k)) for k, a in units.items()}
        run = {k: a.astype(_wide(k)) for k, a in run.items()}
        return Carried(
            tuple(int(k) for k in units_head["key"]),
            tuple((int(w), int(s)) for w, s in head["history"]),
            int(head["world_size"]), int(head["steps"]), **units, **run, plan=plan,
        )  # fmt: skip
    except (ValueError, KeyError, TypeError, UnicodeError, binascii.Error, zlib.error):
        return None


def _pack(head: dict, arrays: dict[str, np.ndarray], level: int) -> bytes:
    """``head`` (JSON) and ``arrays`` (each in its narrowest dtype), compressed."""
    narrow = {name: _narrow(np.asarray(a)) for name, a in arrays.items()}
    head = {**head, "arrays": [[name, a.dtype.str, len(a)] for name, a in narrow.items()]}
    text = json.dumps(head, separators=(",", ":")).encode()
    body = len(text).to_bytes(4, "little") + text + b"".join(a.tobytes() for a in narrow.values())
    return zlib.compress(body, level)


def _unpack(packed: bytes) -> tuple[dict[str, np.ndarray], dict]:
    """``_pack``'s arrays (as int64, packed ranks as bytes: ``decode`` gives them ``Units``'s
    dtypes once it has undone ``pack_units``'s differences) and head; ValueError if malformed."""
    body = zlib.decompress(packed)
    n = int.from_bytes(body[:4], "little")
    head = json.loads(body[4 : 4 + n])
    at, arrays = 4 + n, dict[str, np.ndarray]()
    for name, dtype, length in head["arrays"]:
        dt = np.dtype(dtype)
        if dt.kind not in "iu" or name not in _NAMES:
            raise ValueError(f"array {name!r} of {dtype}")
        wide = np.uint8 if name == "rank_of.bits" else np.int64  # decode narrows to Units's
        arrays[name] = np.frombuffer(body, dt, int(length), at).astype(wide)
        at += dt.itemsize * int(length)
    if at != len(body):
        raise ValueError("trailing bytes")
    return arrays, head


def _zigzag(a: np.ndarray) -> np.ndarray:
    """Signed ints as unsigned ones, small magnitudes small (0, -1, 1, -2 -> 0, 1, 2, 3)."""
    a = np.asarray(a, dtype=np.int64)
    return ((a << 1) ^ (a >> 63)).view(np.uint64)


def _unzigzag(a: np.ndarray) -> np.ndarray:
    u = np.asarray(a).astype(np.uint64)
    return ((u >> np.uint64(1)).view(np.int64)) ^ -((u & np.uint64(1)).view(np.int64))


def _top_before(top: np.ndarray, per_rank: np.ndarray) -> np.ndarray:
    """Each unit's previous unit's ``top`` on the same old rank (0 for a rank's first)."""
    top, per_rank = np.asarray(top, dtype=np.int64), np.asarray(per_rank, dtype=np.int64)
    if int(per_rank.sum()) != len(top) or (len(per_rank) and int(per_rank.min()) < 0):
        raise ValueError("units per rank do not sum to the units")
    before = np.concatenate(([0], top[:-1])) if len(top) else top.copy()
    firsts = (np.cumsum(per_rank) - per_rank)[per_rank > 0]
    before[firsts] = 0
    return before


def _to_bits(a: np.ndarray, bits: int) -> np.ndarray:
    """Non-negative ints below ``2 ** bits``, ``bits`` bits each (most significant first)."""
    shifts = np.arange(bits - 1, -1, -1, dtype=np.int64)
    return np.packbits(((a[:, None] >> shifts) & 1).astype(np.uint8).reshape(-1))


def _from_bits(packed: np.ndarray, bits: int, n: int) -> np.ndarray:
    if not 0 < bits <= 32 or n < 0 or len(packed) != -(-n * bits // 8):
        raise ValueError("packed ranks of another length")
    flat = np.unpackbits(np.asarray(packed, dtype=np.uint8))[: n * bits].reshape(n, bits)
    return flat.astype(np.int64) @ (np.int64(1) << np.arange(bits - 1, -1, -1, dtype=np.int64))


def _narrow(a: np.ndarray) -> np.ndarray:
    """``a`` (ints) in the smallest unsigned dtype that holds it (int64 if any is negative):
    a smaller state."""
    if len(a) and int(a.min()) < 0:
        return a.astype(np.int64)
    top = int(a.max()) if len(a) else 0
    for dt in (np.uint8, np.uint16, np.uint32):
        if top <= np.iinfo(dt).max:
            return a.astype(dt)
    return a.astype(np.uint64)


def _wide(name: str) -> type:
    """The dtype ``Units`` (and the loader) hold array ``name`` as."""
    return _UNIT_ARRAYS.get(name, np.int64)
