"""``gengroup lake``: the lake sink and its Spark jobs (``gengroup.lake.cli``)."""

from __future__ import annotations

import argparse
from typing import Any

__all__ = ["add_parser"]


def add_parser(subparsers: Any) -> None:
    """Register ``lake sink|verify|analytics``."""
    from ..lake.cli import add_commands, run

    parser: argparse.ArgumentParser = subparsers.add_parser(
        "lake",
        help="land topics in a Parquet lake; verify and analyse it on Spark",
        description="Land topics in a Parquet lake exactly once, verify and analyse it on Spark "
        "(docs/pipeline.md).",
    )
    add_commands(parser.add_subparsers(dest="lake_command", metavar="COMMAND", required=True))
    parser.set_defaults(func=run)
