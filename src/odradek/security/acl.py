"""Kafka's ACL model and its decision function, over an in-memory index.

An ACL binding is a resource pattern (resource type, pattern type, name) and an entry (principal,
host, operation, permission).  :class:`AclIndex` holds a set of them and answers
:meth:`AclIndex.authorize` as Kafka's ``AclAuthorizer`` does:

* a super user is allowed everything;
* the ACLs that apply to a resource are those on its exact name (LITERAL), on the wildcard ``*``
  and on every PREFIXED pattern that starts its name;
* with no ACL at all on the resource, ``allow.everyone.if.no.acl.found`` decides;
* a DENY entry that matches the principal (or ``User:*``), the host (or ``*``) and the operation
  (or ``All``) denies, whatever allows;
* an ALLOW entry matching the same way allows; Describe is also allowed by Read, Write, Delete and
  Alter, DescribeConfigs by AlterConfigs;
* anything else is denied.

The lookup is a few dictionary reads (one per prefix length for PREFIXED patterns), and decisions
are cached until the ACLs change, so a request costs one dictionary read per resource it names.
Pure code: the broker's authorizer (``odradek.broker.authorizer``) feeds it from the metadata
store and logs its decisions.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Self

from odradek.errors import OdradekError

__all__ = [
    "CLUSTER_NAME",
    "RESOURCE_OPERATIONS",
    "WILDCARD",
    "WILDCARD_PRINCIPAL",
    "AclBinding",
    "AclBindingFilter",
    "AclEntry",
    "AclError",
    "AclIndex",
    "Operation",
    "PatternType",
    "PermissionType",
    "ResourceType",
    "authorized_operations",
]

#: one stored ACL entry of a resource: (principal, permission type, operation, host) in Kafka's names
AclEntry = tuple[str, str, str, str]

#: the one Cluster resource's name
CLUSTER_NAME = "kafka-cluster"
#: the resource name that matches every resource of its type (a LITERAL pattern)
WILDCARD = "*"
WILDCARD_PRINCIPAL = "User:*"
WILDCARD_HOST = "*"


class AclError(OdradekError, ValueError):
    """An ACL or filter that Kafka would refuse (INVALID_REQUEST and friends)."""


class _Named(enum.IntEnum):
    """A Kafka enum with the wire code as value and Kafka's display name."""

    @property
    def title(self) -> str:
        """Kafka's display name of the member (``Topic``, ``TransactionalId``, ``DescribeConfigs``),
        as kafka-acls prints it and the metadata store keeps it."""
        return _TITLES.get(self.name) or "".join(w.capitalize() for w in self.name.split("_"))

    @classmethod
    def parse(cls, text: str | int) -> Self:
        """The member named by ``text`` in any spelling (``DESCRIBE_CONFIGS``, ``DescribeConfigs``,
        ``describe-configs``) or by its wire code; AclError for an unknown name."""
        if isinstance(text, int):
            return cls(text)
        key = text.strip().replace("-", "").replace("_", "").replace(" ", "").upper()
        for m in cls:
            if m.name.replace("_", "") == key:
                return m
        raise AclError(f"unknown {cls.__name__} {text!r}")


_TITLES = {"TRANSACTIONAL_ID": "TransactionalId", "CLUSTER_ACTION": "ClusterAction"}


class ResourceType(_Named):
    """What an ACL protects (Kafka's ``ResourceType``): a topic, group, the cluster, a transactional id, a
    delegation token, a user; ANY only in filters."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(_Named):
    """How an ACL's resource name matches: LITERAL (the name, or ``*`` for every one) or PREFIXED; ANY and
    MATCH only in filters (MATCH: the bindings that apply to a name)."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4

    @property
    def title(self) -> str:
        """The member's name in capitals, as Kafka writes pattern types (``LITERAL``)."""
        return self.name


