"""Audio loading with on-the-fly log-mel features at 0, 1 and 2 DataLoader workers.

    python -m benchmarks.audio_scaling [--utterances 600] [--repeats 7] [--quick] [--main-threads 1]

One generated corpus (speech-like signals as FLAC/WAV/OGG, RETURNN OggZip) is read through
``AudioSource`` + ``SeqLoader``. The 0-, 1- and 2-worker loaders are opened together and warmed up
(worker start-up and the page cache are outside the timing), then measured in turns, one epoch
each, rotating the order every round: load from other users of the shared machine then hits all
worker counts alike. Each epoch also records how many cores *other* processes used meanwhile
(/proc/stat less this process tree); epochs where that exceeds 0.15 cores are left out of the
medians (all are kept if fewer than two are calm; the JSON has every epoch). Per worker count:

- throughput: the consumer does nothing; sequences per second of wall time;
- computation time %: the consumer "trains" by sleeping a fixed step per batch (a GPU step costs
  the CPU nothing), RETURNN's definition (step time over wall time). The step is 1.25x the
  2-worker batch time, so a loader that scales hides its work and one that doesn't shows.

When the ``returnn`` package is importable, RETURNN's own pipeline (``OggZipDataset`` ->
``ReturnnDatasetIterDataPipe`` -> ``BatchingIterDataPipe`` -> DataLoader) reads the same zip:
decoding only (``features="raw"``; its log-mel needs librosa, used when installed). Results go to
``benchmarks/results/audio_scaling.json``; the load average before and after is recorded because
the machine is shared.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass

import torch

import seqloader as sl
from benchmarks.side_by_side import rotated
from seqloader.synthetic.audio import AudioCorpus, write_audio_corpus
from seqloader.transforms import SpecAugment

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results", "audio_scaling.json")
QUICK_RESULTS = os.path.join(HERE, "out", "audio_scaling.json")  # git-ignored
WORKERS = (0, 1, 2)
FEATURES = sl.LogMel(sample_rate=16000, n_mels=80)


@dataclass(frozen=True)
class CorpusSpec:
    utterances: int = 600
    seconds: tuple[float, float] = (1.0, 5.0)
    formats: tuple[str, ...] = ("flac", "wav", "ogg")
    sample_rate: int = 16000
    seed: int = 0

    def cached(self) -> AudioCorpus:
        """Written once per spec under the temp folder (never in the repository)."""
        key = hashlib.sha256(json.dumps(asdict(self)).encode()).hexdigest()[:12]
        folder = os.path.join(tempfile.gettempdir(), "seqloader-bench", f"audio-{key}")
        done = os.path.join(folder, "done.json")
        if not os.path.exists(done):
            corpus = write_audio_corpus(
                folder,
                self.utterances,
                name="corpus",
                formats=self.formats,
                sample_rates=(self.sample_rate,),
                seconds=self.seconds,
                seed=self.seed,
            )
            with open(done, "w") as f:
                json.dump(asdict(corpus), f)
        with open(done) as f:
            fields = json.load(f)
        return AudioCorpus(**{**fields, "files": tuple(fields["files"])})


def load_average() -> float:
    return os.getloadavg()[0]


FOREIGN_LIMIT = 0.15  # cores used by other processes above which an epoch counts as disturbed


class ForeignCpu:
    """CPU seconds spent by processes other than this one and its children (the DataLoader
    workers), from /proc/stat and psutil: the shared machine's load, measured per epoch."""

    def __init__(self) -> None:
        try:
            import psutil

            self._me = psutil.Process()
            with open("/proc/stat"):
                pass
        except (ImportError, OSError):
            self._me = None

    def _busy_and_ours(self) -> tuple[float, float]:
        with open("/proc/stat") as f:
            ticks = [int(v) for v in f.readline().split()[1:]]
        busy = (sum(ticks) - ticks[3] - ticks[4]) / os.sysconf("SC_CLK_TCK")  # less idle, iowait
        ours = 0.0
        for proc in [self._me, *self._me.children(recursive=True)]:
            try:
                t = proc.cpu_times()
                ours += t.user + t.system
            except Exception:  # a child that just exited
                pass
        return busy, ours

    def start(self) -> tuple[float, float]:
        return self._busy_and_ours() if self._me is not None else (0.0, 0.0)

    def cores_since(self, mark: tuple[float, float], wall: float) -> float:
        if self._me is None:
            return 0.0
        busy, ours = self._busy_and_ours()
        return max(0.0, (busy - mark[0]) - (ours - mark[1])) / wall


