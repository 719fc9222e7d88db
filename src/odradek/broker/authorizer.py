"""The ACL authorizer: Kafka's decisions over the ACLs of the metadata store, with an audit log.

``authorizer.class.name`` turns it on: ``odradek.acl``, or Kafka's own class names
(``kafka.security.authorizer.AclAuthorizer``, ``org.apache.kafka.metadata.authorizer.StandardAuthorizer``,
and the older ``kafka.security.auth.SimpleAclAuthorizer``), so that a Kafka ``server.properties``
works unchanged.  Empty (the default) means no authorizer: every request is allowed and the ACL
APIs answer SECURITY_DISABLED.

The ACLs live in the metadata store (ZooKeeper's ``/kafka-acl`` and ``/kafka-acl-extended``, or
the embedded store); each new image with different ACLs rebuilds the in-memory index
(:class:`~odradek.security.acl.AclIndex`), whose decisions are cached per principal, host,
operation and resource.  Every decision is logged on the ``odradek.authorizer`` logger in the
form of Kafka's ``kafka.authorizer.logger``: denials at INFO, grants at DEBUG.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from odradek.cluster.metadata import MetadataImage
from odradek.config import ConfigError
from odradek.protocol import ApiKey
from odradek.security.acl import AclIndex, Operation, ResourceType
from odradek.settings import SecuritySettings

__all__ = ["AUTHORIZER_CLASSES", "Authorizer", "authorizer_for"]

log = logging.getLogger(__name__)
audit = logging.getLogger("odradek.authorizer")

#: the values of authorizer.class.name that select the ACL authorizer
AUTHORIZER_CLASSES = frozenset(
    {
        "odradek.acl",
        "kafka.security.authorizer.AclAuthorizer",
        "kafka.security.auth.SimpleAclAuthorizer",
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    }
)


class Authorizer:
    def __init__(self, super_users: Iterable[str], allow_if_no_acl: bool, image: MetadataImage) -> None:
        self._acls = image.acls
        self.index = AclIndex(image.acls, super_users=super_users, allow_if_no_acl=allow_if_no_acl)

    def on_image(self, image: MetadataImage) -> None:
        """A new metadata image: rebuild the index when its ACLs changed (a new mapping)."""
        if image.acls is self._acls:
            return
        self._acls = image.acls
        self.index.replace(image.acls)
        stored = sum(len(v) for v in image.acls.values())
        if len(self.index) != stored:
            log.warning("%d stored ACL entries could not be read and are ignored", stored - len(self.index))
        log.debug("ACLs changed: %d bindings", len(self.index))

    def authorize(
        self,
        principal: str,
        host: str,
        op: Operation,
        rtype: ResourceType,
        name: str,
        api: int,
        *,
        log_denied: bool = True,
        log_allowed: bool = True,
    ) -> bool:
        """Whether ``principal`` ("User:alice") connecting from ``host`` may do ``op`` on the
        resource, for a request of API key ``api`` (named in the audit line)."""
        allowed = self.index.authorize(principal, host, op, rtype, name)
        if allowed:
            if log_allowed and audit.isEnabledFor(logging.DEBUG):
                audit.debug(_LINE, principal, "Allowed", op.title, host, rtype.title, name, api_title(api))
        elif log_denied and audit.isEnabledFor(logging.INFO):
            audit.info(_LINE, principal, "Denied", op.title, host, rtype.title, name, api_title(api))
        return allowed

    def authorize_any(self, principal: str, host: str, op: Operation, rtype: ResourceType) -> bool:
        return self.index.authorize_any(principal, host, op, rtype)


def api_title(api_key: int) -> str:
    """An API's name as Kafka's request log writes it (``Produce``, ``OffsetCommit``)."""
    try:
        return "".join(w.capitalize() for w in ApiKey(api_key).name.split("_"))
    except ValueError:
        return str(api_key)


_LINE = "Principal = %s is %s Operation = %s from host = %s on resource = %s:LITERAL:%s for request = %s"


def authorizer_for(settings: SecuritySettings, image: MetadataImage) -> Authorizer | None:
    """The authorizer ``authorizer.class.name`` asks for, or None."""
    name = settings.authorizer_class_name.strip()
    if not name:
        return None
    if name not in AUTHORIZER_CLASSES:
        raise ConfigError(
            f"authorizer.class.name={name!r} is not an authorizer Odradek has: use one of {sorted(AUTHORIZER_CLASSES)}"
        )
    supers = [s.strip() for s in settings.super_users.split(";") if s.strip()]
    for s in supers:
        if ":" not in s:
            raise ConfigError(f"super.users entry {s!r} is not a principal of the form User:name")
    allow = settings.allow_everyone_if_no_acl_found
    log.info(
        "ACL authorizer on: %d ACL bindings, super users %s, allow.everyone.if.no.acl.found=%s",
        sum(len(v) for v in image.acls.values()), supers or "none", str(allow).lower(),
    )
    return Authorizer(supers, allow, image)
