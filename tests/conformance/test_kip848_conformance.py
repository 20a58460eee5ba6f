"""Conformance of the embedded broker's consumer group protocol (KIP-848) with Apache Kafka.

Each scenario drives ConsumerGroupHeartbeat (v1), ConsumerGroupDescribe and
the offset and admin requests step by step, against the session's real Apache
Kafka (``kafka``, marked ``kafka``) and against a fresh embedded cluster, and
the two transcripts must equal the one expected transcript, written from what
Kafka answers (Apache Kafka 4.3: a new group's first member gets epoch 2, and
the target assignment is recomputed at most once a second, by the first
heartbeat after the interval, so scenarios wait :data:`INTERVAL_WAIT` where a
new assignment is expected). Member ids are made by the members (v1), so they
are labels of our own; topic ids are shown as topic aliases (``"t:0,1"``).
Nothing here waits for a session or rebalance timeout: those are covered by the
unit tests (``tests/broker/test_consumer_group_coordinator.py``) and the
client scenarios (``tests/consumer/test_kip848_embedded.py``).
"""

from __future__ import annotations

import datetime
import uuid
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Final

import anyio
import pytest

from gengroup.io.connection import BrokerConnection
from gengroup.protocol.framing import build, request_module
from gengroup.protocol.versions import ApiKey

from .client import Session, by_name, error_name, open_session
from .conftest import Target
from .test_conformance import (
    CLIENT_HOST,
    SCENARIO_TIMEOUT,
    Divergence,
    join_error,
    joined,
    resolve,
)

HEARTBEAT_V: Final = 1
DESCRIBE_V: Final = 0
REBALANCE_MS: Final = 30_000
INTERVAL_WAIT: Final = 1.2
"""Seconds past the brokers' 1 s assignment interval (``group.consumer.assignment.interval.ms``,
KIP-1263): the next heartbeat recomputes the target assignment."""


class Kip848Member:
    """A consumer protocol member on its own connection, with a member id of its own."""

    def __init__(
        self,
        s: Session,
        conn: BrokerConnection,
        name: str,
        group_id: str,
        topics: Mapping[str, uuid.UUID],
        instance_id: str | None = None,
    ) -> None:
        self.s, self.conn, self.name, self.group_id = s, conn, name, group_id
        self.topic_ids = topics
        self.member_id = f"{name}-{uuid.uuid4()}"
        s.names.bind(self.member_id, name)
        self.instance_id = instance_id
        self.epoch = 0
        self.owned: dict[uuid.UUID, tuple[int, ...]] = {}

    def _assignment(self, assignment: Any) -> str | None:
        if assignment is None:
            return None
        aliases = {tid: self.s.names.label(name) for name, tid in self.topic_ids.items()}
        return ";".join(
            sorted(
                f"{aliases.get(tp.topic_id, tp.topic_id)}:{','.join(str(p) for p in sorted(tp.partitions))}"  # noqa: E501
                for tp in assignment.topic_partitions
            )
        )

    async def heartbeat(
        self,
        epoch: int | None = None,
        *,
        owned: Mapping[uuid.UUID, Sequence[int]] | None = None,
        member_id: str | None = None,
        topics: Sequence[str] | None = None,
        assignor: str | None = None,
        group_id: str | None = None,
    ) -> dict[str, Any]:
        """One ConsumerGroupHeartbeat; epoch 0 sends a full (joining) request.

        Returns:
            ``error``, ``member``, ``epoch`` and ``assignment`` (``"t:0,1"``,
            ``""`` for an empty one, None when absent).
        """
        epoch = self.epoch if epoch is None else epoch
        joining = epoch == 0
        mod = request_module(ApiKey.CONSUMER_GROUP_HEARTBEAT, HEARTBEAT_V)
        sent_owned = self.owned if owned is None else owned
        if joining and owned is None:
            sent_owned = {}
        names = topics if topics is not None else list(self.topic_ids)
        resp = await self.conn.request(
            build(
                mod.ConsumerGroupHeartbeatRequest,
                group_id=self.group_id if group_id is None else group_id,
                member_id=self.member_id if member_id is None else member_id,
                member_epoch=epoch,
                instance_id=self.instance_id,
                rack_id=None,
                rebalance_timeout=datetime.timedelta(milliseconds=REBALANCE_MS if joining else -1),
                subscribed_topic_names=tuple(names) if joining else None,
                subscribed_topic_regex=None,
                server_assignor=assignor,
                topic_partitions=tuple(
                    build(mod.TopicPartitions, topic_id=tid, partitions=tuple(ps))
                    for tid, ps in sent_owned.items()
                ),
            )
        )
        error = error_name(resp.error_code)
        if error == "NONE" and member_id is None and group_id is None:
            self.epoch = int(resp.member_epoch)
            if resp.assignment is not None:
                self.owned = {
                    tp.topic_id: tuple(tp.partitions) for tp in resp.assignment.topic_partitions
                }
        return {
            "error": error,
            "member": self.s.names.label(resp.member_id) if error == "NONE" else None,
            "epoch": int(resp.member_epoch),
            "assignment": self._assignment(resp.assignment),
        }

    async def commit(self, epoch: int, topic: str, version: int = 9) -> dict[str, str]:
        """OffsetCommit of offset 1 of partition 0 with ``epoch``."""
        mod = request_module(ApiKey.OFFSET_COMMIT, version)
        resp = await self.conn.request(
            build(
                mod.OffsetCommitRequest,
                group_id=self.group_id,
                generation_id_or_member_epoch=epoch,
                member_id=self.member_id,
                group_instance_id=self.instance_id,
                topics=(
                    build(
                        mod.OffsetCommitRequestTopic,
                        name=topic,
                        partitions=(
                            build(
                                mod.OffsetCommitRequestPartition,
                                partition_index=0,
                                committed_offset=1,
                                committed_leader_epoch=-1,
                                committed_metadata="",
                            ),
                        ),
                    ),
                ),
            )
        )
        return {
            f"{self.s.names.label(t.name)}[{p.partition_index}]": error_name(p.error_code)
            for t in resp.topics
            for p in t.partitions
        }