FOREIGN = ForeignCpu()


def timed_epoch(batches: Iterable, step_s: float = 0.0) -> tuple[float, float, int, float]:
    """(wall seconds, computation %, batches, cores used by other processes) of one epoch,
    sleeping ``step_s`` per batch as a training step that costs no CPU."""
    waited, count = 0.0, 0
    mark = FOREIGN.start()
    start = t = time.perf_counter()
    for _ in batches:
        waited += time.perf_counter() - t
        count += 1
        if step_s:
            time.sleep(step_s)
        t = time.perf_counter()
    wall = time.perf_counter() - start
    return wall, 100.0 * (wall - waited) / wall, count, FOREIGN.cores_since(mark, wall)


@dataclass
class Timings:
    walls: list[float]  # seconds per epoch
    comps: list[float]  # computation % per epoch
    foreign: list[float]  # cores used by other processes during the epoch
    batches: int = 0  # per epoch

    def median(self, values: list[float]) -> float:
        """Median over the undisturbed epochs (all of them if fewer than 2 are)."""
        calm = [v for v, f in zip(values, self.foreign, strict=True) if f < FOREIGN_LIMIT]
        return statistics.median(calm if len(calm) >= 2 else values)

    @property
    def calm_epochs(self) -> int:
        return sum(f < FOREIGN_LIMIT for f in self.foreign)


def rounds(
    epoch_iters: dict[int, Callable[[int], Iterable]],
    repeats: int,
    first_epoch: int,
    step_s: float = 0.0,
) -> dict[int, Timings]:
    """One epoch per worker count per round, rotating the order every round."""
    out = {w: Timings([], [], []) for w in epoch_iters}
    order = list(epoch_iters)
    for r in range(repeats):
        for w in rotated(order, r):
            wall, comp, out[w].batches, foreign = timed_epoch(
                epoch_iters[w](first_epoch + r), step_s
            )
            out[w].walls.append(wall)
            out[w].comps.append(comp)
            out[w].foreign.append(foreign)
    return out


def seqloader_setup(source: sl.AudioSource, transform, repeats: int) -> dict:
    """Throughput, then computation % at a step derived from it, on the same warm loaders."""
    max_frames = 3000 if "data" in source.keys else 480_000  # ~30 s of audio per batch either way
    loaders = {
        w: sl.SeqLoader(
            source,
            ordering="laplace:.16",
            max_frames=max_frames,
            seed=1,
            num_workers=w,
            transform=transform,
        )
        for w in WORKERS
    }
    try:
        for loader in loaders.values():
            list(loader.epoch(1))  # warm-up: worker start-up, page cache, filter banks
        iters = {w: loader.epoch for w, loader in loaders.items()}
        speed = rounds(iters, repeats, first_epoch=2)
        step_s = 1.25 * speed[2].median(speed[2].walls) / speed[2].batches
        busy = rounds(iters, repeats, first_epoch=2 + repeats, step_s=step_s)
    finally:
        for loader in loaders.values():
            loader.close()
    rows = [
        {
            "workers": w,
            "seqs": len(source),
            "batches": speed[w].batches,
            "wall_s": speed[w].walls,
            "foreign_cores": [round(f, 2) for f in speed[w].foreign + busy[w].foreign],
            "calm_epochs": f"{speed[w].calm_epochs}/{repeats} + {busy[w].calm_epochs}/{repeats}",
            "seqs_per_s": len(source) / speed[w].median(speed[w].walls),
            "computation_pct": round(busy[w].median(busy[w].comps), 1),
            "computation_pct_epochs": [round(c, 1) for c in busy[w].comps],
        }
        for w in WORKERS
    ]
    table = [
        {**t, "computation_pct": r["computation_pct"]}
        for t, r in zip(scaling_table(rows), rows, strict=True)
    ]
    return {
        "step_ms": round(1000 * step_s, 2),
        "rows": rows,
        "table": table,
        "x2_vs_1_paired": paired_ratio(speed[1], speed[2]),
    }


