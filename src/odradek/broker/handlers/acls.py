"""CreateAcls (30), DescribeAcls (29) and DeleteAcls (31), v0-3.

Without an authorizer every answer is SECURITY_DISABLED, as in Kafka.  Creating and deleting
ACLs needs Alter on the Cluster, describing them Describe on the Cluster.  Changes go to the
metadata store one resource at a time (ZooKeeper's ``/kafka-acl`` nodes with a version check and
a change notification), so every broker's authorizer applies them; a deletion filter is applied
to what the store holds, and the answer lists exactly the entries it removed.
"""

from __future__ import annotations

import functools
import logging
from collections import defaultdict

from odradek.broker.dispatch import RequestContext, handles
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol import ApiKey
from odradek.protocol.messages.create_acls import CreateAclsRequest, CreateAclsResponse
from odradek.protocol.messages.delete_acls import DeleteAclsRequest, DeleteAclsResponse
from odradek.protocol.messages.describe_acls import DescribeAclsRequest, DescribeAclsResponse
from odradek.security.acl import (
    AclBinding,
    AclBindingFilter,
    AclEntry,
    AclError,
    Operation,
    PatternType,
    PermissionType,
    ResourceType,
)

log = logging.getLogger(__name__)

_DISABLED = "No Authorizer is configured on the broker"
_CLUSTER_DENIED = "Cluster authorization failed."


def _binding(c: CreateAclsRequest.AclCreation) -> AclBinding:
    try:
        return AclBinding(
            ResourceType(c.resource_type),
            c.resource_name,
            PatternType(c.resource_pattern_type),
            c.principal,
            c.host,
            Operation(c.operation),
            PermissionType(c.permission_type),
        )
    except ValueError as exc:
        raise AclError(str(exc)) from None


def _filter(
    rtype: int, name: str | None, pattern: int, principal: str | None, host: str | None, op: int, permission: int
) -> AclBindingFilter:
    try:
        return AclBindingFilter(
            ResourceType(rtype), name, PatternType(pattern), principal, host, Operation(op), PermissionType(permission)
        )
    except ValueError as exc:
        raise AclError(str(exc)) from None


@handles(ApiKey.CREATE_ACLS, versions=(0, 3))
async def create_acls(ctx: RequestContext, request: CreateAclsRequest) -> CreateAclsResponse:
    R = CreateAclsResponse
    results = [R.AclCreationResult(error_code=0, error_message=None) for _ in request.creations]
    if ctx.ports.acls.authorizer is None:
        for r in results:
            r.error_code, r.error_message = int(ErrorCode.SECURITY_DISABLED), _DISABLED
        return R(throttle_time_ms=0, results=results)
    if not ctx.authorize_cluster(Operation.ALTER):
        for r in results:
            r.error_code, r.error_message = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED), _CLUSTER_DENIED
        return R(throttle_time_ms=0, results=results)
    by_resource: dict[tuple[str, str, str], list[tuple[int, AclEntry]]] = defaultdict(list)
    for i, c in enumerate(request.creations):
        try:
            b = _binding(c)
            b.validate()
        except AclError as exc:
            results[i].error_code, results[i].error_message = int(ErrorCode.INVALID_REQUEST), str(exc)
            continue
        by_resource[b.resource].append((i, b.entry))
    for resource, items in by_resource.items():
        new = frozenset(e for _, e in items)
        try:
            await ctx.ports.acls.acls.alter_acls(resource, lambda before, new=new: before | new)  # type: ignore[misc]
        except KafkaError as exc:
            for i, _ in items:
                results[i].error_code, results[i].error_message = int(exc.code), exc.message
            continue
        log.info("ACLs added by %s on %s:%s:%s: %s", ctx.session.principal, *resource, sorted(new))
    return R(throttle_time_ms=0, results=results)


