"""The producer's settings: declared once, with their defaults, validated at construction.

:class:`ProducerConfig` is what a :class:`~gengroup.producer.Producer` runs
with; :class:`ProducerSettings` names the same fields as keyword arguments of
``Producer(...)`` for type checkers (``tests/test_config.py`` checks that the
two agree).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from ._config import check_flag, check_idle_limit, check_seconds
from ._errors import ConfigError
from .io.security import Security, SecuritySettings
from .partitioner import Partitioner
from .protocol.framing import check_client_id
from .protocol.records import Compression

__all__ = ["Acks", "ProducerConfig", "ProducerSettings"]

Acks = Literal[-1, 0, 1, "all"]


def _codec(value: Any) -> Compression:
    """A :class:`Compression`, its value (an int), or its name in any case
    (``"lz4"``, as Java's ``compression.type``); a bool or a float is none of them."""
    try:
        if isinstance(value, str):
            return Compression[value.upper()]
        if isinstance(value, int) and not isinstance(value, bool):
            return Compression(value)
    except (KeyError, ValueError):
        pass
    names = ", ".join(repr(c.name.lower()) for c in Compression)
    raise ConfigError(f"compression must be a Compression or one of {names}, not {value!r}")


@dataclass(frozen=True, slots=True)
class ProducerConfig(Security):
    """The settings of a :class:`Producer`, validated at construction.

    Attributes:
        acks: ``-1``/``"all"`` (every in-sync replica), ``1`` (the leader) or
            ``0`` (no acknowledgement: offsets are reported as -1); ``"all"``
            is stored as -1.
        idempotence: True: every batch carries a producer id
            (InitProducerId, asked before the first Produce), its epoch and
            sequence numbers, so that a retry after a lost answer is never
            written twice (Java's ``enable.idempotence``); needs
            ``acks="all"``. False: a retry after a lost answer may write its
            batch twice. None (the default): True with ``acks="all"``, False
            with 0 or 1, as the Java producer when it is not set;
            :attr:`idempotent` tells which.
        compression: the codec of every batch: a :class:`Compression` or its
            name (``"lz4"``, as Java's ``compression.type``).
        linger: seconds a partition's first queued record waits for company.
        max_batch_bytes: estimated uncompressed bytes per batch (a larger
            single record is sent alone).
        max_request_bytes: estimated bytes of the batches one Produce request
            carries (a single larger batch goes alone); keep it below the
            brokers' ``socket.request.max.bytes``, which close the connection
            of a larger request.
        buffer_bytes: estimated bytes queued before ``send`` waits for room
            (for ``max_block`` at most, then ``BufferExhausted``).
        delivery_timeout: seconds from the start of a ``send`` call until a
            record that could not be delivered (retries included) fails; a
            Produce request still unanswered then fails its records with
            ``RequestTimedOut`` (they may yet be written). Must be above
            ``linger``.
        request_timeout: seconds the broker may take to replicate (the
            Produce ``timeout`` field) and, plus 5 s, the client waits for it.
        max_block: seconds ``send`` may block before its record is queued:
            waiting for the topic's metadata, then for room in the buffer.
        retry_backoff: base seconds between retries and metadata refreshes
            (doubling while they fail up to 1 s, jittered by ±20%).
        metadata_max_age: seconds between background metadata refreshes.
        partitioner: strategy for null-key records, ``"sticky"`` or ``"round_robin"``.
        client_id: client id of an owned cluster.
        connections_max_idle: seconds after which an owned cluster closes a
            connection that has had no request in flight, before the broker's
            own idle limit does (None: never).
        allow_auto_create_topics: let the broker create a topic this producer
            sends to that does not exist, where the broker allows it
            (``auto.create.topics.enable``), as the Java producer does.
        security_protocol, ssl_*, sasl_*: :class:`~gengroup.io.security.Security`'s, inherited.

    Raises:
        ConfigError: an invalid value (a bool where a number is expected, a
            non-bool ``allow_auto_create_topics``, an ``idempotence`` neither
            a bool nor None),
            ``delivery_timeout`` not above ``linger``, or ``idempotence``
            with ``acks`` other than ``"all"``.
    """

    acks: Acks = -1
    idempotence: bool | None = None
    compression: Compression = Compression.NONE
    linger: float = 0.005
    max_batch_bytes: int = 1_000_000
    max_request_bytes: int = 1_048_576
    buffer_bytes: int = 64 * 1024 * 1024
    delivery_timeout: float = 120.0
    request_timeout: float = 30.0
    max_block: float = 10.0
    retry_backoff: float = 0.1
    metadata_max_age: float = 300.0
    partitioner: Partitioner = "sticky"
    client_id: str = "gengroup-producer"
    connections_max_idle: float | None = 540.0
    allow_auto_create_topics: bool = True

    def __post_init__(self) -> None:
        Security.__post_init__(self)
        acks = -1 if self.acks == "all" else self.acks
        # True == 1 and 1.0 == 1: only an int (not a bool) is a number of acks.
        if isinstance(acks, bool) or not isinstance(acks, int) or acks not in (-1, 0, 1):
            raise ConfigError(f"acks must be -1, 'all', 0 or 1, not {self.acks!r}")
        object.__setattr__(self, "acks", int(acks))
        object.__setattr__(self, "compression", _codec(self.compression))
        check_flag("allow_auto_create_topics", self.allow_auto_create_topics)
        if self.idempotence is not None:
            check_flag("idempotence", self.idempotence)
        if self.idempotence and acks != -1:
            # Java's ConfigException for enable.idempotence=true with acks other than all.
            raise ConfigError(
                f"idempotence=True needs acks='all' (-1), not acks={self.acks!r}: with "
                "fewer acknowledgements a batch may be written twice or lost; set "
                "idempotence=False to send with acks 0 or 1"
            )
        check_client_id(self.client_id)
        if self.partitioner not in ("sticky", "round_robin"):
            raise ConfigError(
                f"partitioner must be 'sticky' or 'round_robin', not {self.partitioner!r}"
            )
        check_seconds("linger", self.linger, zero=True)
        check_seconds("max_block", self.max_block, zero=True, forever=True)
        check_seconds("delivery_timeout", self.delivery_timeout, forever=True)
        check_seconds("metadata_max_age", self.metadata_max_age, forever=True)
        check_seconds("retry_backoff", self.retry_backoff)
        # The Produce request carries it (its ``timeout``, int32 milliseconds).
        check_seconds("request_timeout", self.request_timeout, sent=True)
        check_idle_limit(self.connections_max_idle)
        if self.delivery_timeout <= self.linger:
            # Every record would expire while it lingers (Java's ConfigException).
            raise ConfigError(
                f"delivery_timeout ({self.delivery_timeout!r} s) must be above "
                f"linger ({self.linger!r} s): every record would expire before it is sent"
            )
        for name in ("max_batch_bytes", "max_request_bytes", "buffer_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"{name} must be a positive integer, got {value!r}")

    @property
    def idempotent(self) -> bool:
        """Whether the producer sends idempotently: ``idempotence``, or if that
        is None, whether ``acks`` is ``"all"``."""
        return self.acks == -1 if self.idempotence is None else self.idempotence


class ProducerSettings(SecuritySettings, total=False):
    """:class:`ProducerConfig`'s fields as keyword arguments of :class:`Producer`.

    Names and types only, for type checkers; a test checks they match the config.
    """

    acks: Acks
    idempotence: bool | None
    compression: Compression
    linger: float
    max_batch_bytes: int
    max_request_bytes: int
    buffer_bytes: int
    delivery_timeout: float
    request_timeout: float
    max_block: float
    retry_backoff: float
    metadata_max_age: float
    partitioner: Partitioner
    client_id: str
    connections_max_idle: float | None
    allow_auto_create_topics: bool