async def topic_ids(s: Session, names: Sequence[str]) -> dict[str, uuid.UUID]:
    """The topic ids of ``names`` (Metadata v12)."""
    mod = request_module(ApiKey.METADATA, 12)
    resp = await s.admin.send(
        build(
            mod.MetadataRequest,
            topics=tuple(build(mod.MetadataRequestTopic, topic_id=None, name=n) for n in names),
            allow_auto_topic_creation=False,
            include_topic_authorized_operations=False,
        )
    )
    return {t.name: t.topic_id for t in resp.topics}


async def describe(s: Session, group_id: str) -> dict[str, Any]:
    """ConsumerGroupDescribe of one group: error, state, epochs, assignor, members."""
    mod = request_module(ApiKey.CONSUMER_GROUP_DESCRIBE, DESCRIBE_V)
    resp = await s.admin.send(
        build(
            mod.ConsumerGroupDescribeRequest,
            group_ids=(group_id,),
            include_authorized_operations=False,
        )
    )
    (g,) = resp.groups

    def assigned(a: Any) -> str:
        return ";".join(
            sorted(
                f"{s.names.label(tp.topic_name)}:{','.join(str(p) for p in sorted(tp.partitions))}"
                for tp in a.topic_partitions
            )
        )

    return {
        "error": error_name(g.error_code),
        "state": g.group_state,
        "group_epoch": int(g.group_epoch),
        "assignment_epoch": int(g.assignment_epoch),
        "assignor": g.assignor_name,
        "members": sorted(
            s.names.member(
                m.member_id,
                m.instance_id,
                f"epoch={int(m.member_epoch)}",
                f"sub={','.join(str(s.names.label(t)) for t in m.subscribed_topic_names)}",
                f"assign={assigned(m.assignment)} target={assigned(m.target_assignment)}",
            )
            for m in g.members
        ),
    }


async def describe_for_admin(s: Session, group_id: str) -> dict[str, Any]:
    """ConsumerGroupDescribe v1 (the admin's version) of one group: what
    ``Admin.describe_groups`` reads besides :func:`describe`'s: the error and
    its message (the group id shown as ``G``), each member's client and type."""
    mod = request_module(ApiKey.CONSUMER_GROUP_DESCRIBE, 1)
    resp = await s.admin.send(
        build(
            mod.ConsumerGroupDescribeRequest,
            group_ids=(group_id,),
            include_authorized_operations=False,
        )
    )
    (g,) = resp.groups
    return {
        "error": error_name(g.error_code),
        "message": None if g.error_message is None else g.error_message.replace(group_id, "G"),
        "members": sorted(
            s.names.member(
                m.member_id,
                m.instance_id,
                f"{m.client_id}@{m.client_host}",
                f"type={m.member_type}",
            )
            for m in g.members
        ),
    }


