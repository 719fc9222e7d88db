"""GetTelemetrySubscriptions (71) and PushTelemetry (72), v0 (KIP-714): a client asks which of
its metrics the broker wants and how often, then pushes them as OTLP.  The rules are the
receiver's (:mod:`odradek.broker.telemetry`); these handlers only answer with its result or its
Kafka error.  Served only when the broker exports metrics (see :mod:`odradek.broker.advertised`).
"""

from __future__ import annotations

import logging

from odradek.broker.dispatch import RequestContext, handles
from odradek.cluster.client_metrics import ClientInfo
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol import ApiKey
from odradek.protocol.messages.get_telemetry_subscriptions import (
    GetTelemetrySubscriptionsRequest,
    GetTelemetrySubscriptionsResponse,
)
from odradek.protocol.messages.push_telemetry import PushTelemetryRequest, PushTelemetryResponse

log = logging.getLogger(__name__)


#: the longest client id kept with a client instance (its state stays small)
_CLIENT_ID_MAX = 256


def _client(ctx: RequestContext) -> ClientInfo:
    name, version = ctx.session.client_software
    client_id = (ctx.header.client_id or "")[:_CLIENT_ID_MAX]
    return ClientInfo("", client_id, name, version, ctx.client_host, ctx.session.client_port)


@handles(ApiKey.GET_TELEMETRY_SUBSCRIPTIONS, versions=(0, 0))
def get_telemetry_subscriptions(
    ctx: RequestContext, request: GetTelemetrySubscriptionsRequest
) -> GetTelemetrySubscriptionsResponse:
    R = GetTelemetrySubscriptionsResponse
    receiver = ctx.ports.telemetry.receiver
    if receiver is None:
        return R(error_code=int(ErrorCode.UNSUPPORTED_VERSION))
    try:
        granted = receiver.get_subscriptions(request.client_instance_id, _client(ctx))
    except KafkaError as exc:
        return R(error_code=int(exc.code))
    return R(
        client_instance_id=granted.client_instance_id,
        subscription_id=granted.subscription_id,
        accepted_compression_types=list(granted.accepted_compression),
        push_interval_ms=granted.push_interval_ms,
        telemetry_max_bytes=receiver.max_bytes,
        # cumulative sums: what /metrics shows as Prometheus counters
        delta_temporality=False,
        requested_metrics=list(granted.metrics),
    )


@handles(ApiKey.PUSH_TELEMETRY, versions=(0, 0))
def push_telemetry(ctx: RequestContext, request: PushTelemetryRequest) -> PushTelemetryResponse:
    receiver = ctx.ports.telemetry.receiver
    if receiver is None:
        return PushTelemetryResponse(error_code=int(ErrorCode.UNSUPPORTED_VERSION))
    try:
        receiver.push(
            request.client_instance_id, _client(ctx), request.subscription_id, request.terminating,
            request.compression_type, bytes(request.metrics or b""),
        )
    except KafkaError as exc:
        log.debug("PushTelemetry from %s refused: %s %s", ctx.client_host, exc.code.name, exc.message)
        return PushTelemetryResponse(error_code=int(exc.code))
    return PushTelemetryResponse()
