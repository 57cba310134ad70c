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
    if h5py.h5i.get_file_id(dset.id).fileno != h5.id.fileno:
        return False
    plist = dset.id.get_create_plist()
    return plist.get_layout() != h5py.h5d.VIRTUAL and plist.get_external_count() == 0
