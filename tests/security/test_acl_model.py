"""The ACL decision function: Kafka's AclAuthorizer semantics, one rule per test."""

from __future__ import annotations

import pytest

from odradek.security.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclBindingFilter,
    AclError,
    AclIndex,
    Operation,
    PatternType,
    PermissionType,
    ResourceType,
    authorized_operations,
)

T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER
ALLOW, DENY = PermissionType.ALLOW, PermissionType.DENY
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED


def acl(rtype: ResourceType, name: str, principal: str, op: Operation, perm: PermissionType = ALLOW,
        pattern: PatternType = LIT, host: str = "*") -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def index(*bindings: AclBinding, supers: tuple[str, ...] = (), allow_if_none: bool = False) -> AclIndex:
    stored: dict[tuple[str, str, str], set[tuple[str, str, str, str]]] = {}
    for b in bindings:
        b.validate()
        stored.setdefault(b.resource, set()).add(b.entry)
    return AclIndex(stored, super_users=supers, allow_if_no_acl=allow_if_none)


def test_literal_allow_only_that_topic_and_operation() -> None:
    ix = index(acl(T, "orders", "User:alice", Operation.READ))
    assert ix.authorize("User:alice", "10.0.0.1", Operation.READ, T, "orders")
    assert not ix.authorize("User:alice", "10.0.0.1", Operation.WRITE, T, "orders")
    assert not ix.authorize("User:alice", "10.0.0.1", Operation.READ, T, "orders2")
    assert not ix.authorize("User:bob", "10.0.0.1", Operation.READ, T, "orders")
    assert not ix.authorize("User:alice", "10.0.0.1", Operation.READ, G, "orders")


def test_implied_operations() -> None:
    for op in (Operation.READ, Operation.WRITE, Operation.DELETE, Operation.ALTER):
        ix = index(acl(T, "t", "User:a", op))
        assert ix.authorize("User:a", "h", Operation.DESCRIBE, T, "t"), op
        assert not ix.authorize("User:a", "h", Operation.CREATE, T, "t")
    ix = index(acl(T, "t", "User:a", Operation.ALTER_CONFIGS))
    assert ix.authorize("User:a", "h", Operation.DESCRIBE_CONFIGS, T, "t")
    ix = index(acl(T, "t", "User:a", Operation.DESCRIBE))
    assert not ix.authorize("User:a", "h", Operation.READ, T, "t")  # not the other way round
    ix = index(acl(T, "t", "User:a", Operation.ALL))
    assert all(ix.authorize("User:a", "h", op, T, "t") for op in (Operation.READ, Operation.ALTER_CONFIGS))


def test_prefixed_and_wildcard_patterns() -> None:
    ix = index(
        acl(T, "logs-", "User:a", Operation.WRITE, pattern=PRE),
        acl(G, "*", "User:a", Operation.READ),
    )
    assert ix.authorize("User:a", "h", Operation.WRITE, T, "logs-app")
    assert ix.authorize("User:a", "h", Operation.WRITE, T, "logs-")
    assert not ix.authorize("User:a", "h", Operation.WRITE, T, "log")
    assert not ix.authorize("User:a", "h", Operation.WRITE, T, "app-logs-")
    assert ix.authorize("User:a", "h", Operation.READ, G, "anything")
    # a literal '*' pattern is the wildcard; a topic literally named '*' is not special for prefixes
    assert not ix.authorize("User:a", "h", Operation.WRITE, T, "*")


def test_deny_beats_allow_across_patterns() -> None:
    ix = index(
        acl(T, "*", "User:*", Operation.ALL),
        acl(T, "secret-", "User:bob", Operation.READ, DENY, pattern=PRE),
    )
    assert ix.authorize("User:bob", "h", Operation.READ, T, "public")
    assert not ix.authorize("User:bob", "h", Operation.READ, T, "secret-x")
    assert ix.authorize("User:bob", "h", Operation.WRITE, T, "secret-x")  # the deny is on Read only
    assert ix.authorize("User:alice", "h", Operation.READ, T, "secret-x")
    # a DENY of All denies every operation
    ix = index(acl(T, "t", "User:*", Operation.READ), acl(T, "t", "User:bob", Operation.ALL, DENY))
    assert not ix.authorize("User:bob", "h", Operation.DESCRIBE, T, "t")


def test_deny_of_describe_is_not_implied_by_deny_of_read() -> None:
    """Implication works for ALLOW only: denying Read does not deny Describe."""
    ix = index(acl(T, "t", "User:a", Operation.ALL), acl(T, "t", "User:a", Operation.READ, DENY))
    assert ix.authorize("User:a", "h", Operation.DESCRIBE, T, "t")
    assert not ix.authorize("User:a", "h", Operation.READ, T, "t")


