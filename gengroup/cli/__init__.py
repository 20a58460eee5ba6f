"""The ``gengroup`` command: argparse dispatch to subcommands.

Each subcommand lives in its own module exposing ``add_parser(subparsers)``,
which registers the subcommand's parser and sets ``func`` (taking the parsed
arguments, returning the exit code) as a default. Add a subcommand by writing
such a module and listing it in :func:`subcommands`.

The command draws its tables and progress views with rich, the ``cli``
extra's dependency: without it, :func:`main` says so in one line (exit 2)
instead of failing to import the subcommands.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

from .. import __version__

__all__ = ["build_parser", "main", "subcommands"]


def subcommands() -> list[Callable[[Any], None]]:
    """``add_parser`` functions of the subcommands, in help order."""
    from . import consume, demo, groups, lag, lake, produce, serve, topics

    return [
        demo.add_parser,
        serve.add_parser,
        groups.add_parser,
        lag.add_parser,
        topics.add_parser,
        produce.add_parser,
        consume.add_parser,
        lake.add_parser,
    ]


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="gengroup",
        description="gengroup: Kafka consumer groups for structured-concurrency Python.",
    )
    parser.add_argument("--version", action="version", version=f"gengroup {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for add_parser in subcommands():
        add_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``gengroup`` command.

    Args:
        argv: the arguments after the program name (default: ``sys.argv[1:]``).

    Returns:
        The process exit code.
    """
    try:
        import rich  # noqa: F401  (the subcommands' tables and views)
    except ImportError:
        sys.stderr.write(
            "gengroup: the gengroup command needs the 'cli' extra (rich is not installed): "
            "pip install 'gengroup[cli]'\n"
        )
        return 2
    args = build_parser().parse_args(argv)
    func: Callable[[argparse.Namespace], int] = args.func
    return func(args)
