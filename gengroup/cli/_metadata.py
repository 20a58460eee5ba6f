"""The metadata of the topics a command sends to or reads, waited for until ``--timeout``.

A command may start with its cluster: a compose stack starting, a broker
restarting. :func:`topic_metadata` asks for the topics' metadata again, with
backoff, while no broker answers (and while a topic just created has no
leader yet) until the command's ``--timeout``, as the commands built on
:class:`~gengroup.Admin` wait; a topic that does not exist is said at once.
"""

from __future__ import annotations

from collections.abc import Sequence

from kio.schema.errors import ErrorCode

from .._errors import KafkaConnectionError, error_for_code, is_retriable
from ..io.cluster import Cluster, TopicInfo
from ..io.retry import GiveUp, retry

__all__ = ["topic_metadata"]

_UNKNOWN_TOPIC = int(ErrorCode.unknown_topic_or_partition)


async def topic_metadata(
    cluster: Cluster, topics: Sequence[str], timeout: float
) -> dict[str, TopicInfo]:
    """The metadata of each of ``topics`` (without creating them), retrying until ``timeout``.

    Connection failures (no broker reachable yet) and retriable topic errors
    (a topic without a leader yet) are asked again with backoff and jitter
    until ``timeout`` seconds have passed.

    Args:
        cluster: the command's cluster.
        topics: the topic names (each asked once).
        timeout: seconds to wait for an answer (the command's ``--timeout``).

    Returns:
        Each topic's metadata, by name.

    Raises:
        UnknownTopicOrPartition: a topic does not exist (at once).
        BrokerError: the broker refused the metadata request for a topic.
        KafkaConnectionError: no broker answered within ``timeout`` (the last
            failure, naming each address and why it failed).
        TimeoutError: a topic stayed unavailable (no leader) for ``timeout``.
    """
    names = list(dict.fromkeys(topics))

    async def attempt() -> dict[str, TopicInfo]:
        md = await cluster.refresh_metadata(names)
        for name in names:
            info = md.get(name)
            if info is None or info.error_code:
                code = (info.error_code if info is not None else 0) or _UNKNOWN_TOPIC
                said = "does not exist" if code == _UNKNOWN_TOPIC else "is not available"
                error = error_for_code(code, f"topic {name!r} {said}")
                # A topic just created has no leader for a moment: asked again;
                # a topic that does not exist is said at once (it is not created).
                raise error if code != _UNKNOWN_TOPIC and is_retriable(error) else GiveUp(error)
        return {name: md[name] for name in names}

    def timed_out(last: BaseException | None) -> BaseException:
        if isinstance(last, KafkaConnectionError):
            return last
        shown = ", ".join(map(repr, names))
        return TimeoutError(f"no metadata for topic {shown} within {timeout:g} s")

    return await retry(
        f"metadata for topic {', '.join(map(repr, names))}",
        attempt,
        timeout=timeout,
        backoff=cluster.retry_backoff,
        # Every connection failure, also one the cluster's own unreachable
        # timeout calls exhausted: the command's --timeout is the limit.
        retriable=lambda exc: isinstance(exc, KafkaConnectionError) or is_retriable(exc),
        on_timeout=timed_out,
    )
