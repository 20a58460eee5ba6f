"""``gengroup topics``: list, describe, create and delete topics, add partitions.

Every action takes ``--bootstrap`` (or ``GENGROUP_BOOTSTRAP``) and ``--json``
(see :mod:`._admin` for the exit codes). ``create`` and ``add-partitions``
wait until every partition has a leader that serves it; on a terminal, stderr
shows how many have one meanwhile (:mod:`._progress`).
"""

from __future__ import annotations

import argparse
from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from kio.schema.errors import ErrorCode

from .._errors import UnknownTopicOrPartition
from .._types import TopicPartition
from ..admin import Admin
from ..admin_types import INT16_MAX, INT32_MAX, NewTopic
from ._admin import AdminCommand
from ._common import bounded
from ._progress import View, wanted

__all__ = ["add_parser"]


def add_parser(subparsers: Any) -> None:
    """Register the ``topics`` subcommand and its actions."""
    command = AdminCommand(subparsers, "topics", "list, describe, create and delete topics")
    command.action("list", "list the topics", _list)
    command.action("describe", "partitions, leaders and end offsets of a topic", _describe)
    create = command.action("create", "create a topic", _create)
    create.add_argument(
        "--partitions",
        type=_partition_count,
        default=1,
        help="default 1; -1: the broker's default (num.partitions)",
    )
    create.add_argument(
        "--replication-factor",
        type=_replication_factor,
        default=-1,
        help="copies of each partition; default -1: the broker's (default.replication.factor)",
    )
    command.action("delete", "delete a topic", _delete)
    grow = command.action("add-partitions", "grow a topic to a number of partitions", _grow)
    grow.add_argument(
        "--partitions", type=bounded(int, 1, INT32_MAX), required=True, help="the new total"
    )
    for parser in command.actions.values():
        if parser is not command.actions["list"]:
            parser.add_argument("topic")


def _partition_count(text: str) -> int:
    """``--partitions`` of ``create``: 1 to 2**31 - 1, or -1 (CreateTopics' "the broker's
    default", as its ``num.partitions``)."""
    if text.strip() == "-1":
        return -1
    value: int = bounded(int, 1, INT32_MAX)(text)
    return value


def _replication_factor(text: str) -> int:
    """``--replication-factor`` of ``create``: 1 to 2**15 - 1, or -1 (the broker's
    ``default.replication.factor``)."""
    if text.strip() == "-1":
        return -1
    value: int = bounded(int, 1, INT16_MAX)(text)
    return value


async def _list(admin: Admin, args: argparse.Namespace) -> list[dict[str, Any]]:
    md = await admin.metadata(None)
    return [
        {"topic": name, "partitions": len(info.partitions)}
        for name, info in sorted(md.items())
        if not info.error_code and not info.is_internal
    ]


def _missing(topic: str) -> UnknownTopicOrPartition:
    """The error of a topic that does not exist, naming it once.

    The broker's own text for UNKNOWN_TOPIC_OR_PARTITION differs (the embedded
    broker names the topic, Apache Kafka says "This server does not host this
    topic-partition." or nothing), so the command says it in its own words.
    """
    return UnknownTopicOrPartition(
        ErrorCode.unknown_topic_or_partition, f"topic {topic!r} does not exist"
    )


async def _describe(admin: Admin, args: argparse.Namespace) -> dict[str, Any]:
    info = (await admin.metadata([args.topic])).get(args.topic)
    if info is None or info.error_code:
        raise _missing(args.topic)
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
    topic = NewTopic(args.topic, args.partitions, args.replication_factor)
    await _showing_leaders(admin, args, lambda: admin.create_topics([topic]))
    # The count the topic got (with -1, the broker's default), as the metadata shows it.
    return {"created": args.topic, "partitions": admin.cluster.partition_count(args.topic)}


async def _showing_leaders(
    admin: Admin, args: argparse.Namespace, call: Callable[[], Awaitable[None]]
) -> None:
    """Await ``call``, the action ``args`` name, while the view shows how many of
    ``args.topic``'s ``args.partitions`` partitions have a leader in the metadata the
    admin's own refreshes keep (no requests of its own). With ``-1`` (the broker's
    default count) the count is the one the metadata shows, once it shows the topic."""
    topic, asked = args.topic, args.partitions
    view = View("partitions", enabled=wanted())
    if not view.enabled:
        await call()
        return

    def count() -> int | None:
        return asked if asked > 0 else admin.cluster.partition_count(topic)

    with view:
        task = view.add(f"{args.topics_action} {topic}", total=max(asked, 1), detail="requested")

        async def watch() -> None:
            while True:
                info = admin.cluster.topics.get(topic)
                total = count()
                if info is not None and not info.error_code and total:
                    led = sum(p.leader >= 0 for p in info.partitions.values())
                    view.update(
                        task,
                        total=total,
                        completed=min(led, total),
                        detail=f"waiting for metadata: {led}/{total} partitions with a leader",
                    )
                await anyio.sleep(0.1)

        async with anyio.create_task_group() as tg:
            tg.start_soon(watch)
            await call()
            tg.cancel_scope.cancel()
        total = count() or 0
        view.update(
            task,
            total=max(total, 1),
            completed=max(total, 1),
            detail=f"{total}/{total} partitions served",
        )


async def _delete(admin: Admin, args: argparse.Namespace) -> dict[str, Any]:
    try:
        await admin.delete_topics([args.topic])
    except UnknownTopicOrPartition:
        raise _missing(args.topic) from None
    return {"deleted": args.topic}


async def _grow(admin: Admin, args: argparse.Namespace) -> dict[str, Any]:
    try:
        await _showing_leaders(
            admin, args, lambda: admin.create_partitions(args.topic, args.partitions)
        )
    except UnknownTopicOrPartition:
        raise _missing(args.topic) from None
    return {"topic": args.topic, "partitions": args.partitions}
