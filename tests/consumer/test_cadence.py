"""The heartbeat cadence's arithmetic: the period, the shared grid, the handover's lead."""

from __future__ import annotations

import zlib

import pytest

from gengroup.consumer.cadence import (
    EXPIRY_MARGIN,
    HANDOVER_MARGIN,
    beat_period,
    handover_lead,
    until_grid,
)


def test_the_period_spans_the_session_plus_the_margin_in_whole_beats() -> None:
    assert beat_period(1.0, 10.0) == pytest.approx((10.0 + EXPIRY_MARGIN) / 10)
    assert beat_period(3.0, 10.0) == pytest.approx((10.0 + EXPIRY_MARGIN) / 4)
    assert beat_period(5.0, 45.0) == pytest.approx((45.0 + EXPIRY_MARGIN) / 9)


def test_the_grid_is_the_periods_multiples_shifted_by_the_key() -> None:
    assert until_grid(1.0, 0.0, now=10.3) == pytest.approx(0.7)
    # A point at ``now`` is a period away; ``least`` skips a point too close.
    assert until_grid(1.0, 0.0, now=10.0) == pytest.approx(1.0)
    assert until_grid(1.0, 0.5, now=10.7) == pytest.approx(1.3)
    shift = zlib.crc32(b"orders") / 2**32
    assert until_grid(1.0, 0.0, "orders", now=10.0) == pytest.approx(shift)
    # Members of a group meet on the same points whenever they ask.
    for now in (3.21, 7.5, 1e9 + 0.123):
        phase = (now + until_grid(2.0, 0.0, "orders", now=now) - 2 * shift) % 2.0
        assert min(phase, 2.0 - phase) < 1e-6, now
    # Other groups of the same period are spread over it.
    shifts = {until_grid(1.0, 0.0, f"group-{i}", now=0.0) for i in range(20)}
    assert len({round(x, 3) for x in shifts}) == 20
    assert max(shifts) - min(shifts) > 0.5


def test_the_handovers_lead_allows_twice_the_teardown_plus_the_margin() -> None:
    assert handover_lead(0.0) == pytest.approx(HANDOVER_MARGIN + 0.05)
    assert handover_lead(0.2) == pytest.approx(HANDOVER_MARGIN + 0.4)
