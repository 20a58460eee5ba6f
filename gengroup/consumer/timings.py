"""How long forming a generation took, step by step."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["RebalanceTimings"]


@dataclass(slots=True)
class RebalanceTimings:
    """How long each step of forming a generation took, in seconds.

    ``previous_teardown`` is how long this member's previous generation took
    to end (tasks returning after cancellation, the final commit), 0 for the
    first generation.

    ``first_record`` is measured from the end of the offset fetch to the first
    batch handed to a worker, and stays None until one is.

    ``revocation`` is how long revoking the partitions this generation no
    longer assigns took before it was handed out (an incremental rebalance:
    their tasks returning, their commit); 0 when it revoked none.
    """

    previous_teardown: float = 0.0
    find_coordinator: float = 0.0
    join: float = 0.0
    sync: float = 0.0
    offset_fetch: float = 0.0
    first_record: float | None = None
    revocation: float = 0.0

    @property
    def total(self) -> float:
        """The previous generation's teardown + coordinator lookup + join + sync + offset fetch.

        The teardown counts: while the previous generation's tasks finish
        and its final commit waits for the coordinator, this member processes
        nothing.
        """
        return (
            self.previous_teardown
            + self.find_coordinator
            + self.join
            + self.sync
            + self.offset_fetch
        )
