"""Docs are code: every ```python block of README.md and docs/*.md runs, in order, one namespace per
document, in a temporary directory holding small stand-in files under the names the docs use
(``train.1.hdf``, ``dev.zip``, ``cuts_train.jsonl.gz``, ...). A block preceded by a line
``<!-- not run: REASON -->`` is skipped; the reason must be given.

A failing block is reported with its document and line (tracebacks point into the markdown file).
Stand-ins are built only for the names a document mentions, so a document costs what it uses.
"""

from __future__ import annotations

import re
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import seqloader as sl

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
NOT_RUN = re.compile(r"^<!--\s*not run:(.*?)-->\s*$")


@dataclass(frozen=True)
class Block:
    """One ```python block: where it starts (1-based line of its first code line), its code, and
    the reason it is not run (``None``: it runs)."""

    line: int
    code: str
    not_run: str | None


def python_blocks(text: str) -> list[Block]:
    """The ```python blocks of a markdown text, with the not-run marker of the line before each
    fence (blank lines between marker and fence are allowed)."""
    lines = text.splitlines()
    out: list[Block] = []
    i = 0
    while i < len(lines):
        if lines[i].strip() != "```python":
            i += 1
            continue
        before = next((lines[j] for j in range(i - 1, -1, -1) if lines[j].strip()), "")
        match = NOT_RUN.match(before.strip())
        end = next((j for j in range(i + 1, len(lines)) if lines[j].strip() == "```"), None)
        if end is None:
            raise AssertionError(f"line {i + 1}: ```python block is never closed")
        reason = match.group(1).strip() if match else None
        out.append(Block(i + 2, "\n".join(lines[i + 1 : end]) + "\n", reason))
        i = end + 1
    return out


def run_blocks(doc: Path, blocks: list[Block]) -> None:
    """Execute the runnable blocks in one namespace; line numbers are the document's."""
    namespace: dict[str, object] = {"__name__": f"doc:{doc.name}"}
    try:
        for block in blocks:
            if block.not_run is not None:
                continue
            # pad so that the code's line numbers are the markdown file's
            code = compile("\n" * (block.line - 1) + block.code, str(doc), "exec")
            exec(code, namespace)
    finally:
        # a document's loaders stop their workers here, not whenever a later test's garbage
        # collection finds the namespace (its functions refer back to it): the workers of an
        # unclosed loader in docs/migrating.md held a later test 20 s in torch's shutdown
        for value in namespace.values():
            if isinstance(value, sl.SeqLoader):
                value.close()
        namespace.clear()


# ---- stand-in files, by the names the docs use ----


