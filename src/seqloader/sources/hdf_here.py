"""Whether an HDF dataset's values lie in the file it was opened from.

Readers that skip HDF5 and read a dataset's bytes at their offset in the opened file (a memory
map, ``pread``) and the NaN/Inf screen's verdicts (keyed by the opened file's identity) may only
do so for such a dataset: one reached through an external link lives in another file (its offset
is an offset there), a virtual dataset keeps its values in its source files, and external raw
storage in raw files of its own.
"""

from __future__ import annotations

import h5py


def values_here(dset: h5py.Dataset, h5: h5py.File) -> bool:
    """Whether every value of ``dset`` lies in the opened file ``h5`` itself: not a dataset of
    another file reached through an external link, not a virtual dataset, no external raw
    storage.

    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> with h5py.File(os.path.join(folder, "other.hdf"), "w") as other:
    ...     _ = other.create_dataset("x", data=[1.0, 2.0])
    >>> with h5py.File(os.path.join(folder, "a.hdf"), "w") as f:
    ...     _ = f.create_dataset("own", data=[3.0])
    ...     f["linked"] = h5py.ExternalLink(os.path.join(folder, "other.hdf"), "x")
    ...     values_here(f["own"], f), values_here(f["linked"], f)
    (True, False)
    """
    return elsewhere(dset, h5) is None


def elsewhere(obj: h5py.Dataset | h5py.Group, h5: h5py.File) -> str | None:
    """Why values (or, for a group, attributes) of ``obj`` lie outside the opened file ``h5``
    (where they are, for messages), or None where they all lie in it.

    >>> import os, tempfile
    >>> folder = tempfile.mkdtemp()
    >>> with h5py.File(os.path.join(folder, "a.hdf"), "w") as f:
    ...     _ = f.create_dataset("raw", (2,), "<i4", external=[("a.raw", 0, 8)])
    ...     elsewhere(f["raw"], f)
    "it keeps its values in external raw storage: 'a.raw'"
    """
    if h5py.h5i.get_file_id(obj.id).fileno != h5.id.fileno:
        return f"it is reached through an external link: its values live in {obj.file.filename!r}"
    if not isinstance(obj, h5py.Dataset):
        return None
    plist = obj.id.get_create_plist()
    if plist.get_layout() == h5py.h5d.VIRTUAL:
        sources = sorted({plist.get_virtual_filename(i) for i in range(plist.get_virtual_count())})
        return f"it is a virtual dataset: its values live in its source file(s) {sources}"
    if plist.get_external_count():
        raw = [plist.get_external(i)[0].decode() for i in range(plist.get_external_count())]
        return f"it keeps its values in external raw storage: {', '.join(map(repr, raw))}"
    return None
