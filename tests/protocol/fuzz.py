"""Mutation fuzzing of every response decoder the client uses, and of the record codec.

Seeds are valid encodings: for each API the client speaks, responses of every
version drawn from kio's hypothesis strategies; for the record codec, record
batch streams from ``encode_batch`` in every compression. Each case mutates
one seed (truncation, bit flips, a span overwritten with extreme values such as
huge lengths and counts, a span deleted or repeated, two seeds spliced) and
feeds it to the decoder. The only acceptable outcomes are a decoded value or
a typed error: :class:`~gengroup._errors.ProtocolError` (``CorruptRecordError``
is one), or a ``BrokerError`` for an error code the response carries; any
other exception is a finding. Every case is timed: a case slower
than ``SLOW`` seconds is a finding too (a hang cannot be interrupted in-process,
but the per-case maximum shows how far from one the decoders are), and the
process's peak RSS is reported (an unbounded allocation would show there, or
kill the run).

The short variant runs in the suite (``test_fuzz.py``); the long one is
``scripts/fuzz [--cases 100000] [--seed S] [--target NAME]``.
"""

from __future__ import annotations

import argparse
import dataclasses
import random
import resource
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pkgutil import resolve_name
from typing import Any

from hypothesis import HealthCheck, given, settings, strategies as st
from kio.schema.errors import ErrorCode
from kio.schema.index import schema_name_map
from kio.static.constants import EntityType
from kio.static.primitive import Records

from gengroup._errors import GengroupError
from gengroup.protocol.fetch import parse_fetch_response
from gengroup.protocol.framing import decode_response, encode_response
from gengroup.protocol.records import Compression, decode_batches, encode_batch
from gengroup.protocol.versions import CLIENT_VERSIONS, CONSUMER_PROTOCOL_VERSIONS, ApiKey

#: The APIs whose responses the client decodes: every API it negotiates (consumer,
#: producer, admin), the consumer protocol's heartbeat included.
CLIENT_APIS = tuple(k.name.lower() for k in (*CLIENT_VERSIONS, *CONSUMER_PROTOCOL_VERSIONS))
#: A case slower than this many seconds is a finding.
SLOW = 1.0
#: Values written over a span: lengths and counts a hostile peer would send.
_EXTREMES = [
    struct.pack(">i", 2**31 - 1),
    struct.pack(">i", -1),
    struct.pack(">i", -(2**31)),
    struct.pack(">h", 2**15 - 1),
    struct.pack(">h", -1),
    b"\xff\xff\xff\xff\x0f",  # a compact count of 2**35
    b"\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01",  # an over-long varint
    b"\x00",
    b"\xff",
]

st.register_type_strategy(Records, st.binary(max_size=64))


@dataclass
class Target:
    """A decoder family and its seeds: ``seeds[i]`` is decoded by ``decoders[i]``."""

    name: str
    seeds: list[bytes]
    decoders: list[Callable[[bytes], object]]


@dataclass
class Stats:
    """What a run of one target found."""

    target: str
    cases: int = 0
    decoded: int = 0
    typed_errors: int = 0
    slowest: float = 0.0
    findings: list[str] = field(default_factory=list)


def _response_classes(api: str) -> list[type[Any]]:
    """The response classes of the versions of ``api`` the client negotiates."""
    lo, hi = {**CLIENT_VERSIONS, **CONSUMER_PROTOCOL_VERSIONS}[ApiKey[api.upper()]]
    return [
        resolve_name(by_type[EntityType.response])
        for version, by_type in schema_name_map[api].items()
        if lo <= version <= hi
    ]


def _response_seeds(api: str, count: int) -> Target:
    """Valid response frames (payloads without the length prefix) of every version of
    ``api``, each decoded as the version it was (the one the client negotiated)."""
    seeds: list[bytes] = []
    decoders: list[Callable[[bytes], object]] = []

    @settings(
        max_examples=count,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.sampled_from(_response_classes(api)).flatmap(st.from_type))
    def collect(response: Any) -> None:
        if api == "fetch":  # reach the records: a top-level error code stops the parse
            response = dataclasses.replace(response, error_code=ErrorCode.none)
        seeds.append(encode_response(response, correlation_id=7)[4:])
        decoders.append(partial(decode_response, type(response)))

    collect()
    if api == "fetch":  # the client goes on to read the records of each partition
        decoders = [partial(_fetch_and_records, d) for d in decoders]
    return Target(api, seeds, decoders)


