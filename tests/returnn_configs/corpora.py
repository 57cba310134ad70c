"""Stand-in corpora for the configs in this folder, laid out as the public setups lay out theirs.

``write_corpora(folder)`` writes under ``folder`` (the configs read it as
``$SEQLOADER_RETURNN_DATA``, default ``data``):

- ``dataset-ogg/{train-clean-100,train-other-500,dev-clean,dev-other}.zip`` + ``.txt.gz``: the
  official LibriSpeech OggZip preparation (returnn-experiments 2020-librispeech-data-prepare,
  ``12_tar_to_ogg_zip.sh`` + ``14_create_trans_raw.py``): the zip holds LibriSpeech's own folders
  (``PART/SPEAKER/CHAPTER/ID.flac.ogg``, ``ID.trans.txt``), no listing inside; the listing is the
  separate ``PART.txt.gz`` (``file`` with the part prefix, ``seq_name`` = ``PART-ID``);
- ``dataset/trans.bpe.{codes,vocab}``, ``dataset/stats.{mean,std_dev}.txt`` (40 MFCC dims),
  ``dataset/spm.model`` (SentencePiece);
- ``hdf/train.{1..4}.hdf``, ``hdf/dev.hdf``: log-mel features + BPE targets, written by RETURNN's
  ``SimpleHDFWriter`` (LibriSpeech-960 over HDF);
- ``swb/features.hdf``, ``swb/alignment.hdf``: Switchboard hybrid stand-in (features, and framewise
  state alignments stored in another order);
- ``hdf/dfd/part.{01..10}.hdf``: LibriSpeech-960 features in ten files of 2-9 sequences each
  (``SimpleHDFWriter``), read through ``DistributeFilesDataset``; ``hdf/dfd-framewise/`` six more
  with framewise targets (for chunking);
- ``LibriSpeech/PART/...`` and ``librispeech-zip/PART.zip``: LibriSpeech as distributed, for
  ``LibriSpeechCorpus`` (``write_librispeech``);
- ``wmt/{train,dev}.hdf``: a translation corpus dumped to HDF (source ids as sparse ``data``,
  target ids as ``classes``, targets longer than sources);
- ``wmt-text/``: a translation corpus as RETURNN's ``TranslationDataset`` reads it
  (``{source,target}.{train,dev}.gz`` a sentence a line, ``{source,target}.vocab.pkl`` pickled
  ``{word: id}`` with ``</S>`` and ``<UNK>``; some words out of vocabulary);
- ``lm/``: BPE-split LM text and its ``orth_symbols_map_file``, as ``LmDataset`` reads them.
"""

from __future__ import annotations

import gzip
import os
import shutil
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from seqloader.synthetic.audio import WORDS, encode_audio, speech_like

PARTS = {"train-clean-100": 14, "train-other-500": 10, "dev-clean": 7, "dev-other": 5}
# BPE merges: whole words, except "loader" and "speech", kept in two pieces each ("@@" tokens)
_PIECES = {"loader": ("loa", "der"), "speech": ("spe", "ech")}


def _merges() -> list[str]:
    merges: list[str] = []
    for word in WORDS:
        pieces = _PIECES.get(word, (word,))
        for k, piece in enumerate(pieces):
            last = k == len(pieces) - 1
            cur = piece[0]
            for j, c in enumerate(piece[1:], start=1):
                nxt = c + ("</w>" if last and j == len(piece) - 1 else "")
                line = f"{cur} {nxt}"
                if line not in merges:
                    merges.append(line)
                cur += c
    return merges


def _bpe_vocab() -> dict[str, int]:
    vocab = {"<s>": 0, "</s>": 0, "<unk>": 1}
    for word in WORDS:
        pieces = _PIECES.get(word, (word,))
        for k, piece in enumerate(pieces):
            token = piece + ("@@" if k < len(pieces) - 1 else "")
            vocab.setdefault(token, len(set(vocab.values())))
    return vocab


def write_spm(folder: Path, rng: np.random.Generator) -> None:
    """``folder/spm.model``: a 30-piece SentencePiece unigram model of sentences of ``WORDS``."""
    texts = [" ".join(rng.choice(WORDS, size=6)) for _ in range(200)]
    (folder / "spm.txt").write_text("\n".join(texts) + "\n")
    import sentencepiece as spm

    spm.SentencePieceTrainer.train(
        input=str(folder / "spm.txt"), model_prefix=str(folder / "spm"), vocab_size=30,
        model_type="unigram", minloglevel=2,
    )  # fmt: skip