async def list_groups(s: Session, group_id: str) -> list[tuple[str, str, str]]:
    """ListGroups v5: this scenario's group as ``(protocol type, state, type)``."""
    mod = request_module(ApiKey.LIST_GROUPS, 5)
    resp = await s.admin.send(build(mod.ListGroupsRequest, states_filter=(), types_filter=()))
    return [
        (g.protocol_type, g.group_state, g.group_type)
        for g in resp.groups
        if g.group_id == group_id
    ]


async def setup(
    s: Session, partitions: int, *names: str, instance_ids: Sequence[str | None] = ()
) -> tuple[str, list[Kip848Member]]:
    """A group, a topic ``t`` of ``partitions`` and members on their own connections."""
    suffix = uuid.uuid4().hex[:8]
    group_id = f"kip848-conf-{suffix}"
    topic = s.topic(f"kip848-t-{suffix}", "t")
    assert (await s.admin.create_topic(topic, partitions))["error"] == "NONE"
    await s.admin.wait_coordinator(group_id)
    ids = await topic_ids(s, [topic])
    members = []
    for i, name in enumerate(names):
        conn = await s.connect(f"conf-{name}")
        instance = instance_ids[i] if i < len(instance_ids) else None
        members.append(Kip848Member(s, conn, name, group_id, ids, instance))
    return group_id, members


# --------------------------------------------------------------------------- scenarios


async def join_and_heartbeat(s: Session) -> None:
    group_id, (a,) = await setup(s, 4, "A")
    s.record("A joins", await a.heartbeat(0))
    s.record("A heartbeats", await a.heartbeat())
    s.record("describe", await describe(s, group_id))
    s.record("list", await list_groups(s, group_id))
    s.record("A leaves", await a.heartbeat(-1))
    s.record("describe empty", await describe(s, group_id))
    s.record("list empty", await list_groups(s, group_id))


async def revoke_then_assign(s: Session) -> None:
    group_id, (a, b) = await setup(s, 4, "A", "B")
    every = {tid: (0, 1, 2, 3) for tid in a.topic_ids.values()}
    s.record("A joins", await a.heartbeat(0))
    s.record("B joins", await b.heartbeat(0))
    s.record("describe assigning", await describe(s, group_id))
    await anyio.sleep(INTERVAL_WAIT)
    s.record("A must revoke", await a.heartbeat(owned=every))
    s.record("A still owns them", await a.heartbeat(owned=every))
    s.record("B waits", await b.heartbeat())
    s.record("describe reconciling", await describe(s, group_id))
    s.record("A revoked", await a.heartbeat())
    s.record("B acquires", await b.heartbeat())
    s.record("describe stable", await describe(s, group_id))
    s.record("A rejoins", await a.heartbeat(0))
    s.record("B leaves", await b.heartbeat(-1))
    await anyio.sleep(INTERVAL_WAIT)
    s.record("A takes all", await a.heartbeat())


async def fencing_errors(s: Session) -> None:
    group_id, (a, b) = await setup(s, 2, "A", "B")
    topic = next(iter(a.topic_ids))
    s.record("A joins", await a.heartbeat(0))
    s.record("A ahead", await a.heartbeat(7))
    s.record("unknown member", await b.heartbeat(1, owned={}))
    s.record("unknown group", await a.heartbeat(1, group_id=f"{group_id}-nope"))
    s.record("unknown member leaves", await b.heartbeat(-1))
    s.record("unknown assignor", await b.heartbeat(0, assignor="sticky"))
    s.record("join owning partitions", await b.heartbeat(0, owned={a.topic_ids[topic]: (0,)}))
    s.record("commit current epoch", await a.commit(a.epoch, topic))
    s.record("commit stale epoch", await a.commit(a.epoch + 1, topic))
    s.record("commit unknown member", await b.commit(1, topic))