@handles(ApiKey.DESCRIBE_ACLS, versions=(0, 3))
def describe_acls(ctx: RequestContext, request: DescribeAclsRequest) -> DescribeAclsResponse:
    R = DescribeAclsResponse
    authorizer = ctx.ports.acls.authorizer
    if authorizer is None:
        return R(throttle_time_ms=0, error_code=int(ErrorCode.SECURITY_DISABLED), error_message=_DISABLED, resources=[])
    if not ctx.authorize_cluster(Operation.DESCRIBE):
        return R(throttle_time_ms=0, error_code=int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED),
                 error_message=_CLUSTER_DENIED, resources=[])
    try:
        flt = _filter(
            request.resource_type_filter, request.resource_name_filter, request.pattern_type_filter,
            request.principal_filter, request.host_filter, request.operation, request.permission_type,
        )
        flt.validate()
    except AclError as exc:
        return R(throttle_time_ms=0, error_code=int(ErrorCode.INVALID_REQUEST), error_message=str(exc), resources=[])
    grouped: dict[tuple[ResourceType, str, PatternType], list[AclBinding]] = defaultdict(list)
    for b in authorizer.index.matching(flt):
        grouped[(b.resource_type, b.name, b.pattern_type)].append(b)
    resources = [
        R.DescribeAclsResource(
            resource_type=int(rt), resource_name=name, pattern_type=int(pt),
            acls=[
                R.AclDescription(principal=b.principal, host=b.host, operation=int(b.operation),
                                 permission_type=int(b.permission))
                for b in sorted(bs, key=lambda b: b.entry)
            ],
        )
        for (rt, name, pt), bs in sorted(grouped.items())
    ]
    return R(throttle_time_ms=0, error_code=0, error_message=None, resources=resources)


def _remove_matching(
    flt: AclBindingFilter, resource: tuple[str, str, str], removed: list[AclBinding], before: frozenset[AclEntry]
) -> frozenset[AclEntry]:
    """The entries of ``before`` the filter does not match; those it matches into ``removed``."""
    removed.clear()
    keep = set()
    for e in before:
        b = AclBinding.from_stored(resource, e)
        if flt.matches(b):
            removed.append(b)
        else:
            keep.add(e)
    return frozenset(keep)


@handles(ApiKey.DELETE_ACLS, versions=(0, 3))
async def delete_acls(ctx: RequestContext, request: DeleteAclsRequest) -> DeleteAclsResponse:
    R = DeleteAclsResponse
    authorizer = ctx.ports.acls.authorizer
    results = [R.DeleteAclsFilterResult(error_code=0, error_message=None, matching_acls=[]) for _ in request.filters]
    if authorizer is None:
        for r in results:
            r.error_code, r.error_message = int(ErrorCode.SECURITY_DISABLED), _DISABLED
        return R(throttle_time_ms=0, filter_results=results)
    if not ctx.authorize_cluster(Operation.ALTER):
        for r in results:
            r.error_code, r.error_message = int(ErrorCode.CLUSTER_AUTHORIZATION_FAILED), _CLUSTER_DENIED
        return R(throttle_time_ms=0, filter_results=results)
    for f, result in zip(request.filters, results, strict=True):
        try:
            flt = _filter(
                f.resource_type_filter, f.resource_name_filter, f.pattern_type_filter, f.principal_filter,
                f.host_filter, f.operation, f.permission_type,
            )
            flt.validate()
        except AclError as exc:
            result.error_code, result.error_message = int(ErrorCode.INVALID_REQUEST), str(exc)
            continue
        # the resources the filter may touch, as this broker knows them; each is filtered again
        # against what the store holds when it is changed
        resources = {b.resource for b in authorizer.index.matching(flt)}
        for resource in sorted(resources):
            removed: list[AclBinding] = []
            remove = functools.partial(_remove_matching, flt, resource, removed)
            try:
                await ctx.ports.acls.acls.alter_acls(resource, remove)
            except KafkaError as exc:
                result.error_code, result.error_message = int(exc.code), exc.message
                break
            for b in removed:
                result.matching_acls.append(
                    R.DeleteAclsMatchingAcl(
                        error_code=0, error_message=None, resource_type=int(b.resource_type), resource_name=b.name,
                        pattern_type=int(b.pattern_type), principal=b.principal, host=b.host,
                        operation=int(b.operation), permission_type=int(b.permission),
                    )
                )
            if removed:
                log.info("ACLs removed by %s on %s:%s:%s: %d", ctx.session.principal, *resource, len(removed))
    return R(throttle_time_ms=0, filter_results=results)