def test_hosts() -> None:
    ix = index(acl(T, "t", "User:a", Operation.READ, host="10.0.0.5"))
    assert ix.authorize("User:a", "10.0.0.5", Operation.READ, T, "t")
    assert not ix.authorize("User:a", "10.0.0.6", Operation.READ, T, "t")
    ix = index(acl(T, "t", "User:a", Operation.READ), acl(T, "t", "User:a", Operation.READ, DENY, host="10.0.0.6"))
    assert ix.authorize("User:a", "10.0.0.5", Operation.READ, T, "t")
    assert not ix.authorize("User:a", "10.0.0.6", Operation.READ, T, "t")


def test_super_users_and_no_acl_found() -> None:
    ix = index(acl(T, "t", "User:admin", Operation.READ, DENY), supers=("User:admin",))
    assert ix.authorize("User:admin", "h", Operation.READ, T, "t")  # even over a DENY
    assert ix.authorize("User:admin", "h", Operation.CLUSTER_ACTION, C, CLUSTER_NAME)
    closed = index(acl(T, "other", "User:a", Operation.READ))
    assert not closed.authorize("User:a", "h", Operation.READ, T, "t")
    opened = index(acl(T, "other", "User:a", Operation.READ), allow_if_none=True)
    assert opened.authorize("User:b", "h", Operation.READ, T, "t")  # no ACL on t at all
    assert not opened.authorize("User:b", "h", Operation.READ, T, "other")  # t has ACLs: they decide


def test_decisions_follow_replace() -> None:
    ix = index(acl(T, "t", "User:a", Operation.READ))
    assert ix.authorize("User:a", "h", Operation.READ, T, "t")
    ix.replace({})
    assert not ix.authorize("User:a", "h", Operation.READ, T, "t")  # the cached answer went with it


def test_authorize_any_topic() -> None:
    ix = index(acl(T, "logs-", "User:a", Operation.WRITE, pattern=PRE))
    assert ix.authorize_any("User:a", "h", Operation.WRITE, T)
    assert not ix.authorize_any("User:b", "h", Operation.WRITE, T)
    ix = index(acl(T, "logs-", "User:a", Operation.WRITE, pattern=PRE), acl(T, "logs", "User:a", Operation.WRITE, DENY, pattern=PRE))
    assert not ix.authorize_any("User:a", "h", Operation.WRITE, T)
    ix = index(acl(T, "x", "User:a", Operation.WRITE), acl(T, "*", "User:a", Operation.ALL, DENY))
    assert not ix.authorize_any("User:a", "h", Operation.WRITE, T)


def test_authorized_operations_bits() -> None:
    ix = index(acl(T, "t", "User:a", Operation.READ))
    bits = authorized_operations(ix, "User:a", "h", T, "t")
    assert bits == (1 << Operation.READ.value) | (1 << Operation.DESCRIBE.value)


def test_validation_refuses_what_kafka_refuses() -> None:
    with pytest.raises(AclError):
        acl(T, "*", "User:a", Operation.READ, pattern=PRE).validate()
    with pytest.raises(AclError):
        acl(C, "other", "User:a", Operation.ALTER).validate()
    with pytest.raises(AclError):
        acl(T, "t", "alice", Operation.READ).validate()
    with pytest.raises(AclError):
        acl(G, "g", "User:a", Operation.WRITE).validate()  # groups have no Write
    with pytest.raises(AclError):
        acl(T, "t", "User:a", Operation.ANY).validate()


def test_filters() -> None:
    a = acl(T, "orders", "User:a", Operation.READ)
    p = acl(T, "ord", "User:b", Operation.WRITE, pattern=PRE)
    w = acl(T, "*", "User:c", Operation.DESCRIBE)
    g = acl(G, "orders", "User:a", Operation.READ)
    ix = index(a, p, w, g)
    assert set(ix.matching(AclBindingFilter())) == {a, p, w, g}
    assert set(ix.matching(AclBindingFilter(T, "orders", PatternType.ANY))) == {a}
    assert set(ix.matching(AclBindingFilter(T, "orders", PatternType.MATCH))) == {a, p, w}
    assert set(ix.matching(AclBindingFilter(principal="User:a"))) == {a, g}
    assert set(ix.matching(AclBindingFilter(T, pattern_type=PRE))) == {p}


def test_parse_names() -> None:
    assert Operation.parse("IdempotentWrite") is Operation.IDEMPOTENT_WRITE
    assert Operation.parse("describe-configs") is Operation.DESCRIBE_CONFIGS
    assert ResourceType.parse("TransactionalId") is ResourceType.TRANSACTIONAL_ID
    assert ResourceType.TRANSACTIONAL_ID.title == "TransactionalId"
    assert Operation.CLUSTER_ACTION.title == "ClusterAction"
    assert PatternType.PREFIXED.title == "PREFIXED"
    with pytest.raises(AclError):
        Operation.parse("Fly")
