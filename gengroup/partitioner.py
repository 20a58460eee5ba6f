"""Kafka's key partitioner: murmur2 as the Java client computes it (sans-IO).

Theory of operation:

A record with a key goes to ``toPositive(murmur2(key)) % partitions``, as the
Java client's default partitioner (and librdkafka's ``murmur2`` /
``murmur2_random``) sends it, so records of one key land in the same partition
whichever client wrote them. :func:`murmur2` reproduces Java's 32-bit signed
arithmetic with masks.

Records without a key are spread by :class:`KeylessPartitioner`: *sticky*
(KIP-480, the default) sends every null-key record of a topic to one randomly
chosen partition with a leader until a batch of that partition is drained,
then picks another, which fills batches quickly; *round robin* spreads them
one by one. Which partitions have a leader is the caller's to say.
"""

from __future__ import annotations

import random
import struct
from collections import defaultdict
from collections.abc import Sequence
from typing import Final, Literal

__all__ = ["KeylessPartitioner", "Partitioner", "murmur2", "partition_for_key"]

#: The strategy for null-key records.
Partitioner = Literal["sticky", "round_robin"]

_M32: Final = 0xFFFFFFFF
_MURMUR2_SEED: Final = 0x9747B28C
_MURMUR2_M: Final = 0x5BD1E995
_LE_U32: Final = struct.Struct("<I")


def murmur2(data: bytes) -> int:
    """Kafka's 32-bit murmur2 hash, as the Java client's ``Utils.murmur2`` computes it.

    Args:
        data: the bytes to hash (a record key).

    Returns:
        The hash as a signed 32-bit integer (Java ``int``).
    """
    length = len(data)
    h = (_MURMUR2_SEED ^ length) & _M32
    body = length & ~3
    for (k,) in _LE_U32.iter_unpack(data[:body]):
        k = (k * _MURMUR2_M) & _M32
        k ^= k >> 24
        k = (k * _MURMUR2_M) & _M32
        h = ((h * _MURMUR2_M) & _M32) ^ k
    extra = length & 3
    if extra == 3:
        h ^= data[body + 2] << 16
    if extra >= 2:
        h ^= data[body + 1] << 8
    if extra >= 1:
        h ^= data[body]
        h = (h * _MURMUR2_M) & _M32
    h ^= h >> 13
    h = (h * _MURMUR2_M) & _M32
    h ^= h >> 15
    return h - (1 << 32) if h & 0x80000000 else h


def partition_for_key(key: bytes, num_partitions: int) -> int:
    """The partition the Java client's default partitioner picks for a non-null key.

    ``toPositive(murmur2(key)) % num_partitions`` with ``toPositive(x) = x & 0x7fffffff``;
    librdkafka's ``murmur2`` / ``murmur2_random`` partitioners agree.

    Args:
        key: the serialized key.
        num_partitions: the topic's partition count (> 0).

    Returns:
        A partition index in ``[0, num_partitions)``.
    """
    if num_partitions <= 0:
        raise ValueError(f"num_partitions must be positive, not {num_partitions}")
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


class KeylessPartitioner:
    """Chooses the partition of null-key records, per topic.

    Args:
        strategy: ``"sticky"`` or ``"round_robin"``.
    """

    def __init__(self, strategy: Partitioner) -> None:
        self.strategy = strategy
        self._sticky: dict[str, int] = {}
        self._round_robin: dict[str, int] = defaultdict(int)

    def choose(self, topic: str, count: int, led: Sequence[int]) -> int:
        """The partition of the next null-key record of ``topic``.

        Args:
            topic: the topic.
            count: its partition count.
            led: its partitions with a known leader, sorted (empty: unknown,
                every partition is a candidate).
        """
        sticky = self._sticky.get(topic)
        if self.strategy == "sticky" and sticky is not None and sticky < count:
            return sticky
        choices = [p for p in led if p < count] or list(range(count))
        if self.strategy == "round_robin":
            n = self._round_robin[topic]
            self._round_robin[topic] = n + 1
            return choices[n % len(choices)]
        sticky = random.choice(choices)
        self._sticky[topic] = sticky
        return sticky

    def drained(self, topic: str, partition: int, led: Sequence[int] | None) -> None:
        """A batch of ``partition`` was drained: a sticky topic moves to another partition.

        Args:
            topic: the topic.
            partition: the partition whose batch was drained.
            led: the topic's partitions with a known leader (None: the topic
                is not in the metadata any more).
        """
        if self._sticky.get(topic) != partition:
            return
        if led is None:
            del self._sticky[topic]
            return
        others = [p for p in led if p != partition]
        if others:
            self._sticky[topic] = random.choice(others)
