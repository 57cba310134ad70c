"""End-to-end smoke test: a MemorySource through SeqLoader, one epoch, all sequences once."""

import numpy as np

import seqloader as sl


def test_one_epoch_exactly_once_single_rank():
    rng = np.random.default_rng(0)
    lens = rng.integers(1, 50, size=37)
    src = sl.MemorySource({"data": [rng.standard_normal((n, 3)).astype(np.float32) for n in lens]})
    loader = sl.SeqLoader(src, ordering="random", max_seqs=4, max_frames=120, seed=3)
    seen = []
    for batch in loader.epoch(1):
        assert batch["data"].shape[0] == batch.size
        for row, i in enumerate(batch.seq_indices.tolist()):
            n = int(batch.lengths["data"][row])
            assert n == lens[i]
            np.testing.assert_array_equal(batch["data"][row, :n].numpy(), src.read(i)["data"])
            assert not batch["data"][row, n:].any()
        seen.extend(batch.seq_indices.tolist())
    assert sorted(seen) == list(range(37))
    assert loader.report().seqs == 37


def test_report_keeps_the_wait_distribution_after_the_first_batch():
    """The histogram counts every batch after the first; its quantiles are ordered upper bounds
    within 2x, capped by the longest wait; the format line shows them."""
    from seqloader.loading.counts import KeyCounts
    from seqloader.trainer.report import EpochMeter, EpochReport

    now = [0.0]  # a clock the test moves
    report = EpochReport(1, 0, 1)
    meter = EpochMeter(report, "data", clock=lambda: now[0])
    waits = [0.3, 0.0004, 0.0005, 0.0003, 0.0004, 0.012, 0.0005, 0.0004, 0.0006, 0.0005]
    for w in waits:  # known waits for each batch, then a 10 ms training step
        meter.before_next()
        now[0] += w
        meter.count_handed(KeyCounts(1, 0, 1, 1))
        now[0] += 0.01
    meter.finish()
    assert report.first_batch_s >= 0.3 and sum(report.wait_histogram) == len(waits) - 1
    assert report.max_wait_s >= 0.012
    q = report.wait_summary_ms()
    assert q["p50"] <= q["p90"] <= q["p99"] <= q["max"]
    assert 0.5 <= q["p50"] <= 2 * 0.6  # true median 0.5 ms; bound within 2x
    assert q["p99"] == q["max"]  # the 12 ms stall
    assert "then per batch median <=" in report.format()
    assert report.to_dict()["wait_ms_after_first_batch"] == q
    assert EpochReport(1, 0, 1).wait_summary_ms() is None  # no batch after the first yet
