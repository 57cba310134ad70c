"""Tar-shard corpora (Lhotse Shar): ``ShardSource`` + ``SeqLoader`` against Lhotse's own pipeline,
the index build against reading the shards, random against sequential member reads.

    python -m benchmarks.shards [--utterances 240] [--repeats 5] [--quick]

One generated corpus (speech-like FLAC, 1-4 s, ``seqloader convert``'s Shar layout, 40 utterances
per shard) is measured, all in this run, every figure a median over ``--repeats`` interleaved
repetitions and reported as a ratio:

1. **Loading with on-the-fly features**, 0 and 2 DataLoader workers, two epochs after a warm-up
   epoch with one loader each (workers started once, as in training): seqloader
   (``ShardSource.lhotse_shar(features=KaldiFbank())``, ``ordering="buckets:10"``) vs Lhotse
   (``CutSet.from_shar`` + ``DynamicBucketingSampler(num_buckets=10)`` +
   ``K2SpeechRecognitionDataset(OnTheFlyFeatures(Fbank()))``, the sampler in the main process as
   Lhotse documents it), the same batch budget (``max_frames = 100 * max_duration``) and the same
   features (``KaldiFbank`` equals Lhotse's ``Fbank`` within 1e-4): sequences per second, and
   CPU seconds per audio hour (the trainer process and its workers, user + system, over the
   timed epochs). Lhotse runs in both of its settings, ``OnTheFlyFeatures``' default (a batch's
   features in one ``extract_batch``) and ``use_batch_extract=False`` (one utterance at a time);
   ``lhotse_best`` is the faster of the two in each repetition.
2. **Index build**: opening the corpus with an empty index directory (listings + tar headers) vs
   reading every shard file once (``read()`` of the bytes, page cache warm for both); seconds per
   GB of shards. **Second open**: bytes read through ``read()`` (``/proc/self/io`` rchar) beyond
   the index file itself.
3. **Random access**: every member read once through the index in a random order vs in shard order
   (page cache warm), and a full sequential ``tarfile`` stream of the same shards.
4. **Where a worker's time goes** (the profile behind 1): CPU time per utterance in this process
   with torch on one thread, as in a DataLoader worker, over the corpus in batches of 16 similar
   lengths: reading and decoding the FLAC members, ``KaldiFbank`` one utterance at a time and a
   batch at once (``KaldiFbank.many``), and Lhotse's ``Fbank().extract_batch`` on the same batches
   (what ``OnTheFlyFeatures`` calls per batch); minimum over the repetitions.

Results: ``benchmarks/results/shards.json`` (``--quick``: ``benchmarks/out/``).

``--reads`` measures instead **shard reads with the audio decoded** (no features) against each
peer's own reader (``benchmarks/shard_peers.py``): the same utterances written as Lhotse Shar
(``write_shards``), as WebDataset shards (``webdataset.ShardWriter``) and as NeMo tarred audio
(``nemo_convert``), each read by its peer and by ``ShardSource`` (``keys=["audio"]``,
``SeqLoader(max_seqs=16, ordering="random")``), batches of 16 padded float32 waveforms, 0 and 2
DataLoader workers, one warm-up epoch then ``--epochs`` timed epochs per loader, all
configurations interleaved per repetition (the order reversed every other one), each in a fresh
process (``--in-process``: all in this one); ``--base-src OLD/src`` measures seqloader's code
there beside (``seqloader@base``). Before the timed runs, the first utterances of each peer's
first batch are found, sample for sample, among seqloader's reads. The warm-up epoch (untimed)
checks the audio: its
utterance count, sample count and sum of the samples must equal seqloader's (NeMo's reader may
end an utterance one sample early: it reads ``int(duration * rate)`` samples); the timed epochs
only count the utterances of each batch, so the consumer costs nothing on either side. Ratio: seqloader's utterances per second / the peer's.
Results: ``benchmarks/results/shard_reads.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np

import seqloader as sl
from seqloader.audio import flac
from seqloader.shards import ShardSource, write_shards
from seqloader.synthetic.audio import write_audio_corpus

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "shards.json"
QUICK_RESULTS = HERE / "out" / "shards.json"
MAX_DURATION = 40.0  # seconds of audio per batch (Lhotse); seqloader: the same in frames
SHARD_SIZE = 40


def corpus(utterances: int) -> Path:
    """The Shar corpus, written once per size under the temp folder."""
    root = Path(tempfile.gettempdir()) / "seqloader-bench" / f"shar-{utterances}"
    shar = root / "shar"
    if not (root / "done").exists():
        audio = write_audio_corpus(root, utterances, seconds=(1.0, 4.0), seed=0)
        source = sl.AudioSource(audio.jsonl, keys=["audio", "text"])
        write_shards(source, shar, "shar", shard_size=SHARD_SIZE)
        (root / "done").write_text("ok")
    return shar


def tree_cpu_s() -> float:
    """CPU seconds (user + system) of this process and its living children (the DataLoader
    workers) so far."""
    import psutil

    me = psutil.Process()
    return sum(sum(p.cpu_times()[:2]) for p in [me, *me.children(recursive=True)])


def seqloader_rate(shar: Path, workers: int, index_dir: Path, epochs: int) -> tuple[float, float]:
    """(sequences per second, CPU seconds of the trainer and its workers per sequence) over
    ``epochs`` epochs after a warm-up epoch, one loader (its workers started once, as in
    training)."""
    src = ShardSource.lhotse_shar(shar, features=sl.KaldiFbank(), index_dir=index_dir)
    with sl.SeqLoader(
        src,
        ordering="buckets:10",
        max_frames=int(MAX_DURATION * 100),
        num_workers=workers,
        seed=1,
    ) as loader:
        for _ in loader.epoch(1):
            pass
        start, cpu, n = time.perf_counter(), tree_cpu_s(), 0
        for epoch in range(2, 2 + epochs):
            n += sum(int(b.mask.sum()) for b in loader.epoch(epoch))
        return n / (time.perf_counter() - start), (tree_cpu_s() - cpu) / n


def lhotse_rate(
    shar: Path, workers: int, epochs: int, batch_extract: bool = True
) -> tuple[float, float]:
    """The same for Lhotse's pipeline: persistent DataLoader workers, ``sampler.set_epoch``;
    ``OnTheFlyFeatures(use_batch_extract=batch_extract)`` (its default: a batch's features in one
    call; False: one utterance at a time)."""
    import torch
    from lhotse import CutSet, Fbank
    from lhotse.dataset import DynamicBucketingSampler, K2SpeechRecognitionDataset
    from lhotse.dataset.input_strategies import OnTheFlyFeatures

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cuts = CutSet.from_shar(in_dir=shar)
        sampler = DynamicBucketingSampler(
            cuts, max_duration=MAX_DURATION, num_buckets=10, shuffle=True, seed=1
        )
        dataset = K2SpeechRecognitionDataset(
            input_strategy=OnTheFlyFeatures(Fbank(), use_batch_extract=batch_extract)
        )
        loader = torch.utils.data.DataLoader(
            dataset,
            sampler=sampler,
            batch_size=None,
            num_workers=workers,
            persistent_workers=workers > 0,
        )
        sampler.set_epoch(1)
        for _ in loader:
            pass
        start, cpu, n = time.perf_counter(), tree_cpu_s(), 0
        for epoch in range(2, 2 + epochs):
            sampler.set_epoch(epoch)
            n += sum(int(b["inputs"].shape[0]) for b in loader)
        return n / (time.perf_counter() - start), (tree_cpu_s() - cpu) / n


def audio_hours(shar: Path) -> float:
    """Hours of audio in the corpus (the listings' durations)."""
    src = ShardSource.lhotse_shar(shar, keys=["audio"], index_dir=shar.parent / "hours-index")
    return float(src.durations().sum()) / 3600


def lhotse_ratios(runs: dict[str, list[float]], cpu_runs: dict[str, list[float]]) -> dict:
    """seqloader over each Lhotse setting and over Lhotse's best one in each repetition:
    sequences per second (higher is seqloader's), and Lhotse's CPU per audio hour over seqloader's
    (higher: seqloader needs less), medians over the repetitions, and each repetition's."""
    out: dict[str, Any] = {}
    for w in (0, 2):
        ours, ours_cpu = runs[f"seqloader_{w}w"], cpu_runs[f"seqloader_{w}w"]
        batch, each = runs[f"lhotse_{w}w"], runs[f"lhotse_each_{w}w"]
        best = [max(a, b) for a, b in zip(batch, each)]
        best_cpu = [
            cpu_runs[f"lhotse_{w}w"][i] if batch[i] >= each[i] else cpu_runs[f"lhotse_each_{w}w"][i]
            for i in range(len(best))
        ]
        for name, theirs, theirs_cpu in (
            ("lhotse", batch, cpu_runs[f"lhotse_{w}w"]),
            ("lhotse_each", each, cpu_runs[f"lhotse_each_{w}w"]),
            ("lhotse_best", best, best_cpu),
        ):
            speed = [a / b for a, b in zip(ours, theirs)]
            cpu = [b / a for a, b in zip(ours_cpu, theirs_cpu)]
            out[f"seqloader_over_{name}_{w}w"] = float(statistics.median(speed))
            out[f"seqloader_over_{name}_{w}w_per_run"] = speed
            out[f"{name}_cpu_per_audio_hour_over_seqloader_{w}w"] = float(statistics.median(cpu))
            out[f"{name}_cpu_per_audio_hour_over_seqloader_{w}w_per_run"] = cpu
    return out


def profile_figures(shar: Path, index_dir: Path) -> dict:
    """CPU milliseconds per utterance of a worker's steps (torch on one thread, as in workers)."""
    import torch
    from lhotse import Fbank

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        audio = ShardSource.lhotse_shar(shar, keys=["audio"], index_dir=index_dir)
        fbank = sl.KaldiFbank()
        order = np.argsort(audio.lengths("audio"), kind="stable")
        batches = [order[i : i + 16] for i in range(0, len(order), 16)]
        waves = [[seq["audio"] for seq in audio.read_many(b)] for b in batches]
        lhotse_fbank = Fbank()

        def cpu_ms(step) -> float:
            start = time.process_time()
            for b, w in zip(batches, waves):
                step(b, w)
            return (time.process_time() - start) * 1e3 / len(order)

        with mock.patch.object(flac, "_dr_flac", lambda: None):  # libsndfile, as before
            libsndfile_ms = cpu_ms(lambda b, w: audio.read_many(b))
        return {
            "read_and_decode_ms": cpu_ms(lambda b, w: audio.read_many(b)),
            "read_and_decode_libsndfile_ms": libsndfile_ms,
            "kaldi_fbank_each_ms": cpu_ms(lambda b, w: [fbank(x) for x in w]),
            "kaldi_fbank_batch_ms": cpu_ms(lambda b, w: fbank.many(w)),
            "lhotse_fbank_batch_ms": cpu_ms(lambda b, w: lhotse_fbank.extract_batch(w, 16000)),
        }
    finally:
        torch.set_num_threads(threads)


def rchar() -> int:
    with open("/proc/self/io") as fh:
        for line in fh:
            if line.startswith("rchar:"):
                return int(line.split()[1])
    return 0


def index_figures(shar: Path, scratch: Path) -> dict:
    tars = sorted(shar.glob("*.tar")) + sorted(shar.glob("cuts.*"))
    total = sum(p.stat().st_size for p in tars)
    for p in tars:  # warm the page cache for both sides
        p.read_bytes()
    start = time.perf_counter()
    for p in tars:
        with open(p, "rb") as fh:
            while fh.read(1 << 20):
                pass
    read_s = time.perf_counter() - start
    index_dir = scratch / f"index-{time.monotonic_ns()}"
    start = time.perf_counter()
    src = ShardSource.lhotse_shar(shar, keys=["audio"], index_dir=index_dir)
    build_s = time.perf_counter() - start
    assert src.index_built
    before = rchar()
    start = time.perf_counter()
    again = ShardSource.lhotse_shar(shar, keys=["audio"], index_dir=index_dir)
    reopen_s = time.perf_counter() - start
    read_again = rchar() - before
    assert not again.index_built
    store = next(index_dir.glob("*.cols"))
    return {
        "gb": total / 1e9,
        "build_s_per_gb": build_s / (total / 1e9),
        "read_s_per_gb": read_s / (total / 1e9),
        "build_over_read": build_s / read_s,
        "second_open_s": reopen_s,
        "second_open_rchar_bytes": read_again,
        "index_bytes": store.stat().st_size,
    }


def access_figures(shar: Path, scratch: Path) -> dict:
    import tarfile

    src = ShardSource.lhotse_shar(shar, keys=["audio"], index_dir=scratch / "access")
    order = np.arange(len(src))
    shuffled = np.random.default_rng(0).permutation(len(src))

    def members(indices: np.ndarray) -> float:
        start = time.perf_counter()
        for i in indices.tolist():
            src._member(i, src.shard_of(i))
        return time.perf_counter() - start

    def stream() -> float:
        start = time.perf_counter()
        for p in sorted(shar.glob("recording.*.tar")):
            with tarfile.open(p, "r|") as tar:
                for info in tar:
                    fh = tar.extractfile(info)
                    if fh is not None:
                        fh.read()
        return time.perf_counter() - start

    members(order)  # warm
    seq, rnd, st = members(order), members(shuffled), stream()
    return {"random_s": rnd, "sequential_s": seq, "stream_s": st}


READ_BATCH = 16


def read_corpora(utterances: int) -> dict[str, Any]:
    """The Shar corpus of ``corpus`` also as WebDataset and NeMo tarred shards (written once)."""
    from benchmarks.shard_peers import write_nemo, write_webdataset

    shar = corpus(utterances)
    root = shar.parent
    jsonl = root / "corpus.jsonl"
    if not (root / "peers-done").exists():
        write_webdataset(jsonl, root / "wds", SHARD_SIZE)
        write_nemo(jsonl, root / "nemo", max(1, utterances // SHARD_SIZE))
        (root / "peers-done").write_text("ok")
    last = (utterances - 1) // SHARD_SIZE
    return {
        "lhotse": shar,
        "webdataset": str(root / "wds" / f"shard-{{000000..{last:06d}}}.tar"),
        "nemo": root / "nemo",
    }


def _tally(batches: Any) -> np.ndarray:
    """Utterances, samples and the samples' sum of padded ``(audio, lengths)`` batches (the
    warm-up epoch's check that every side reads the same audio)."""
    out = np.zeros(3)
    for audio, lengths in batches:
        out += (len(lengths), int(lengths.sum()), float(audio.double().sum()))
    return out


def all_cpu_s() -> float:
    """CPU seconds (user + system) of this process (``process_time``: the clock ticks of
    ``psutil`` are 10 ms, coarse against a 0-worker pass of ~0.2 s), its living children and
    the children it has reaped (a DataLoader without persistent workers ends its workers with
    each epoch)."""
    import psutil

    reaped = os.times()
    living = sum(sum(p.cpu_times()[:2]) for p in psutil.Process().children(recursive=True))
    return time.process_time() + living + reaped.children_user + reaped.children_system


def seqloader_reads(src: ShardSource, workers: int, epochs: int) -> tuple[float, float, np.ndarray]:
    """(utterances per second, CPU seconds per utterance, the warm-up epoch's tally)."""
    with sl.SeqLoader(
        src, ordering="random", max_seqs=READ_BATCH, num_workers=workers, seed=1
    ) as loader:

        def batches(epoch: int) -> Iterator[tuple[Any, Any]]:
            for b in loader.epoch(epoch):
                yield b["audio"], b.lengths["audio"]

        tally = _tally(batches(1))
        cpu, start = all_cpu_s(), time.perf_counter()
        n = sum(len(lengths) for epoch in range(2, 2 + epochs) for _, lengths in batches(epoch))
        wall, cpu = time.perf_counter() - start, all_cpu_s() - cpu
        return n / wall, cpu / n, tally


def peer_reads(who: str, where: Any, workers: int, epochs: int) -> tuple[float, float, np.ndarray]:
    """``seqloader_reads`` of the peer's own reader."""
    from benchmarks import shard_peers

    sampler = None
    if who == "lhotse":
        loader, sampler = shard_peers.lhotse_loader(where, workers, READ_BATCH)
    elif who == "webdataset":
        loader = shard_peers.webdataset_loader(where, workers, READ_BATCH)
    else:
        loader = shard_peers.nemo_loader(where, workers, READ_BATCH)

    def batches(epoch: int) -> Any:
        if sampler is not None:
            sampler.set_epoch(epoch)
        return iter(loader)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tally = _tally(batches(1))
        cpu, start = all_cpu_s(), time.perf_counter()
        n = sum(len(lengths) for epoch in range(2, 2 + epochs) for _, lengths in batches(epoch))
        wall, cpu = time.perf_counter() - start, all_cpu_s() - cpu
    return n / wall, cpu / n, tally


def read_source(c: dict[str, Any], who: str, index_dir: Path) -> ShardSource:
    """seqloader's ``ShardSource`` over peer ``who``'s shards, the audio decoded."""
    if who == "lhotse":
        return ShardSource.lhotse_shar(c["lhotse"], keys=["audio"], index_dir=index_dir)
    if who == "webdataset":
        return ShardSource.webdataset(c["webdataset"], keys=["audio"], index_dir=index_dir)
    tars = sorted(str(p) for p in Path(c["nemo"]).glob("audio_*.tar"))
    return ShardSource.nemo(
        str(Path(c["nemo"]) / "tarred_audio_manifest.json"),
        tars,
        keys=["audio"],
        index_dir=index_dir,
    )


def read_sources(c: dict[str, Any], index_dir: Path) -> dict[str, ShardSource]:
    """``read_source`` over every peer's shards."""
    return {who: read_source(c, who, index_dir) for who in ("lhotse", "webdataset", "nemo")}


def reads_child(cfg: dict) -> dict:
    """One configuration of ``--reads`` (``side``: ``seqloader`` or the peer; ``who``: whose
    shards; ``workers``), in a fresh process (``--child``) or in this one."""
    c = {k: Path(v) if k != "webdataset" else v for k, v in cfg["corpora"].items()}
    who, workers, epochs = cfg["who"], cfg["workers"], cfg["epochs"]
    if cfg["side"] == "seqloader":
        src = read_source(c, who, Path(cfg["index_dir"]))
        rate, cpu, tally = seqloader_reads(src, workers, epochs)
    else:
        rate, cpu, tally = peer_reads(who, c[who], workers, epochs)
    return {"rate": rate, "cpu": cpu, "tally": tally.tolist(), "load": os.getloadavg()}


def same_utterances(c: dict[str, Any], sources: dict[str, ShardSource], count: int = 4) -> dict:
    """The first ``count`` utterances of each peer's first batch (0 workers) found among
    seqloader's reads of the same shards, sample for sample (NeMo's may end one sample early)
    -> how many were compared per peer; raises where one is not found exactly once."""
    from benchmarks import shard_peers

    checked = {}
    for who, src in sources.items():
        ours = [src.read(i)["audio"] for i in range(len(src))]
        if who == "lhotse":
            loader, _ = shard_peers.lhotse_loader(c[who], 0, READ_BATCH)
        elif who == "webdataset":
            loader = shard_peers.webdataset_loader(c[who], 0, READ_BATCH)
        else:
            loader = shard_peers.nemo_loader(c[who], 0, READ_BATCH)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            audio, lengths = next(iter(loader))
        for row, n in list(zip(audio.numpy(), lengths.tolist()))[:count]:
            theirs = np.asarray(row[:n], np.float32)
            found = [
                i
                for i, w in enumerate(ours)
                if len(w) - n in (0, int(who == "nemo")) and np.array_equal(w[:n], theirs)
            ]
            if len(found) != 1:
                raise AssertionError(f"{who}: an utterance of {n} samples matches {found}")
        checked[who] = count
    return checked


def reads_main(args: argparse.Namespace) -> dict:
    """``--reads``: each peer's reader against ``ShardSource`` on the same shards, every
    configuration in a fresh process (``args.fresh``; in this process otherwise), the
    configurations' order reversed every other repetition; with ``args.base_src``, seqloader's
    code there is measured beside (``seqloader@base``)."""
    from benchmarks.fresh import run_child

    c = read_corpora(args.utterances)
    scratch = Path(tempfile.mkdtemp(prefix="seqloader-shard-reads-"))
    sources = read_sources(c, scratch / "idx")  # the index, built once before the children
    compared = same_utterances(c, sources)
    fresh, base = getattr(args, "fresh", False), getattr(args, "base_src", None)
    corpora = {k: str(v) for k, v in c.items()}
    runs: dict[str, list[float]] = {}
    cpus: dict[str, list[float]] = {}  # CPU seconds per utterance (steadier on a loaded machine)
    tallies: dict[str, np.ndarray] = {}
    loads = [os.getloadavg()]
    configs = [(who, w) for w in (0, 2) for who in ("lhotse", "webdataset", "nemo")]
    for r in range(args.repeats):
        for who, workers in configs if r % 2 == 0 else configs[::-1]:
            sides = ["seqloader", *(["seqloader@base"] if base else []), who]
            for side in sides if r % 2 == 0 else sides[::-1]:
                cfg = {
                    "side": side.split("@")[0],
                    "code": "base" if side.endswith("@base") else "",
                    "who": who,
                    "workers": workers,
                    "epochs": args.epochs,
                    "corpora": corpora,
                    "index_dir": str(scratch / ("idx-base" if side.endswith("@base") else "idx")),
                    "label": f"{side} on {who}, {workers} workers",
                }
                got = run_child("benchmarks.shards", cfg, base, 900) if fresh else reads_child(cfg)
                key = f"{side}_on_{who}_{workers}w"
                runs.setdefault(key, []).append(got["rate"])
                cpus.setdefault(key, []).append(got["cpu"])
                tallies[key] = np.asarray(got["tally"])
                loads.append(tuple(got["load"]))
    problems = []
    for key, tally in tallies.items():
        mine = tallies["seqloader_on_" + key.split("_on_")[1]]
        # NeMo reads int(duration * rate) samples: one fewer where the float product falls
        # short; each such sample is within [-1, 1]
        short = mine[1] - tally[1] if key.startswith("nemo") else 0
        if (
            tally[0] != mine[0]
            or not 0 <= short <= tally[0]
            or abs(tally[2] - mine[2]) > short + 1e-6 * max(1.0, abs(mine[2]))
        ):
            problems.append(f"{key}: {tally.tolist()} != seqloader's {mine.tolist()}")
    if problems:
        raise AssertionError("not the same audio: " + "; ".join(problems))
    ratios: dict[str, Any] = {}
    for who, workers in configs:
        for side in ["seqloader", *(["seqloader@base"] if base else [])]:
            ours, theirs = runs[f"{side}_on_{who}_{workers}w"], runs[f"{who}_on_{who}_{workers}w"]
            name = side.replace("@", "_at_")
            per_run = [a / b for a, b in zip(ours, theirs)]
            ratios[f"{name}_over_{who}_{workers}w"] = float(statistics.median(per_run))
            ratios[f"{name}_over_{who}_{workers}w_per_run"] = [float(x) for x in per_run]
            # the peer's CPU per utterance over seqloader's (how many times less CPU it takes)
            mine, peer = cpus[f"{side}_on_{who}_{workers}w"], cpus[f"{who}_on_{who}_{workers}w"]
            per_run = [b / a for a, b in zip(mine, peer)]
            ratios[f"cpu_{name}_over_{who}_{workers}w"] = float(statistics.median(per_run))
            ratios[f"cpu_{name}_over_{who}_{workers}w_per_run"] = [float(x) for x in per_run]
    return {
        "utterances": args.utterances,
        "repeats": args.repeats,
        "fresh_processes": fresh,
        "epochs_timed": f"{args.epochs} per configuration, after a warm-up epoch",
        "batch": f"{READ_BATCH} utterances, padded float32 audio",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "ratios": ratios,
        "decoders": decoders(),
        "utterances_compared_sample_for_sample": compared,
        "utterances_per_s_medians": {k: float(statistics.median(v)) for k, v in runs.items()},
        "cpu_us_per_utterance_medians": {
            k: float(statistics.median(v)) * 1e6 for k, v in cpus.items()
        },
        "per_epoch_utterances_samples_sum": {k: v.tolist() for k, v in tallies.items()},
        "load_average_before_after": [loads[0], os.getloadavg()],
        "load_average_range_1min": [min(x[0] for x in loads), max(x[0] for x in loads)],
    }


def decoders() -> dict[str, str]:
    """Which library decodes the FLAC members on each side (the peers keep their own)."""
    from lhotse.audio.backend import get_current_audio_backend

    ours = flac.flac_decoder()
    backend = get_current_audio_backend()
    tried = [type(b).__name__ for b in getattr(backend, "backends", [])]
    return {
        "seqloader": f"{ours} ({'dr_flac' if ours == 'miniaudio' else 'libsndfile'}) for FLAC",
        "lhotse": f"{type(backend).__name__} {tried} (FLAC: LibsndfileBackend, its first that "
        "reads FLAC)",
        "webdataset": "soundfile (libsndfile), benchmarks/shard_peers.py",
        "nemo": "soundfile (libsndfile), as NeMo's AudioSegment, benchmarks/shard_peers.py",
    }


def results_path(args: argparse.Namespace, name: str) -> Path:
    """Where a run's results go: ``results/NAME.json``, ``NAME-LABEL.json`` with ``--label``
    (several runs kept side by side), ``out/`` with ``--quick``."""
    base = QUICK_RESULTS if args.quick else RESULTS
    return base.with_name(f"{name}-{args.label}.json" if args.label else f"{name}.json")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--utterances", type=int, default=240)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--epochs", type=int, default=4, help="timed epochs per configuration")
    p.add_argument("--quick", action="store_true", help="60 utterances, 2 repeats, out/ only")
    p.add_argument("--reads", action="store_true", help="audio reads against each peer's reader")
    p.add_argument("--label", default="", help="results file NAME-LABEL.json (keep several runs)")
    p.add_argument(
        "--in-process",
        dest="fresh",
        action="store_false",
        help="--reads: every configuration in this process (default: a fresh process each)",
    )
    p.add_argument("--base-src", help="--reads: src/ of another checkout, measured beside")
    p.add_argument("--child", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        print(json.dumps(reads_child(json.loads(args.child))))
        return 0
    if args.quick:
        args.utterances, args.repeats, args.epochs = 60, 2, 2
    if args.reads:
        reads = reads_main(args)
        out = results_path(args, "shard_reads")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(reads, indent=1) + "\n")
        print(json.dumps({k: v for k, v in reads["ratios"].items() if "per_run" not in k}))
        return 0
    shar = corpus(args.utterances)
    scratch = Path(tempfile.mkdtemp(prefix="seqloader-shards-bench-"))
    runs: dict[str, list[float]] = {}
    cpu_runs: dict[str, list[float]] = {}  # CPU seconds per audio hour
    hour_per_seq = audio_hours(shar) / args.utterances
    index_runs, access_runs, profile_runs = [], [], []
    load_before = os.getloadavg()
    for r in range(args.repeats):
        configs = [(who, w) for w in (0, 2) for who in ("seqloader", "lhotse", "lhotse_each")]
        if r % 2:
            configs.reverse()
        for who, workers in configs:
            if who == "seqloader":
                rate, cpu = seqloader_rate(shar, workers, scratch / "idx", args.epochs)
            else:
                rate, cpu = lhotse_rate(shar, workers, args.epochs, who == "lhotse")
            runs.setdefault(f"{who}_{workers}w", []).append(rate)
            cpu_runs.setdefault(f"{who}_{workers}w", []).append(cpu / hour_per_seq)
        index_runs.append(index_figures(shar, scratch))
        access_runs.append(access_figures(shar, scratch))
        profile_runs.append(profile_figures(shar, scratch / "idx"))

    def med(values: list[float]) -> float:
        return float(statistics.median(values))

    seqs_per_s = {k: med(v) for k, v in runs.items()}
    index = {k: med([r[k] for r in index_runs]) for k in index_runs[0]}
    access = {k: med([r[k] for r in access_runs]) for k in access_runs[0]}
    profile = {k: min(r[k] for r in profile_runs) for k in profile_runs[0]}
    seqloader_ms = profile["read_and_decode_ms"] + profile["kaldi_fbank_batch_ms"]
    result = {
        "utterances": args.utterances,
        "repeats": args.repeats,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "epochs_timed": f"{args.epochs} per configuration, after a warm-up epoch (workers "
        "started once)",
        "ratios": {
            **lhotse_ratios(runs, cpu_runs),
            "index_build_over_one_read": index["build_over_read"],
            "random_over_sequential_members": access["random_s"] / access["sequential_s"],
            "indexed_members_over_tar_stream": access["sequential_s"] / access["stream_s"],
            "kaldi_fbank_each_over_batch": profile["kaldi_fbank_each_ms"]
            / profile["kaldi_fbank_batch_ms"],
            "lhotse_fbank_batch_over_kaldi_fbank_batch": profile["lhotse_fbank_batch_ms"]
            / profile["kaldi_fbank_batch_ms"],
            "decode_share_of_seqloader_worker_cpu": profile["read_and_decode_ms"] / seqloader_ms,
            "libsndfile_over_seqloader_decoder_read_and_decode": profile[
                "read_and_decode_libsndfile_ms"
            ]
            / profile["read_and_decode_ms"],
        },
        "decoders": decoders(),
        "worker_cpu_ms_per_utterance": profile,
        "index": index,
        "seqs_per_s_medians": seqs_per_s,
        "cpu_s_per_audio_hour_medians": {k: med(v) for k, v in cpu_runs.items()},
        "load_average_before_after": [load_before, os.getloadavg()],
    }
    out = results_path(args, "shards")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["ratios"], indent=1))
    print(
        f"second open: {index['second_open_rchar_bytes']} bytes read; index "
        f"{index['index_bytes']} bytes for {index['gb']:.3f} GB of shards"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
