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
        case = {"ordering": orderings["indexed"], "distribution": "shard"}
        index, _ = index_store(store, n, case, str(tmp_path))
        base = {"store": store, "index": index, "checks": True}
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
