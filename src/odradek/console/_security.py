"""The console's security pages: ACLs (DescribeAcls; a binding removed with DeleteAcls), SCRAM users
(DescribeUserScramCredentials; a user's credential of one mechanism removed) and client quotas
(DescribeClientQuotas; one quota of an entity removed).  The removals are POST forms, so the
console's guards apply: refused in read-only mode, this console's CSRF token, same-origin only.
A broker without an authorizer answers DescribeAcls with SECURITY_DISABLED: the ACL page says so."""

from __future__ import annotations

from odradek.client.admin import ClientQuotaEntity
from odradek.console._html import e, table
from odradek.console._http import HttpError, Request, Response
from odradek.console._pages import Pages, num
from odradek.errors import ErrorCode, KafkaError
from odradek.security.acl import AclBinding, AclError, Operation, PatternType, PermissionType, ResourceType

__all__ = ["SecurityPages"]

_NOTICES = {
    "acl-deleted": "ACL removed.",
    "credential-deleted": "SCRAM credential removed.",
    "quota-deleted": "Quota removed.",
}
_QUOTA_ENTITY_TYPES = ("user", "client-id", "ip")


def _notice(request: Request) -> str | None:
    return _NOTICES.get(request.query.get("notice", ""))


class SecurityPages(Pages):
    # -- ACLs --------------------------------------------------------------------------------------
    async def acls(self, request: Request) -> Response:
        try:
            bindings = await self.data.acls()
        except KafkaError as exc:
            if exc.code != ErrorCode.SECURITY_DISABLED:
                raise
            content = ('<p class="lead" data-testid="acls-disabled">No authorizer is configured on the brokers '
                       "(SECURITY_DISABLED): every principal may do everything. Set "
                       "<code>authorizer.class.name</code> to use ACLs.</p>")
            return Response.html(self.page.render("ACLs", content, active="/acls", page_id="acls"))
        rows = []
        for b in sorted(bindings, key=lambda b: (b.resource_type.title, b.name, b.principal, b.operation.title)):
            cells = [e(b.principal), e(b.host), e(b.permission.title), e(b.operation.title),
                     e(b.resource_type.title), e(b.name), e(b.pattern_type.title)]
            if not self.read_only:
                cells.append(
                    '<form method="post" action="/acls/delete" class="inline">' + self.csrf()
                    + "".join(f'<input type="hidden" name="{k}" value="{e(v)}">' for k, v in (
                        ("resource_type", b.resource_type.name), ("name", b.name),
                        ("pattern_type", b.pattern_type.name), ("principal", b.principal), ("host", b.host),
                        ("operation", b.operation.name), ("permission", b.permission.name)))
                    + '<button type="submit" class="danger">Remove</button></form>'
                )
            rows.append(cells)
        headers = ["Principal", "Host", "Permission", "Operation", "Resource type", "Resource", "Pattern"]
        if not self.read_only:
            headers.append("")
        content = table(headers, rows, empty="no ACLs", test_id="acls")
        return Response.html(self.page.render("ACLs", content, active="/acls", notice=_notice(request),
                                              page_id="acls"))

    async def delete_acl(self, request: Request) -> Response:
        try:
            binding = AclBinding(
                ResourceType.parse(request.arg("resource_type")), request.arg("name"),
                PatternType.parse(request.arg("pattern_type")), request.arg("principal"), request.arg("host"),
                Operation.parse(request.arg("operation")), PermissionType.parse(request.arg("permission")),
            )
            binding.validate()
        except AclError as exc:
            raise HttpError(400, f"not an ACL: {exc}") from None
        await self.data.delete_acl(binding)
        return Response.redirect("/acls?notice=acl-deleted")

    # -- SCRAM users -------------------------------------------------------------------------------
    async def users(self, request: Request) -> Response:
        users = await self.data.scram_users()
        rows = []
        for user, creds in sorted(users.items()):
            for mechanism, iterations in sorted(creds.items()):
                cells = [e(user), e(mechanism), e(num(iterations))]
                if not self.read_only:
                    cells.append(
                        '<form method="post" action="/users/delete" class="inline">' + self.csrf()
                        + f'<input type="hidden" name="user" value="{e(user)}">'
                        + f'<input type="hidden" name="mechanism" value="{e(mechanism)}">'
                        + '<button type="submit" class="danger">Remove</button></form>'
                    )
                rows.append(cells)
        headers = ["User", "Mechanism", "Iterations"] + ([] if self.read_only else [""])
        content = (table(headers, rows, numeric=[2], empty="no SCRAM users", test_id="users")
                   + '<p class="muted">Add users with <code>odradek users add</code> (the password is read from a '
                   "prompt or a file, never typed into a web page).</p>")
        return Response.html(self.page.render("SCRAM users", content, active="/users", notice=_notice(request),
                                              page_id="users"))

    async def delete_credential(self, request: Request) -> Response:
        user, mechanism = request.arg("user"), request.arg("mechanism")
        if not user or mechanism not in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            raise HttpError(400, "give a user and a mechanism (SCRAM-SHA-256 or SCRAM-SHA-512)")
        await self.data.delete_scram_credential(user, mechanism)
        return Response.redirect("/users?notice=credential-deleted")

    # -- client quotas ---------------------------------------------------------------------------
    async def quotas(self, request: Request) -> Response:
        quotas = await self.data.client_quotas()
        rows = []
        for entity, values in sorted(quotas.items(), key=lambda kv: str(kv[0])):
            for key, value in sorted(values.items()):
                shown = {k: ("<default>" if v is None else v) for k, v in entity.parts}
                cells = [e(shown.get(t, "")) for t in _QUOTA_ENTITY_TYPES] + [e(key), e(num(value))]
                if not self.read_only:
                    fields = "".join(
                        f'<input type="hidden" name="{t}" value="{e("" if v is None else v)}">'
                        f'<input type="hidden" name="{t}-default" value="{"1" if v is None else ""}">'
                        for t, v in entity.parts
                    )
                    cells.append(
                        '<form method="post" action="/quotas/delete" class="inline">' + self.csrf() + fields
                        + f'<input type="hidden" name="key" value="{e(key)}">'
                        + '<button type="submit" class="danger">Remove</button></form>'
                    )
                rows.append(cells)
        headers = ["User", "Client id", "IP", "Quota", "Value"] + ([] if self.read_only else [""])
        content = table(headers, rows, numeric=[4], empty="no client quotas", test_id="quotas")
        return Response.html(self.page.render("Client quotas", content, active="/quotas", notice=_notice(request),
                                              page_id="quotas"))

    async def delete_quota(self, request: Request) -> Response:
        parts: dict[str, str | None] = {}
        for t in _QUOTA_ENTITY_TYPES:
            if request.arg(f"{t}-default") == "1":
                parts[t] = None
            elif request.arg(t):
                parts[t] = request.arg(t)
        key = request.arg("key")
        if not parts or not key:
            raise HttpError(400, "give an entity (user, client-id or ip) and a quota key")
        await self.data.remove_client_quota(ClientQuotaEntity.of(parts), key)
        return Response.redirect("/quotas?notice=quota-deleted")
