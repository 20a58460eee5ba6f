"""Frozen, validated configuration of a consumer group.

Every value is checked at construction, before any I/O, and a bad one raises
:class:`~gengroup._errors.ConfigError` naming the setting. Durations are float
seconds throughout the public API.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, fields
from typing import Any, Literal, TypeVar, Unpack

from ._errors import ConfigError
from ._types import parse_address, topic_name_error
from .io.security import Security, SecuritySettings
from .membership.balancers import Balancer, RangeBalancer, RoundRobinBalancer
from .membership.member import MemberConfig
from .membership.pattern import re2j_regex
from .protocol.consumer_protocol import LATEST_VERSION
from .protocol.framing import MAX_CLIENT_ID_BYTES, check_client_id

__all__ = ["GroupConfig", "GroupProtocol", "GroupSettings", "IsolationLevel", "StartOffset"]

GroupProtocol = Literal["classic", "consumer"]
StartOffset = Literal["earliest", "latest", "error"]
IsolationLevel = Literal["read_committed", "read_uncommitted"]
#: Turns a key's or value's bytes (None for null) into an object.
Deserializer = Callable[[bytes | None], Any]


_C = TypeVar("_C")

#: The longest duration Kafka carries (an int32 of milliseconds), in seconds.
MAX_SECONDS = (2**31 - 1) // 1000
#: The group's durations that requests carry (JoinGroup's timeouts, Fetch's wait).
_SENT = frozenset({"session_timeout", "rebalance_timeout", "fetch_max_wait"})
#: The most a byte count a request carries as an int32 may be.
_INT32_MAX = 2**31 - 1


def check_seconds(
    name: str, value: float, *, zero: bool = False, sent: bool = False, forever: bool = False
) -> None:
    """A setting of seconds, else a ConfigError naming the setting and the value.

    Above 0 (or 0, with ``zero``); finite (or ``inf`` for "never", with
    ``forever``); at most :data:`MAX_SECONDS` if a request carries it
    (``sent``).
    """
    if not isinstance(value, int | float) or isinstance(value, bool):
        raise ConfigError(f"{name} must be a number of seconds, got {value!r}")
    infinite = math.isinf(value) and value > 0
    if math.isnan(value) or value < 0 or (value == 0 and not zero) or (infinite and not forever):
        least = ">= 0" if zero else "positive"
        finite = "" if forever else " finite"
        raise ConfigError(f"{name} must be a {least}{finite} number of seconds, got {value!r}")
    if sent and value > MAX_SECONDS:
        raise ConfigError(
            f"{name} must be at most {MAX_SECONDS} s (Kafka's int32 milliseconds), got {value!r}"
        )


def check_cluster_timings(
    connect_timeout: float,
    request_timeout: float,
    retry_backoff: float,
    unreachable_timeout: float | None,
) -> None:
    """A :class:`~gengroup.io.cluster.Cluster`'s durations, else a ConfigError naming one."""
    check_seconds("connect_timeout", connect_timeout)
    check_seconds("request_timeout", request_timeout, sent=True)
    check_seconds("retry_backoff", retry_backoff)
    if unreachable_timeout is not None:
        check_seconds("unreachable_timeout", unreachable_timeout)


def check_idle_limit(connections_max_idle: float | None) -> None:
    """``connections_max_idle``: None (never), or positive finite seconds, else a ConfigError."""
    if connections_max_idle is not None:
        check_seconds("connections_max_idle", connections_max_idle)


def check_brokers_type(brokers: object, note: str = "") -> None:
    """Bootstrap addresses as a string or an iterable of them, else a ConfigError.

    ``note`` ends the message (what else the argument may be).
    """
    if not isinstance(brokers, str | Iterable):
        raise ConfigError(
            f"brokers must be bootstrap host:port addresses (a list or a comma-separated "
            f"string), got {type(brokers).__name__}{note}"
        )


