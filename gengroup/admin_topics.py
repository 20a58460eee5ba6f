"""How :class:`~gengroup.admin.Admin` changes topics: per-topic requests sent
until each topic is done, then metadata polled until it shows the change.

Theory of operation:

CreateTopics, DeleteTopics and CreatePartitions answer per topic.
:func:`topic_requests` sends the request for the topics still pending until
each one succeeded, was accepted (``exist_ok`` ...) or failed for good; a
retriable error keeps its topic pending for the next attempt. Kafka answers
before every broker knows the change, so :func:`wait_for_metadata` then polls
Metadata until it shows it, and :func:`wait_until_served` until each new
partition's leader answers ListOffsets for it (a leader named in metadata may
not have opened the partition's log yet). Connection failures are retried
with backoff until the deadline, which names the last error seen.

:func:`lag_metadata` reads the topics' metadata for ``group_lag``: an
unknown topic is a deleted one there, and every other topic error is raised.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from ._errors import BrokerError, KafkaConnectionError, error_for_code, is_retriable
from ._types import TopicPartition
from .io import offsets
from .io.cluster import Cluster, TopicInfo
from .io.retry import GiveUp, retry, seconds_left
from .protocol.versions import ApiKey

__all__ = ["lag_metadata", "listed", "topic_requests", "wait_for_metadata", "wait_until_served"]


class _NotYet(Exception):
    """The metadata does not show what is awaited yet (retried until the deadline)."""


async def wait_for_metadata(
    cluster: Cluster,
    what: str,
    topics: Sequence[str],
    ready: Callable[[dict[str, Any]], bool],
    timeout: float,
) -> None:
    """Poll Metadata for ``topics`` until ``ready`` says yes; retry connection failures.

    Raises:
        TimeoutError: ``ready`` did not say yes within ``timeout`` (naming the
            last connection failure, if any).
    """

    async def attempt() -> None:
        if not ready(await cluster.refresh_metadata(topics)):
            raise _NotYet

    def timed_out(last: BaseException | None) -> TimeoutError:
        suffix = "" if last is None or isinstance(last, _NotYet) else f" (last error: {last})"
        return TimeoutError(f"metadata did not show {what} within {round(timeout, 3):g} s{suffix}")

    await retry(
        what,
        attempt,
        timeout=timeout,
        backoff=cluster.retry_backoff,
        retriable=lambda exc: isinstance(exc, _NotYet | KafkaConnectionError),
        on_timeout=timed_out,
    )


async def topic_requests(
    cluster: Cluster,
    api: ApiKey,
    names: Sequence[str],
    make: Callable[[Any, list[str], float], Any],
    results: str,
    accept: Callable[[BrokerError], bool],
    limit: float,
) -> Callable[[], float]:
    """Send a per-topic request until every topic succeeded, was accepted or failed.

    ``make(module, names, limit)`` builds the request for the topics still
    pending, ``limit`` being the operation's time limit; the response's
    ``results`` field lists the per-topic results (``name``, ``error_code``,
    ``error_message``). A topic whose error ``accept`` approves counts as
    done; a retriable error keeps it pending for the next attempt; any other
    error is raised.

    Returns:
        The seconds left of the operation's time limit, for what follows.

    Raises:
        BrokerError: a topic's non-retriable error (naming the topic).
        TimeoutError: some topic was still pending at the deadline.
    """
    remaining = seconds_left(limit)
    pending = list(names)

    async def attempt() -> None:
        nonlocal pending
        if not pending:
            return
        retry_names: list[str] = []
        first_error: BrokerError | None = None
        batch = pending
        resp = await cluster.call(None, api, lambda mod: make(mod, batch, limit))
        for result in getattr(resp, results):
            code = int(result.error_code)
            if not code:
                continue
            err = error_for_code(code, f"topic {result.name!r}: {result.error_message}")
            if accept(err):
                continue
            if not is_retriable(err):
                raise GiveUp(err)
            retry_names.append(result.name)
            first_error = first_error or err
        pending = retry_names
        if first_error is not None:
            raise first_error

    what = "".join(word.capitalize() for word in api.name.split("_"))  # "CreateTopics"
    await retry(
        what, attempt, timeout=limit, backoff=cluster.retry_backoff, waiting_on=cluster.waiting_on
    )
    return remaining


async def wait_until_served(cluster: Cluster, topics: Sequence[str], timeout: float) -> None:
    """Wait until each partition's leader serves it (answers ListOffsets without error).

    Metadata names a leader slightly before that broker has opened the
    partition's log; requests in that window get NOT_LEADER_OR_FOLLOWER.
    """
    tps = {
        TopicPartition(name, p)
        for name in topics
        if name in cluster.topics
        for p in cluster.topics[name].partitions
    }
    await offsets.list_offsets(cluster, tps, "latest", timeout=timeout)


def listed(md: Mapping[str, Any], tp: TopicPartition) -> bool:
    """Whether metadata ``md`` (:func:`lag_metadata`'s) lists ``tp``."""
    info = md.get(tp.topic)
    return info is not None and not info.error_code and tp.partition in info.partitions


async def lag_metadata(cluster: Cluster, names: Sequence[str]) -> dict[str, TopicInfo]:
    """The metadata of topics ``names`` for :meth:`~gengroup.admin.Admin.group_lag`.

    Only an unknown topic's error stays in the answer: a commit left for a
    deleted topic is listed with end and lag unknown.

    Raises:
        BrokerError: any other topic error: an authorization failure, or a
            retriable one (a topic still being created, a leader being
            elected) for the caller to retry.
    """
    md = await cluster.refresh_metadata(names)
    for name in names:
        info = md.get(name)
        if info is not None and info.error_code not in (0, ErrorCode.unknown_topic_or_partition):
            raise error_for_code(info.error_code, f"metadata of topic {name!r}")
    return md
