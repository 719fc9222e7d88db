"""DescribeClientQuotas (48) and AlterClientQuotas (49), v0-1: Kafka's client quotas (KIP-546).

Entities are users, client ids, (user, client id) pairs and IPs, a null name meaning the default
entity; they are kept by the metadata backend under Kafka's ``/config`` paths (see
:mod:`odradek.security.quota`).  Describing needs DescribeConfigs on the Cluster, altering
AlterConfigs on the Cluster (else CLUSTER_AUTHORIZATION_FAILED).  A filter's components match an
entity type EXACTly (by name), its DEFAULT entity, or any SPECIFIED (non-default) name; a strict
filter matches only entities with exactly the filtered types.  Unknown quota names, values that
are not positive, bad entity combinations answer INVALID_REQUEST, per entry for an alter.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable
from typing import Any

from odradek.broker.dispatch import RequestContext, handles
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol import ApiKey
from odradek.protocol.messages.alter_client_quotas import AlterClientQuotasRequest, AlterClientQuotasResponse
from odradek.protocol.messages.describe_client_quotas import (
    DescribeClientQuotasRequest,
    DescribeClientQuotasResponse,
)
from odradek.security.acl import Operation
from odradek.security.quota import (
    CLIENT_ID,
    IP,
    USER,
    QuotaError,
    entity_path,
    parse_entity_path,
    validate_quota,
)

log = logging.getLogger(__name__)

MATCH_EXACT, MATCH_DEFAULT, MATCH_SPECIFIED = 0, 1, 2
_TYPES = (USER, CLIENT_ID, IP)


def _entity_list(entity: dict[str, str | None], cls: Any) -> list[Any]:
    return [cls(entity_type=k, entity_name=entity[k]) for k in _TYPES if k in entity]


def _filter(request: DescribeClientQuotasRequest) -> dict[str, tuple[int, str | None]]:
    out: dict[str, tuple[int, str | None]] = {}
    for c in request.components:
        if c.entity_type not in _TYPES:
            raise KafkaError(
                ErrorCode.UNSUPPORTED_VERSION, f"Custom entity type '{c.entity_type}' not supported"
            )
        if c.entity_type in out:
            raise KafkaError(
                ErrorCode.INVALID_REQUEST, f"Duplicate {c.entity_type} filter component entity type"
            )
        if c.match_type == MATCH_EXACT:
            if c.match is None:
                raise KafkaError(
                    ErrorCode.INVALID_REQUEST, "Request specified MATCH_EXACT, but set match string to null"
                )
        elif c.match_type == MATCH_DEFAULT:
            if c.match is not None:
                raise KafkaError(
                    ErrorCode.INVALID_REQUEST,
                    "Request specified MATCH_DEFAULT, but also specified a match string",
                )
        elif c.match_type == MATCH_SPECIFIED:
            if c.match is not None:
                raise KafkaError(
                    ErrorCode.INVALID_REQUEST,
                    "Request specified MATCH_SPECIFIED, but also specified a match string",
                )
        else:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"Unexpected match type: {c.match_type}")
        out[c.entity_type] = (c.match_type, c.match)
    if IP in out and (USER in out or CLIENT_ID in out):
        raise KafkaError(
            ErrorCode.INVALID_REQUEST,
            "Invalid entity filter component combination, IP filter component should not be used with user or "
            "clientId filter component.",
        )
    return out


def _matches(
    entity: dict[str, str | None], components: dict[str, tuple[int, str | None]], strict: bool
) -> bool:
    if strict and set(entity) != set(components):
        return False
    for kind, (match_type, match) in components.items():
        if kind not in entity:
            return False
        name = entity[kind]
        if match_type == MATCH_EXACT and name != match:
            return False
        if match_type == MATCH_DEFAULT and name is not None:
            return False
        if match_type == MATCH_SPECIFIED and name is None:
            return False
    return True


@handles(ApiKey.DESCRIBE_CLIENT_QUOTAS, versions=(0, 1))
def describe_client_quotas(
    ctx: RequestContext, request: DescribeClientQuotasRequest
) -> DescribeClientQuotasResponse:
    R = DescribeClientQuotasResponse
    if not ctx.authorize_cluster(Operation.DESCRIBE_CONFIGS):
        return R(
            throttle_time_ms=0,
            error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
            error_message=None,
            entries=None,
        )
    try:
        components = _filter(request)
    except KafkaError as exc:
        return R(throttle_time_ms=0, error_code=int(exc.code), error_message=exc.message, entries=None)
    entries = []
    for path, values in sorted(ctx.ports.quotas.metadata.image.client_quotas.items()):
        try:
            entity = parse_entity_path(path)
        except QuotaError:
            continue
        if not values or not _matches(entity, components, request.strict):
            continue
        entries.append(
            R.EntryData(
                entity=_entity_list(entity, R.EntityData),
                values=[R.ValueData(key=k, value=float(v)) for k, v in sorted(values.items())],
            )
        )
    return R(throttle_time_ms=0, error_code=0, error_message=None, entries=entries)


def _entity(data: AlterClientQuotasRequest.EntryData) -> dict[str, str | None]:
    entity: dict[str, str | None] = {}
    for e in data.entity:
        if e.entity_type in entity:
            raise QuotaError(f"Duplicate {e.entity_type} entity type in the quota entity")
        if e.entity_type not in _TYPES:
            raise QuotaError(f"Unhandled client quota entity type: {e.entity_type}")
        if e.entity_name == "":
            raise QuotaError(f"Empty {e.entity_type} name in the quota entity (use null for the default)")
        if e.entity_type == IP and e.entity_name is not None:
            try:
                ipaddress.ip_address(e.entity_name)
            except ValueError:
                raise QuotaError(f"{e.entity_name} is not a valid IP address") from None
        entity[e.entity_type] = e.entity_name
    entity_path(entity)  # the combination is one Kafka stores
    return entity


def _ops(entity: dict[str, str | None], data: AlterClientQuotasRequest.EntryData) -> dict[str, float | None]:
    ops: dict[str, float | None] = {}
    for op in data.ops:
        if op.key in ops:
            raise QuotaError(f"Duplicate quota key {op.key} in the request")
        if op.remove:
            validate_quota(entity, op.key, 1.0)  # the key must be one the entity may have
            ops[op.key] = None
        else:
            validate_quota(entity, op.key, float(op.value))
            ops[op.key] = float(op.value)
    return ops


@handles(ApiKey.ALTER_CLIENT_QUOTAS, versions=(0, 1))
async def alter_client_quotas(
    ctx: RequestContext, request: AlterClientQuotasRequest
) -> AlterClientQuotasResponse:
    R = AlterClientQuotasResponse
    allowed = ctx.authorize_cluster(Operation.ALTER_CONFIGS)
    results = []
    for data in request.entries:
        code, message = 0, None
        if not allowed:
            code = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
        else:
            try:
                entity = _entity(data)
                ops = _ops(entity, data)
                if not request.validate_only:
                    await ctx.ports.quotas.quotas.alter_client_quota(entity_path(entity), _apply(ops))
                    log.info("client quotas of %s altered: %s", entity_path(entity), ops)
            except QuotaError as exc:
                code, message = int(ErrorCode.INVALID_REQUEST), str(exc)
            except KafkaError as exc:
                code, message = int(exc.code), exc.message
        results.append(
            R.EntryData(
                error_code=code,
                error_message=message,
                entity=[
                    R.EntityData(entity_type=e.entity_type, entity_name=e.entity_name) for e in data.entity
                ],
            )
        )
    return R(throttle_time_ms=0, entries=results)


def _apply(ops: dict[str, float | None]) -> Callable[[dict[str, float]], dict[str, float]]:
    def change(quotas: dict[str, float]) -> dict[str, float]:
        out = dict(quotas)
        for key, value in ops.items():
            if value is None:
                out.pop(key, None)
            else:
                out[key] = value
        return out

    return change