def _fetch_and_records(decode: Callable[[bytes], Any], data: bytes) -> object:
    """Decode a Fetch response, then its partitions' records as the fetch loop does
    (a partition's undecodable records become its typed ``error``)."""
    _, response = decode(data)
    return parse_fetch_response(response, isolation_level="read_committed")


def _record_seeds(count: int, rng: random.Random) -> list[bytes]:
    out = []
    for i in range(count):
        records = [
            (
                rng.randbytes(rng.randrange(12)) if rng.random() < 0.9 else None,
                rng.randbytes(rng.randrange(60)) if rng.random() < 0.95 else None,
                [("h", rng.randbytes(4))] * rng.randrange(3),
                1_700_000_000_000 + rng.randrange(10**6),
            )
            for _ in range(1 + rng.randrange(8))
        ]
        codec = list(Compression)[i % len(Compression)]
        stream = encode_batch(records, base_offset=rng.randrange(10**6), compression=codec)
        if rng.random() < 0.5:
            stream += encode_batch(records[:1], base_offset=10**6 + i)
        out.append(stream)
    return out


def targets(seeds_per_target: int, seed: int) -> list[Target]:
    """Every target, with its seeds."""
    rng = random.Random(seed)
    out = [_response_seeds(api, seeds_per_target) for api in CLIENT_APIS]
    records = _record_seeds(seeds_per_target, rng)
    out.append(Target("records", records, [decode_batches] * len(records)))
    return out


def mutate(rng: random.Random, data: bytes, pool: list[bytes]) -> bytes:
    """One hostile variant of ``data``."""
    buf = bytearray(data)
    for _ in range(1 + rng.randrange(3)):
        kind = rng.randrange(6)
        pos = rng.randrange(len(buf) + 1)
        if kind == 0:  # truncate
            del buf[pos:]
        elif kind == 1 and buf:  # flip bits
            for _ in range(1 + rng.randrange(4)):
                i = rng.randrange(len(buf))
                buf[i] ^= 1 << rng.randrange(8)
        elif kind == 2:  # an extreme value over a span
            value = rng.choice(_EXTREMES)
            buf[pos : pos + len(value)] = value
        elif kind == 3:  # delete a span
            del buf[pos : pos + 1 + rng.randrange(16)]
        elif kind == 4:  # repeat a span
            span = bytes(buf[pos : pos + 1 + rng.randrange(32)])
            buf[pos:pos] = span * (1 + rng.randrange(4))
        else:  # splice another seed's tail
            other = rng.choice(pool)
            buf[pos:] = other[rng.randrange(len(other) + 1) :]
    return bytes(buf)


def run(target: Target, cases: int, seed: int) -> Stats:
    """``cases`` mutated inputs through ``target``'s decoder."""
    rng = random.Random(seed)
    stats = Stats(target.name)
    for _ in range(cases):
        i = rng.randrange(len(target.seeds))
        data = mutate(rng, target.seeds[i], target.seeds)
        started = time.perf_counter()
        try:
            target.decoders[i](data)
            stats.decoded += 1
        except GengroupError:  # ProtocolError; or a BrokerError for an error code read
            stats.typed_errors += 1
        except Exception as exc:  # a finding: the decoder let an untyped error out
            if len(stats.findings) < 5:
                stats.findings.append(f"{exc!r} on {data.hex()}")
        elapsed = time.perf_counter() - started
        stats.slowest = max(stats.slowest, elapsed)
        if elapsed > SLOW and len(stats.findings) < 5:
            stats.findings.append(f"{elapsed:.2f} s on {data.hex()}")
        stats.cases += 1
    return stats


def peak_rss_mb() -> float:
    """The process's peak resident memory so far, in MB."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=100_000, help="cases per target")
    parser.add_argument("--seeds", type=int, default=200, help="valid seeds per target")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--target", action="append", help="only these targets (repeatable)")
    args = parser.parse_args()
    failed = False
    for target in targets(args.seeds, args.seed):
        if args.target and target.name not in args.target:
            continue
        started = time.perf_counter()
        stats = run(target, args.cases, args.seed)
        print(
            f"{stats.target:<18} {stats.cases:>8} cases in {time.perf_counter() - started:6.1f} s: "
            f"{stats.decoded} decoded, {stats.typed_errors} ProtocolError, "
            f"{len(stats.findings)} findings, slowest case {stats.slowest * 1000:.1f} ms, "
            f"peak RSS {peak_rss_mb():.0f} MB",
            flush=True,
        )
        for finding in stats.findings:
            print(f"  FINDING {finding}")
        failed |= bool(stats.findings)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
