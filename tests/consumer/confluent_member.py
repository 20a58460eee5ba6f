"""A librdkafka (confluent-kafka) consumer as a group member next to gengroup's.

The consumer is polled in a thread of its own until :meth:`close`; its
rebalance callbacks keep :attr:`PolledMember.assignment`, each subclass by
its protocol's rules (eager: the whole assignment each time; incremental:
the partitions added and revoked).
"""

from __future__ import annotations

import threading
from typing import Any

import confluent_kafka

from gengroup import TopicPartition

#: Seconds a librdkafka consumer's close may take (it leaves the group).
CLOSE_LIMIT = 60.0


def partitions_of(partitions: list[Any]) -> set[TopicPartition]:
    return {TopicPartition(p.topic, p.partition) for p in partitions}


class PolledMember:
    """A confluent-kafka consumer of ``topic``, polled in a thread after :meth:`start`.

    Attributes:
        assignment: the partitions it owns (read it with :meth:`current`).
        values: the values of the records it read.
        error: what ended the polling thread, if anything did.
    """

    def __init__(self, topic: str, config: dict[str, Any]) -> None:
        self.topic = topic
        self.consumer = confluent_kafka.Consumer(
            {
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "client.id": "librdkafka-member",
                **config,
            }
        )
        self.assignment: set[TopicPartition] = set()
        self.values: set[bytes] = set()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.error: BaseException | None = None

    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        raise NotImplementedError

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        raise NotImplementedError

    def _loop(self) -> None:
        try:
            while not self._stop.is_set():
                msg = self.consumer.poll(0.1)
                if msg is not None and msg.error() is None:
                    with self._lock:
                        self.values.add(msg.value())
        except BaseException as exc:  # reported by the test
            self.error = exc

    def start(self) -> None:
        """Subscribe (librdkafka joins the group from its own threads from then
        on, polled or not) and start polling; lost partitions count as revoked."""
        self.consumer.subscribe(
            [self.topic],
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_revoke,
        )
        self.thread.start()

    def current(self) -> set[TopicPartition]:
        with self._lock:
            return set(self.assignment)

    def close(self) -> None:
        """Stop polling and close the consumer (it leaves the group); idempotent.

        Raises:
            AssertionError: librdkafka's close did not return within
                :data:`CLOSE_LIMIT` (seen once: a blocking C call that
                pytest-timeout's signal cannot interrupt would hang the run).
        """
        if self._stop.is_set():
            return
        self._stop.set()
        if self.thread.is_alive():
            self.thread.join(10)
        closing = threading.Thread(target=self.consumer.close, daemon=True)
        closing.start()
        closing.join(CLOSE_LIMIT)
        if closing.is_alive():
            raise AssertionError(
                f"confluent-kafka's Consumer.close() did not return within {CLOSE_LIMIT} s"
            )


class IncrementalMember(PolledMember):
    """A member whose rebalance callbacks are incremental (cooperative-sticky on
    the classic protocol, or the consumer protocol): ``on_assign`` gets the
    partitions added, ``on_revoke`` the ones revoked."""

    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        with self._lock:
            self.assignment |= partitions_of(partitions)

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        with self._lock:
            self.assignment -= partitions_of(partitions)
