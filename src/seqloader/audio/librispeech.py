"""The LibriSpeech corpus as distributed (openslr.org/12), read in place, as RETURNN's
``LibriSpeechCorpus`` reads it: no listing to prepare.

A part (``train-clean-100``, ``dev-other``, ...) is either the extracted tree
``ROOT/PART/SPEAKER/CHAPTER/`` (``SPEAKER-CHAPTER.trans.txt`` and ``SPEAKER-CHAPTER-SEQ.flac``) or
``ROOT/PART.zip`` holding ``LibriSpeech/PART/...`` (RETURNN's ``use_zip``); ``use_ogg`` appends
``.ogg`` to the audio names. Utterances come from the ``.trans.txt`` lines (``ID TEXT``), sorted by
(speaker, chapter, sequence) as RETURNN sorts them; tags follow RETURNN's ``seq_tag_format``
(``"%(subdir)s-%(speaker)i-%(chapter)i-%(seq)04i"``: ``dev-other-116-288045-0000``).

Planning needs each utterance's length at open: read from the audio file's header with soundfile
(``soundfile.info``: FLAC and Ogg give the exact sample count); a zipped file is read whole once for
that. The result is a ``Manifest`` like any other, so ``AudioSource`` decodes, cuts and features it.
"""

from __future__ import annotations

import glob
import io
import os
import zipfile
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from seqloader.audio.manifest import Manifest, StringTable, import_soundfile
from seqloader.errors import DataError

TAG_FORMAT = "%(subdir)s-%(speaker)i-%(chapter)i-%(seq)04i"  # RETURNN's default


@dataclass(frozen=True)
class LibriSpeechPart:
    """One part of a LibriSpeech folder (``root``: the folder holding ``PART/`` or ``PART.zip``).
    ``orth``: a function applied to each transcription (RETURNN's ``orth_post_process``); a
    path-like of the part's folder or zip.

    >>> LibriSpeechPart("LibriSpeech", "dev-clean", use_zip=True).location
    'LibriSpeech/dev-clean.zip'
    """

    root: str
    part: str
    use_zip: bool = False
    use_ogg: bool = False
    tag_format: str = TAG_FORMAT
    orth: Callable[[str], str] | None = None

    @property
    def location(self) -> str:
        return os.path.join(self.root, self.part + (".zip" if self.use_zip else ""))

    def __fspath__(self) -> str:
        return self.location

    def open_manifest(self) -> Manifest:
        """Read by ``open_manifest`` (and so by ``AudioSource``) like a manifest file."""
        return read_librispeech_part(self)


def librispeech_parts(root: str, prefix: str, use_zip: bool) -> list[str]:
    """The parts under ``root`` whose names start with ``prefix`` (RETURNN: ``ROOT/PREFIX*``
    folders, or ``ROOT/PREFIX*.zip``), sorted."""
    if use_zip:
        found = glob.glob(os.path.join(glob.escape(root), glob.escape(prefix) + "*.zip"))
        return sorted(os.path.basename(p)[: -len(".zip")] for p in found)
    found = glob.glob(os.path.join(glob.escape(root), glob.escape(prefix) + "*"))
    return sorted(os.path.basename(p) for p in found if os.path.isdir(p))


def read_librispeech_part(part: LibriSpeechPart) -> Manifest:
    """Parse one part's transcriptions and audio headers -> ``Manifest`` (audio: file paths, or
    zip members with ``in_zip``)."""
    entries: list[tuple[tuple[int, int, int], str, str, int]] = []  # key, text, trans file, line
    location = part.location
    if part.use_zip:
        try:
            z = zipfile.ZipFile(location)
        except (OSError, zipfile.BadZipFile) as e:
            raise DataError(f"LibriSpeech part {location!r} cannot be read as a zip ({e})") from e
        with z:
            members = [i.filename for i in z.infolist()]
            for name in members:
                if name.startswith(f"LibriSpeech/{part.part}/") and name.endswith(".trans.txt"):
                    text = z.read(name).decode("utf-8")
                    entries += _trans_lines(f"{location}:{name}", text, part.orth)
            prefix = "LibriSpeech/"
            audio = [prefix + _audio_name(part, key) for key, *_ in sorted(entries)]
            sizes = _samples_in_zip(z, audio, location)
    else:
        if not os.path.isdir(location):
            raise DataError(f"LibriSpeech part {location!r} is not a folder")
        for name in sorted(glob.glob(os.path.join(glob.escape(location), "*", "*", "*.trans.txt"))):
            with open(name, encoding="utf-8") as f:
                entries += _trans_lines(name, f.read(), part.orth)
        audio = [os.path.join(part.root, _audio_name(part, key)) for key, *_ in sorted(entries)]
        sizes = _samples_in_files(audio)
    if not entries:
        raise DataError(
            f"LibriSpeech part {location!r}: no SPEAKER/CHAPTER/*.trans.txt found; expected "
            "LibriSpeech's own layout (the folder as extracted, or LibriSpeech/PART/... in the zip)"
        )
    entries.sort()
    keys = [e[0] for e in entries]
    if len(set(keys)) != len(keys):
        raise DataError(f"LibriSpeech part {location!r}: an utterance id is listed twice")
    frames, rates = sizes
    tags = [
        part.tag_format % {"subdir": part.part, "speaker": s, "chapter": c, "seq": q}
        for s, c, q in keys
    ]
    return Manifest(
        location,
        f"{location} transcriptions",
        StringTable(audio),
        frames / rates,
        StringTable([e[1] for e in entries]),
        StringTable(tags),
        np.array([e[3] for e in entries], dtype=np.int64),
        in_zip=part.use_zip,
    )


def _audio_name(part: LibriSpeechPart, key: tuple[int, int, int]) -> str:
    s, c, q = key
    return f"{part.part}/{s}/{c}/{s}-{c}-{q:04d}.flac" + (".ogg" if part.use_ogg else "")


def _trans_lines(
    where: str, text: str, orth: Callable[[str], str] | None
) -> list[tuple[tuple[int, int, int], str, str, int]]:
    out = []
    for line_no, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        seq_name, _, txt = line.partition(" ")
        try:
            speaker, chapter, seq = map(int, seq_name.split("-"))
        except ValueError:
            raise DataError(
                f"{where} line {line_no}: {seq_name!r} is not SPEAKER-CHAPTER-SEQ; expected "
                "LibriSpeech's 'ID TEXT' lines"
            ) from None
        out.append(((speaker, chapter, seq), orth(txt) if orth else txt, where, line_no))
    return out


def _samples_in_files(paths: list[str]) -> tuple[np.ndarray, np.ndarray]:
    sf = import_soundfile()
    frames, rates = np.zeros(len(paths)), np.zeros(len(paths))
    for i, p in enumerate(paths):
        try:
            info = sf.info(p)
        except (OSError, RuntimeError) as e:  # soundfile: LibsndfileError is a RuntimeError
            raise DataError(f"LibriSpeech audio {p!r} cannot be read ({e})") from e
        frames[i], rates[i] = info.frames, info.samplerate
    return frames, rates


def _samples_in_zip(
    z: zipfile.ZipFile, members: list[str], location: str
) -> tuple[np.ndarray, np.ndarray]:
    sf = import_soundfile()
    frames, rates = np.zeros(len(members)), np.zeros(len(members))
    for i, name in enumerate(members):
        try:
            info = sf.info(io.BytesIO(z.read(name)))
        except (KeyError, OSError, RuntimeError) as e:
            raise DataError(f"LibriSpeech audio {location}:{name} cannot be read ({e})") from e
        frames[i], rates[i] = info.frames, info.samplerate
    return frames, rates
