"""Fetch responses by topic id (v13+), sans-IO: the topics are named through
the ids the request used, and a partition's leader hint (v16) is kept."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

import pytest

from gengroup._errors import ProtocolError
from gengroup._types import TopicPartition
from gengroup.protocol.fetch import parse_fetch_response
from gengroup.protocol.framing import build, response_module
from gengroup.protocol.versions import ApiKey

from ..embedded import batch

T_ID = uuid.uuid4()


def _response(version: int, topic_id: uuid.UUID, *, error: int = 0, hint: bool = False) -> Any:
    mod = response_module(ApiKey.FETCH, version)
    extra: dict[str, Any] = {}
    if hint:
        extra["current_leader"] = mod.LeaderIdAndEpoch(leader_id=2, leader_epoch=7)
    part = build(
        mod.PartitionData,
        partition_index=0,
        error_code=error,
        high_watermark=1,
        last_stable_offset=1,
        log_start_offset=0,
        aborted_transactions=None,
        preferred_read_replica=-1,
        records=None if error else batch(b"a"),
        **extra,
    )
    endpoints = (mod.NodeEndpoint(node_id=2, host="h", port=9),) if hint else ()
    return build(
        mod.FetchResponse,
        throttle_time=datetime.timedelta(0),
        error_code=0,
        session_id=0,
        responses=(build(mod.FetchableTopicResponse, topic_id=topic_id, partitions=(part,)),),
        node_endpoints=endpoints,
    )


@pytest.mark.parametrize("version", [13, 16])
def test_a_topic_id_is_named_as_the_request_named_it(version: int) -> None:
    got = parse_fetch_response(
        _response(version, T_ID), isolation_level=0, positions=None, names={T_ID: "t"}
    )
    assert [r.value for r in got[TopicPartition("t", 0)].records] == [b"a"]


def test_a_topic_id_the_request_did_not_name_is_a_protocol_error() -> None:
    with pytest.raises(ProtocolError, match="did not ask for"):
        parse_fetch_response(_response(16, uuid.uuid4()), isolation_level=0, names={T_ID: "t"})


def test_a_refusals_leader_hint_is_kept_on_the_partition() -> None:
    got = parse_fetch_response(
        _response(16, T_ID, error=6, hint=True), isolation_level=0, names={T_ID: "t"}
    )
    pf = got[TopicPartition("t", 0)]
    assert pf.error is not None
    assert (pf.current_leader.leader_id, pf.current_leader.leader_epoch) == (2, 7)
    assert [(e.node_id, e.host, e.port) for e in pf.node_endpoints] == [(2, "h", 9)]
