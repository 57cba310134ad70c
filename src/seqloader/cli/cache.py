"""``seqloader cache``: list the node's stores under ``$XDG_CACHE_HOME/seqloader`` (size, when
last used, what each belongs to) and, with ``--clean``, remove the stale ones
(``seqloader.sources.node_cache``): never one a process is building."""

from __future__ import annotations

import argparse
import time

from seqloader.cli.options import add_command, add_output_options, non_negative_float
from seqloader.cli.output import human, print_json
from seqloader.loading import bucket_store
from seqloader.shards.source import INDEX_VERSION
from seqloader.sources import concat_store, hdf_store, screen_verdicts
from seqloader.sources.node_cache import (
    CachedStore,
    cache_root,
    list_stores,
    remove,
    size_text,
    stale,
)
from seqloader.trainer import duplicate_store

#: the formats this seqloader writes its stores in (each store's header says its own):
#: ``--superseded`` keeps a store of one of these over a newer one of another version's format
#: built from the same data (a store of newer data is kept whatever its format)
FORMATS = frozenset(
    {
        bucket_store.FORMAT,
        duplicate_store.CHECK_VERSION,
        hdf_store.STORE_VERSION,
        concat_store.STORE_VERSION,
        INDEX_VERSION,
        screen_verdicts.FORMAT,
        screen_verdicts.PART_FORMAT,
    }
)

HELP = "list the node's stores (metadata, verdicts, bucket indexes) and remove stale ones"
DETAILS = (
    f"Default folder: {cache_root()} ($XDG_CACHE_HOME/seqloader). Without --clean only "
    "lists. --clean removes leftovers of builds that died, incomplete files, and the stores "
    "the rules below select; a store being built (its lock held) is never removed."
)


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = add_command(sub, "cache", HELP, DETAILS)
    p.add_argument(
        "--dir",
        action="append",
        default=None,
        metavar="DIR",
        help="look here instead (repeatable; e.g. an HDFSource index_dir)",
    )
    p.add_argument("--clean", action="store_true", help="remove the stale stores")
    p.add_argument(
        "--older-than",
        type=non_negative_float,
        default=None,
        metavar="DAYS",
        help="with --clean: also stores not used for more than DAYS days",
    )
    p.add_argument(
        "--superseded",
        action="store_true",
        help="with --clean: also stores of a source and options that have a store of newer data "
        "(whatever the formats), or of the same data in this seqloader's format (theirs is "
        "another version's), or a newer one",
    )
    add_output_options(p)
    return p


def run(args: argparse.Namespace) -> int:
    now = time.time()
    stores = list_stores(args.dir)
    chosen = stale(stores, args.older_than, args.superseded, now, FORMATS) if args.clean else []
    removed, skipped = remove(chosen) if args.clean else ([], [])
    if args.json:
        print_json(
            {
                "folders": args.dir or [cache_root()],
                "stores": [_as_dict(s, now) for s in stores],
                "removed": removed,
                "skipped": skipped,
            }
        )
        return 0
    print(f"folders: {', '.join(args.dir or [cache_root()])}")
    gone = set(removed)
    for s in stores:
        mark = "removed " if s.path in gone else ""
        seqs = "" if s.sequences is None else f", {human(s.sequences)} seqs"
        print(
            f"{mark}{s.kind} {s.state} {size_text(s.nbytes)}, used {s.age_days(now):.1f} days ago"
            f"{seqs}{_format_text(s)}: {s.path}" + (f" [{s.about}]" if s.about else "")
        )
    total = sum(s.nbytes for s in stores)
    print(f"{len(stores)} file(s), {size_text(total)}")
    if args.clean:
        freed = sum(s.nbytes for s in stores if s.path in gone)
        print(f"removed {len(removed)} file(s), {size_text(freed)}")
        for p in skipped:
            print(f"skipped (in use or changed): {p}")
    return 0


def _format_text(s: CachedStore) -> str:
    if s.state != "ok" or s.format in FORMATS:
        return ""
    if not s.format:  # written before stores said it, or by a builder that does not say
        return ", format not recorded"
    return f", format {s.format!r} (another seqloader version's; not read by this one)"


def _as_dict(s: CachedStore, now: float) -> dict[str, object]:
    return {
        "path": s.path,
        "kind": s.kind,
        "state": s.state,
        "bytes": s.nbytes,
        "age_days": s.age_days(now),
        "sequences": s.sequences,
        "about": s.about,
        "identity": s.identity,
        "format": s.format,
        "current_format": s.format in FORMATS,
    }
