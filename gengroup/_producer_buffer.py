"""The producer's buffer: the bytes of queued records, and the sends waiting for room.

Theory of operation:

Every queued record counts its estimated size against ``buffer_bytes`` until
it has its outcome. A ``send`` whose record does not fit waits for room, and
the waiting sends are served in arrival order, as Java's ``BufferPool``
serves its waiters: room freed goes to the first waiter once its record fits,
and a new record does not pass waiting ones, even if it would fit. Otherwise
a large record could wait in vain while smaller ones, arriving later, took
every byte freed. A waiter that gives up (its ``max_block`` passed, its call
was cancelled) leaves the line, and the ones behind it are served at once if
they fit. So no send waits longer than its own ``max_block``, however large
the record ahead of it. A record larger than the whole buffer is served once
the buffer is empty, and then goes alone.
"""

from __future__ import annotations

from collections import deque

import anyio

__all__ = ["BufferPool"]


class _Room:
    """One send waiting for ``size`` bytes of room."""

    __slots__ = ("event", "granted", "size")

    def __init__(self, size: int) -> None:
        self.size = size
        self.granted = False
        self.event = anyio.Event()


class BufferPool:
    """The bytes a producer has queued, and the sends waiting for room, in arrival order.

    Args:
        limit: ``buffer_bytes``.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        #: Bytes counted for the records queued (and for waiters already served).
        self.used = 0
        self._waiting: deque[_Room] = deque()
        self._closed = False

    def must_wait(self, size: int) -> bool:
        """Whether a record of ``size`` bytes would wait for room now."""
        return bool(self._waiting) or not self._fits(size)

    def _fits(self, size: int) -> bool:
        return not self.used or self.used + size <= self.limit

    async def reserve(self, size: int, deadline: float) -> bool:
        """Count ``size`` bytes as used, once they fit and every earlier waiter is served.

        Does not yield when they fit at once and nobody waits.

        Args:
            size: the record's estimated size.
            deadline: when to give up (event-loop time).

        Returns:
            True once the bytes are counted; False if ``deadline`` passed, or
            the pool was closed, first (nothing is counted then).
        """
        if self._closed:
            return False
        if not self._waiting and self._fits(size):
            self.used += size
            return True
        room = _Room(size)
        self._waiting.append(room)
        try:
            with anyio.CancelScope(deadline=deadline):
                await room.event.wait()
        except BaseException:  # cancelled: served meanwhile or not, leave the line
            self._leave(room)
            raise
        if room.granted:
            return True
        self._leave(room)
        return False

    def _leave(self, room: _Room) -> None:
        if room.granted:
            self.release(room.size)
            self.serve()
        else:
            if room in self._waiting:
                self._waiting.remove(room)
            self.serve()  # those behind it may fit now

    def release(self, size: int) -> None:
        """Uncount ``size`` bytes (a record has its outcome); :meth:`serve` hands them out."""
        self.used -= size

    def serve(self) -> None:
        """Serve the waiters, first come first, as long as the first one's record fits."""
        while self._waiting and self._fits(self._waiting[0].size) and not self._closed:
            room = self._waiting.popleft()
            room.granted = True
            self.used += room.size
            room.event.set()

    def close(self) -> None:
        """Wake every waiter unserved (:meth:`reserve` returns False), and serve none again."""
        self._closed = True
        while self._waiting:
            self._waiting.popleft().event.set()