def paired_ratio(one: Timings, two: Timings) -> dict:
    """2-worker speed-up from the rounds where both epochs were calm (they ran back to back, so
    they saw the same machine): median of wall(1 worker) / wall(2 workers)."""
    calm = [
        a / b
        for a, b, fa, fb in zip(one.walls, two.walls, one.foreign, two.foreign, strict=True)
        if fa < FOREIGN_LIMIT and fb < FOREIGN_LIMIT
    ]
    return {
        "median": round(statistics.median(calm), 2) if calm else None,
        "calm_rounds": f"{len(calm)}/{len(one.walls)}",
        "each": [round(x, 2) for x in calm],
    }


def returnn_rows(corpus: AudioCorpus, repeats: int, features: str) -> list[dict] | str:
    """RETURNN's OggZipDataset pipeline on the same zip, or why it could not run."""
    try:
        from returnn.datasets.audio import OggZipDataset
        from returnn.torch.data.pipeline import BatchingIterDataPipe, collate_batch
        from returnn.torch.data.returnn_dataset_wrapper import ReturnnDatasetIterDataPipe
    except ImportError as e:
        return f"returnn not importable: {e}"
    if features != "raw":
        try:
            import librosa  # noqa: F401
        except ImportError:
            return "RETURNN's log-mel needs librosa, which is not installed"
    audio = {"features": features, "sample_rate": 16000}
    if features != "raw":
        audio["num_feature_filters"] = FEATURES.n_mels
    limit = 3000 if features != "raw" else 480_000
    loaders, counts = {}, {}
    for workers in WORKERS:
        dataset = OggZipDataset(
            path=corpus.oggzip, audio=audio, targets=None, seq_ordering="laplace:.16"
        )
        dataset.initialize()
        pipe = ReturnnDatasetIterDataPipe(dataset, shard_workers=True)
        batches = BatchingIterDataPipe(pipe, batch_size=limit, max_seqs=None)
        kwargs = {"persistent_workers": True} if workers else {}
        loaders[workers] = torch.utils.data.DataLoader(
            batches, batch_size=None, collate_fn=collate_batch, num_workers=workers, **kwargs
        )
        counts[workers] = sum(int(b["data"].shape[0]) for b in loaders[workers])  # warm-up
    speed = rounds({w: (lambda _e, dl=dl: iter(dl)) for w, dl in loaders.items()}, repeats, 0)
    del loaders
    return [
        {
            "workers": w,
            "seqs": counts[w],
            "wall_s": speed[w].walls,
            "foreign_cores": [round(f, 2) for f in speed[w].foreign],
            "calm_epochs": f"{speed[w].calm_epochs}/{repeats}",
            "seqs_per_s": counts[w] / speed[w].median(speed[w].walls),
        }
        for w in WORKERS
    ]


