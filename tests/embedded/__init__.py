"""Tests of the embedded broker, and helpers shared by them.

The helpers build kio requests of any advertised version from one set of
keyword arguments (fields a version lacks are dropped by
:func:`gengroup.protocol.framing.build`), so each test can sweep versions.
"""

from __future__ import annotations

import datetime
import struct
import uuid
from collections.abc import AsyncIterator, Iterable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import anyio
import anyio.abc
from crc32c import crc32c
from kio.index import load_response_schema
from kio.schema.errors import ErrorCode

from gengroup import GenerationIdentity, TopicPartition
from gengroup.broker import FakeCluster
from gengroup.broker.faults import Intercepted, Respond
from gengroup.io.connection import BrokerConnection, open_connection
from gengroup.membership.member import JoinParams
from gengroup.membership.requests import (
    commit_request,
    heartbeat_request,
    join_request,
    leave_request,
)
from gengroup.protocol.framing import (
    FrameBuffer,
    build,
    decode_response,
    encode_request,
    request_module,
    response_module,
)
from gengroup.protocol.records import encode_batch, with_base_offset
from gengroup.protocol.versions import ApiKey

NIL = uuid.UUID(int=0)

T = TypeVar("T")


def ms(value: float) -> datetime.timedelta:
    """A kio duration in milliseconds."""
    return datetime.timedelta(milliseconds=value)


def batch(*values: bytes, ts: int = 1_000) -> bytes:
    """One record batch holding ``values`` (null keys)."""
    return encode_batch([(None, v, (), ts) for v in values])


@asynccontextmanager
async def connect(
    cluster: FakeCluster, broker_id: int = 0, *, request_timeout: float = 30.0
) -> AsyncIterator[BrokerConnection]:
    """A gengroup client connection to one broker of ``cluster``."""
    host, port = cluster.address(broker_id)
    async with open_connection(
        host, port, client_id="embedded-test", request_timeout=request_timeout
    ) as conn:
        yield conn


async def raw_roundtrip(stream: anyio.abc.ByteStream, request: Any, cid: int = 7) -> Any:
    """Send one request on a raw byte stream and decode its response."""
    await stream.send(encode_request(request, correlation_id=cid, client_id="raw"))
    buf = FrameBuffer()
    while (frame := buf.next_frame()) is None:
        buf.feed(await stream.receive())
    cls = load_response_schema(int(type(request).__api_key__), int(type(request).__version__))
    got_cid, response = decode_response(cls, frame)
    assert got_cid == cid
    return response


def frame(payload: bytes) -> bytes:
    """A length-prefixed frame."""
    return struct.pack(">i", len(payload)) + payload


# --------------------------------------------------------------------------- request builders


def _by_topic(entries: Iterable[tuple[str, T]]) -> dict[str, list[T]]:
    """Group ``(topic, item)`` pairs by topic, keeping the first-seen order of topics and items."""
    grouped: dict[str, list[T]] = {}
    for topic, item in entries:
        grouped.setdefault(topic, []).append(item)
    return grouped


def api_versions(v: int) -> Any:
    mod = request_module(ApiKey.API_VERSIONS, v)
    return build(
        mod.ApiVersionsRequest, client_software_name="embedded-test", client_software_version="1.0"
    )


def metadata(v: int, topics: Sequence[str] | None, *, auto: bool = True) -> Any:
    mod = request_module(ApiKey.METADATA, v)
    entries = (
        None
        if topics is None
        else tuple(build(mod.MetadataRequestTopic, name=t, topic_id=NIL) for t in topics)
    )
    if entries is None and v == 0:
        entries = ()
    return build(
        mod.MetadataRequest,
        topics=entries,
        allow_auto_topic_creation=auto,
        include_cluster_authorized_operations=False,
        include_topic_authorized_operations=False,
    )


def produce(v: int, topic: str, partition: int, records: bytes | None, *, acks: int = -1) -> Any:
    mod = request_module(ApiKey.PRODUCE, v)
    return build(
        mod.ProduceRequest,
        transactional_id=None,
        acks=acks,
        timeout=ms(5000),
        topic_data=(
            build(
                mod.TopicProduceData,
                name=topic,
                partition_data=(build(mod.PartitionProduceData, index=partition, records=records),),
            ),
        ),
    )