class Operation(_Named):
    """What an ACL allows or denies on its resource (Kafka's ``AclOperation``): READ, WRITE, CREATE,
    DESCRIBE_CONFIGS, ...; ALL covers every operation, ANY only in filters."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class PermissionType(_Named):
    """Whether an ACL allows or denies (a DENY wins over any ALLOW); ANY only in filters."""

    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


#: operations whose ALLOW also allows another one (Kafka's implied operations)
_IMPLIED_BY: dict[Operation, frozenset[Operation]] = {
    Operation.DESCRIBE: frozenset(
        {Operation.DESCRIBE, Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER, Operation.ALL}
    ),
    Operation.DESCRIBE_CONFIGS: frozenset({Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS, Operation.ALL}),
}

#: the operations each resource type has (what authorized-operations bit sets cover)
RESOURCE_OPERATIONS: dict[ResourceType, tuple[Operation, ...]] = {
    ResourceType.TOPIC: (
        Operation.READ, Operation.WRITE, Operation.CREATE, Operation.DESCRIBE, Operation.DELETE,
        Operation.ALTER, Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (
        Operation.READ, Operation.DESCRIBE, Operation.DELETE, Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS,
    ),
    ResourceType.CLUSTER: (
        Operation.CREATE, Operation.CLUSTER_ACTION, Operation.DESCRIBE_CONFIGS, Operation.ALTER_CONFIGS,
        Operation.IDEMPOTENT_WRITE, Operation.ALTER, Operation.DESCRIBE,
    ),
    ResourceType.TRANSACTIONAL_ID: (Operation.DESCRIBE, Operation.WRITE),
    ResourceType.DELEGATION_TOKEN: (Operation.DESCRIBE,),
    ResourceType.USER: (Operation.CREATE_TOKENS, Operation.DESCRIBE_TOKENS),
}

_CONCRETE_RESOURCES = frozenset(RESOURCE_OPERATIONS)
_CONCRETE_OPERATIONS = frozenset(Operation) - {Operation.UNKNOWN, Operation.ANY}


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: ``principal`` (``User:alice``) from ``host`` (``*`` for any) is allowed or denied
    ``operation`` on the resources ``name`` matches with ``pattern_type``; what CreateAcls creates and
    DescribeAcls returns."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: Operation
    permission: PermissionType

    @property
    def resource(self) -> tuple[str, str, str]:
        """The key the metadata store keeps entries under: Kafka's names of type and pattern."""
        return (self.resource_type.title, self.pattern_type.title, self.name)

    @property
    def entry(self) -> tuple[str, str, str, str]:
        """The entry the metadata store keeps under :attr:`resource`: principal, permission, operation and
        host in Kafka's names."""
        return (self.principal, self.permission.title, self.operation.title, self.host)

    @classmethod
    def from_stored(cls, resource: tuple[str, str, str], entry: tuple[str, str, str, str]) -> AclBinding:
        """The binding of a stored (:attr:`resource`, :attr:`entry`) pair; AclError for names Kafka does not know."""
        return cls(
            ResourceType.parse(resource[0]),
            resource[2],
            PatternType.parse(resource[1]),
            entry[0],
            entry[3],
            Operation.parse(entry[2]),
            PermissionType.parse(entry[1]),
        )

    def validate(self) -> None:
        """Refuse what Kafka's CreateAcls refuses."""
        if self.resource_type not in _CONCRETE_RESOURCES:
            raise AclError(f"resource type {self.resource_type.name} is not a concrete resource type")
        if self.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
            raise AclError(f"pattern type {self.pattern_type.name} is not LITERAL or PREFIXED")
        if self.operation not in _CONCRETE_OPERATIONS:
            raise AclError(f"operation {self.operation.name} is not a concrete operation")
        if self.permission not in (PermissionType.ALLOW, PermissionType.DENY):
            raise AclError(f"permission {self.permission.name} is not ALLOW or DENY")
        if not self.name:
            raise AclError("the resource name is empty")
        if self.pattern_type is PatternType.PREFIXED and self.name == WILDCARD:
            raise AclError("a PREFIXED pattern cannot be the wildcard '*'")
        if self.resource_type is ResourceType.CLUSTER and self.name != CLUSTER_NAME:
            raise AclError(f"the Cluster resource's name is {CLUSTER_NAME!r}")
        if ":" not in self.principal or not self.principal.split(":", 1)[1]:
            raise AclError(f"principal {self.principal!r} is not of the form Type:name")
        if not self.host:
            raise AclError("the host is empty (use '*')")
        if self.operation is not Operation.ALL and self.operation not in RESOURCE_OPERATIONS[self.resource_type]:
            raise AclError(f"operation {self.operation.title} does not apply to {self.resource_type.title} resources")


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """What DescribeAcls and DeleteAcls select: ``None`` fields match anything; ANY too."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: Operation = Operation.ANY
    permission: PermissionType = PermissionType.ANY

    def validate(self) -> None:
        """Refuse what Kafka's DescribeAcls / DeleteAcls refuse: an UNKNOWN field (AclError)."""
        for value, what in (
            (self.resource_type, "resource type"), (self.pattern_type, "pattern type"),
            (self.operation, "operation"), (self.permission, "permission type"),
        ):
            if value.name == "UNKNOWN":
                raise AclError(f"the filter's {what} is UNKNOWN")

    def matches(self, b: AclBinding) -> bool:
        """Whether binding ``b`` is selected: every field of the filter is ANY/None or equal to ``b``'s (with
        MATCH, ``b``'s pattern applies to the filter's name)."""
        if self.resource_type is not ResourceType.ANY and self.resource_type is not b.resource_type:
            return False
        if self.pattern_type is PatternType.MATCH:
            # the bindings that would apply to the filter's literal name
            if self.name is not None and not _pattern_applies(b.pattern_type, b.name, self.name):
                return False
        else:
            if self.pattern_type is not PatternType.ANY and self.pattern_type is not b.pattern_type:
                return False
            if self.name is not None and self.name != b.name:
                return False
        if self.principal is not None and self.principal != b.principal:
            return False
        if self.host is not None and self.host != b.host:
            return False
        if self.operation is not Operation.ANY and self.operation is not b.operation:
            return False
        return self.permission is PermissionType.ANY or self.permission is b.permission


