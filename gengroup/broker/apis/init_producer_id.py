"""InitProducerId (key 22): a producer id and epoch for an idempotent producer.

Version notes: v0-v5 served, as Kafka 4.3 advertises them (v2+ flexible; v3
adds the producer id and epoch of a producer asking again, KIP-360; v4 and v5
only allow new error codes). As Kafka's ``KafkaApis`` and
``TransactionCoordinator`` answer a request without a transactional id: a
producer id with an epoch of -1, or an epoch with a producer id of -1, is
INVALID_REQUEST; otherwise the answer is always a fresh producer id with epoch
0 -- also to a producer that names its current id and epoch (Kafka bumps
epochs only for transactional ids, and checks no epoch for the others).
Transactions are not supported: an empty transactional id is INVALID_REQUEST
(as with Kafka), any other INVALID_TXN_STATE. Error answers carry producer id
-1 and epoch -1.
"""

from __future__ import annotations

from typing import Any, Final

from kio.schema.errors import ErrorCode

from ...protocol.framing import build, response_module
from ...protocol.versions import ApiKey
from ._base import NONE, ZERO, ApiSpec, Context, ec

__all__ = ["SPEC", "error_response", "handle"]

KEY: Final = ApiKey.INIT_PRODUCER_ID
NO_PRODUCER_ID: Final = -1
NO_PRODUCER_EPOCH: Final = -1


def _response(mod: Any, code: int, producer_id: int, epoch: int) -> Any:
    return build(
        mod.InitProducerIdResponse,
        throttle_time=ZERO,
        error_code=ec(code),
        producer_id=producer_id,
        producer_epoch=epoch,
    )


def error_response(version: int, request: Any, code: int, message: str | None = None) -> Any:
    """InitProducerId failing with ``code``: no producer id, no epoch."""
    return _response(response_module(KEY, version), code, NO_PRODUCER_ID, NO_PRODUCER_EPOCH)


async def handle(ctx: Context, req: Any, v: int) -> Any:
    """Give an idempotent producer a new producer id with epoch 0."""
    producer_id = int(getattr(req, "producer_id", NO_PRODUCER_ID))
    epoch = int(getattr(req, "producer_epoch", NO_PRODUCER_EPOCH))
    if (producer_id == NO_PRODUCER_ID) != (epoch == NO_PRODUCER_EPOCH):
        return error_response(v, req, ErrorCode.invalid_request)
    if req.transactional_id == "":
        return error_response(v, req, ErrorCode.invalid_request)
    if req.transactional_id is not None:
        return error_response(v, req, ErrorCode.invalid_txn_state)
    mod = response_module(KEY, v)
    return _response(mod, NONE, ctx.state.allocate_producer_id(), 0)


SPEC: Final = ApiSpec(KEY, 0, 5, handle, error_response)