def fetch(
    v: int,
    topic: str,
    partition: int,
    offset: int,
    *,
    max_wait: float = 0,
    min_bytes: int = 1,
    max_bytes: int = 50 * 1024 * 1024,
    partition_max_bytes: int = 1024 * 1024,
    session_id: int = 0,
    session_epoch: int = -1,
    leader_epoch: int = -1,
    extra_partitions: Sequence[tuple[str, int, int]] = (),
    topic_ids: Mapping[str, uuid.UUID] | None = None,
) -> Any:
    """A Fetch of ``v`` (v13+: naming each topic by its id in ``topic_ids``,
    the nil id if absent)."""
    mod = request_module(ApiKey.FETCH, v)
    by_topic = _by_topic((t, (p, o)) for t, p, o in [(topic, partition, offset), *extra_partitions])
    return build(
        mod.FetchRequest,
        cluster_id=None,
        replica_id=-1,
        max_wait=ms(max_wait),
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=0,
        session_id=session_id,
        session_epoch=session_epoch,
        topics=tuple(
            build(
                mod.FetchTopic,
                topic=t,
                topic_id=(topic_ids or {}).get(t, NIL),
                partitions=tuple(
                    build(
                        mod.FetchPartition,
                        partition=p,
                        current_leader_epoch=leader_epoch,
                        fetch_offset=o,
                        last_fetched_epoch=-1,
                        log_start_offset=-1,
                        partition_max_bytes=partition_max_bytes,
                    )
                    for p, o in parts
                ),
            )
            for t, parts in by_topic.items()
        ),
        forgotten_topics_data=(),
        rack_id="",
    )


def list_offsets(v: int, topic: str, partition: int, timestamp: int) -> Any:
    mod = request_module(ApiKey.LIST_OFFSETS, v)
    return build(
        mod.ListOffsetsRequest,
        replica_id=-1,
        isolation_level=0,
        timeout=ms(1000),
        topics=(
            build(
                mod.ListOffsetsTopic,
                name=topic,
                partitions=(
                    build(
                        mod.ListOffsetsPartition,
                        partition_index=partition,
                        current_leader_epoch=-1,
                        timestamp=timestamp,
                    ),
                ),
            ),
        ),
    )


def find_coordinator(v: int, key: str, key_type: int = 0) -> Any:
    mod = request_module(ApiKey.FIND_COORDINATOR, v)
    return build(mod.FindCoordinatorRequest, key=key, key_type=key_type, coordinator_keys=(key,))


def join_group(
    v: int,
    group: str,
    member_id: str = "",
    *,
    session_ms: int = 10_000,
    rebalance_ms: int = 10_000,
    protocols: Sequence[tuple[str, bytes]] = (("range", b"meta"),),
    instance_id: str | None = None,
) -> Any:
    params = JoinParams(
        group,
        member_id,
        instance_id,
        session_ms / 1000,
        rebalance_ms / 1000,
        tuple(protocols),
        None,
    )
    return join_request(request_module(ApiKey.JOIN_GROUP, v), params)


def sync_group(
    v: int,
    group: str,
    generation: int,
    member_id: str,
    assignments: Sequence[tuple[str, bytes]] = (),
    *,
    protocol: str | None = "range",
) -> Any:
    mod = request_module(ApiKey.SYNC_GROUP, v)
    return build(
        mod.SyncGroupRequest,
        group_id=group,
        generation_id=generation,
        member_id=member_id,
        group_instance_id=None,
        protocol_type="consumer",
        protocol_name=protocol,
        assignments=tuple(
            build(mod.SyncGroupRequestAssignment, member_id=m, assignment=a) for m, a in assignments
        ),
    )


def heartbeat(v: int, group: str, generation: int, member_id: str) -> Any:
    identity = GenerationIdentity(group, generation, member_id, None)
    return heartbeat_request(request_module(ApiKey.HEARTBEAT, v), identity)


def leave_group(v: int, group: str, member_id: str) -> Any:
    mod = request_module(ApiKey.LEAVE_GROUP, v)
    if v < 3:
        return build(mod.LeaveGroupRequest, group_id=group, member_id=member_id)
    return leave_request(mod, group, member_id, None)


def offset_commit(
    v: int, group: str, generation: int, member_id: str, offsets: Sequence[tuple[str, int, int]]
) -> Any:
    return commit_request(
        request_module(ApiKey.OFFSET_COMMIT, v),
        group_id=group,
        generation_id=generation,
        member_id=member_id,
        group_instance_id=None,
        offsets=((t, p, o, "m") for t, p, o in offsets),
    )


def offset_fetch(v: int, group: str, partitions: Sequence[tuple[str, int]] | None) -> Any:
    mod = request_module(ApiKey.OFFSET_FETCH, v)
    topic_type = mod.OffsetFetchRequestTopics if v >= 8 else mod.OffsetFetchRequestTopic
    topics = (
        None
        if partitions is None
        else tuple(
            build(topic_type, name=t, partition_indexes=tuple(ps))
            for t, ps in _by_topic(partitions).items()
        )
    )
    if v < 8:
        return build(mod.OffsetFetchRequest, group_id=group, topics=topics, require_stable=False)
    return build(
        mod.OffsetFetchRequest,
        groups=(
            build(
                mod.OffsetFetchRequestGroup,
                group_id=group,
                member_id=None,
                member_epoch=-1,
                topics=topics,
            ),
        ),
        require_stable=False,
    )


def describe_groups(v: int, *groups: str) -> Any:
    mod = request_module(ApiKey.DESCRIBE_GROUPS, v)
    return build(mod.DescribeGroupsRequest, groups=groups, include_authorized_operations=False)


def list_groups(v: int) -> Any:
    mod = request_module(ApiKey.LIST_GROUPS, v)
    return build(mod.ListGroupsRequest, states_filter=(), types_filter=())


