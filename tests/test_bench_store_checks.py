"""benchmarks/store_checks.py at a small size: the store it builds is what ``HDFSource``'s
metadata store holds (it opens as one, tags and row offsets read back), and the child measures
every stage with and without the checks (no timing assertions)."""

from __future__ import annotations

import numpy as np
from benchmarks import store_checks

from seqloader.sources import columns
from seqloader.sources.hdf_store import FileStarts, metadata_of


def test_the_store_and_every_stage(tmp_path, monkeypatch) -> None:
    meta_path, bucket_path = store_checks.build(str(tmp_path), 3000)
    meta = metadata_of(columns.ColumnStore(meta_path))
    assert meta.tags.take(np.array([0, 2999])) == ["corpus/rec0/seg0", "corpus/rec2999/seg2999"]
    assert len(meta.lengths["data"]) == 3000 and int(meta.bounds[-1]) == 3000
    assert FileStarts(meta.starts, meta.bounds)[99]["data"][-1] == 30 * 1000
    for check in (True, False):
        monkeypatch.setattr(columns, "CHECK_CONTENTS", check)
        config = {"meta": meta_path, "bucket": bucket_path, "check": check, "rep": 0}
        out = store_checks.child(config)
        assert set(out) == {"open", "first reads", "bucket open"}
        assert all(v > 0 for v in out.values())
