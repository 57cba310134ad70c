"""benchmarks/mix_scale.py at a small size: both children plan this rank's batches of a three-corpus
mix and pass their checks (per-corpus exactly-once per corpus epoch, the share its part of the
global list, the counts the mix plans); no timing assertions."""

from __future__ import annotations

from benchmarks import mix_scale
from benchmarks.scale import index_store, lengths_store


def test_children_plan_and_check_a_small_mix(tmp_path) -> None:
    n = 20_000
    store = lengths_store(n, str(tmp_path))
    for name, orderings in mix_scale.CASES.items():
        files = bool(orderings.get("files"))  # indexed: whole files per rank
        case = {"ordering": orderings["indexed"], "distribution": "files" if files else "shard"}
        index, _ = index_store(store, n, case, str(tmp_path))
        base = {"store": store, "index": index, "checks": True, "files": files}
        out = {
            code: mix_scale.child({**base, "planning": code, "ordering": orderings[code]})
            for code in ("indexed", "global")
        }
        for code, got in out.items():
            assert got["checks_ok"], (name, code)
            assert got["private_bytes"] >= 0 and got["total_s"] > 0
        # rates 0.5 / 1 / 2 on 50 / 30 / 20 % of the sequences: 0.95 n slots, both plannings
        want = [n // 4, 3 * n // 10, 2 * n // 5]
        assert out["global"]["corpus_slots"] == out["indexed"]["corpus_slots"] == want


def test_loader_children_over_a_concat_source(tmp_path, monkeypatch) -> None:
    """``--loader``: the mapped node store and the in-memory concatenation both plan the rank's
    batches of the mix (the child checks which one it used)."""
    from benchmarks.loader_scale import corpus_store

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setattr("seqloader.sources.concat_store.MIN_SEQUENCES", 1000)
    stores = {}
    for name, share in zip(mix_scale.NAMES, mix_scale.SHARES):
        (tmp_path / name).mkdir()
        stores[name] = corpus_store(int(share * 20_000), str(tmp_path / name))
    for code in ("mapped", "in memory"):
        out = mix_scale.loader_child({"stores": stores, "code": code})
        assert out["checks_ok"] and out["total_s"] > 0, code
