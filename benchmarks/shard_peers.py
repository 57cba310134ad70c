"""The peers' own shard readers for ``benchmarks/shards.py --reads``: each yields padded float32
audio batches ``(audio [B, T], lengths [B])`` from a torch ``DataLoader``, as its users read.

- **WebDataset**: shards written by ``webdataset.ShardWriter`` (``KEY.flac`` + ``KEY.txt``), read by
  ``webdataset.WebDataset(urls, shardshuffle=False)`` (its default per-worker shard split), the
  ``flac`` member decoded with soundfile in a ``.map``, ``DataLoader(batch_size=B)`` with a padding
  collate.
- **NeMo tarred**: shards written by ``nemo_convert`` (NeMo's
  ``scripts/speech_recognition/convert_to_tarred_audio_dataset.py`` re-implemented), read by
  ``NemoTarredAudio``, a re-implementation of the read path of NeMo's ``TarredAudioToCharDataset``
  (``nemo/collections/asr/data/audio_to_text.py``, ``_TarredAudioToTextDataset``): the manifest
  parsed into a collection indexed by file id, then ``wds.DataPipeline(SimpleShardList,
  split_by_worker, shuffle(0), tarfile_to_samples, rename(audio=formats, key="__key__"),
  to_tuple("audio", "key"), _filter, _loop_offsets, map(_build_sample))``; ``_build_sample`` looks
  the entry up by file id and offset id and decodes as ``AudioSegment.from_file`` does (soundfile,
  ``seek(int(offset * rate))``, ``read(int(duration * rate))``, float32), then NeMo's
  ``_speech_collate_fn`` pads (audio only here; text tokens are left out on every side).
- **Lhotse Shar**: ``CutSet.from_shar`` + ``SimpleCutSampler(max_cuts=B)`` in the main process
  (as Lhotse documents it) + a dataset returning ``AudioSamples()(cuts)`` (``collate_audio``).

Written from reading those projects' sources; no code of theirs is copied here.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

NEMO_FORMATS = "wav;mp3;flac"  # NeMo's VALID_FILE_FORMATS starts with these (then soundfile's)


def nemo_convert(
    manifest: Path, target: Path, num_shards: int, sort_in_shards: bool = True
) -> None:
    """NeMo's ``scripts/speech_recognition/convert_to_tarred_audio_dataset.py`` re-implemented
    (``create_new_dataset`` and ``_create_shard``, defaults: no shuffle, no codec change,
    ``slice_with_offset`` off): ``len // num_shards`` entries per shard in manifest order (the
    rest dropped, as NeMo drops it), each shard sorted by duration, audio paths squashed into
    member names (``/`` and ``.`` of the stem become ``_``), a recording's first entry adds its
    file, later entries of the same file become ``STEM-subN.EXT`` (the member is not added again;
    ``offset`` and ``duration`` are kept), every entry gets ``shard_id``; ``audio_N.tar``,
    ``sharded_manifests/manifest_N.json`` and ``tarred_audio_manifest.json``."""
    entries = []
    for line in manifest.read_text().splitlines():
        entry = json.loads(line)
        if not os.path.isabs(entry["audio_filepath"]):
            entry["audio_filepath"] = str(manifest.parent / entry["audio_filepath"])
        entries.append(entry)
    per_shard = len(entries) // num_shards
    (target / "sharded_manifests").mkdir(parents=True, exist_ok=True)
    everything = []
    for shard_id in range(num_shards):
        shard = entries[shard_id * per_shard : (shard_id + 1) * per_shard]
        if sort_in_shards:
            shard.sort(key=lambda e: e["duration"])
        count: dict[str, int] = {}
        written = []
        with tarfile.open(target / f"audio_{shard_id}.tar", mode="w", dereference=True) as tar:
            for entry in shard:
                base, ext = os.path.splitext(entry["audio_filepath"])
                base = base.replace("/", "_").replace(".", "_")
                squashed = f"{base}{ext}"
                if squashed not in count:
                    tar.add(entry["audio_filepath"], arcname=squashed)
                    to_write, count[squashed] = squashed, 1
                else:
                    to_write = f"{base}-sub{count[squashed]}{ext}"
                    count[squashed] += 1
                written.append({**entry, "audio_filepath": to_write, "shard_id": shard_id})
        lines = "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in written)
        (target / "sharded_manifests" / f"manifest_{shard_id}.json").write_text(lines)
        everything += written
    lines = "".join(json.dumps(e, ensure_ascii=False) + "\n" for e in everything)
    (target / "tarred_audio_manifest.json").write_text(lines)


def write_webdataset(jsonl: Path, target: Path, shard_size: int) -> str:
    """The corpus (``AudioSource`` manifest: ``audio``, ``text``, ``id``) through
    ``webdataset.ShardWriter``; returns the brace pattern of the shards."""
    import webdataset as wds

    target.mkdir(parents=True, exist_ok=True)
    pattern = str(target / "shard-%06d.tar")
    rows = [json.loads(line) for line in jsonl.read_text().splitlines()]
    with wds.ShardWriter(pattern, maxcount=shard_size, verbose=0) as sink:
        for row in rows:
            blob = (jsonl.parent / row["audio"]).read_bytes()
            sink.write({"__key__": row["id"], "flac": blob, "txt": row["text"]})
    last = (len(rows) - 1) // shard_size
    return str(target / f"shard-{{000000..{last:06d}}}.tar")


def write_nemo(jsonl: Path, target: Path, num_shards: int) -> None:
    """The corpus as a NeMo manifest (``audio_filepath``, ``duration``, ``text``), converted by
    ``nemo_convert``."""
    rows = [json.loads(line) for line in jsonl.read_text().splitlines()]
    manifest = target.parent / "nemo_manifest.json"
    manifest.write_text(
        "".join(
            json.dumps(
                {
                    "audio_filepath": str(jsonl.parent / r["audio"]),
                    "duration": r["duration"],
                    "text": r["text"],
                }
            )
            + "\n"
            for r in rows
        )
    )
    nemo_convert(manifest, target, num_shards)


def pad_collate(waves: list[Any]) -> tuple[Any, Any]:
    """Pad 1-d float32 arrays into ``[B, T]`` with their lengths (what NeMo's
    ``_speech_collate_fn`` and a WebDataset user's collate do for the audio). Padded in numpy:
    torch's own copies here ran its intra-op threads, which on a loaded machine made the peers'
    0-worker figures mostly that collate."""
    import torch

    lengths = np.array([len(w) for w in waves], dtype=np.int64)
    out = np.zeros((len(waves), int(lengths.max())), dtype=np.float32)
    for i, w in enumerate(waves):
        out[i, : len(w)] = w
    return torch.from_numpy(out), torch.from_numpy(lengths)


def _decode_flac(sample: dict) -> Any:
    import soundfile as sf

    audio, _ = sf.read(io.BytesIO(sample["flac"]), dtype="float32")
    return audio


def webdataset_loader(urls: str, workers: int, batch: int) -> Any:
    import torch
    import webdataset as wds

    dataset = wds.WebDataset(urls, shardshuffle=False).map(_decode_flac)
    return torch.utils.data.DataLoader(
        dataset,
        batch_size=batch,
        collate_fn=pad_collate,
        num_workers=workers,
        persistent_workers=workers > 0,
    )


class NemoTarredAudio:
    """The read path of NeMo's ``TarredAudioToCharDataset`` re-implemented (see the module
    docstring): an ``IterableDataset`` over ``audio_*.tar`` with the manifest's entries looked up
    by file id."""

    def __init__(self, manifest: str, tars: list[str]) -> None:
        self.entries: list[dict] = []
        self.mapping: dict[str, list[int]] = {}  # NeMo's collection.mapping (index_by_file_id)
        for line in Path(manifest).read_text().splitlines():
            entry = json.loads(line)
            self.entries.append(entry)
            file_id, _ = os.path.splitext(os.path.basename(entry["audio_filepath"]))
            self.mapping.setdefault(file_id, []).append(len(self.entries) - 1)
        self.tars = tars

    def pipeline(self) -> Any:
        import webdataset as wds

        return wds.DataPipeline(
            wds.SimpleShardList(urls=self.tars),
            wds.split_by_worker,
            wds.shuffle(0),
            wds.tarfile_to_samples(),
            wds.rename(audio=NEMO_FORMATS, key="__key__"),
            wds.to_tuple("audio", "key"),
            self._filter,
            self._loop_offsets,
            wds.map(self._build_sample),
        )

    def _filter(self, samples: Iterator[tuple]) -> Iterator[tuple]:
        """Members whose file id the manifest lacks are skipped (NeMo's ``TarredAudioFilter``)."""
        for audio_bytes, key in samples:
            file_id, _ = os.path.splitext(os.path.basename(key))
            if file_id in self.mapping:
                yield audio_bytes, key

    def _loop_offsets(self, samples: Iterator[tuple]) -> Iterator[tuple]:
        """Each member once per manifest entry of its file (NeMo's ``TarredAudioLoopOffsets``)."""
        for audio_bytes, key in samples:
            file_id, _ = os.path.splitext(os.path.basename(key))
            for offset_id in range(len(self.mapping[file_id])):
                yield audio_bytes, key, offset_id

    def _build_sample(self, sample: tuple) -> Any:
        import soundfile as sf

        audio_bytes, key, offset_id = sample
        file_id, _ = os.path.splitext(os.path.basename(key))
        entry = self.entries[self.mapping[file_id][offset_id]]
        offset, duration = entry.get("offset") or 0, entry["duration"]
        with sf.SoundFile(io.BytesIO(audio_bytes), "r") as f:  # AudioSegment.from_file
            rate = f.samplerate
            if offset > 0:
                f.seek(int(offset * rate))
            if duration > 0:
                samples = f.read(int(duration * rate), dtype="float32")
            else:
                samples = f.read(dtype="float32")
        if samples.ndim >= 2:
            samples = np.mean(samples, 1)
        return samples  # NeMo makes a float tensor of it; the collate pads it


def nemo_loader(root: Path, workers: int, batch: int) -> Any:
    import torch

    tars = sorted(str(p) for p in root.glob("audio_*.tar"))
    reader = NemoTarredAudio(str(root / "tarred_audio_manifest.json"), tars)

    return torch.utils.data.DataLoader(
        reader.pipeline(),  # an IterableDataset, as NeMo's dataset wraps it
        batch_size=batch,
        collate_fn=pad_collate,
        num_workers=workers,
        persistent_workers=workers > 0,
    )


class _LhotseAudio:
    """``AudioSamples()(cuts)``: what Lhotse's datasets call to load and pad a batch's audio."""

    def __init__(self) -> None:
        from lhotse.dataset.input_strategies import AudioSamples

        self.audio = AudioSamples()

    def __getitem__(self, cuts: Any) -> tuple[Any, Any]:
        return self.audio(cuts)


def lhotse_loader(shar: Path, workers: int, batch: int) -> tuple[Any, Any]:
    """Lhotse's Shar reader and its sampler (``set_epoch`` per epoch)."""
    import torch
    from lhotse import CutSet
    from lhotse.dataset import SimpleCutSampler

    cuts = CutSet.from_shar(in_dir=shar)
    sampler = SimpleCutSampler(cuts, max_cuts=batch, shuffle=False)
    loader = torch.utils.data.DataLoader(
        _LhotseAudio(),
        sampler=sampler,
        batch_size=None,
        num_workers=workers,
        persistent_workers=workers > 0,
    )
    return loader, sampler