async def static_member(s: Session) -> None:
    group_id, (s1, twin, other) = await setup(s, 4, "S", "T", "O", instance_ids=("i1", "i1", None))
    every = {tid: (0, 1, 2, 3) for tid in s1.topic_ids.values()}
    s.record("S joins", await s1.heartbeat(0))
    s.record("O joins", await other.heartbeat(0))
    await anyio.sleep(INTERVAL_WAIT)
    s.record("S revokes", await s1.heartbeat(owned=every))
    s.record("S acks", await s1.heartbeat())
    s.record("O acquires", await other.heartbeat())
    s.record("twin refused", await twin.heartbeat(0))
    s.record("S leaves for a while", await s1.heartbeat(-2))
    s.record("describe away", await describe(s, group_id))
    s.record("twin takes over", await twin.heartbeat(0))
    s.record("describe back", await describe(s, group_id))


async def commit_epochs(s: Session) -> None:
    _, (a, b) = await setup(s, 4, "A", "B")
    topic = next(iter(a.topic_ids))
    every = {tid: (0, 1, 2, 3) for tid in a.topic_ids.values()}
    s.record("A joins", await a.heartbeat(0))
    s.record("B joins", await b.heartbeat(0))
    await anyio.sleep(INTERVAL_WAIT)
    s.record("A must revoke", await a.heartbeat(owned=every))
    s.record("A commits a kept partition", await a.commit(2, topic))
    s.record("A revoked", await a.heartbeat())
    s.record("A commits with the epoch it got the partition at", await a.commit(2, topic))
    s.record("A commits with an older epoch", await a.commit(1, topic))
    s.record("A commits with its epoch", await a.commit(3, topic))
    s.record("B acquires", await b.heartbeat())
    s.record("B commits a partition it does not own", await b.commit(3, topic))
    s.record("B commits it with an older epoch", await b.commit(2, topic))


async def range_assignor(s: Session) -> None:
    group_id, (a, b) = await setup(s, 5, "A", "B")
    every = {tid: (0, 1, 2, 3, 4) for tid in a.topic_ids.values()}
    s.record("A joins", await a.heartbeat(0, assignor="range"))
    s.record("B joins", await b.heartbeat(0, assignor="range"))
    await anyio.sleep(INTERVAL_WAIT)
    s.record("A must revoke", await a.heartbeat(owned=every))
    s.record("A revoked", await a.heartbeat())
    s.record("B acquires", await b.heartbeat())
    described = await describe(s, group_id)
    s.record("describe", {k: described[k] for k in ("state", "assignor", "members")})


async def mixed_protocols(s: Session) -> None:
    group_id, (a,) = await setup(s, 2, "A")
    topic = next(iter(a.topic_ids))
    s.record("A joins", await a.heartbeat(0))
    s.record("describe classic view", await s.admin.describe(group_id, version=5))
    c = await s.member("C", group_id, topics=[topic])
    s.record("classic member joins the consumer group", await c.join())
    classic_id = f"{group_id}-classic"
    await s.admin.wait_coordinator(classic_id)
    d = await s.member("D", classic_id, topics=[topic])
    s.record("D gets an id", await d.join())
    s.record("D joins", await d.join())
    upgraded = await a.heartbeat(0, group_id=classic_id)
    if upgraded["assignment"]:  # which partition depends on Kafka's HashMap order: count them
        upgraded["assignment"] = len(upgraded["assignment"].split(":")[1].split(","))
    s.record("consumer member joins the classic group", upgraded)


async def describe_by_group_type(s: Session) -> None:
    group_id, (a,) = await setup(s, 2, "A")
    topic = next(iter(a.topic_ids))
    s.record("A joins", await a.heartbeat(0))
    s.record("describe the consumer group", await describe_for_admin(s, group_id))
    classic_id = f"{group_id}-classic"
    await s.admin.wait_coordinator(classic_id)
    c = await s.member("C", classic_id, topics=[topic])
    s.record("C gets an id", await c.join())
    s.record("C joins", await c.join())
    s.record("describe the classic group", await describe_for_admin(s, classic_id))
    s.record("describe an unknown group", await describe_for_admin(s, f"{group_id}-nope"))


Scenario = Callable[[Session], Awaitable[None]]

SCENARIOS: Final[Mapping[str, Scenario]] = by_name(
    join_and_heartbeat,
    revoke_then_assign,
    fencing_errors,
    static_member,
    commit_epochs,
    range_assignor,
    mixed_protocols,
    describe_by_group_type,
)

# --------------------------------------------------------------------------- expected answers


def hb(error: str, member: str | None, epoch: int, assignment: str | None) -> dict[str, Any]:
    return {"error": error, "member": member, "epoch": epoch, "assignment": assignment}