def delete_groups(v: int, *groups: str) -> Any:
    mod = request_module(ApiKey.DELETE_GROUPS, v)
    return build(mod.DeleteGroupsRequest, groups_names=groups)


def create_topics(
    v: int,
    *topics: tuple[str, int],
    rf: int = 1,
    configs: Mapping[str, str | None] | None = None,
    validate_only: bool = False,
    timeout: float = 5000,
) -> Any:
    mod = request_module(ApiKey.CREATE_TOPICS, v)
    return build(
        mod.CreateTopicsRequest,
        topics=tuple(
            build(
                mod.CreatableTopic,
                name=name,
                num_partitions=count,
                replication_factor=rf,
                assignments=(),
                configs=tuple(
                    build(mod.CreatableTopicConfig, name=k, value=val)
                    for k, val in (configs or {}).items()
                ),
            )
            for name, count in topics
        ),
        timeout=ms(timeout),
        validate_only=validate_only,
    )


def delete_topics(v: int, *names: str) -> Any:
    mod = request_module(ApiKey.DELETE_TOPICS, v)
    if v >= 6:
        states = tuple(build(mod.DeleteTopicState, name=n, topic_id=NIL) for n in names)
        return build(mod.DeleteTopicsRequest, topics=states, timeout=ms(5000))
    return build(mod.DeleteTopicsRequest, topic_names=names, timeout=ms(5000))


def create_partitions(v: int, topic: str, count: int) -> Any:
    mod = request_module(ApiKey.CREATE_PARTITIONS, v)
    return build(
        mod.CreatePartitionsRequest,
        topics=(build(mod.CreatePartitionsTopic, name=topic, count=count, assignments=None),),
        timeout=ms(5000),
        validate_only=False,
    )


def fetch_topic(call: Intercepted, topic: str = "t") -> dict[str, Any]:
    """How an answer to the Fetch ``call`` names ``topic``: by its name before
    v13, else by the id the request named its first topic by (the tests that
    answer Fetch themselves fetch one topic)."""
    if call.api_version < 13:
        return {"topic": topic}
    named = [t.topic_id for t in call.request.topics]
    named += [t.topic_id for t in call.request.forgotten_topics_data]
    return {"topic_id": named[0] if named else NIL}


def fetch_topic_name(cluster: FakeCluster, topic: Any) -> str:
    """The name of a topic of a Fetch request (v13+: of its id in ``cluster``)."""
    name = getattr(topic, "topic", None)
    if name is not None:
        return str(name)
    return cluster.state.topics.by_id[topic.topic_id].name


def fetch_answer(
    call: Intercepted,
    records: bytes,
    high_watermark: int,
    *,
    topic: str = "t",
    aborted: Sequence[tuple[int, int]] = (),
) -> Respond:
    """A Fetch answer, in the version of ``call``, whose partition 0 of
    ``topic`` holds ``records`` (and the aborted transactions ``aborted``,
    as (producer id, first offset))."""
    mod = response_module(ApiKey.FETCH, call.api_version)
    part = mod.PartitionData(
        partition_index=0,
        error_code=ErrorCode.none,
        high_watermark=high_watermark,
        last_stable_offset=high_watermark,
        log_start_offset=0,
        aborted_transactions=tuple(
            mod.AbortedTransaction(producer_id=p, first_offset=o) for p, o in aborted
        ),
        records=records,
    )
    return Respond(
        mod.FetchResponse(
            throttle_time=datetime.timedelta(0),
            error_code=ErrorCode.none,
            session_id=0,
            responses=(
                build(
                    mod.FetchableTopicResponse,
                    **fetch_topic(call, topic),
                    partitions=(part,),
                ),
            ),
        )
    )


def sound_batch(first: int, value: bytes, count: int = 3) -> bytes:
    """A batch of ``count`` records of ``value`` from offset ``first``."""
    return with_base_offset(encode_batch([(None, value, (), 0)] * count), first)


def damaged_batch(first: int) -> bytes:
    """Three records from offset ``first`` whose first record's length is
    malformed (-2) under a correct CRC: damage only decoding finds."""
    batch = bytearray(sound_batch(first, b"y"))
    batch[61] = 0x03  # the first record's length: -2
    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    return bytes(batch)


def append_commit_marker(cluster: FakeCluster, tp: TopicPartition) -> None:
    """Append a transaction's commit marker (a control batch) to ``tp`` on the embedded
    broker, which has no transactions and refuses control batches from clients: the last
    offset then holds no record, as after a transactional producer's commit."""
    from gengroup.broker.log import StoredBatch
    from gengroup.protocol.records import ControlType, encode_control_batch

    log = cluster._partition(tp.topic, tp.partition).log
    offset = log.high_watermark
    data = encode_control_batch(
        ControlType.COMMIT, producer_id=1, producer_epoch=0, timestamp=0, base_offset=offset
    )
    log.batches.append(StoredBatch(offset, offset, data, 0, 0))
    log._last_offsets.append(offset)
    log.high_watermark = offset + 1
    log.size_bytes += len(data)