def scaling_table(rows: list[dict]) -> list[dict]:
    by = {r["workers"]: r["seqs_per_s"] for r in rows}
    return [
        {
            "workers": w,
            "seqs_per_s": round(by[w], 1),
            "x_vs_0_workers": round(by[w] / by[0], 2),
            "x_vs_1_worker": round(by[w] / by[1], 2) if 1 in by else None,
        }
        for w in sorted(by)
    ]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--utterances", type=int, default=600)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="60 utterances, 2 repeats")
    parser.add_argument(
        "--out", help="JSON path (default benchmarks/results/; with --quick benchmarks/out/)"
    )
    parser.add_argument(
        "--main-threads",
        type=int,
        default=1,
        help="torch threads of the main process (num_workers=0 computes features there)",
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(args.main_threads)
    n, repeats = (60, 2) if args.quick else (args.utterances, args.repeats)
    load_before = load_average()
    corpus = CorpusSpec(utterances=n).cached()

    setups = {
        "log-mel": (sl.AudioSource(corpus.oggzip, features=FEATURES, keys=("data",)), None),
        "log-mel+specaugment": (
            sl.AudioSource(corpus.oggzip, features=FEATURES, keys=("data",)),
            SpecAugment(),
        ),
        "decode only": (sl.AudioSource(corpus.oggzip, keys=("audio",)), None),
    }
    results: dict = {"setups": {}}
    for name, (source, transform) in setups.items():
        results["setups"][name] = seqloader_setup(source, transform, repeats)
    results["returnn"] = {
        "decode only (features='raw')": _returnn_table(corpus, repeats, "raw"),
        "log-mel (features='log_mel_filterbank')": _returnn_table(
            corpus, repeats, "log_mel_filterbank"
        ),
    }
    results["machine"] = {
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        "torch_threads_main": torch.get_num_threads(),
        "python": platform.python_version(),
        "load_avg_1min_before": round(load_before, 2),
        "load_avg_1min_after": round(load_average(), 2),
    }
    results["corpus"] = {**asdict(CorpusSpec(utterances=n)), "path": corpus.oggzip}
    results["repeats"] = repeats
    out = args.out or (QUICK_RESULTS if args.quick else RESULTS)
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        json.dump(results, f, indent=2)
    print_report(results)
    return results


def _returnn_table(corpus: AudioCorpus, repeats: int, features: str) -> list[dict] | str:
    rows = returnn_rows(corpus, repeats, features)
    return rows if isinstance(rows, str) else {"rows": rows, "table": scaling_table(rows)}


def print_report(results: dict) -> None:
    m = results["machine"]
    print(
        f"audio scaling, {results['corpus']['utterances']} utterances, medians of "
        f"{results['repeats']} epochs; {m['cpus']} CPUs, load {m['load_avg_1min_before']} -> "
        f"{m['load_avg_1min_after']}"
    )
    for name, s in results["setups"].items():
        pair = s["x2_vs_1_paired"]
        print(
            f"\nseqloader, {name} (simulated step {s['step_ms']} ms/batch; 2 vs 1 worker in calm "
            f"rounds: {pair['median'] or 'n/a'}x over {pair['calm_rounds']})"
        )
        print("workers  seqs/s   x vs 0   x vs 1   computation %   calm epochs")
        for t, r in zip(s["table"], s["rows"], strict=True):
            x1 = "" if t["x_vs_1_worker"] is None else f"{t['x_vs_1_worker']:.2f}"
            print(
                f"{t['workers']:>7}  {t['seqs_per_s']:>6.1f}   {t['x_vs_0_workers']:>6.2f}   "
                f"{x1:>6}   {t['computation_pct']:>13.1f}   {r['calm_epochs']}"
            )
    for name, r in results["returnn"].items():
        print(f"\nRETURNN OggZipDataset pipeline, {name}")
        if isinstance(r, str):
            print(f"  not run: {r}")
            continue
        print("workers  seqs/s   x vs 0   x vs 1   calm epochs")
        for t, row in zip(r["table"], r["rows"], strict=True):
            print(
                f"{t['workers']:>7}  {t['seqs_per_s']:>6.1f}   {t['x_vs_0_workers']:>6.2f}   "
                f"{t['x_vs_1_worker']:>6.2f}   {row['calm_epochs']}"
            )


if __name__ == "__main__":
    main()
