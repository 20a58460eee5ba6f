"""An explicit ``await gen.commit()`` against a coordinator that refuses it, on the
embedded broker in trio's virtual time.

A refusal worth retrying (a coordinator loading, moving or slow, a broken
connection) is sent again with the client's backoff within ``request_timeout``,
as the Java client's ``commitSync`` does, so one such answer no longer ends
the worker that committed (and with it the generation and the group). A
fencing answer or REBALANCE_IN_PROGRESS is raised at once; what keeps failing
comes out as ``RequestTimedOut`` with the last refusal as its cause.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
import pytest
import trio
import trio.testing
from kio.schema.errors import ErrorCode

from gengroup import (
    ConsumerGroup,
    Generation,
    GenerationEnded,
    IllegalGeneration,
    RebalanceInProgress,
    RequestTimedOut,
    TopicPartition,
)
from gengroup._errors import CoordinatorLoadInProgress
from gengroup.broker import FakeCluster
from gengroup.broker.faults import Disconnect, Drop, Fail, Intercepted
from gengroup.protocol.records import NewRecord
from gengroup.protocol.versions import ApiKey

from .helpers import EMBEDDED_SETTINGS

#: No periodic commit: the explicit ones are the only commits while live.
SETTINGS = {**EMBEDDED_SETTINGS, "commit_interval": 0.0, "request_timeout": 10.0}
TP = TopicPartition("t", 0)


@asynccontextmanager
async def first_generation(cluster: FakeCluster) -> AsyncIterator[Generation]:
    cluster.produce("t", [NewRecord(None, str(i).encode(), (), 0) for i in range(10)])
    async with ConsumerGroup("g", ["t"], cluster.bootstrap, **SETTINGS) as group:
        yield await group.next()


def offsets(req: Intercepted) -> list[int]:
    return [p.committed_offset for t in req.request.topics for p in t.partitions]


@pytest.mark.parametrize(
    "fault",
    [
        ErrorCode.coordinator_load_in_progress,
        ErrorCode.request_timed_out,
        ErrorCode.not_coordinator,
        ErrorCode.coordinator_not_available,
        "disconnect",
    ],
)
async def test_a_commit_refused_with_a_retriable_code_is_sent_again(
    autojump_clock: trio.testing.MockClock, fault: ErrorCode | str
) -> None:
    """The worker's commit returns normally; the generation goes on."""
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        sent: list[float] = []

        # A moved coordinator and a broken connection are followed once at
        # once (CoordinatorClient.call): those fail twice.
        follows = fault in (
            "disconnect",
            ErrorCode.not_coordinator,
            ErrorCode.coordinator_not_available,
        )
        failures = 2 if follows else 1

        def refuse(req: Intercepted) -> Fail | Disconnect | None:
            sent.append(trio.current_time())
            if len(sent) > failures:
                return None
            return Disconnect() if fault == "disconnect" else Fail(fault)

        async with first_generation(cluster) as gen:
            cluster.control(ApiKey.OFFSET_COMMIT, refuse)
            gen.mark(TP, 7)
            await gen.commit()
            assert cluster.committed_offsets("g")[TP] == 7
            assert gen.committed[TP] == 7 and gen.commit_error is None
            assert not gen.ending
            # Sent again after a backoff (retry_backoff 0.1 s, jittered), not at once.
            assert 0.08 <= sent[-1] - sent[-2] <= 0.12


@pytest.mark.parametrize(
    ("code", "raised"),
    [
        (ErrorCode.illegal_generation, IllegalGeneration),
        (ErrorCode.rebalance_in_progress, RebalanceInProgress),
    ],
)
async def test_a_fencing_answer_is_raised_at_once(
    autojump_clock: trio.testing.MockClock, code: ErrorCode, raised: type[Exception]
) -> None:
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        sent: list[float] = []

        def refuse(req: Intercepted) -> Fail:
            sent.append(trio.current_time())
            return Fail(code)

        async with first_generation(cluster) as gen:
            control = cluster.control(ApiKey.OFFSET_COMMIT, refuse)
            gen.mark(TP, 7)
            with pytest.raises(raised):
                await gen.commit()
            assert len(sent) == 1
            assert isinstance(gen.commit_error, raised)
            control.remove()