def _pattern_applies(pattern_type: PatternType, pattern: str, name: str) -> bool:
    if pattern_type is PatternType.LITERAL:
        return pattern in (name, WILDCARD)
    if pattern_type is PatternType.PREFIXED:
        return name.startswith(pattern)
    return False


# an entry as the index keeps it: (principal, host, operation, is_deny)
_Entry = tuple[str, str, Operation, bool]


class AclIndex:
    """The ACLs by resource type and name; decisions cached until the next :meth:`replace`."""

    def __init__(
        self,
        stored: Mapping[tuple[str, str, str], Iterable[tuple[str, str, str, str]]] | None = None,
        *,
        super_users: Iterable[str] = (),
        allow_if_no_acl: bool = False,
        cache_size: int = 65536,
    ) -> None:
        self.super_users = frozenset(super_users)
        self.allow_if_no_acl = allow_if_no_acl
        self._cache_size = cache_size
        self._literal: dict[ResourceType, dict[str, list[_Entry]]] = {}
        self._prefixed: dict[ResourceType, dict[str, list[_Entry]]] = {}
        self._prefix_lengths: dict[ResourceType, list[int]] = {}
        self._cache: dict[tuple[str, str, Operation, ResourceType, str], bool] = {}
        self.bindings: tuple[AclBinding, ...] = ()
        self.replace(stored or {})

    def replace(self, stored: Mapping[tuple[str, str, str], Iterable[tuple[str, str, str, str]]]) -> None:
        """Rebuild the index from the store's form (resource -> entries)."""
        literal: dict[ResourceType, dict[str, list[_Entry]]] = {}
        prefixed: dict[ResourceType, dict[str, list[_Entry]]] = {}
        bindings = []
        for resource, entries in stored.items():
            for entry in entries:
                try:
                    b = AclBinding.from_stored(resource, entry)
                except (AclError, ValueError):
                    continue  # the broker's loader logs what it could not read
                bindings.append(b)
                target = prefixed if b.pattern_type is PatternType.PREFIXED else literal
                target.setdefault(b.resource_type, {}).setdefault(b.name, []).append(
                    (b.principal, b.host, b.operation, b.permission is PermissionType.DENY)
                )
        self._literal = literal
        self._prefixed = prefixed
        self._prefix_lengths = {rt: sorted({len(p) for p in names}) for rt, names in prefixed.items()}
        self.bindings = tuple(bindings)
        self._cache = {}

    def __len__(self) -> int:
        return len(self.bindings)

    def _matching(self, rtype: ResourceType, name: str) -> list[_Entry]:
        out: list[_Entry] = []
        names = self._literal.get(rtype)
        if names:
            out += names.get(name, ())
            if name != WILDCARD:
                out += names.get(WILDCARD, ())
        prefixes = self._prefixed.get(rtype)
        if prefixes:
            for n in self._prefix_lengths[rtype]:
                if n > len(name):
                    break
                found = prefixes.get(name[:n])
                if found:
                    out += found
        return out

    def authorize(self, principal: str, host: str, op: Operation, rtype: ResourceType, name: str) -> bool:
        key = (principal, host, op, rtype, name)
        cached = self._cache.get(key)
        if cached is not None:
            return cached
        decision = self._decide(principal, host, op, rtype, name)
        if len(self._cache) >= self._cache_size:
            self._cache.clear()
        self._cache[key] = decision
        return decision

    def _decide(self, principal: str, host: str, op: Operation, rtype: ResourceType, name: str) -> bool:
        if principal in self.super_users:
            return True
        entries = self._matching(rtype, name)
        if not entries:
            return self.allow_if_no_acl
        allowing = _IMPLIED_BY.get(op) or (op, Operation.ALL)
        allowed = False
        for e_principal, e_host, e_op, deny in entries:
            if e_principal != principal and e_principal != WILDCARD_PRINCIPAL:
                continue
            if e_host != host and e_host != WILDCARD_HOST:
                continue
            if deny:
                if e_op is op or e_op is Operation.ALL:
                    return False
            elif e_op in allowing:
                allowed = True
        return allowed

    def authorize_any(self, principal: str, host: str, op: Operation, rtype: ResourceType) -> bool:
        """Whether ``principal`` may do ``op`` on at least one resource of ``rtype`` (Kafka's
        ``authorizeByResourceType``: an ALLOW on some pattern that no DENY covers entirely)."""
        if principal in self.super_users:
            return True
        literal = self._literal.get(rtype, {})
        prefixed = self._prefixed.get(rtype, {})
        if not literal and not prefixed:
            return self.allow_if_no_acl

        def hits(entries: Iterable[_Entry], deny: bool) -> bool:
            return any(
                d is deny
                and (p in (principal, WILDCARD_PRINCIPAL))
                and (h in (host, WILDCARD_HOST))
                and (o is op or o is Operation.ALL)
                for p, h, o, d in entries
            )

        if hits(literal.get(WILDCARD, ()), True):
            return False
        denied_prefixes = [p for p, es in prefixed.items() if hits(es, True)]
        for pattern_type, names in ((PatternType.LITERAL, literal), (PatternType.PREFIXED, prefixed)):
            for n, entries in names.items():
                if not hits(entries, False):
                    continue
                if pattern_type is PatternType.LITERAL and hits(literal.get(n, ()), True) and n != WILDCARD:
                    continue
                if any(n.startswith(d) for d in denied_prefixes):
                    continue
                return True
        return False

    def matching(self, flt: AclBindingFilter) -> list[AclBinding]:
        return [b for b in self.bindings if flt.matches(b)]


def authorized_operations(index: AclIndex, principal: str, host: str, rtype: ResourceType, name: str) -> int:
    """KIP-430's bit set: bit ``op.value`` set for each operation of ``rtype`` that is allowed."""
    bits = 0
    for op in RESOURCE_OPERATIONS[rtype]:
        if index.authorize(principal, host, op, rtype, name):
            bits |= 1 << op.value
    return bits
