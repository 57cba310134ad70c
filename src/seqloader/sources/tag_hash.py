"""``tag_hashes``: a 64-bit hash of every string of a packed buffer, eight bytes at a time.

The duplicate-tag screen hashes every tag of a corpus (10^8 of them when a node's first process
writes an HDF file's metadata store) and looks only at tags whose hashes repeat, so the hash must
be cheap per tag, give equal tags equal values, and spread its top bits (``sources/repeats.py``
cuts the values by them). A tag of ``m`` bytes is read as little-endian 64-bit words: its full
words ``w_k`` (bytes ``8k .. 8k + 7``, ``k < (m - 1) // 8``) and a last word (its last eight
bytes, overlapping the full words when ``m`` is not a multiple of 8; a tag shorter than 8 bytes
is its bytes padded with zeros), summed as ``last + sum_k w_k Q^(k+1) + m G`` (mod 2^64) and
mixed by MurmurHash3's 64-bit finalizer. Every byte counts, and two tags of one length differ in
some word. The words are loaded straight from the packed buffer (no copy of the bytes): for a
run of tags of one length (ids of a fixed width, the usual case) as strided views, otherwise by
gathering each tag's ``k``-th word, in cache-sized chunks of tags.
"""

from __future__ import annotations

import numpy as np

#: the word multiplier (odd) and the length's (the golden ratio's 64 bits)
Q = np.uint64(0x9FB21C651E98DF25)
G = np.uint64(0x9E3779B97F4A7C15)
#: MurmurHash3's fmix64 constants
_C1, _C2 = np.uint64(0xFF51AFD7ED558CCD), np.uint64(0xC4CEB9FE1A85EC53)
_S33 = np.uint64(33)
#: the low ``8 m`` bits (a tag of ``m < 8`` bytes: what its one word keeps)
_MASKS = np.array([(1 << (8 * k)) - 1 for k in range(8)] + [(1 << 64) - 1], dtype=np.uint64)
#: tags hashed at once (their uint64 temporaries stay in cache)
CHUNK = 1 << 15
#: runs of one length are hashed run by run where they are this long on average
RUN_ROWS = 256


def tag_hashes(
    data: np.ndarray, offsets: np.ndarray, chunk: int = CHUNK, out: np.ndarray | None = None
) -> np.ndarray:
    """The hash of each string ``data[offsets[i] : offsets[i + 1]]`` -> uint64 ``[n]``
    (``data``: contiguous uint8; ``chunk``: tags hashed at once; ``out``: uint64 ``[n]`` to
    write them to, else a new array).

    >>> data = np.frombuffer(b"abcabcdefghijkabc", np.uint8)
    >>> h = tag_hashes(data, np.array([0, 3, 14, 17]))
    >>> bool(h[0] == h[2]), bool(h[0] == h[1])
    (True, False)
    """
    n = len(offsets) - 1
    if out is None:
        out = np.empty(max(n, 0), dtype=np.uint64)
    if n <= 0:
        return out
    lengths = np.diff(offsets)
    first = np.flatnonzero(np.concatenate([[True], lengths[1:] != lengths[:-1]]))
    if len(first) * RUN_ROWS <= n:
        ends = np.append(first[1:], n).tolist()
        for a, b, width in zip(first.tolist(), ends, lengths[first].tolist(), strict=True):
            _run(data, int(offsets[a]), width, out[a:b], chunk)
        return out
    for a in range(0, n, chunk):
        b = min(n, a + chunk)
        out[a:b] = _gathered(data, offsets[a : b + 1])
    return out


def _mixed(acc: np.ndarray, length: np.ndarray | np.uint64) -> np.ndarray:
    """``acc + length G``, through fmix64 (in place)."""
    with np.errstate(over="ignore"):
        acc += np.asarray(length, dtype=np.uint64) * G
        acc ^= acc >> _S33
        acc *= _C1
        acc ^= acc >> _S33
        acc *= _C2
        acc ^= acc >> _S33
    return acc


def _run(data: np.ndarray, start: int, width: int, out: np.ndarray, chunk: int) -> None:
    """``len(out)`` tags of ``width`` bytes each, one after another from ``start``."""
    rows = len(out)
    if width < 8:  # one word each, padded: a [chunk, 8] copy per chunk (not [rows, 8] at once)
        padded = np.empty((min(rows, chunk), 8), dtype=np.uint8)
        for a in range(0, rows, chunk):
            b = min(rows, a + chunk)
            block = padded[: b - a]
            block[:, width:] = 0  # _mixed left the last chunk's hashes here
            block[:, :width] = data[start + a * width : start + b * width].reshape(b - a, width)
            out[a:b] = _mixed(block.view("<u8").reshape(b - a), np.uint64(width))
        return
    full = (width - 1) // 8
    for a in range(0, rows, chunk):
        b = min(rows, a + chunk)
        at = start + a * width

        def word(byte: int, count: int = b - a, at: int = at) -> np.ndarray:
            """Each tag's 8 bytes from ``byte`` on, a strided view of ``data``."""
            return np.ndarray((count,), "<u8", data, at + byte, (width,))

        acc = word(width - 8).copy()
        q = Q
        with np.errstate(over="ignore"):
            for k in range(full):
                acc += word(8 * k) * q
                q = q * Q
        out[a:b] = _mixed(acc, np.uint64(width))


def _gathered(data: np.ndarray, offsets: np.ndarray) -> np.ndarray:
    """The hashes of the tags of ``offsets`` (a chunk), each word gathered on its own."""
    lo, hi = int(offsets[0]), int(offsets[-1])
    if hi + 8 <= len(data):  # the words may read past the chunk's last byte: still in ``data``
        src, base = data, 0
    else:  # at the buffer's end: a copy with 8 bytes of slack
        src = np.zeros(hi - lo + 8, dtype=np.uint8)
        src[: hi - lo] = data[lo:hi]
        base = lo
    words = np.ndarray((len(src) - 7,), "<u8", src, 0, (1,))  # the 8 bytes at each byte
    last = len(words) - 1
    start = offsets[:-1] - base
    length = np.diff(offsets)
    full = np.maximum(length - 1, 0) >> 3
    short = length < 8
    at = start + length - 8
    if short.any():
        np.copyto(at, start, where=short)
        acc = words[at]
        acc &= _MASKS[np.minimum(length, 8)]
    else:
        acc = words[at]
    least = int(full.min())
    q = Q
    with np.errstate(over="ignore"):
        for k in range(int(full.max())):
            at = start + 8 * k
            if k < least:
                word = words[at]
            else:  # some tags have fewer full words: theirs count 0
                np.minimum(at, last, out=at)
                word = words[at]
                word[full <= k] = 0
            word *= q
            acc += word
            q = q * Q
    return _mixed(acc, length)
