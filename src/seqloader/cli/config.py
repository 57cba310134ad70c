"""DATA: what the command line (or a script) points at — a data file, or a small config naming one.

Accepted forms (see docs/cli.md):

- ``train.hdf`` / ``.h5`` / ``.hdf5`` (one or several): RETURNN HDF files, concatenated in order;
- ``train.txt`` / ``.list``: a text file listing HDF files, one per line (``#`` comments);
- ``train.jsonl``: an audio manifest; ``train.zip``: an OggZip (both read by ``AudioSource``, with
  log-mel ``data`` features unless the config says ``features = false``);
- ``returnn.config``: a RETURNN config; ``--dataset`` names which of its datasets (default
  ``train``), read as ``seqloader.from_returnn_config`` reads it (RETURNN's order, its batch
  options as loader options; ``--stub-modules`` for configs importing absent model code);
- ``data.toml`` / ``data.json``: a config with a ``[source]`` table (one of ``hdf``, ``manifest``,
  ``oggzip``, ``synthetic``, or ``corpora``: named corpora, each a source table of its own, opened
  as a ``ConcatSource``; optional ``options`` forwarded to the source class) and a ``[loader]``
  table of ``PlanOptions`` / ``WorkerOptions`` fields (``mix`` included). Relative paths are
  relative to the config.

The config only *names* things; opening and planning stay in the sources and the planner.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from seqloader.errors import DataError, OptionError
from seqloader.plan.options import PlanOptions
from seqloader.sources.base import Source
from seqloader.trainer.loader_options import PLAN_FIELDS, WORKER_FIELDS, WorkerOptions

HDF_SUFFIXES = (".hdf", ".h5", ".hdf5")
LIST_SUFFIXES = (".txt", ".list")
CONFIG_SUFFIXES = (".toml", ".json")
RETURNN_SUFFIXES = (".config",)
SOURCE_KINDS = ("hdf", "manifest", "oggzip", "synthetic", "corpora")
_EXPECTED = (
    "expected RETURNN HDF file(s) (.hdf, .h5, .hdf5), a list of HDF files (.txt, .list), an audio "
    "manifest (.jsonl), an OggZip (.zip), a config (.toml, .json) or a RETURNN config (.config)"
)


@dataclass(frozen=True)
class SourceSpec:
    """Which source class to open on which files, with which constructor keywords."""

    kind: str
    paths: tuple[str, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)  # parsed JSON/TOML values
    corpora: tuple[tuple[str, SourceSpec], ...] = ()  # kind "corpora": (name, source) each

    def __post_init__(self) -> None:
        if self.kind not in (*SOURCE_KINDS, "returnn"):
            raise OptionError(f"source kind: got {self.kind!r}, expected one of {SOURCE_KINDS}")
        object.__setattr__(self, "options", MappingProxyType(dict(self.options)))

    def open(self) -> Source:
        """Open the source (cheap: lengths, tags and schema only; data is read on demand)."""
        opts = dict(self.options)
        if self.kind == "returnn":  # options: dataset, stub_modules
            return returnn_dataset(self.paths[0], **opts).source
        if self.kind == "synthetic":
            from seqloader.synthetic import SyntheticSpec, synthetic_corpus

            try:
                return synthetic_corpus(SyntheticSpec(**opts))
            except TypeError as e:
                raise OptionError(f"synthetic source options: {e}") from e
        if self.kind == "hdf":
            from seqloader.sources.hdf import HDFSource

            return HDFSource(list(self.paths), **opts)
        if self.kind == "corpora":
            from seqloader.sources.concat import ConcatSource

            return ConcatSource({name: spec.open() for name, spec in self.corpora}, **opts)
        return open_audio(self.paths[0], opts)

    def describe(self) -> str:
        if self.kind == "returnn":
            return f"RETURNN config {self.paths[0]}, dataset {self.options['dataset']!r}"
        if self.kind == "synthetic":
            return f"synthetic corpus {dict(self.options)}"
        if self.kind == "corpora":
            return "corpora " + ", ".join(f"{n} ({s.describe()})" for n, s in self.corpora)
        shown = ", ".join(self.paths[:3]) + (
            f", ... ({len(self.paths)} files)" * (len(self.paths) > 3)
        )
        return f"{self.kind} {shown}"


def open_audio(path: str, options: Mapping[str, Any]) -> Source:
    """``AudioSource`` with log-mel ``data`` by default (100 frames/s, what models train on and
    what ``convert`` precomputes). ``features`` in the options: a table of ``LogMel`` fields, or
    ``false`` for the raw waveform only; a top-level ``sample_rate`` goes to the features."""
    from seqloader.audio.features import LogMel
    from seqloader.audio.source import AudioSource

    opts = dict(options)
    features = opts.pop("features", {})
    if features is False or features is None:
        return AudioSource(path, **opts)
    if not isinstance(features, Mapping):
        raise OptionError(
            f"audio source option features: got {features!r}, expected a table of LogMel fields "
            "(e.g. {n_mels = 80}) or false for the waveform only"
        )
    features = dict(features)
    if "sample_rate" in opts:
        features.setdefault("sample_rate", opts.pop("sample_rate"))
    try:
        logmel = LogMel(**features)
    except TypeError as e:
        raise OptionError(f"audio source option features: {e}") from e
    return AudioSource(path, features=logmel, **opts)


@dataclass(frozen=True)
class DataConfig:
    """A source plus loader options; command-line options override the config's."""

    source: SourceSpec
    loader: Mapping[str, Any] = field(default_factory=dict)  # parsed JSON/TOML values
    origin: str = ""

    def __post_init__(self) -> None:
        unknown = set(self.loader) - set(PLAN_FIELDS) - set(WORKER_FIELDS)
        if unknown:
            where = f"{self.origin}: " if self.origin else ""
            raise OptionError(
                f"{where}unknown loader option(s) {sorted(unknown)}; expected fields of "
                f"PlanOptions {list(PLAN_FIELDS)} or WorkerOptions {list(WORKER_FIELDS)}"
            )
        object.__setattr__(self, "loader", MappingProxyType(dict(self.loader)))

    def merged(self, overrides: Mapping[str, Any]) -> dict[str, Any]:
        """Loader options with ``overrides`` applied (``None`` values mean "not given")."""
        out = dict(self.loader)
        out.update({k: v for k, v in overrides.items() if v is not None})
        return out

    def plan_options(self, overrides: Mapping[str, Any] = MappingProxyType({})) -> PlanOptions:
        merged = self.merged(overrides)
        return PlanOptions(**{k: v for k, v in merged.items() if k in PLAN_FIELDS})

    def worker_options(self, overrides: Mapping[str, Any] = MappingProxyType({})) -> WorkerOptions:
        merged = self.merged(overrides)
        return WorkerOptions(**{k: v for k, v in merged.items() if k in WORKER_FIELDS})

    def open(self) -> Source:
        return self.source.open()