def _frames_source(n: int, seed: int, dim: int = 4, classes: bool = True) -> sl.MemorySource:
    rng = np.random.default_rng(seed)
    lengths = rng.integers(20, 120, size=n)
    data = {"data": [rng.standard_normal((int(t), dim)).astype(np.float32) for t in lengths]}
    if classes:
        data["classes"] = [
            rng.integers(0, 10, size=int(t) // 4 + 1).astype(np.int32) for t in lengths
        ]
    return sl.MemorySource(data, tags=[f"seq-{seed}-{i}" for i in range(n)])


def _hdf(classes: bool = True, seed: int = 0) -> Callable[[Path], None]:
    def build(path: Path) -> None:
        sl.write_hdf(path, _frames_source(12, seed, classes=classes))

    return build


def _align_hdf(path: Path) -> None:
    """Frame-level labels for the tags of feat.hdf (``ZipSource`` joins them by tag)."""
    feat = _frames_source(12, 5, classes=False)
    rng = np.random.default_rng(6)
    labels = [rng.integers(0, 10, size=n).astype(np.int32) for n in feat.lengths("data")]
    sl.write_hdf(path, sl.MemorySource({"data": labels}, tags=list(feat.tags)))


def _audio_zip(name: str) -> Callable[[Path], None]:
    def build(path: Path) -> None:
        from seqloader.synthetic.audio import write_audio_corpus

        corpus = write_audio_corpus(path.parent, 6, name=name, seconds=(0.3, 0.8), seed=len(name))
        assert Path(corpus.oggzip) == path

    return build


def _chars(path: Path) -> None:
    from seqloader.synthetic.audio import WORDS

    chars = sorted(set("".join(WORDS)) | {" "})
    path.write_text("\n".join([*chars, "<unk>"]) + "\n", encoding="utf-8")


def _sentencepiece(path: Path) -> None:
    import sentencepiece as spm

    from seqloader.synthetic.audio import WORDS

    rng = np.random.default_rng(0)
    text = path.parent / f"{path.stem}.txt"
    text.write_text("\n".join(" ".join(rng.choice(WORDS, size=6)) for _ in range(200)) + "\n")
    spm.SentencePieceTrainer.train(
        input=str(text), model_prefix=str(path.with_suffix("")), vocab_size=30,
        model_type="bpe", minloglevel=2,
    )  # fmt: skip


def _lhotse_cuts(path: Path) -> None:
    """Cuts with Lhotse-computed fbank features in Lhotse's default storage, and supervisions."""
    import soundfile as sf
    from lhotse import (
        CutSet,
        Fbank,
        FbankConfig,
        Recording,
        RecordingSet,
        SupervisionSegment,
        SupervisionSet,
    )
    from lhotse.features.io import LilcomChunkyWriter

    from seqloader.synthetic.audio import WORDS

    rng = np.random.default_rng(1)
    recordings, supervisions = [], []
    for i in range(6):
        wav = path.parent / f"lhotse{i}.wav"
        sf.write(wav, (0.1 * rng.standard_normal(int(rng.integers(3000, 9000)))), 16000)
        rec = Recording.from_file(wav, recording_id=f"rec{i}")
        recordings.append(rec)
        text = " ".join(rng.choice(WORDS, size=3))
        supervisions.append(SupervisionSegment(f"sup{i}", rec.id, 0.0, rec.duration, text=text))
    cuts = CutSet.from_manifests(
        recordings=RecordingSet.from_recordings(recordings),
        supervisions=SupervisionSet.from_segments(supervisions),
    ).compute_and_store_features(
        Fbank(FbankConfig(num_mel_bins=16)),
        storage_path=path.parent / "lhotse_feats",
        storage_type=LilcomChunkyWriter,
        num_jobs=1,
    )
    cuts.to_file(path)


def _hf_features(path: Path) -> None:
    """A dataset saved with ``save_to_disk``: ``[T, D]`` features, labels, ids."""
    import datasets

    rng = np.random.default_rng(9)
    lengths = rng.integers(20, 120, size=8)
    ds = datasets.Dataset.from_dict(
        {
            "feat": [rng.standard_normal((int(t), 4)).astype(np.float32).tolist() for t in lengths],
            "label": [rng.integers(0, 10, size=int(t) // 4 + 1).tolist() for t in lengths],
            "id": [f"utt{i}" for i in range(len(lengths))],
        }
    )
    ds.save_to_disk(str(path))


def _returnn_config(path: Path) -> None:
    """``my.config``: docs/migrating.md's RETURNN config block itself (the one starting with the
    ``#!rnn.py`` header), so the snippet reading it runs the config the reader sees."""
    config = next(
        b.code
        for b in python_blocks((ROOT / "docs" / "migrating.md").read_text(encoding="utf-8"))
        if b.code.startswith("#!rnn.py")
    )
    path.write_text(config, encoding="utf-8")


#: name used in the docs -> what writes a small stand-in under that name (in the doc's folder)
STANDINS: dict[str, Callable[[Path], None]] = {
    "train.1.hdf": _hdf(seed=1),
    "train.2.hdf": _hdf(seed=2),
    "dev.hdf": _hdf(seed=3),
    "feat.hdf": lambda p: sl.write_hdf(p, _frames_source(12, 5, classes=False)),
    "align.hdf": _align_hdf,
    "libri.hdf": _hdf(classes=False, seed=7),
    "ted.hdf": _hdf(classes=False, seed=8),
    "train.zip": _audio_zip("train"),
    "dev.zip": _audio_zip("dev"),
    "chars.txt": _chars,
    "spm.model": _sentencepiece,
    "bpe.model": _sentencepiece,
    "cuts_train.jsonl.gz": _lhotse_cuts,
    "speech_feats": _hf_features,
    "my.config": _returnn_config,
}


def build_standins(text: str, folder: Path) -> None:
    for name, build in STANDINS.items():
        if re.search(rf"(?<![\w.]){re.escape(name)}(?![\w])", text):
            build(folder / name)


# ---- the tests ----


def test_the_not_run_marker_needs_a_reason_and_applies_to_the_next_block() -> None:
    text = textwrap.dedent(
        """\
        <!-- not run: needs GPUs -->
        ```python
        raise RuntimeError
        ```
        text
        ```python
        x = 1
        ```
        <!-- not run: -->

        ```python
        y = 2
        ```
        """
    )
    blocks = python_blocks(text)
    assert [(b.line, b.code, b.not_run) for b in blocks] == [
        (3, "raise RuntimeError\n", "needs GPUs"),
        (7, "x = 1\n", None),
        (12, "y = 2\n", ""),
    ]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: p.name)
def test_every_not_run_block_gives_its_reason(doc: Path) -> None:
    empty = [b.line for b in python_blocks(doc.read_text(encoding="utf-8")) if b.not_run == ""]
    assert not empty, (
        f"{doc.name}: `<!-- not run: REASON -->` without a reason before lines {empty}"
    )


@pytest.mark.parametrize(
    "doc",
    [d for d in DOCS if python_blocks(d.read_text(encoding="utf-8"))],
    ids=lambda p: p.name,
)
def test_python_blocks_run(doc: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = doc.read_text(encoding="utf-8")
    build_standins(text, tmp_path)
    monkeypatch.chdir(tmp_path)
    blocks = python_blocks(text)
    if all(b.not_run is not None for b in blocks):
        pytest.skip(f"{doc.name}: every block is marked not run")
    run_blocks(doc, blocks)
