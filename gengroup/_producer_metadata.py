"""The producer's view of its topics: partition counts, leaders, and refreshing them.

Theory of operation:

A ``send`` needs its topic's partition count before it can pick a partition:
:meth:`ProducerMetadata.partition_count` reads it from the cluster's cache,
or asks for the topic's metadata (creating the topic where the producer and
the broker allow it), retried with backoff for at most ``max_block``; one
request per topic at a time, however many sends wait for it. Every topic
asked for is remembered: the background task, :meth:`ProducerMetadata.loop`,
refreshes them all on demand (:meth:`ProducerMetadata.want`: a batch with no
leader known, a leadership error, a broken connection) and every
``metadata_max_age``, at least a ``retry_backoff`` apart, growing with
jitter while a refresh leaves a partition without a leader. A refresh that
fails, or a topic the answer reports an error for, is kept: a batch that
waits for a leader fails with it if it persists until its delivery timeout
(:meth:`ProducerMetadata.leader_error`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import anyio

from ._errors import (
    BrokerError,
    ClusterUnreachable,
    ConnectionClosed,
    GengroupError,
    KafkaConnectionError,
    ProtocolError,
    error_for_code,
    is_retriable,
)
from ._producer_config import ProducerConfig
from ._producer_idempotence import Sequencer, init_producer_id_request
from ._types import TopicPartition
from .io.cluster import Cluster, TopicInfo
from .io.retry import Backoff, ClientClosed, retry
from .protocol.versions import ApiKey

__all__ = ["ProducerMetadata"]

_UNKNOWN_TOPIC: Final = 3  # UNKNOWN_TOPIC_OR_PARTITION
_LEADER_NOT_AVAILABLE: Final = 5


class ProducerMetadata:
    """The topics one producer sends to, and the task that keeps their metadata fresh.

    Args:
        cluster: the producer's cluster (its metadata cache is the one read).
        config: the producer's settings.
        refreshed: called after each background refresh (the sender looks
            again at the batches waiting for a leader).
    """

    def __init__(
        self, cluster: Cluster, config: ProducerConfig, refreshed: Callable[[], None]
    ) -> None:
        self.cluster = cluster
        self.config = config
        self._refreshed = refreshed
        #: The topics sent to: the background refresh asks for these.
        self.topics: set[str] = set()
        self._topic_errors: dict[str, BrokerError] = {}
        self._error: BaseException | None = None
        self._wanted = anyio.Event()
        self._locks: dict[str, anyio.Lock] = {}
        self._led_cache: dict[str, tuple[TopicInfo, list[int]]] = {}
        #: The sends waiting for a topic's metadata (:meth:`close` ends them).
        self._waits: set[anyio.CancelScope] = set()
        self._closed = False

    def close(self) -> None:
        """The producer is closing: the sends waiting for metadata raise ConnectionClosed,
        and so does every later one that would have to wait."""
        self._closed = True
        for scope in self._waits:
            scope.cancel()

    def want(self) -> None:
        """Ask the background task for a refresh (it comes a backoff after the last one)."""
        self._wanted.set()

    @property
    def closed(self) -> ClientClosed | None:
        """The error of the last refresh if it found the Cluster closed (nothing reopens it)."""
        return self._error if isinstance(self._error, ClientClosed) else None

    def leader_error(self, tp: TopicPartition) -> BaseException:
        """Why ``tp`` has no leader known: the Cluster is closed, the last
        refresh's error, or LEADER_NOT_AVAILABLE."""
        return (
            self.closed
            or self._topic_errors.get(tp.topic)
            or (self._error or error_for_code(_LEADER_NOT_AVAILABLE, f"no leader known for {tp}"))
        )

    async def check_partition(self, topic: str, partition: int, count: int) -> int:
        """The partition count, once ``partition`` is known to be one of the topic's."""
        if not 0 <= partition < count:
            count = await self.partition_count(topic, refresh=True)
            if not 0 <= partition < count:
                raise error_for_code(
                    _UNKNOWN_TOPIC, f"topic {topic!r} has {count} partitions, not {partition}"
                )
        return count

    async def partition_count(self, topic: str, *, refresh: bool = False) -> int:
        """The topic's partition count: cached, or asked for (at most ``max_block``).

        Raises:
            BrokerError: the topic (still) fails within ``max_block``
                (UNKNOWN_TOPIC_OR_PARTITION: it does not exist).
            KafkaConnectionError: no broker answered within ``max_block``.
            ConnectionClosed: the producer closed while the send waited.
        """
        if not refresh:
            info = self.cluster.topics.get(topic)
            if info is not None and info.partitions:
                self.topics.add(topic)
                return len(info.partitions)
        with anyio.CancelScope() as scope:
            if self._closed:
                scope.cancel()
            self._waits.add(scope)
            try:
                return await self._ask(topic, refresh)
            finally:
                self._waits.discard(scope)
        raise ConnectionClosed(
            f"the Producer was closed while the send waited for the metadata of topic {topic!r}"
        )

    async def _ask(self, topic: str, refresh: bool) -> int:
        """The partition count, asked for (one request per topic at a time)."""
        lock = self._locks.setdefault(topic, anyio.Lock())
        async with lock:
            info = self.cluster.topics.get(topic)
            if not refresh and info is not None and info.partitions:
                return len(info.partitions)

            async def attempt() -> int:
                md = await self.cluster.refresh_metadata(
                    [topic], allow_auto_create=self.config.allow_auto_create_topics
                )
                got = md.get(topic)
                if got is not None and not got.error_code and got.partitions:
                    self.topics.add(topic)
                    return len(got.partitions)
                code = (got.error_code if got is not None else 0) or _UNKNOWN_TOPIC
                raise error_for_code(code, f"metadata for topic {topic!r}")

            def timed_out(last: BaseException | None) -> BaseException:
                if last is None:  # not a missing topic: no broker answered at all
                    said = "; ".join(f"{a}: {c}" for a, c in self.cluster.waiting_on().items())
                    return KafkaConnectionError(
                        f"no metadata for topic {topic!r} within max_block ({self.config.max_block}"
                        f" s): no broker answered ({said or 'no attempt under way'})"
                    )
                if isinstance(last, BrokerError):
                    error: BaseException = error_for_code(
                        last.code, f"topic {topic!r}: still failing after {self.config.max_block} s"
                    )
                elif isinstance(last, ClusterUnreachable):
                    error = ClusterUnreachable(last.causes, last.unreachable_for)
                else:
                    error = type(last)(f"no metadata for topic {topic!r}: {last}")
                error.__cause__ = last
                return error

            return await retry(
                f"metadata for topic {topic!r}",
                attempt,
                timeout=self.config.max_block,
                backoff=self.config.retry_backoff,
                on_timeout=timed_out,
            )

    async def producer_id(self, idem: Sequencer) -> None:
        """Ask any broker for a producer id (InitProducerId) and give it to ``idem``.

        What is retriable is retried with backoff for ``delivery_timeout`` (the
        records waiting for it have expired by then: the producer asks again
        if records wait), each attempt and failure reported to ``idem`` (an
        attempt unanswered within ``request_timeout`` fails with
        RequestTimedOut naming InitProducerId).

        Raises:
            GengroupError: a failure that is not retried (ClusterAuthorizationFailed,
                UnsupportedVersion from a broker without InitProducerId ...).
        """

        async def attempt() -> Any:
            idem.attempt(anyio.current_time())
            got = await self.cluster.call(None, ApiKey.INIT_PRODUCER_ID, init_producer_id_request)
            if got.error_code:
                raise idem.init_error(int(got.error_code))
            return got

        def retriable(exc: BaseException) -> bool:
            if not is_retriable(exc) or self.cluster._closed:  # closing: no failure to report
                return False
            idem.init_failed(exc, final=False, now=anyio.current_time())
            return True

        try:
            got = await retry(
                "InitProducerId",
                attempt,
                timeout=self.config.delivery_timeout,
                backoff=self.config.retry_backoff,
                retriable=retriable,
            )
        except TimeoutError:  # each failure was reported; the sender asks again if need be
            return
        except GengroupError as exc:
            if isinstance(exc, ClientClosed) or self.cluster._closed:
                raise  # the Cluster was closed under the producer: no refusal to keep or log
            idem.init_failed(exc, final=True, now=anyio.current_time())
            raise
        idem.set_id(int(got.producer_id), int(got.producer_epoch))

    def led(self, topic: str) -> list[int] | None:
        """The partitions of ``topic`` with a known leader (None: topic not in metadata)."""
        info = self.cluster.topics.get(topic)
        if info is None:
            return None
        # Each metadata refresh makes new TopicInfo objects: the cache holds
        # as long as the one it was computed from.
        cached = self._led_cache.get(topic)
        if cached is None or cached[0] is not info:
            led = sorted(p for p, part in info.partitions.items() if part.leader >= 0)
            cached = self._led_cache[topic] = (info, led)
        return cached[1]

    async def loop(self) -> None:
        """Refresh the topics sent to, on demand and every ``metadata_max_age``; forever."""
        backoff = Backoff(self.config.retry_backoff)  # reset by a complete refresh
        while True:
            with anyio.move_on_after(self.config.metadata_max_age):
                await self._wanted.wait()
            self._wanted = anyio.Event()
            topics = sorted(self.topics)
            complete = True
            if topics:
                try:
                    md = await self.cluster.refresh_metadata(topics)
                except (KafkaConnectionError, ProtocolError) as exc:
                    # Kept for the records waiting on a leader: they fail with it
                    # if it persists until their delivery timeout (at once if
                    # the Cluster was closed: the sender is woken below).
                    self._error = exc
                    complete = False
                else:
                    self._error = None
                    for name in topics:
                        info = md.get(name)
                        if info is not None and info.error_code:
                            self._topic_errors[name] = error_for_code(
                                info.error_code, f"metadata for topic {name!r}"
                            )
                            complete = False
                        else:
                            self._topic_errors.pop(name, None)
                            complete = complete and (
                                info is not None
                                and all(p.leader >= 0 for p in info.partitions.values())
                            )
                self._refreshed()
            if complete:
                backoff.reset()
            await backoff.sleep()
