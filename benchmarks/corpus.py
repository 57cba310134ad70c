"""The reference corpus: RETURNN-format HDF files with speech-like sequences.

Written with h5py in the layout RETURNN's ``SimpleHDFWriter`` produces (resizable datasets whose
chunk shape h5py guesses from the first sequence, variable-length utf-8 tags, int32
``seqLengths`` with one column per key), because that is what users' files look like and what makes
per-sequence reads slow. A second, contiguous copy of the same data (made with
``seqloader.convert_contiguous``, as ``seqloader convert`` does) shows what a memory-mappable
layout allows. Files are cached by their parameters, so repeated runs skip the (slow) writing.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass

import h5py
import numpy as np

CORPUS_VERSION = 2  # bump when the files' layout changes, so cached corpora are rewritten


@dataclass(frozen=True)
class CorpusSpec:
    """What the corpus holds. Lengths are log-normal (median ``median_frames``) and clipped to
    ``[min_frames, max_frames]``; labels are sparse int32, about one per ``frames_per_label``."""

    num_seqs: int = 10_000
    median_frames: int = 600
    sigma: float = 0.4
    min_frames: int = 50
    max_frames: int = 2_000
    dim: int = 40
    vocab: int = 1_000
    frames_per_label: int = 8
    seed: int = 1

    def name(self) -> str:
        return (
            f"ref-n{self.num_seqs}-m{self.median_frames}-s{self.sigma}-d{self.dim}"
            f"-v{self.vocab}-r{self.seed}"
        )

    def lengths(self) -> tuple[np.ndarray, np.ndarray]:
        """(frames int64 ``[n]``, labels int64 ``[n]``) — a pure function of the spec."""
        rng = np.random.default_rng(self.seed)
        frames = rng.lognormal(np.log(self.median_frames), self.sigma, self.num_seqs)
        frames = np.clip(np.rint(frames), self.min_frames, self.max_frames).astype(np.int64)
        labels = np.maximum(frames // self.frames_per_label, 1)
        return frames, labels


@dataclass(frozen=True)
class Corpus:
    spec: CorpusSpec
    chunked: str  # RETURNN-like: resizable, small chunks
    contiguous: str  # same data, contiguous datasets (memory-mappable)
    frames: np.ndarray  # int64 [n]
    labels: np.ndarray  # int64 [n]

    @property
    def data_bytes(self) -> int:
        """Bytes of ``data`` features in the whole corpus (what a perfect reader must move)."""
        return int(self.frames.sum()) * self.spec.dim * 4


def _features(rng: np.random.Generator, frames: int, dim: int) -> np.ndarray:
    return rng.standard_normal((frames, dim), dtype=np.float32)


def write_corpus(path: str, spec: CorpusSpec, contiguous: bool = False) -> None:
    """Write the corpus to ``path`` (via a temporary name, so a killed run leaves no half file).
    ``contiguous`` writes the same bytes without chunks (the benchmark itself makes its contiguous
    copy with ``seqloader.convert_contiguous``, as a user would)."""
    frames, labels = spec.lengths()
    n = spec.num_seqs
    tmp = path + ".tmp"
    rng = np.random.default_rng([spec.seed, 7])
    total_f, total_l = int(frames.sum()), int(labels.sum())
    with h5py.File(tmp, "w") as f:
        f.attrs["numTimesteps"] = total_f
        f.attrs["inputPattSize"] = spec.dim
        f.attrs["numDims"] = 1
        f.attrs["numLabels"] = spec.dim
        f.attrs["numSeqs"] = n
        f.create_dataset("labels", (0,), dtype="S5")
        if contiguous:
            inputs = f.create_dataset("inputs", (total_f, spec.dim), dtype=np.float32)
            classes = f.create_dataset("targets/data/classes", (total_l,), dtype=np.int32)
            f.create_dataset("seqLengths", data=np.stack([frames, labels], 1).astype(np.int32))
        else:
            # SimpleHDFWriter: created with the first sequence's shape and unlimited maxshape, so
            # h5py picks a small chunk shape; we then grow the datasets (one resize, same chunks).
            inputs = f.create_dataset(
                "inputs", (int(frames[0]), spec.dim), np.float32, maxshape=(None, None)
            )
            inputs.resize(total_f, axis=0)
            classes = f.create_dataset(
                "targets/data/classes", (int(labels[0]),), np.int32, maxshape=(None,)
            )
            classes.resize((total_l,))
            lens = f.create_dataset("seqLengths", (0, 2), dtype="i", maxshape=(None, None))
            lens.resize(n, axis=0)
            lens[:] = np.stack([frames, labels], 1)
        f.create_group("targets/size")
        f["targets/size"].attrs["classes"] = [spec.vocab, 1]
        f.create_group("targets/labels")
        tags = [f"corpus/seq-{i:07d}" for i in range(n)]
        vlen = h5py.string_dtype("utf-8")
        if contiguous:
            f.create_dataset("seqTags", data=np.array(tags, dtype=object), dtype=vlen)
        else:
            t = f.create_dataset("seqTags", (0,), dtype=vlen, maxshape=(None,))
            t.resize((n,))
            t[:] = np.array(tags, dtype=object)
        # write in slabs of ~64 MB: fast, and bounded memory for large corpora
        pos_f = pos_l = 0
        i = 0
        while i < n:
            j = i
            slab_frames = 0
            while j < n and slab_frames < 400_000:
                slab_frames += int(frames[j])
                j += 1
            nl = int(labels[i:j].sum())
            inputs[pos_f : pos_f + slab_frames] = _features(rng, slab_frames, spec.dim)
            classes[pos_l : pos_l + nl] = rng.integers(0, spec.vocab, nl, dtype=np.int32)
            pos_f += slab_frames
            pos_l += nl
            i = j
    os.replace(tmp, path)


def build_corpus(directory: str, spec: CorpusSpec, log=print) -> Corpus:
    """The chunked and contiguous corpus files for ``spec`` under ``directory`` (cached)."""
    os.makedirs(directory, exist_ok=True)
    base = os.path.join(directory, spec.name())
    paths = {"chunked": base + ".chunked.hdf", "contiguous": base + ".contiguous.hdf"}
    meta = base + ".json"
    want = {"version": CORPUS_VERSION, "spec": asdict(spec)}
    fresh = os.path.exists(meta) and all(os.path.exists(p) for p in paths.values())
    if fresh:
        with open(meta) as fh:
            fresh = json.load(fh) == want
    if not fresh:
        log(f"writing the RETURNN-layout corpus {paths['chunked']} ...")
        write_corpus(paths["chunked"], spec, contiguous=False)
        log(f"converting it with seqloader.convert_contiguous -> {paths['contiguous']} ...")
        from seqloader import convert_contiguous  # what a user runs (`seqloader convert`)

        convert_contiguous(paths["chunked"], paths["contiguous"])
        with open(meta, "w") as fh:
            json.dump(want, fh)
    frames, labels = spec.lengths()
    return Corpus(spec, paths["chunked"], paths["contiguous"], frames, labels)


def warm_page_cache(paths: list[str]) -> None:
    """Read the files once, so every pipeline reads from memory (we compare CPU, not disks)."""
    for p in paths:
        with open(p, "rb") as fh:
            while fh.read(1 << 24):
                pass