def config_or_default(cls: type[_C], config: _C | None) -> _C:
    """``config``, or ``cls()`` for None: a TypeError for a config of another class.

    A dict, or another client's config, would otherwise fail later on an
    attribute it lacks, far from the call that passed it.
    """
    if config is None:
        return cls()
    if not isinstance(config, cls):
        what = type(config).__name__
        raise TypeError(
            f"config must be a {cls.__name__} instance (or settings by keyword), not {what}"
        )
    return config


def check_flag(name: str, value: object) -> None:
    """A setting that is True or False, else a ConfigError naming it and the value.

    Only a bool: ``"no"``, ``"false"`` or ``0`` read from a file or the
    environment must not turn into a truthy or falsy surprise.
    """
    if not isinstance(value, bool):
        raise ConfigError(f"{name} must be True or False, got {value!r}")


def _default_balancers() -> tuple[Balancer, ...]:
    return (RangeBalancer(), RoundRobinBalancer())


@dataclass(frozen=True, slots=True)
class GroupConfig(Security):
    """Settings of a :class:`~gengroup.ConsumerGroup`: the one place they are declared.

    ``ConsumerGroup(group_id, topics, brokers, **settings)`` builds this with
    :meth:`create`; every keyword setting is a field below.

    Attributes:
        group_id: the consumer group.
        topics: topics to subscribe to (empty when subscribing by pattern).
        brokers: bootstrap ``host:port`` addresses.
        balancers: assignment strategies offered, most preferred first
            (default: range, then roundrobin, like the Java client's default list).
        session_timeout: seconds without heartbeat before the coordinator evicts us.
        rebalance_timeout: seconds the coordinator waits for members to rejoin;
            also how long tasks get to finish after a generation is cancelled
            (then ``TaskStuckError``; docs/guarantees.md, sections 1 and 3).
        heartbeat_interval: seconds between heartbeats (must be below session_timeout).
            Beats are at most this far apart (plus a few milliseconds) so that a
            whole number of them spans the session timeout plus 50 ms: see
            :func:`gengroup.consumer.cadence.beat_period`. Under the consumer
            protocol the interval the coordinator returns takes this one's place.
        watch_partition_changes: whether the leader watches subscribed topics for
            partition-count changes and new topics (a ``topic_pattern`` is
            re-checked by every member whatever this says).
        partition_watch_interval: seconds between the leader's metadata checks.
        join_backoff: base seconds between failed join attempts (jittered).
        commit_interval: seconds between periodic commits of marked offsets
            (0: only on generation end and explicit ``commit()``).
        start_offset: where a partition without a committed offset starts:
            ``"earliest"``, ``"latest"`` or ``"error"`` (raise).
        group_instance_id: a static member id (KIP-345), or None.
        isolation_level: ``"read_committed"`` or ``"read_uncommitted"``.
        client_id: client id sent to brokers.
        rack: this member's rack, sent in the subscription.
        subscription_version: the consumer-protocol version of the
            subscription sent in JoinGroup, 0 to 3; None sends the latest
            (3, as the Java client does). Use 0 in a group shared with
            segmentio/kafka-go members, whose leader reads only version-0
            subscriptions and rejects longer ones; version 0 carries no owned
            partitions, generation or rack.
        request_timeout: seconds to wait for an ordinary response.
        unreachable_timeout: seconds the cluster may stay unreachable (no
            bootstrap address or broker accepts a connection) before
            :class:`~gengroup.ClusterUnreachable` comes out of ``async for``,
            and FindCoordinator may keep answering COORDINATOR_NOT_AVAILABLE
            (no broker can be the group's coordinator) before
            :class:`~gengroup.CoordinatorUnavailable` does; None keeps
            retrying forever.
        connections_max_idle: seconds after which the member closes a
            connection to a broker that has had no request in flight (the
            next request opens a new one), before the broker's own
            ``connections.max.idle.ms`` closes it under a request; None
            keeps connections open until they break.
        fetch_max_wait: seconds a Fetch may wait on the broker for data.
        fetch_min_bytes: bytes a Fetch waits for (up to ``fetch_max_wait``);
            at most ``fetch_max_bytes`` and ``fetch_buffer_bytes``, since no
            Fetch asks for more. Kafka reads it as at most each request's
            response-wide limit, which the buffers size (see
            ``fetch_buffer_bytes``): a larger value waits for whole requests.
        fetch_max_bytes: bytes one Fetch response may carry.
        partition_buffer_bytes: fetched bytes held per partition at most:
            its buffered batches plus the batch its worker was handed last,
            until the worker's next step (one batch more if a single batch
            is larger); under ``fetch_buffer_bytes``, a partition's share is
            this or its part of the budget, whichever is less.
        fetch_buffer_bytes: fetched bytes held by the whole member: the sum
            of the partitions' shares (None: no member-wide bound,
            ``partition_buffer_bytes`` per partition). Each assigned
            partition's share is this divided by the number of partitions
            the member is assigned in the generation, so the member holds at
            most this plus one batch per partition (a batch larger than a
            share comes whole); fetch sizes follow (see below). It takes
            effect once the partitions' own bounds
            (``partition_buffer_bytes`` each) add up to more.
        max_batch_records: the most records a worker is handed in one
            ``FetchedBatch``: a partition's part of a Fetch answer holding more
            is handed out in several, split between Kafka record batches (a
            record batch is never split, so one larger than this comes whole).
            None hands out each partition's part whole.
        max_decompressed_bytes: the most bytes one compressed record batch
            may decompress to when a worker reads it (a guard against
            decompression bombs); a larger one raises
            :class:`~gengroup.DecompressionLimitExceeded` (a
            ``CorruptRecordError``) from the worker's next step, as damaged
            records do. The Java consumer has no such limit.
        fetch_sessions: whether Fetch requests use incremental fetch sessions
            (KIP-227: after the first request, only partitions whose position
            changed are named); False sends every partition every time.
        key_deserializer: turns a record's key bytes (or None) into an object,
            applied by ``FetchedBatch.decoded()`` (None: keys stay bytes).
        value_deserializer: the same for values.
        group_protocol: the group protocol: ``"classic"`` (JoinGroup, SyncGroup
            and Heartbeat; a member balances) or ``"consumer"`` (KIP-848: one
            ConsumerGroupHeartbeat, the coordinator assigns; needs Apache
            Kafka 4.x). ``balancers`` and ``subscription_version`` are the
            classic protocol's; ``group_remote_assignor`` the consumer protocol's.
        group_remote_assignor: the coordinator's assignor under
            ``group_protocol="consumer"``, e.g. ``"uniform"`` or ``"range"``;
            None lets the broker choose (the first of its
            ``group.consumer.assignors``).
        topic_pattern: subscribe by pattern instead of by names: a compiled
            ``re.Pattern`` (also accepted in place of ``topics``). Under the
            classic protocol the member subscribes to the topics whose whole
            name it matches, internal topics excepted, and follows topics
            created and deleted (checked every ``partition_watch_interval``);
            under ``group_protocol="consumer"`` the broker matches it (RE2J
            syntax: constructs RE2J lacks are refused here).

    The security settings (``security_protocol``, ``ssl_*``, ``sasl_*``) are
    :class:`~gengroup.io.security.Security`'s, inherited (keyword-only).

    Defaults and their reasons:

    * ``session_timeout=45.0`` -- Kafka's own default since 3.0: long enough to
      ride out a GC pause or a slow rebalance, short enough to move a dead
      member's partitions within a minute.
    * ``heartbeat_interval=3.0`` -- Kafka's default; well under a third of the
      session timeout, so two heartbeats can be lost without eviction.
    * ``rebalance_timeout=60.0`` -- how long the coordinator waits for members
      to rejoin, and how long a generation's tasks get to finish after
      cancellation before gengroup reports the one holding it up.
    * ``partition_watch_interval=5.0`` -- kafka-go's default; metadata for the
      subscribed topics is a cheap request.
    * ``join_backoff=1.0`` -- pause between failed join attempts (jittered).
    * ``commit_interval=5.0`` -- marked offsets are committed this often, and
      always once more when the generation ends; 0 commits only at the end
      and on explicit ``commit()``.
    * ``start_offset="earliest"`` -- a new group reads what is already there
      (the safer choice for at-least-once pipelines; Java defaults to latest).
    * ``isolation_level="read_committed"`` -- never hand out aborted data.
    * ``unreachable_timeout=60.0`` -- a wrong address or a cluster that is
      down reaches the code iterating the group within about a minute (a
      typed error naming every address and why it failed), while a broker
      restart of a few seconds goes unnoticed; services that would rather
      wait out any outage pass None.
    * ``connections_max_idle=540.0`` -- the Java client's default, a minute
      below the brokers' default ``connections.max.idle.ms`` (600 s): the
      client closes an idle connection first, so that no request is written
      on one just as the broker closes it (a failure and a retry).
    * ``fetch_buffer_bytes=32 MiB`` -- the member's fetched memory stays
      flat however many partitions it is assigned: each partition's share is
      an equal part of it, and what a partition holds -- its buffered batches
      and the batch its worker was handed last, until the worker's next step
      -- stays within its share, or one batch more (a batch larger than the
      share comes whole, so that it can be consumed at all). So the member
      holds at most this plus one batch per partition, however slow its
      workers. A slow worker stops only its own partition's fetching; a
      partition whose worker waits with nothing buffered is always fetched.
      With many partitions each share is small: a partition is fetched in
      steps of half its share (or of its largest recent batch), yet each
      Fetch asks for many partitions at once, so throughput does not fall as
      partitions are added. 32 MiB keeps one member below the peers' peak
      memory with 200 partitions at equal throughput
      (``benchmarks/bench_memory.py``). What a worker keeps of batches it
      is done with (references to them) is its own memory, and decoded
      records take more than the bytes fetched (by the compression ratio
      with compressed batches): ``max_batch_records`` bounds what a worker
      is handed at once.
    * ``partition_buffer_bytes=4 MiB`` -- the most a partition holds (or its
      share of the budget, if less); a slow worker stops its partition's
      fetching at its share, so it holds the buffer without growing it
      while the other partitions go on. A partition is fetched in steps of
      half its share (or its largest recent batch, if larger), so that one
      step is on its way or buffered while the worker processes the other.
      Batches of about half the share or more leave no room for a second
      step, so the default makes room for two of librdkafka's default 1 MB
      batches per step: with 1 MiB a worker waited for every Fetch round
      trip (``benchmarks/run_all.py`` ran 1 KB values 20 to 40% faster with
      4 MiB). The member-wide budget still bounds the total: eight
      partitions fill it.
    """

    group_id: str
    topics: tuple[str, ...]
    brokers: tuple[str, ...]
    balancers: tuple[Balancer, ...] = field(default_factory=_default_balancers)
    session_timeout: float = 45.0
    rebalance_timeout: float = 60.0
    heartbeat_interval: float = 3.0
    watch_partition_changes: bool = True
    partition_watch_interval: float = 5.0
    join_backoff: float = 1.0
    commit_interval: float = 5.0
    start_offset: StartOffset = "earliest"
    group_instance_id: str | None = None
    isolation_level: IsolationLevel = "read_committed"
    client_id: str = "gengroup"
    rack: str | None = None
    subscription_version: int | None = None
    request_timeout: float = 30.0
    unreachable_timeout: float | None = 60.0
    connections_max_idle: float | None = 540.0
    fetch_max_wait: float = 0.5
    fetch_min_bytes: int = 1
    fetch_max_bytes: int = 50 * 1024 * 1024
    partition_buffer_bytes: int = 4 * 1024 * 1024
    fetch_buffer_bytes: int | None = 32 * 1024 * 1024
    max_batch_records: int | None = None
    max_decompressed_bytes: int = 64 * 1024 * 1024
    fetch_sessions: bool = True
    key_deserializer: Deserializer | None = None
    value_deserializer: Deserializer | None = None
    # The group protocol (KIP-848); see ``gengroup.consumer.consumer_protocol``.
    group_protocol: GroupProtocol = "classic"
    group_remote_assignor: str | None = None
    # Subscribing by pattern; see ``gengroup.membership.pattern``.
    topic_pattern: re.Pattern[str] | None = None

    @classmethod
    def create(
        cls,
        group_id: str,
        topics: Sequence[str] | re.Pattern[str] | None,
        brokers: Sequence[str] | str,
        **settings: Unpack[GroupSettings],
    ) -> GroupConfig:
        """The configuration of ``ConsumerGroup(group_id, topics, brokers, **settings)``.

        Args:
            group_id: the consumer group.
            topics: topics to subscribe to (a sequence of names, not a string),
                or a compiled ``re.Pattern`` to subscribe by pattern (None or
                empty with the ``topic_pattern`` setting).
            brokers: bootstrap ``host:port`` addresses (a list or a comma-separated string).
            **settings: any other field of this class; ``balancers`` may be any
                sequence (empty or None: the default list).

        Raises:
            ConfigError: a setting is invalid.
        """
        check_brokers_type(brokers, " (a Cluster is for Producer and Admin)")
        if isinstance(brokers, str):
            brokers = brokers.split(",")
        # Spaces around an address are dropped, as the Java client does ("a:1, b:2").
        brokers = [b.strip() if isinstance(b, str) else b for b in brokers]
        brokers = [b for b in brokers if b != ""]
        rest: dict[str, Any] = dict(settings)
        if rest.get("balancers"):
            rest["balancers"] = tuple(rest["balancers"])
        else:
            rest.pop("balancers", None)
        if isinstance(topics, re.Pattern):
            if rest.get("topic_pattern") is not None:
                raise ConfigError(
                    "give the pattern once: in place of topics or as topic_pattern, not both"
                )
            rest["topic_pattern"], topics = topics, ()
        return cls(group_id, _topics(topics), tuple(brokers), **rest)

    def member_config(self) -> MemberConfig:
        """What the sans-IO member machine needs of these settings."""
        return MemberConfig(**{f.name: getattr(self, f.name) for f in fields(MemberConfig)})

    def __post_init__(self) -> None:
        Security.__post_init__(self)
        if not isinstance(self.group_id, str) or not self.group_id:
            raise ConfigError(f"group_id must be a non-empty string, got {self.group_id!r}")
        if isinstance(self.topics, str) or not isinstance(self.topics, Sequence):
            raise ConfigError("topics must be a sequence of topic names, not a string")
        self._check_subscription()
        if not self.brokers:
            raise ConfigError("brokers must list at least one host:port")
        for address in self.brokers:
            parse_address(address)
        for balancer in self.balancers:
            if isinstance(balancer, str | type) or not callable(getattr(balancer, "assign", None)):
                raise ConfigError(
                    f"balancers must be balancer objects such as RangeBalancer(), got {balancer!r}"
                )
        check_client_id(self.client_id)
        for name in (
            "session_timeout",
            "rebalance_timeout",
            "heartbeat_interval",
            "partition_watch_interval",
            "join_backoff",
            "request_timeout",
            "fetch_max_wait",
        ):
            check_seconds(name, getattr(self, name), sent=name in _SENT)
        if self.unreachable_timeout is not None:
            check_seconds("unreachable_timeout", self.unreachable_timeout)
        check_idle_limit(self.connections_max_idle)
        interval = self.commit_interval
        if (
            isinstance(interval, bool)
            or not isinstance(interval, int | float)
            or not math.isfinite(interval)
            or interval < 0
        ):
            raise ConfigError(
                "commit_interval must be >= 0 and finite, a number of seconds "
                f"(0: no periodic commits), got {interval!r}"
            )
        if self.heartbeat_interval >= self.session_timeout:
            raise ConfigError(
                f"heartbeat_interval ({self.heartbeat_interval} s) must be below "
                f"session_timeout ({self.session_timeout} s)"
            )
        if self.start_offset not in ("earliest", "latest", "error"):
            raise ConfigError(
                f"start_offset must be 'earliest', 'latest' or 'error', got {self.start_offset!r}"
            )
        if self.isolation_level not in ("read_committed", "read_uncommitted"):
            raise ConfigError(
                "isolation_level must be 'read_committed' or 'read_uncommitted', "
                f"got {self.isolation_level!r}"
            )
        static = self.group_instance_id
        if static is not None and (not isinstance(static, str) or not static):
            raise ConfigError(
                f"group_instance_id must be None or a non-empty string, got {static!r}"
            )
        if self.rack is not None and not isinstance(self.rack, str):
            raise ConfigError(f"rack must be None or a string, got {self.rack!r}")
        for name in ("group_instance_id", "rack"):
            size = len((getattr(self, name) or "").encode())
            if size > MAX_CLIENT_ID_BYTES:  # an int16-length string in requests
                raise ConfigError(
                    f"{name} of {size} bytes: a request holds {MAX_CLIENT_ID_BYTES} at most"
                )
        version = self.subscription_version
        if version is not None and (
            isinstance(version, bool)
            or not isinstance(version, int)
            or not 0 <= version <= LATEST_VERSION
        ):
            raise ConfigError(
                f"subscription_version must be None or 0..{LATEST_VERSION}, got {version!r}"
            )
        if self.fetch_max_wait >= self.request_timeout:
            raise ConfigError("fetch_max_wait must be below request_timeout")
        for name in ("key_deserializer", "value_deserializer"):
            fn = getattr(self, name)
            if fn is not None and not callable(fn):
                raise ConfigError(f"{name} must be a callable or None, got {fn!r}")
        for name in ("fetch_min_bytes", "fetch_max_bytes", "partition_buffer_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")
            if value > _INT32_MAX:
                # A Fetch request carries it as an int32 (Java's INT config).
                raise ConfigError(
                    f"{name} must be at most {_INT32_MAX} (a Fetch request carries an "
                    f"int32), got {value!r}"
                )
        limit = self.max_decompressed_bytes
        if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
            raise ConfigError(f"max_decompressed_bytes must be a positive integer, got {limit!r}")
        for name in ("fetch_buffer_bytes", "max_batch_records"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, int) or value <= 0
            ):
                raise ConfigError(f"{name} must be None or a positive integer, got {value!r}")
        if self.fetch_buffer_bytes is not None and self.fetch_buffer_bytes > _INT32_MAX:
            # A partition's ask (up to half the budget) and a request's limit
            # go into a Fetch request as int32s.
            raise ConfigError(
                f"fetch_buffer_bytes must be None or at most {_INT32_MAX} (a Fetch request "
                f"carries its asks as int32s), got {self.fetch_buffer_bytes!r}"
            )
        self._check_fetch_min_bytes()
        check_flag("watch_partition_changes", self.watch_partition_changes)
        check_flag("fetch_sessions", self.fetch_sessions)
        self._check_group_protocol()

    def _check_fetch_min_bytes(self) -> None:
        """``fetch_min_bytes`` within what a Fetch may ask for.

        Every request's ``max_bytes`` is at most ``fetch_max_bytes`` and at
        most ``fetch_buffer_bytes`` (half of it once the budget is in effect;
        until then the partitions' asks add up to no more than it). Kafka
        reads ``min_bytes`` as at most the request's ``max_bytes``, so a
        larger ``fetch_min_bytes`` never means what it says.
        """
        least = self.fetch_min_bytes
        for name in ("fetch_max_bytes", "fetch_buffer_bytes"):
            most = getattr(self, name)
            if most is not None and least > most:
                raise ConfigError(
                    f"fetch_min_bytes ({least}) must be at most {name} ({most}): no Fetch "
                    f"asks for more than {name}, and the broker reads a larger min_bytes as "
                    f"the request's max_bytes; lower fetch_min_bytes (1, the default, answers "
                    f"as soon as there is data) or raise {name}"
                )

    def _check_subscription(self) -> None:
        """Exactly one of ``topics`` (names) and ``topic_pattern``."""
        pattern = self.topic_pattern
        if pattern is None:
            if not self.topics or not all(isinstance(t, str) and t for t in self.topics):
                raise ConfigError(
                    f"topics must be a non-empty list of names, got {self.topics!r} (to "
                    "subscribe by pattern, pass a compiled re.Pattern in place of the list, "
                    "or topic_pattern=)"
                )
            for topic in self.topics:
                why = topic_name_error(topic)
                if why is not None:  # its partitions could never be assigned
                    raise ConfigError(f"topics: {why}")
            return
        if not isinstance(pattern, re.Pattern) or not isinstance(pattern.pattern, str):
            raise ConfigError(
                f"topic_pattern must be a compiled str pattern (re.compile(...)), got {pattern!r}"
            )
        if self.topics:
            raise ConfigError(
                f"subscribe either to topics or to a pattern, not both: got topics="
                f"{list(self.topics)!r} and topic_pattern={pattern.pattern!r}"
            )

    @property
    def subscription_regex(self) -> str | None:
        """``topic_pattern`` as the broker's RE2J reads it (None: subscribed by names)."""
        return None if self.topic_pattern is None else re2j_regex(self.topic_pattern)

    def _check_group_protocol(self) -> None:
        if self.group_protocol not in ("classic", "consumer"):
            raise ConfigError(
                f"group_protocol must be 'classic' or 'consumer', got {self.group_protocol!r}"
            )
        assignor = self.group_remote_assignor
        if assignor is not None and (not isinstance(assignor, str) or not assignor):
            raise ConfigError(
                f"group_remote_assignor must be None or an assignor's name, got {assignor!r}"
            )
        if assignor is not None and self.group_protocol == "classic":
            raise ConfigError(
                "group_remote_assignor is the consumer protocol's (the coordinator assigns): "
                "set group_protocol='consumer', or choose balancers for the classic protocol"
            )
        if self.group_protocol == "consumer" and self.topic_pattern is not None:
            re2j_regex(self.topic_pattern)  # raises ConfigError naming what RE2J lacks


