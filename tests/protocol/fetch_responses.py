"""Fetch responses built in memory for the tests of the sans-IO fetch parsing."""

from __future__ import annotations

import datetime
from typing import Any

from gengroup.protocol.framing import response_module
from gengroup.protocol.versions import ApiKey


def fetch_response(records: bytes, aborted: list[tuple[int, int]] | None, *, error: int = 0) -> Any:
    """A Fetch v12 response carrying ``records`` for partition ``t``/0.

    Args:
        records: The partition's record batches.
        aborted: The aborted transactions as ``(producer id, first offset)``;
            None sends a null list.
        error: The partition's error code.
    """
    mod = response_module(ApiKey.FETCH, 12)
    part = mod.PartitionData(
        partition_index=0,
        error_code=error,
        high_watermark=100,
        last_stable_offset=90,
        log_start_offset=0,
        aborted_transactions=None
        if aborted is None
        else tuple(mod.AbortedTransaction(producer_id=p, first_offset=o) for p, o in aborted),
        records=records,
    )
    return mod.FetchResponse(
        throttle_time=datetime.timedelta(0),
        error_code=0,
        session_id=0,
        responses=(mod.FetchableTopicResponse(topic="t", partitions=(part,)),),
    )
