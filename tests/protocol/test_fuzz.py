"""The short variant of the decoder fuzzing (``fuzz.py``): every response decoder the
client uses and the record codec take mutated valid input and only ever decode it or
raise ProtocolError. ``scripts/fuzz`` runs the long variant (100,000 cases per target)."""

from __future__ import annotations

import pytest

from .fuzz import CLIENT_APIS, Target, run, targets

CASES = 2_000

_TARGETS = targets(seeds_per_target=40, seed=20261124)


@pytest.mark.parametrize("target", _TARGETS, ids=lambda t: t.name)
def test_mutated_input_only_decodes_or_raises_protocol_error(target: Target) -> None:
    stats = run(target, CASES, seed=1)
    assert stats.findings == [], "\n".join(stats.findings)
    assert stats.cases == CASES
    # the mutations reach both outcomes: they are neither all harmless nor all rejected
    assert stats.typed_errors > 0 and stats.decoded > 0, stats


def test_every_client_api_and_the_record_codec_are_targets() -> None:
    assert [t.name for t in _TARGETS] == [*CLIENT_APIS, "records"]
