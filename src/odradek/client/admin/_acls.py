"""ACLs: create, describe and delete them (CreateAcls, DescribeAcls, DeleteAcls), as Kafka's
Admin client does.  A broker without an authorizer answers SECURITY_DISABLED; a principal without
Alter (Describe, to list) on the cluster gets CLUSTER_AUTHORIZATION_FAILED — both raised as
:class:`~odradek.errors.KafkaError` (the latter as ``ClusterAuthorizationError``)."""

from __future__ import annotations

from collections.abc import Iterable

from odradek.client.admin._base import AdminBase
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol.messages.create_acls import CreateAclsRequest, CreateAclsResponse
from odradek.protocol.messages.delete_acls import DeleteAclsRequest, DeleteAclsResponse
from odradek.protocol.messages.describe_acls import DescribeAclsRequest, DescribeAclsResponse
from odradek.security.acl import (
    AclBinding,
    AclBindingFilter,
    Operation,
    PatternType,
    PermissionType,
    ResourceType,
)

__all__ = ["AclAdmin"]


def _binding(
    rtype: int, name: str, pattern: int, principal: str, host: str, op: int, permission: int
) -> AclBinding:
    return AclBinding(
        ResourceType(rtype), name, PatternType(pattern), principal, host, Operation(op), PermissionType(permission)
    )


class AclAdmin(AdminBase):
    """:class:`AsyncAdmin`'s ACL operations: ``create_acls``, ``describe_acls``, ``delete_acls`` (CreateAcls,
    DescribeAcls, DeleteAcls; the brokers need an ``authorizer.class.name``)."""

    async def create_acls(self, bindings: Iterable[AclBinding], *, timeout: float | None = None) -> None:
        """Add ACL bindings; the first refused one raises KafkaError with the broker's message."""
        dl = self._deadline(timeout)
        R = CreateAclsRequest
        items = list(bindings)
        creations = [
            R.AclCreation(
                resource_type=int(b.resource_type), resource_name=b.name, resource_pattern_type=int(b.pattern_type),
                principal=b.principal, host=b.host, operation=int(b.operation), permission_type=int(b.permission),
            )
            for b in items
        ]
        conn = await self._node(None, dl)
        resp: CreateAclsResponse = await self._request(conn, R(creations=creations), conn.version_for(R), dl)
        for b, r in zip(items, resp.results, strict=False):
            if r.error_code:
                raise KafkaError(r.error_code, r.error_message or f"creating {b}")
        if len(resp.results) != len(items):
            raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "the broker did not answer every ACL")

    async def describe_acls(
        self, flt: AclBindingFilter | None = None, *, timeout: float | None = None
    ) -> list[AclBinding]:
        """The bindings that match ``flt`` (None: every binding)."""
        flt = flt or AclBindingFilter()
        dl = self._deadline(timeout)
        conn = await self._node(None, dl)
        req = DescribeAclsRequest(
            resource_type_filter=int(flt.resource_type), resource_name_filter=flt.name,
            pattern_type_filter=int(flt.pattern_type), principal_filter=flt.principal, host_filter=flt.host,
            operation=int(flt.operation), permission_type=int(flt.permission),
        )
        resp: DescribeAclsResponse = await self._request(conn, req, conn.version_for(DescribeAclsRequest), dl)
        if resp.error_code:
            raise KafkaError(resp.error_code, resp.error_message or "describing ACLs")
        return [
            _binding(r.resource_type, r.resource_name, r.pattern_type, a.principal, a.host, a.operation, a.permission_type)
            for r in resp.resources
            for a in r.acls
        ]

    async def delete_acls(
        self, filters: Iterable[AclBindingFilter], *, timeout: float | None = None
    ) -> list[AclBinding]:
        """Remove every binding that matches one of ``filters``; the bindings removed."""
        dl = self._deadline(timeout)
        R = DeleteAclsRequest
        req = R(
            filters=[
                R.DeleteAclsFilter(
                    resource_type_filter=int(f.resource_type), resource_name_filter=f.name,
                    pattern_type_filter=int(f.pattern_type), principal_filter=f.principal, host_filter=f.host,
                    operation=int(f.operation), permission_type=int(f.permission),
                )
                for f in filters
            ]
        )
        conn = await self._node(None, dl)
        resp: DeleteAclsResponse = await self._request(conn, req, conn.version_for(R), dl)
        removed: list[AclBinding] = []
        for r in resp.filter_results:
            if r.error_code:
                raise KafkaError(r.error_code, r.error_message or "deleting ACLs")
            removed += [
                _binding(m.resource_type, m.resource_name, m.pattern_type, m.principal, m.host, m.operation,
                         m.permission_type)
                for m in r.matching_acls
            ]
        return removed