def refused(error: str) -> dict[str, Any]:
    return hb(error, None, 0, None)


def described(state: str, group_epoch: int, assignment_epoch: int, *members: str) -> dict[str, Any]:
    return {
        "error": "NONE",
        "state": state,
        "group_epoch": group_epoch,
        "assignment_epoch": assignment_epoch,
        "assignor": "uniform",
        "members": sorted(members),
    }


_CONVERSION: Final = (
    "Kafka converts between classic and consumer groups (a classic member joins a "
    "consumer group, a consumer member upgrades a classic group); the embedded broker "
    "refuses both (docs/embedded-broker.md)"
)

EXPECTED: Final[dict[str, list[tuple[str, Any]]]] = {
    "join_and_heartbeat": [
        ("A joins", hb("NONE", "A", 2, "t:0,1,2,3")),
        ("A heartbeats", hb("NONE", "A", 2, None)),
        (
            "describe",
            described("Stable", 2, 2, "A epoch=2 sub=t assign=t:0,1,2,3 target=t:0,1,2,3"),
        ),
        ("list", [("consumer", "Stable", "consumer")]),
        ("A leaves", hb("NONE", "A", -1, None)),
        ("describe empty", described("Empty", 3, 2)),
        ("list empty", [("consumer", "Empty", "consumer")]),
    ],
    "revoke_then_assign": [
        ("A joins", hb("NONE", "A", 2, "t:0,1,2,3")),
        ("B joins", hb("NONE", "B", 2, "")),
        (
            "describe assigning",
            described(
                "Assigning",
                3,
                2,
                "A epoch=2 sub=t assign=t:0,1,2,3 target=t:0,1,2,3",
                "B epoch=2 sub=t assign= target=",
            ),
        ),
        ("A must revoke", hb("NONE", "A", 2, "t:0,1")),
        ("A still owns them", hb("NONE", "A", 2, None)),
        ("B waits", hb("NONE", "B", 3, None)),
        (
            "describe reconciling",
            described(
                "Reconciling",
                3,
                3,
                "A epoch=2 sub=t assign=t:0,1,2,3 target=t:0,1",
                "B epoch=3 sub=t assign= target=t:2,3",
            ),
        ),
        ("A revoked", hb("NONE", "A", 3, None)),
        ("B acquires", hb("NONE", "B", 3, "t:2,3")),
        (
            "describe stable",
            described(
                "Stable",
                3,
                3,
                "A epoch=3 sub=t assign=t:0,1 target=t:0,1",
                "B epoch=3 sub=t assign=t:2,3 target=t:2,3",
            ),
        ),
        ("A rejoins", hb("NONE", "A", 3, "t:0,1")),
        ("B leaves", hb("NONE", "B", -1, None)),
        ("A takes all", hb("NONE", "A", 4, "t:0,1,2,3")),
    ],
    "fencing_errors": [
        ("A joins", hb("NONE", "A", 2, "t:0,1")),
        ("A ahead", refused("FENCED_MEMBER_EPOCH")),
        ("unknown member", refused("UNKNOWN_MEMBER_ID")),
        ("unknown group", refused("GROUP_ID_NOT_FOUND")),
        ("unknown member leaves", refused("UNKNOWN_MEMBER_ID")),
        ("unknown assignor", refused("UNSUPPORTED_ASSIGNOR")),
        ("join owning partitions", refused("INVALID_REQUEST")),
        ("commit current epoch", {"t[0]": "NONE"}),
        ("commit stale epoch", {"t[0]": "STALE_MEMBER_EPOCH"}),
        ("commit unknown member", {"t[0]": "UNKNOWN_MEMBER_ID"}),
    ],
    "static_member": [
        ("S joins", hb("NONE", "S", 2, "t:0,1,2,3")),
        ("O joins", hb("NONE", "O", 2, "")),
        ("S revokes", hb("NONE", "S", 2, "t:0,1")),
        ("S acks", hb("NONE", "S", 3, None)),
        ("O acquires", hb("NONE", "O", 3, "t:2,3")),
        ("twin refused", refused("UNRELEASED_INSTANCE_ID")),
        ("S leaves for a while", hb("NONE", "S", -2, None)),
        (
            "describe away",
            described(
                "Reconciling",
                3,
                3,
                "O epoch=3 sub=t assign=t:2,3 target=t:2,3",
                "S/i1 epoch=-2 sub=t assign=t:0,1 target=t:0,1",
            ),
        ),
        ("twin takes over", hb("NONE", "T", 3, "t:0,1")),
        (
            "describe back",
            described(
                "Stable",
                3,
                3,
                "O epoch=3 sub=t assign=t:2,3 target=t:2,3",
                "T/i1 epoch=3 sub=t assign=t:0,1 target=t:0,1",
            ),
        ),
    ],
}


