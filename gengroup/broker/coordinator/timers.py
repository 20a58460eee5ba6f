"""The coordinator's deadlines: keyed one-shot timers on a heap.

They replace Kafka's ``CoordinatorTimer``. Keys name what a deadline is for:
the delayed join of a group (:func:`join_key`), its pending-sync expiry
(:func:`sync_key`) and each member's session expiry (:func:`heartbeat_key`).
Scheduling a key that already exists replaces its deadline, as in Kafka. The
timers hold integer milliseconds and never read a clock: the coordinator asks
for what is due at the time it is given.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Hashable

Action = Callable[[], None]
"""What a timer runs when it fires."""


class Timers:
    """Keyed one-shot timers; scheduling an existing key replaces it.

    Cancelled and replaced entries stay in the heap until they reach its top
    (or the heap is rebuilt once it holds many of them).
    """

    def __init__(self) -> None:
        self._entries: dict[Hashable, tuple[int, int, Action]] = {}
        self._heap: list[tuple[int, int, Hashable]] = []
        self._seq = 0

    def schedule(self, key: Hashable, deadline_ms: int, action: Action) -> None:
        """Arm ``key`` to run ``action`` at ``deadline_ms``, replacing any earlier arming."""
        self._seq += 1
        self._entries[key] = (deadline_ms, self._seq, action)
        heapq.heappush(self._heap, (deadline_ms, self._seq, key))
        if len(self._heap) > 2 * len(self._entries) + 64:
            self._heap = [(d, s, k) for k, (d, s, _) in self._entries.items()]
            heapq.heapify(self._heap)

    def cancel(self, key: Hashable) -> None:
        """Disarm ``key`` (nothing happens if it is not armed)."""
        self._entries.pop(key, None)

    def _discard_stale(self) -> None:
        while self._heap:
            _, seq, key = self._heap[0]
            entry = self._entries.get(key)
            if entry is not None and entry[1] == seq:
                return
            heapq.heappop(self._heap)

    def next_deadline(self) -> int | None:
        """The earliest armed deadline, or None."""
        self._discard_stale()
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now_ms: int) -> tuple[int, Action] | None:
        """Disarm and return the earliest timer due at ``now_ms``, with its deadline."""
        self._discard_stale()
        if not self._heap or self._heap[0][0] > now_ms:
            return None
        deadline, _, key = heapq.heappop(self._heap)
        _, _, action = self._entries.pop(key)
        return deadline, action

    def deadline_of(self, key: Hashable) -> int | None:
        """The deadline ``key`` is armed for, or None."""
        entry = self._entries.get(key)
        return None if entry is None else entry[0]


def join_key(group_id: str) -> tuple[str, str]:
    """The key of a group's delayed-join timer."""
    return ("join", group_id)


def sync_key(group_id: str) -> tuple[str, str]:
    """The key of a group's pending-sync timer."""
    return ("sync", group_id)


def heartbeat_key(group_id: str, member_id: str) -> tuple[str, str, str]:
    """The key of a member's (or pending member's) session timer."""
    return ("heartbeat", group_id, member_id)