def write_official_oggzip(
    folder: Path, part: str, n: int, rng: np.random.Generator
) -> dict[str, int]:
    """``PART.zip`` (LibriSpeech's folders, ``.flac.ogg`` audio) and ``PART.txt.gz``; returns
    each utterance's sample count by tag."""
    entries, members = [], []
    for i in range(n):
        speaker, chapter = 100 + i % 3, 2000 + i % 2
        seq = f"{speaker}-{chapter}-{i:04d}"
        wave = speech_like(float(rng.uniform(0.4, 2.2)), 16000, rng)
        file = f"{part}/{speaker}/{chapter}/{seq}.flac.ogg"
        text = " ".join(rng.choice(WORDS, size=int(rng.integers(1, 9)))).upper()
        members.append((file, encode_audio(wave, 16000, "ogg")))
        entries.append(
            {"text": text.lower(), "file": file, "seq_name": f"{part}-{seq}",
             "duration": len(wave) / 16000}
        )  # fmt: skip
    with zipfile.ZipFile(folder / f"{part}.zip", "w", zipfile.ZIP_STORED) as z:
        for file, blob in members:
            z.writestr(file, blob)
        z.writestr(f"{part}/trans.txt", "".join(f"{e['seq_name']} {e['text']}\n" for e in entries))
    with gzip.open(folder / f"{part}.txt.gz", "wt", encoding="utf-8") as f:
        f.write("[\n" + "".join(f"{e!r},\n" for e in entries) + "]\n")
    return {e["seq_name"]: round(e["duration"] * 16000) for e in entries}


def write_hdf(
    path: Path,
    tags: list[str],
    rng: np.random.Generator,
    *,
    dim: int | None,
    data_len: tuple[int, int],
    target_len,
    target_dim: int,
) -> None:
    """RETURNN's ``SimpleHDFWriter``; ``dim=None``: sparse ``data`` ids; ``target_len(n)``: the
    ``classes`` length of a sequence with ``n`` data frames."""
    from returnn.datasets.hdf import SimpleHDFWriter

    writer = SimpleHDFWriter(str(path), dim=dim or 50, ndim=1 if dim is None else 2)
    for tag in tags:
        n = int(rng.integers(*data_len))
        if dim is None:
            x = rng.integers(1, 50, size=(1, n)).astype(np.int32)
        else:
            x = rng.standard_normal((1, n, dim)).astype(np.float32)
        m = int(target_len(n))
        y = rng.integers(0, target_dim, size=(1, m)).astype(np.int32)
        writer.insert_batch(x, [n], [tag], extra={"classes": y})
    writer.close()