def _topics(topics: Sequence[str] | None) -> tuple[str, ...]:
    # A string is passed through as is, for __post_init__ to reject by name.
    if topics is None:
        return ()
    return topics if isinstance(topics, str) else tuple(topics)  # type: ignore[return-value]


class GroupSettings(SecuritySettings, total=False):
    """The keyword settings of ``ConsumerGroup``: :class:`GroupConfig`'s fields after
    ``group_id``, ``topics`` and ``brokers`` (meanings and defaults there).

    Only names and types are listed here, for type checkers and IDEs; a test
    checks that they match :class:`GroupConfig`'s fields.
    """

    balancers: Sequence[Balancer] | None
    session_timeout: float
    rebalance_timeout: float
    heartbeat_interval: float
    watch_partition_changes: bool
    partition_watch_interval: float
    join_backoff: float
    commit_interval: float
    start_offset: StartOffset
    group_instance_id: str | None
    isolation_level: IsolationLevel
    client_id: str
    rack: str | None
    subscription_version: int | None
    request_timeout: float
    unreachable_timeout: float | None
    connections_max_idle: float | None
    fetch_max_wait: float
    fetch_min_bytes: int
    fetch_max_bytes: int
    partition_buffer_bytes: int
    fetch_buffer_bytes: int | None
    max_batch_records: int | None
    max_decompressed_bytes: int
    fetch_sessions: bool
    key_deserializer: Deserializer | None
    value_deserializer: Deserializer | None
    group_protocol: GroupProtocol
    group_remote_assignor: str | None
    topic_pattern: re.Pattern[str] | None
