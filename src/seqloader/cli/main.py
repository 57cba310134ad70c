"""``seqloader``: entry point. Builds the parser, dispatches, and turns errors into one line.

Exit codes: 0 success; 1 a checked contract failed (``check``); 2 a bad argument, option, file or
data (one line on stderr, no traceback); 130 interrupted.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from seqloader import __version__
from seqloader.cli import bench, cache, check, convert, demo, prepare, stats
from seqloader.errors import SeqLoaderError

COMMANDS = (demo, bench, check, stats, convert, prepare, cache)
EXIT_CONTRACT = 1
EXIT_USAGE = 2


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (plus where to find help), not the usage text."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(
        prog="seqloader",
        description="Exact-epoch loading of variable-length sequences: tools.",
        epilog="Run 'seqloader COMMAND --help' for a command's options. Docs: docs/cli.md.",
    )
    parser.add_argument("--version", action="version", version=f"seqloader {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=Parser)
    for module in COMMANDS:
        p = module.add_parser(sub)
        p.set_defaults(run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    prog = f"seqloader {args.command}"
    try:
        return int(args.run(args) or 0)
    except SeqLoaderError as e:
        return _fail(prog, str(e))
    except (OSError, ImportError) as e:  # missing files, permissions, optional modules
        return _fail(prog, f"{type(e).__name__}: {e}")
    except BrokenPipeError:  # stdout closed early (e.g. piped into head): not an error of ours
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130


def _fail(prog: str, message: str) -> int:
    # one line: multi-line library messages are joined so scripts can grep a single line
    flat = " | ".join(line.strip() for line in message.splitlines() if line.strip())
    print(f"{prog}: error: {flat}", file=sys.stderr)
    return EXIT_USAGE


if __name__ == "__main__":
    raise SystemExit(main())
