"""One group mixing gengroup members and segmentio/kafka-go consumers, on real Kafka.

The kafka-go member is the Go program in ``kafkago/`` (kafka-go v0.4.51),
built by the ``kafkago_member`` fixture with ``go build`` (modules from the Go
module proxy) into a temporary directory. It reports its assignments and the
records it consumed as JSON lines. A missing Go toolchain fails the test.

kafka-go labels its subscription version 1 but writes only the version-0
fields, which gengroup reads as version 0; a kafka-go leader reads only
version-0 subscriptions, so gengroup members send version 0
(``subscription_version=0``) when kafka-go may lead.
"""

from __future__ import annotations

import shutil
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest

from gengroup import ConsumerGroup, RangeBalancer
from gengroup.testing.kafka import KafkaBroker
from tests.programs import run_program

from ..consumer.helpers import FAST, Ledger, produce_ids
from .members import new_mixed_group

pytestmark = pytest.mark.kafka

PROGRAM = Path(__file__).parent / "kafkago"
PARTITIONS = 6
RECORDS = 60


@pytest.fixture(scope="session")
def kafkago_member(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The kafka-go member program, built once per session."""
    go = shutil.which("go")
    if go is None:
        pytest.fail(
            "the kafka-go interop tests need the Go toolchain: `go` is not on PATH "
            "(install Go 1.23 or later)"
        )
    binary = tmp_path_factory.mktemp("kafkago") / "kafkago-member"
    run_program(
        [go, "build", "-o", str(binary), "."],
        f"go build of {PROGRAM.name}",
        cwd=PROGRAM,
        timeout=600,
    )
    yield binary


@pytest.mark.parametrize(
    ("gengroup_leads", "subscription_version"),
    [(True, None), (True, 0), (False, 0)],
    ids=["gengroup-leads-v3", "gengroup-leads-v0", "kafkago-leads-v0"],
)
async def test_mixed_group_with_kafka_go(
    kafka: KafkaBroker,
    kafkago_member: Path,
    tmp_path: Path,
    gengroup_leads: bool,
    subscription_version: int | None,
) -> None:
    ledger = Ledger()
    mixed = await new_mixed_group(
        kafka.bootstrap,
        [str(kafkago_member)],
        tmp_path / "go.log",
        ledger,
        partitions=PARTITIONS,
        prefix="kafkago",
        name="kafka-go",
    )
    topic, group_id, every, peer = mixed.topic, mixed.group_id, mixed.every, mixed.peer

    async with anyio.create_task_group() as outer:
        try:
            if not gengroup_leads:
                outer.start_soon(peer.run)
                await peer.wait_for(
                    lambda: peer.current() == every, "kafka-go to own every partition"
                )
            async with (
                ConsumerGroup(
                    group_id,
                    [topic],
                    kafka.bootstrap,
                    balancers=[RangeBalancer()],
                    subscription_version=subscription_version,
                    **FAST,
                ) as group,
                anyio.create_task_group() as tg,
            ):
                tg.start_soon(ledger.member, "gengroup", group)
                if gengroup_leads:
                    await peer.wait_for(
                        lambda: ledger.assigned("gengroup") == every,
                        "gengroup alone to own every partition",
                    )
                    outer.start_soon(peer.run)

                def shared() -> bool:
                    gen = ledger.current().get("gengroup")
                    if gen is None or not peer.generations:
                        return False
                    mine, theirs = set(gen.assignments), peer.current()
                    return (
                        peer.generations[-1]["generation"] == gen.id
                        and bool(mine)
                        and bool(theirs)
                        and not mine & theirs
                        and mine | theirs == every
                    )

                await peer.wait_for(shared, "gengroup and kafka-go to share every partition")
                gen = ledger.current()["gengroup"]
                assert gen.is_leader is gengroup_leads
                assert peer.generations[-1]["leader"] is (not gengroup_leads)
                assert gen.protocol == "range"
                mine, theirs = set(gen.assignments), peer.current()

                await produce_ids(kafka.bootstrap, topic, range(RECORDS))
                wanted = {f"id-{i}" for i in range(RECORDS)}

                def consumed() -> Counter[str]:
                    got = Counter(v.decode() for v in ledger.processed)
                    got.update(r["value"] for r in peer.records)
                    return got

                await peer.wait_for(lambda: wanted <= set(consumed()), "every record consumed")
                tg.cancel_scope.cancel()
        finally:
            await peer.stop()

    # Each member consumed only from its own partitions, and both consumed some.
    assert peer.consumed() <= theirs
    assert peer.records and ledger.processed
    assert peer.errors == [], peer.errors
    assert mine | theirs == every
