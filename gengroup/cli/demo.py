"""``gengroup demo``: a consumer group living through rebalances on the embedded broker."""

from __future__ import annotations

import argparse
from typing import Any

from .. import demo


def add_parser(subparsers: Any) -> None:
    """Register the ``demo`` subcommand."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "demo",
        help="watch a consumer group rebalance through generations (embedded broker, no JVM)",
        description=demo.__doc__.splitlines()[0] if demo.__doc__ else None,
    )
    demo.add_arguments(parser)
    parser.set_defaults(func=demo.run)