async def test_a_coordinator_that_keeps_refusing_times_the_commit_out(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Refused for longer than request_timeout: RequestTimedOut at request_timeout, the
    last refusal as its cause, after retries spaced by the capped, jittered backoff."""
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        sent: list[float] = []

        def loading(req: Intercepted) -> Fail:
            sent.append(trio.current_time())
            return Fail(ErrorCode.coordinator_load_in_progress)

        async with first_generation(cluster) as gen:
            control = cluster.control(ApiKey.OFFSET_COMMIT, loading)
            gen.mark(TP, 7)
            t0 = trio.current_time()
            with pytest.raises(RequestTimedOut, match="did not complete within 10 s") as caught:
                await gen.commit()
            assert trio.current_time() - t0 == pytest.approx(SETTINGS["request_timeout"])
            assert isinstance(caught.value.__cause__, CoordinatorLoadInProgress)
            assert gen.commit_error is caught.value
            gaps = [b - a for a, b in itertools.pairwise(sent)]
            assert len(sent) > 5 and max(gaps) <= 1.2
            assert min(gaps) < max(gaps)  # growing: the backoff doubles
            assert not gen.ending
            control.remove()
            await gen.commit()  # the marks stayed
            assert cluster.committed_offsets("g")[TP] == 7


async def test_a_retried_commit_carries_the_marks_made_meanwhile(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        seen: list[list[int]] = []

        def loading_once(req: Intercepted) -> Fail | None:
            seen.append(offsets(req))
            return Fail(ErrorCode.coordinator_load_in_progress) if len(seen) == 1 else None

        async with first_generation(cluster) as gen:
            cluster.control(ApiKey.OFFSET_COMMIT, loading_once)
            gen.mark(TP, 5)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(gen.commit)
                await trio.sleep(0.01)
                gen.mark(TP, 8)
            assert seen == [[5], [8]]
            assert cluster.committed_offsets("g")[TP] == 8


async def test_a_generation_that_ends_while_its_commit_is_retried_stops_the_retries(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Offsets given explicitly are refused (retriable) while the final commit of the
    marks is accepted: once the generation has ended, the explicit commit's next
    attempt is refused locally with GenerationEnded; nothing more is sent."""
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        explicit: list[float] = []

        def refuse_nine(req: Intercepted) -> Fail | None:
            if offsets(req) == [9]:
                explicit.append(trio.current_time())
                return Fail(ErrorCode.coordinator_load_in_progress)
            return None

        async with first_generation(cluster) as gen:
            cluster.control(ApiKey.OFFSET_COMMIT, refuse_nine)
            gen.mark(TP, 5)
            raised: list[BaseException] = []

            async def commit_nine() -> None:
                try:
                    await gen.commit({TP: 9})
                except GenerationEnded as exc:
                    raised.append(exc)

            async with trio.open_nursery() as nursery:
                nursery.start_soon(commit_nine)
                await trio.sleep(0.5)
                gen.cancel("test")
                await gen.wait_ended()
                ended_at = trio.current_time()
            assert raised and "ended while its commit was retried" in str(raised[0])
            assert max(explicit) <= ended_at
            assert trio.current_time() - ended_at <= 1.2  # one backoff at most
            assert cluster.committed_offsets("g")[TP] == 5


# ------------------------------------------------------------- gen.commit_error


async def test_a_cancelled_commit_leaves_commit_error_alone(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A commit the caller gives up on (its scope cancelled) is no commit error:
    ``commit_error`` never holds the event loop's cancellation exception."""
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        async with first_generation(cluster) as gen:
            control = cluster.control(ApiKey.OFFSET_COMMIT, lambda req: Drop())
            gen.mark(TP, 7)
            with trio.move_on_after(1.0):
                await gen.commit()
            assert gen.commit_error is None
            control.remove()


async def _hung_final_commit() -> tuple[BaseException | None, float]:
    """A generation whose final commit meets a coordinator that never answers: its
    ``commit_error`` once it ended, and how long the commit took."""
    settings = {**SETTINGS, "request_timeout": 2.0}
    async with FakeCluster(topics={"t": 1}, initial_rebalance_delay_ms=0) as cluster:
        async with ConsumerGroup("g", ["t"], cluster.bootstrap, **settings) as group:
            gen = await group.next()
            gen.mark(TP, 7)
            control = cluster.control(ApiKey.OFFSET_COMMIT, lambda req: Drop())
            t0 = anyio.current_time()
            gen.cancel("test")
            await gen.wait_ended()
            took = anyio.current_time() - t0
            control.remove()
            return gen.commit_error, took


def _is_the_final_commits_timeout(error: BaseException | None) -> bool:
    return isinstance(error, RequestTimedOut) and "did not complete within 2 s" in str(error)


async def test_a_timed_out_final_commit_is_the_commit_error(
    autojump_clock: trio.testing.MockClock,
) -> None:
    error, took = await _hung_final_commit()
    assert _is_the_final_commits_timeout(error), repr(error)
    assert math.isclose(took, 2.0, abs_tol=0.01)


def test_a_timed_out_final_commit_is_the_commit_error_under_asyncio() -> None:
    error, took = anyio.run(_hung_final_commit, backend="asyncio")
    assert _is_the_final_commits_timeout(error), repr(error)
    assert took < 5.0