EXPECTED["commit_epochs"] = [
    ("A joins", hb("NONE", "A", 2, "t:0,1,2,3")),
    ("B joins", hb("NONE", "B", 2, "")),
    ("A must revoke", hb("NONE", "A", 2, "t:0,1")),
    ("A commits a kept partition", {"t[0]": "NONE"}),
    ("A revoked", hb("NONE", "A", 3, None)),
    ("A commits with the epoch it got the partition at", {"t[0]": "NONE"}),
    ("A commits with an older epoch", {"t[0]": "STALE_MEMBER_EPOCH"}),
    ("A commits with its epoch", {"t[0]": "NONE"}),
    ("B acquires", hb("NONE", "B", 3, "t:2,3")),
    ("B commits a partition it does not own", {"t[0]": "NONE"}),
    ("B commits it with an older epoch", {"t[0]": "STALE_MEMBER_EPOCH"}),
]

EXPECTED["range_assignor"] = [
    ("A joins", hb("NONE", "A", 2, "t:0,1,2,3,4")),
    ("B joins", hb("NONE", "B", 2, "")),
    ("A must revoke", hb("NONE", "A", 2, "t:0,1,2")),
    ("A revoked", hb("NONE", "A", 3, None)),
    ("B acquires", hb("NONE", "B", 3, "t:3,4")),
    (
        "describe",
        {
            "state": "Stable",
            "assignor": "range",
            "members": [
                "A epoch=3 sub=t assign=t:0,1,2 target=t:0,1,2",
                "B epoch=3 sub=t assign=t:3,4 target=t:3,4",
            ],
        },
    ),
]

EXPECTED["mixed_protocols"] = [
    ("A joins", hb("NONE", "A", 2, "t:0,1")),
    (
        "describe classic view",
        {"error": "NONE", "state": "Dead", "protocol_type": "", "protocol": "", "members": []},
    ),
    (
        "classic member joins the consumer group",
        Divergence(
            kafka=join_error("MEMBER_ID_REQUIRED", "C"),
            embedded=join_error("INCONSISTENT_GROUP_PROTOCOL"),
            reason=_CONVERSION,
        ),
    ),
    ("D gets an id", join_error("MEMBER_ID_REQUIRED", "D")),
    ("D joins", joined("D", 1, "D", ["D:t"])),
    (
        "consumer member joins the classic group",
        Divergence(
            kafka={"error": "NONE", "member": "A", "epoch": 2, "assignment": 1},
            embedded=refused("GROUP_ID_NOT_FOUND"),
            reason=_CONVERSION,
        ),
    ),
]


EXPECTED["describe_by_group_type"] = [
    ("A joins", hb("NONE", "A", 2, "t:0,1")),
    (
        "describe the consumer group",
        {"error": "NONE", "message": None, "members": [f"A conf-A@{CLIENT_HOST} type=1"]},
    ),
    ("C gets an id", join_error("MEMBER_ID_REQUIRED", "C")),
    ("C joins", joined("C", 1, "C", ["C:t"])),
    (
        "describe the classic group",
        {
            "error": "GROUP_ID_NOT_FOUND",
            "message": "Group G is not a consumer group.",
            "members": [],
        },
    ),
    (
        "describe an unknown group",
        {"error": "GROUP_ID_NOT_FOUND", "message": "Group G not found.", "members": []},
    ),
]


# --------------------------------------------------------------------------- the tests


def test_every_scenario_has_an_expected_transcript() -> None:
    assert list(EXPECTED) == list(SCENARIOS)


@pytest.mark.parametrize("scenario", list(SCENARIOS))
async def test_kip848_conformance(scenario: str, target: Target, bootstrap: str) -> None:
    with anyio.fail_after(SCENARIO_TIMEOUT):
        async with open_session(bootstrap) as s:
            await SCENARIOS[scenario](s)
            transcript = s.transcript
    assert transcript == resolve(EXPECTED[scenario], target.name)
