"""Java's string and ``HashMap`` semantics, where Kafka's behaviour depends on them.

Theory of operation: Kafka's broker and its Java assignors are written in Java,
and a few of their observable choices follow from Java's string model rather
than from the protocol:

* which ``__consumer_offsets`` partition (and so which broker) coordinates a
  group: ``abs(groupId.hashCode()) % partitions``;
* which protocol wins a group's vote when candidates tie: the first in a
  ``HashMap<String, ?>``'s iteration order;
* how assignors order members and topics: ``String.compareTo``, which compares
  UTF-16 code units, not code points;
* how long a string is for a size limit: ``String.length()``, in UTF-16 units.

Python strings are sequences of code points, so each of these is computed here
over the UTF-16 encoding. The module is pure (no I/O, no clock) and is the one
place the coordinator, the embedded broker's server and the balancers take
these rules from.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

__all__ = [
    "hashmap_order",
    "string_hash",
    "string_hash_unsigned",
    "string_length",
    "string_sort_key",
]

_UINT32: Final = 0xFFFFFFFF
_INT32_SIGN: Final = 1 << 31


def _utf16(value: str) -> bytes:
    return value.encode("utf-16-be", "surrogatepass")


def string_hash_unsigned(value: str) -> int:
    """``String.hashCode()`` as an unsigned 32-bit integer (over UTF-16 code units)."""
    data = _utf16(value)
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & _UINT32
    return h


def string_hash(value: str) -> int:
    """``String.hashCode()`` as Java returns it: a signed 32-bit integer."""
    h = string_hash_unsigned(value)
    return h - (1 << 32) if h >= _INT32_SIGN else h


def string_length(value: str) -> int:
    """``String.length()``: the number of UTF-16 code units."""
    return len(_utf16(value)) // 2


def string_sort_key(value: str) -> bytes:
    """A sort key that orders strings as Java's ``String.compareTo`` does.

    Comparing UTF-16-BE bytes lexicographically is comparing UTF-16 code units
    in order, which is what ``compareTo`` does (shorter prefix first).
    """
    return _utf16(value)


def hashmap_order(keys_in_insertion_order: Sequence[str]) -> list[str]:
    """The iteration order of a ``java.util.HashMap<String, ?>`` holding ``keys``.

    Entries are visited by bucket index (``(h ^ (h >>> 16)) & (capacity - 1)``),
    insertion order within a bucket; the table starts at 16 buckets and doubles
    when it is more than three quarters full. Tree bins (8+ keys in one bucket)
    are not modelled.
    """
    capacity = 16
    while len(keys_in_insertion_order) > capacity * 3 // 4:
        capacity *= 2

    def bucket(key: str) -> int:
        h = string_hash_unsigned(key)
        return (h ^ (h >> 16)) & (capacity - 1)

    return sorted(keys_in_insertion_order, key=bucket)