def write_corpora(folder: Path) -> Path:
    rng = np.random.default_rng(2020)
    ogg, dataset = folder / "dataset-ogg", folder / "dataset"
    for sub in (ogg, dataset, folder / "hdf", folder / "swb", folder / "wmt", folder / "align"):
        sub.mkdir(parents=True, exist_ok=True)
    samples: dict[str, int] = {}
    for part, n in PARTS.items():
        samples.update(write_official_oggzip(ogg, part, n, rng))
    (dataset / "trans.bpe.codes").write_text("#version: 0.2\n" + "\n".join(_merges()) + "\n")
    (dataset / "trans.bpe.vocab").write_text(repr(_bpe_vocab()) + "\n")
    np.savetxt(dataset / "stats.mean.txt", rng.normal(0, 2, size=40))
    np.savetxt(dataset / "stats.std_dev.txt", rng.uniform(5, 20, size=40))
    write_spm(dataset, rng)
    for k in range(1, 5):  # LibriSpeech-960 over HDF: features 50-dim, BPE targets shorter
        tags = [f"train-960/{k}-{i}" for i in range(12)]
        write_hdf(folder / "hdf" / f"train.{k}.hdf", tags, rng, dim=50, data_len=(20, 160),
                  target_len=lambda n: max(1, n // 8), target_dim=30)  # fmt: skip
    write_hdf(folder / "hdf" / "dev.hdf", [f"dev-960/{i}" for i in range(9)], rng, dim=50,
              data_len=(20, 160), target_len=lambda n: max(1, n // 8), target_dim=30)  # fmt: skip
    lengths = {f"swb/{i}": int(rng.integers(30, 220)) for i in range(30)}
    from returnn.datasets.hdf import SimpleHDFWriter

    for name, dim, order in (("features", 40, list(lengths)), ("alignment", None, None)):
        writer = SimpleHDFWriter(str(folder / "swb" / f"{name}.hdf"), dim=dim or 9001,
                                 ndim=2 if dim else 1)  # fmt: skip
        for tag in order or list(reversed(list(lengths))):
            n = lengths[tag]
            if dim:
                writer.insert_batch(rng.standard_normal((1, n, dim)).astype(np.float32), [n], [tag])
            else:
                writer.insert_batch(rng.integers(0, 9001, size=(1, n)).astype(np.int32), [n], [tag])
        writer.close()
    for split, n in (("train", 40), ("dev", 8)):  # targets 1.2-1.6x the source length
        tags = [f"wmt-{split}/{i}" for i in range(n)]
        write_hdf(folder / "wmt" / f"{split}.hdf", tags, rng, dim=None, data_len=(3, 45),
                  target_len=lambda s: int(s * rng.uniform(1.2, 1.6)) + 1, target_dim=60)  # fmt: skip
    write_translation_text(folder / "wmt-text", np.random.default_rng(3311))  # its own stream
    write_lm_text(folder / "lm", np.random.default_rng(3312))
    # framewise alignments of the train parts at a 10 ms shift: ceil(samples / 160) frames
    # (RASR alignments dumped to HDF, as i6_experiments' OggZipHdfDataInput reads them)
    writer = SimpleHDFWriter(str(folder / "align" / "train.hdf"), dim=211, ndim=1)
    for tag in sorted(t for t in samples if t.startswith("train")):
        m = -(-samples[tag] // 160)
        writer.insert_batch(rng.integers(0, 211, size=(1, m)).astype(np.int32), [m], [tag])
    writer.close()
    dfd = folder / "hdf" / "dfd"  # many small files of unequal size, for DistributeFilesDataset
    dfd.mkdir(exist_ok=True)
    rng_dfd = np.random.default_rng(1519)  # its own stream: the corpora above stay as they were
    for k in range(1, 11):
        tags = [f"train-960/part{k:02d}-{i}" for i in range(int(rng_dfd.integers(2, 10)))]
        write_hdf(dfd / f"part.{k:02d}.hdf", tags, rng_dfd, dim=50, data_len=(20, 160),
                  target_len=lambda n: max(1, n // 8), target_dim=30)  # fmt: skip
    framewise = folder / "hdf" / "dfd-framewise"  # the same with framewise targets (hybrid)
    framewise.mkdir(exist_ok=True)
    for k in range(1, 7):
        tags = [f"hybrid/part{k:02d}-{i}" for i in range(int(rng_dfd.integers(2, 7)))]
        write_hdf(framewise / f"part.{k:02d}.hdf", tags, rng_dfd, dim=20, data_len=(20, 140),
                  target_len=lambda n: n, target_dim=30)  # fmt: skip
    write_librispeech(folder, np.random.default_rng(12))
    return folder


def write_librispeech(folder: Path, rng: np.random.Generator) -> None:
    """LibriSpeech as distributed (openslr.org/12), as ``LibriSpeechCorpus`` reads it: the
    extracted ``LibriSpeech/PART/SPEAKER/CHAPTER/`` (``.flac`` + ``SPEAKER-CHAPTER.trans.txt``,
    upper-case transcriptions) and ``librispeech-zip/PART.zip`` holding ``LibriSpeech/PART/...``
    with ``.flac.ogg`` audio (``use_zip`` + ``use_ogg``, as the 2018 setup reads it)."""
    tree, zips = folder / "LibriSpeech", folder / "librispeech-zip"
    zips.mkdir(parents=True, exist_ok=True)
    for part, n in (("train-clean-100", 8), ("train-other-500", 6), ("dev-clean", 5),
                    ("dev-other", 4)):  # fmt: skip
        trans: dict[str, list[str]] = {}
        members = []
        for i in range(n):
            speaker, chapter = 19 + 7 * (i % 3), 198 + (i % 2)
            seq = f"{speaker}-{chapter}-{i:04d}"
            wave = speech_like(float(rng.uniform(0.4, 1.8)), 16000, rng)
            words = " ".join(rng.choice(WORDS, size=int(rng.integers(1, 8)))).upper()
            trans.setdefault(f"{speaker}/{chapter}", []).append(f"{seq} {words}")
            d = tree / part / str(speaker) / str(chapter)
            d.mkdir(parents=True, exist_ok=True)
            (d / f"{seq}.flac").write_bytes(encode_audio(wave, 16000, "flac"))
            members.append((f"LibriSpeech/{part}/{speaker}/{chapter}/{seq}.flac.ogg",
                            encode_audio(wave, 16000, "ogg")))  # fmt: skip
        with zipfile.ZipFile(zips / f"{part}.zip", "w", zipfile.ZIP_STORED) as z:
            for key, lines in trans.items():
                speaker, chapter = key.split("/")
                name = f"{part}/{key}/{speaker}-{chapter}.trans.txt"
                (tree / name).write_text("\n".join(lines) + "\n")
                z.writestr(f"LibriSpeech/{name}", "\n".join(lines) + "\n")
            for member, data in members:
                z.writestr(member, data)


def write_translation_text(folder: Path, rng: np.random.Generator) -> None:
    """RETURNN's TranslationDataset layout: gzipped sentence files and pickled vocabularies."""
    import pickle

    folder.mkdir(parents=True, exist_ok=True)
    for side, size in (("source", 40), ("target", 55)):
        words = [f"{side[0]}{i}" for i in range(size)]
        vocab = {"</S>": 0, "<UNK>": 1, **{w: i + 2 for i, w in enumerate(words)}}
        with open(folder / f"{side}.vocab.pkl", "wb") as f:
            pickle.dump(vocab, f)
        for split, n in (("train", 36), ("dev", 9)):
            scale = 1.0 if side == "source" else 1.4  # targets longer, as in the HDF stand-in
            lines = []
            for _ in range(n):
                k = int(rng.integers(2, 30) * scale)
                ids = rng.integers(0, size + 4, size=k)  # ids >= size: out of the vocabulary
                lines.append(" ".join(f"{side[0]}{i}" for i in ids))
            with gzip.open(folder / f"{side}.{split}.gz", "wt", encoding="utf-8") as f:
                f.write("\n".join(lines) + "\n")


def write_lm_text(folder: Path, rng: np.random.Generator) -> None:
    """LmDataset's inputs as the i6 LM setups give them: BPE-split text a sentence a line
    (``lm.{train,dev}.txt.gz``, some words outside the vocabulary) and the BPE vocabulary as an
    ``orth_symbols_map_file`` (``lm.vocab.txt``: ``SYMBOL INDEX`` a line)."""
    folder.mkdir(parents=True, exist_ok=True)
    vocab = _bpe_vocab()
    (folder / "lm.vocab.txt").write_text("".join(f"{w} {i}\n" for w, i in vocab.items()))
    for split, n in (("train", 30), ("dev", 8)):
        lines = []
        for _ in range(n):
            words = [str(w) for w in rng.choice([*WORDS, "qwerty"], size=int(rng.integers(1, 14)))]
            tokens = []
            for word in words:
                pieces = _PIECES.get(word, (word,))
                tokens += [p + ("@@" if k < len(pieces) - 1 else "") for k, p in enumerate(pieces)]
            lines.append(" ".join(tokens))
        with gzip.open(folder / f"lm.{split}.txt.gz", "wt", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")


def data_env(folder: Path) -> dict[str, str]:
    """The environment the configs read their data folder from."""
    return {"SEQLOADER_RETURNN_DATA": os.fspath(folder)}


#: this process's untouched copy of the corpora (``copy_corpora``), written on first use
_WRITTEN: list[Path] = []


def copy_corpora(folder: Path) -> Path:
    """The stand-in corpora under ``folder``, the same bytes as ``write_corpora(folder)``: written
    once per process into a folder of their own beside ``folder``, which no test is given (so
    what a module adds to its corpora reaches no other), and copied from there for each module
    (writing them takes over a second of CPU, encoding audio included; copying, milliseconds)."""
    if not _WRITTEN or not _WRITTEN[0].is_dir():
        untouched = Path(tempfile.mkdtemp(prefix="returnn-corpora-", dir=folder.parent))
        _WRITTEN[:] = [write_corpora(untouched)]
    shutil.copytree(_WRITTEN[0], folder, dirs_exist_ok=True)
    return folder


@contextmanager
def corpora_env(folder: Path) -> Iterator[Path]:
    """The stand-in corpora under ``folder`` (``copy_corpora``), ``$SEQLOADER_RETURNN_DATA``
    naming it while the block runs (the configs read their data folder from it)."""
    written = copy_corpora(folder)
    old = os.environ.get("SEQLOADER_RETURNN_DATA")
    os.environ.update(data_env(written))
    try:
        yield written
    finally:
        if old is None:
            del os.environ["SEQLOADER_RETURNN_DATA"]
        else:
            os.environ["SEQLOADER_RETURNN_DATA"] = old