def returnn_dataset(path: str, dataset: str, stub_modules: bool = False) -> Any:
    """Dataset ``dataset`` of the RETURNN config at ``path`` (``seqloader.returnn``)."""
    from seqloader.returnn.config import returnn_datasets

    return returnn_datasets(path, stub_modules=stub_modules, only=dataset)[dataset]


def load_returnn(path: Path, dataset: str, stub_modules: bool) -> DataConfig:
    """A RETURNN config's dataset: its source, and the loader options its data options map to
    (command-line flags override them like a config's [loader] table)."""
    d = returnn_dataset(str(path), dataset, stub_modules)
    d.source.close()  # opened again by SourceSpec.open when the command reads it
    loader = {f: getattr(d.plan, f) for f in PLAN_FIELDS}
    loader.update({f: getattr(d.workers, f) for f in WORKER_FIELDS})
    options = {"dataset": dataset, "stub_modules": stub_modules}
    return DataConfig(SourceSpec("returnn", (str(path),), options), loader, origin=str(path))


def load_data(
    data: str | Path | Sequence[str | Path],
    *,
    dataset: str | None = None,
    stub_modules: bool = False,
) -> DataConfig:
    """Resolve DATA (one path, or several HDF paths) into a ``DataConfig``; see the module doc.
    ``dataset`` / ``stub_modules``: for a RETURNN config (default: its ``train``)."""
    paths = [Path(data)] if isinstance(data, (str, Path)) else [Path(p) for p in data]
    if not paths:
        raise OptionError(f"no DATA given; {_EXPECTED}")
    for p in paths:
        if not p.exists():
            raise DataError(f"{p}: no such file; {_EXPECTED}")
        if p.is_dir():
            raise DataError(f"{p} is a directory; {_EXPECTED}")
    suffixes = {p.suffix.lower() for p in paths}
    if suffixes <= set(HDF_SUFFIXES):
        return DataConfig(SourceSpec("hdf", tuple(str(p) for p in paths)), origin=str(paths[0]))
    if len(paths) > 1:
        raise OptionError(
            f"several DATA paths are only allowed for HDF files; got {[str(p) for p in paths]}"
        )
    path = paths[0]
    suffix = path.suffix.lower()
    if suffix in LIST_SUFFIXES:
        return DataConfig(SourceSpec("hdf", read_file_list(path)), origin=str(path))
    if suffix == ".jsonl":
        return DataConfig(SourceSpec("manifest", (str(path),)), origin=str(path))
    if suffix == ".zip":
        return DataConfig(SourceSpec("oggzip", (str(path),)), origin=str(path))
    if suffix in CONFIG_SUFFIXES:
        return parse_config(read_config(path), path)
    if suffix in RETURNN_SUFFIXES:
        return load_returnn(path, dataset or "train", stub_modules)
    raise DataError(f"{path}: cannot tell what this is from its suffix {suffix!r}; {_EXPECTED}")


