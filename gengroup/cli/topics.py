"""``gengroup topics``: list, describe, create and delete topics, add partitions.

Every action takes ``--bootstrap`` (or ``GENGROUP_BOOTSTRAP``) and ``--json``
(see :mod:`._admin` for the exit codes).
"""

from __future__ import annotations

import argparse
from typing import Any

from kio.schema.errors import ErrorCode

from .._errors import UnknownTopicOrPartition
from .._types import TopicPartition
from ..admin import Admin
from ._admin import AdminCommand

__all__ = ["add_parser"]


def add_parser(subparsers: Any) -> None:
    """Register the ``topics`` subcommand and its actions."""
    command = AdminCommand(subparsers, "topics", "list, describe, create and delete topics")
    command.action("list", "list the topics", _list)
    command.action("describe", "partitions, leaders and end offsets of a topic", _describe)
    create = command.action("create", "create a topic", _create)
    create.add_argument("--partitions", type=int, default=1, help="default 1")
    command.action("delete", "delete a topic", _delete)
    grow = command.action("add-partitions", "grow a topic to a number of partitions", _grow)
    grow.add_argument("--partitions", type=int, required=True, help="the new total")
    for parser in command.actions.values():
        if parser is not command.actions["list"]:
            parser.add_argument("topic")


async def _list(admin: Admin, args: argparse.Namespace) -> list[dict[str, Any]]:
    md = await admin.cluster.refresh_metadata(None)
    return [
        {"topic": name, "partitions": len(info.partitions)}
        for name, info in sorted(md.items())
        if not info.error_code and not info.is_internal
    ]


async def _describe(admin: Admin, args: argparse.Namespace) -> dict[str, Any]:
    info = (await admin.cluster.refresh_metadata([args.topic])).get(args.topic)
    if info is None or info.error_code:
        raise UnknownTopicOrPartition(
            ErrorCode.unknown_topic_or_partition, f"topic {args.topic!r} does not exist"
        )
    parts = [info.partitions[i] for i in sorted(info.partitions)]
    ends = await admin.list_offsets(
        [TopicPartition(args.topic, p.partition) for p in parts], "latest"
    )
    return {
        "topic": args.topic,
        "partitions": [
            {
                "partition": p.partition,
                "leader": p.leader,
                "end_offset": ends[TopicPartition(args.topic, p.partition)],
            }
            for p in parts
        ],
    }


async def _create(admin: Admin, args: argparse.Namespace) -> dict[str, Any]:
    await admin.create_topics({args.topic: args.partitions})
    return {"created": args.topic, "partitions": args.partitions}


async def _delete(admin: Admin, args: argparse.Namespace) -> dict[str, Any]:
    await admin.delete_topics([args.topic])
    return {"deleted": args.topic}


async def _grow(admin: Admin, args: argparse.Namespace) -> dict[str, Any]:
    await admin.create_partitions(args.topic, args.partitions)
    return {"topic": args.topic, "partitions": args.partitions}
