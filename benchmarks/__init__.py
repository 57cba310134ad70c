"""Benchmarks: ``make bench`` / ``python -m benchmarks [--quick]``.

Builds a reference corpus (RETURNN-format HDF as RETURNN's SimpleHDFWriter writes it, plus a
contiguous copy), then runs side by side, in fresh processes and several interleaved repetitions:
a bare h5py read-and-pad loop, a hand-written torch DataLoader, RETURNN's PyTorch pipeline (when
``returnn`` is installed) and seqloader, each with 0, 1 and 2 workers. Reports sequences/s,
frames/s, time to first batch, main-process CPU time per batch, peak RSS (main + workers) and
computation time % with a simulated accelerator step; prints ratios vs the DataLoader and RETURNN,
the issue's targets and the memory-copy limit; writes JSON and a PNG. See docs/performance.md.

Separate modules measure one question each (not part of the default suite): ``benchmarks.looptime``
(computation time as the loop sees it), ``benchmarks.handover``, ``benchmarks.onecopy``,
``benchmarks.buckets``, ``benchmarks.chunk_planning`` (chunked against unchunked planning),
``benchmarks.speed_planning`` (speed perturbation: planned factors against ``min_speed`` and Lhotse),
``benchmarks.remote`` (remote files through the plan-driven cache under a
throttled network; docs/remote.md). ``benchmarks.ratios`` turns a suite result into its ratios
(per repetition and median) without absolute figures.
"""