def read_file_list(path: Path) -> tuple[str, ...]:
    """HDF paths listed in ``path`` (one per line, ``#`` comments), relative to the list's folder."""
    out = []
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            p = Path(line) if Path(line).is_absolute() else path.parent / line
            if not p.is_file():
                raise DataError(f"{path}: listed file {line!r} does not exist (looked at {p})")
            out.append(str(p))
    if not out:
        raise DataError(f"{path}: the file list names no files; expected one HDF path per line")
    return tuple(out)


def read_config(path: Path) -> dict:
    """Parse a TOML or JSON config into a dict; syntax errors name the file and the position."""
    text = path.read_text()
    if path.suffix.lower() == ".json":
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as e:
            raise DataError(f"{path}: invalid JSON: {e}") from e
    else:
        try:
            import tomllib
        except ModuleNotFoundError as e:  # Python 3.10
            raise DataError(
                f"{path}: TOML configs need Python >= 3.11 (tomllib); use a .json config"
            ) from e
        try:
            obj = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise DataError(f"{path}: invalid TOML: {e}") from e
    if not isinstance(obj, dict):
        raise DataError(f"{path}: expected a table/object at the top, got {type(obj).__name__}")
    return obj


def parse_config(obj: Mapping[str, object], path: Path) -> DataConfig:
    """Validate a parsed config: ``source`` (one kind + optional ``options``) and ``loader``."""
    unknown = set(obj) - {"source", "loader"}
    if unknown:
        raise OptionError(
            f"{path}: unknown top-level table(s) {sorted(unknown)}; expected [source] and [loader]"
        )
    source = obj.get("source")
    if not isinstance(source, Mapping):
        raise OptionError(
            f'{path}: missing [source] table; expected e.g. [source] hdf = ["train.hdf"]'
        )
    spec = parse_source(source, path, "[source]")
    loader = obj.get("loader", {})
    if not isinstance(loader, Mapping):
        raise OptionError(f"{path}: [loader] must be a table, got {loader!r}")
    return DataConfig(spec, loader, origin=str(path))


def parse_source(source: Mapping[str, object], path: Path, where: str) -> SourceSpec:
    """One source table: exactly one kind (``hdf = [...]``, ..., or ``corpora``: a table of
    named source tables) and optional ``options``."""
    kinds = [k for k in source if k in SOURCE_KINDS]
    extra = set(source) - set(SOURCE_KINDS) - {"options"}
    if len(kinds) != 1 or extra:
        raise OptionError(
            f"{path}: {where} got keys {sorted(source)}; expected exactly one of {SOURCE_KINDS} "
            "and optionally 'options'"
        )
    kind = kinds[0]
    options = source.get("options", {})
    if not isinstance(options, Mapping):
        raise OptionError(f"{path}: {where} options must be a table, got {options!r}")
    value = source[kind]
    if kind == "synthetic":
        if not isinstance(value, Mapping):
            raise OptionError(
                f"{path}: {where} synthetic must be a table of SyntheticSpec fields, got {value!r}"
            )
        return SourceSpec("synthetic", (), {**value, **options})
    if kind == "corpora":
        if not isinstance(value, Mapping) or not value:
            raise OptionError(
                f"{path}: {where} corpora must be a table of named sources, e.g. "
                '[source.corpora.libri] hdf = ["libri.hdf"], got {value!r}'
            )
        parts = []
        for name, table in value.items():
            if not isinstance(table, Mapping):
                raise OptionError(
                    f"{path}: {where} corpora.{name} must be a source table, got {table!r}"
                )
            parts.append((str(name), parse_source(table, path, f"{where[:-1]}.corpora.{name}]")))
        return SourceSpec("corpora", (), options, tuple(parts))
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise OptionError(
            f"{path}: {where} {kind} must be a path or a list of paths, got {value!r}"
        )
    if kind != "hdf" and len(names) != 1:
        raise OptionError(f"{path}: {where} {kind} takes one path, got {names}")
    resolved = []
    for n in names:
        p = Path(n) if Path(n).is_absolute() else path.parent / n
        if not p.exists():
            raise DataError(f"{path}: {where} {kind} file {n!r} does not exist (looked at {p})")
        resolved.append(str(p))
    return SourceSpec(kind, tuple(resolved), options)
