"""The ACL authorizer with real clients: a permission matrix.

One broker with ``authorizer.class.name=kafka.security.authorizer.AclAuthorizer`` (Kafka's own
class name), SASL/PLAIN users ``admin`` (a super user), ``alice``, ``bob`` and ``carol``, and a
PLAINTEXT listener whose clients are ``User:ANONYMOUS``.  ACLs are made through confluent-kafka's
AdminClient (CreateAcls as a Kafka tool sends it).  For each operation a principal with the ACL
succeeds, one without gets Kafka's error code, and the super user then checks that nothing was
written or changed.
"""

from __future__ import annotations

import contextlib
import io
import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from odradek.testing import BrokerProcess  # noqa: E402

USERS = ("admin", "alice", "bob", "carol")
JAAS = "org.apache.kafka.common.security.plain.PlainLoginModule required " + " ".join(
    f'user_{u}="{u}-secret"' for u in USERS
) + ";"
T = 20.0  # seconds any single client call may take


def _broker(path: Path, **extra: object) -> BrokerProcess:
    return BrokerProcess(
        path,
        listeners="SASL_PLAINTEXT://127.0.0.1:0,PLAINTEXT://127.0.0.1:0",
        overrides={
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": "User:admin",
            "offsets.topic.num.partitions": 1,
            "group.initial.rebalance.delay.ms": 0,  # a group's first join is not held back 3 s
            **extra,
        },
        log_level="INFO,odradek.authorizer=DEBUG",
    ).start()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = _broker(tmp_path_factory.mktemp("authz") / "data")
    try:
        yield b
    finally:
        _ADMINS.clear()  # the clients go before the broker: no reconnecting to a stopped broker
        b.stop()


def conf(broker: BrokerProcess, user: str | None) -> dict[str, Any]:
    """librdkafka settings for ``user`` over SASL/PLAIN, or None: PLAINTEXT (ANONYMOUS)."""
    if user is None:
        return {"bootstrap.servers": broker.bootstrap_of("PLAINTEXT")}
    return {
        "bootstrap.servers": broker.bootstrap_of("SASL_PLAINTEXT"),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": user,
        "sasl.password": f"{user}-secret",
    }


_ADMINS: dict[tuple[str, str | None], AdminClient] = {}


def admin(broker: BrokerProcess, user: str | None = "admin") -> AdminClient:
    """One AdminClient per broker and user, kept (a dropped client cancels its futures)."""
    key = (broker.bootstrap, user)
    if key not in _ADMINS:
        _ADMINS[key] = AdminClient(conf(broker, user))
    return _ADMINS[key]


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def allow(broker: BrokerProcess, rtype: ResourceType, rname: str, principal: str, *ops: AclOperation,
          pattern: ResourcePatternType = ResourcePatternType.LITERAL,
          permission: AclPermissionType = AclPermissionType.ALLOW) -> None:
    bindings = [AclBinding(rtype, rname, pattern, principal, "*", op, permission) for op in ops]
    for f in admin(broker).create_acls(bindings, request_timeout=T).values():
        f.result(timeout=T)


def create_topic(broker: BrokerProcess, topic: str, partitions: int = 1) -> None:
    admin(broker).create_topics([NewTopic(topic, partitions, 1)], request_timeout=T)[topic].result(timeout=T)
    deadline = time.monotonic() + T
    while topic not in admin(broker).list_topics(timeout=T).topics and time.monotonic() < deadline:
        time.sleep(0.05)


def end_offset(broker: BrokerProcess, topic: str, partition: int = 0) -> int:
    c = Consumer({**conf(broker, "admin"), "group.id": "x"})
    try:
        return int(c.get_watermark_offsets(TopicPartition(topic, partition), timeout=T)[1])
    finally:
        c.close()


def produce(broker: BrokerProcess, user: str | None, topic: str, n: int = 5, **extra: Any) -> list[int]:
    """Produce ``n`` records; the error code of each delivery (0: delivered)."""
    codes: list[int] = []
    errors: list[int] = []
    p = Producer({**conf(broker, user), "message.timeout.ms": 10000, "error_cb": lambda e: errors.append(e.code()),
                  **extra})

    def done(err: Any, _msg: Any) -> None:
        codes.append(0 if err is None else err.code())

    try:
        for i in range(n):
            p.produce(topic, value=f"v{i}".encode(), on_delivery=done)
        p.flush(T)
    except (KafkaException, SystemError) as exc:  # a fatal error (an idempotent producer refused its producer id)
        fatal = _kafka_exception(exc)
        if fatal is None:
            raise
        return [fatal.args[0].code()]
    if errors and not codes:
        return errors
    return codes


def _kafka_exception(exc: BaseException) -> KafkaException | None:
    """The KafkaException ``exc`` is or was raised from.

    confluent-kafka raises a fatal error (from its error callback) as a KafkaException, but leaves that
    exception set while the same ``flush`` goes on to call the delivery callbacks of the purged records:
    whichever Python call comes first there fails with ``SystemError: ... returned a result with an exception
    set``, chained to the KafkaException (whether a delivery report comes after the fatal error in one
    ``flush`` is a matter of timing)."""
    seen: set[int] = set()
    e: BaseException | None = exc
    while e is not None and id(e) not in seen:
        if isinstance(e, KafkaException) and e.args and isinstance(e.args[0], KafkaError):
            return e
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return None


def denied(code: int, expected: int) -> bool:
    return code == expected


# -- produce ---------------------------------------------------------------------------------


def test_produce_needs_write(broker: BrokerProcess) -> None:
    topic = name("produce")
    create_topic(broker, topic)
    allow(broker, ResourceType.TOPIC, topic, "User:alice", AclOperation.WRITE)
    allow(broker, ResourceType.TOPIC, topic, "User:bob", AclOperation.DESCRIBE)  # sees it, may not write
    assert produce(broker, "alice", topic) == [0] * 5
    codes = produce(broker, "bob", topic)
    assert codes and set(codes) == {KafkaError.TOPIC_AUTHORIZATION_FAILED}
    assert end_offset(broker, topic) == 5  # bob wrote nothing


def test_idempotent_produce_needs_idempotent_write_or_write(broker: BrokerProcess) -> None:
    topic = name("idem")
    create_topic(broker, topic)
    allow(broker, ResourceType.TOPIC, topic, "User:alice", AclOperation.WRITE)
    allow(broker, ResourceType.TOPIC, topic, "User:carol", AclOperation.READ)
    assert produce(broker, "alice", topic, **{"enable.idempotence": True}) == [0] * 5
    # carol may read the topic but write nothing anywhere: InitProducerId is refused
    codes = produce(broker, "carol", topic, **{"enable.idempotence": True})
    assert codes and set(codes) & {KafkaError.CLUSTER_AUTHORIZATION_FAILED, KafkaError._FATAL}, codes
    assert end_offset(broker, topic) == 5


def test_produce_with_kafka_python(broker: BrokerProcess) -> None:
    kafka = pytest.importorskip("kafka")
    from kafka.errors import TopicAuthorizationFailedError

    topic = name("kp")
    create_topic(broker, topic)
    allow(broker, ResourceType.TOPIC, topic, "User:alice", AclOperation.WRITE)

    def producer(user: str) -> Any:
        return kafka.KafkaProducer(
            bootstrap_servers=broker.bootstrap_of("SASL_PLAINTEXT"), security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="PLAIN", sasl_plain_username=user, sasl_plain_password=f"{user}-secret",
            max_block_ms=10000, request_timeout_ms=10000,
        )

    p = producer("alice")
    p.send(topic, b"ok").get(timeout=T)
    p.close()
    p = producer("bob")
    with pytest.raises(TopicAuthorizationFailedError):
        p.send(topic, b"no").get(timeout=T)
    p.close()
    assert end_offset(broker, topic) == 1


# -- consume, groups and commits ---------------------------------------------------------------


def consume(broker: BrokerProcess, user: str, topic: str, group: str, want: int) -> tuple[int, int | None]:
    """(records read, the first error code) of a group consumer that reads until ``want``
    records or an error."""
    c = Consumer({**conf(broker, user), "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})
    c.subscribe([topic])
    got, error = 0, None
    deadline = time.monotonic() + T
    try:
        while got < want and error is None and time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                if m.error().code() != KafkaError._PARTITION_EOF:
                    error = m.error().code()
                continue
            got += 1
        if got and error is None:
            c.commit(asynchronous=False)
    except KafkaException as exc:
        error = exc.args[0].code()
    finally:
        c.close()
    return got, error


def committed(broker: BrokerProcess, group: str, topic: str) -> int:
    c = Consumer({**conf(broker, "admin"), "group.id": group})
    try:
        return int(c.committed([TopicPartition(topic, 0)], timeout=T)[0].offset)
    finally:
        c.close()


def test_consume_in_a_group_needs_read_on_group_and_topic(broker: BrokerProcess) -> None:
    topic, group = name("consume"), name("group")
    create_topic(broker, topic)
    assert produce(broker, "admin", topic, 3) == [0] * 3
    for user in ("alice", "bob"):
        allow(broker, ResourceType.TOPIC, topic, f"User:{user}", AclOperation.READ)
    allow(broker, ResourceType.GROUP, group, "User:alice", AclOperation.READ)
    allow(broker, ResourceType.GROUP, group, "User:carol", AclOperation.READ)
    assert consume(broker, "alice", topic, group, 3) == (3, None)
    assert committed(broker, group, topic) == 3
    # bob may read the topic, not use the group
    got, error = consume(broker, "bob", topic, group, 3)
    assert (got, error) == (0, KafkaError.GROUP_AUTHORIZATION_FAILED)
    # carol may use the group, not read the topic
    got, error = consume(broker, "carol", topic, group, 3)
    assert got == 0 and error == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert committed(broker, group, topic) == 3


def test_commit_needs_read_on_group(broker: BrokerProcess) -> None:
    topic, group = name("commit"), name("cgroup")
    create_topic(broker, topic)
    allow(broker, ResourceType.TOPIC, topic, "User:alice", AclOperation.READ)
    allow(broker, ResourceType.TOPIC, topic, "User:bob", AclOperation.READ)
    allow(broker, ResourceType.GROUP, group, "User:alice", AclOperation.READ)
    allow(broker, ResourceType.GROUP, group, "User:bob", AclOperation.DESCRIBE)

    def commit(user: str, offset: int) -> int:
        c = Consumer({**conf(broker, user), "group.id": group})
        try:
            res = c.commit(offsets=[TopicPartition(topic, 0, offset)], asynchronous=False)
            return int(res[0].error.code()) if res and res[0].error else 0
        except KafkaException as exc:
            return int(exc.args[0].code())
        finally:
            c.close()

    assert commit("alice", 7) == 0
    assert commit("bob", 9) == KafkaError.GROUP_AUTHORIZATION_FAILED
    assert committed(broker, group, topic) == 7


def test_list_and_describe_groups(broker: BrokerProcess) -> None:
    topic, group = name("lg"), name("listed")
    create_topic(broker, topic)
    assert produce(broker, "admin", topic, 1) == [0]
    assert consume(broker, "admin", topic, group, 1) == (1, None)
    allow(broker, ResourceType.GROUP, group, "User:alice", AclOperation.DESCRIBE)

    def listed(user: str) -> set[str]:
        res = admin(broker, user).list_consumer_groups(request_timeout=T).result(timeout=T)
        return {g.group_id for g in res.valid}

    assert group in listed("alice")
    assert group in listed("admin")
    assert group not in listed("bob")
    desc = admin(broker, "alice").describe_consumer_groups([group], request_timeout=T)[group].result(timeout=T)
    assert desc.group_id == group
    with pytest.raises(KafkaException) as info:
        admin(broker, "bob").describe_consumer_groups([group], request_timeout=T)[group].result(timeout=T)
    assert info.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED


# -- topics, partitions, records, configs ---------------------------------------------------


def test_create_and_delete_topics(broker: BrokerProcess) -> None:
    mine = name("alice-own")
    allow(broker, ResourceType.TOPIC, "alice-", "User:alice", AclOperation.CREATE, AclOperation.DELETE,
          pattern=ResourcePatternType.PREFIXED)
    admin(broker, "alice").create_topics([NewTopic(mine, 1, 1)], request_timeout=T)[mine].result(timeout=T)
    theirs = name("bob-own")
    with pytest.raises(KafkaException) as info:
        admin(broker, "bob").create_topics([NewTopic(theirs, 1, 1)], request_timeout=T)[theirs].result(timeout=T)
    assert info.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    topics = admin(broker).list_topics(timeout=T).topics
    assert mine in topics and theirs not in topics
    with pytest.raises(KafkaException) as info:
        admin(broker, "bob").delete_topics([mine], request_timeout=T)[mine].result(timeout=T)
    assert info.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert mine in admin(broker).list_topics(timeout=T).topics
    admin(broker, "alice").delete_topics([mine], request_timeout=T)[mine].result(timeout=T)


def test_create_partitions_needs_alter(broker: BrokerProcess) -> None:
    topic = name("parts")
    create_topic(broker, topic)
    allow(broker, ResourceType.TOPIC, topic, "User:alice", AclOperation.ALTER)
    with pytest.raises(KafkaException) as info:
        admin(broker, "bob").create_partitions([NewPartitions(topic, 3)], request_timeout=T)[topic].result(timeout=T)
    assert info.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert len(admin(broker).list_topics(topic, timeout=T).topics[topic].partitions) == 1
    admin(broker, "alice").create_partitions([NewPartitions(topic, 2)], request_timeout=T)[topic].result(timeout=T)
    assert len(admin(broker).list_topics(topic, timeout=T).topics[topic].partitions) == 2


def test_delete_records_needs_delete(broker: BrokerProcess) -> None:
    topic = name("records")
    create_topic(broker, topic)
    assert produce(broker, "admin", topic, 4) == [0] * 4
    allow(broker, ResourceType.TOPIC, topic, "User:alice", AclOperation.DELETE)
    allow(broker, ResourceType.TOPIC, topic, "User:bob", AclOperation.DESCRIBE)
    tp = TopicPartition(topic, 0, 2)
    res = admin(broker, "bob").delete_records([tp], request_timeout=T)
    with pytest.raises(KafkaException) as info:
        next(iter(res.values())).result(timeout=T)
    assert info.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    c = Consumer({**conf(broker, "admin"), "group.id": "x"})
    assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=T)[0] == 0
    next(iter(admin(broker, "alice").delete_records([tp], request_timeout=T).values())).result(timeout=T)
    assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=T)[0] == 2
    c.close()


def test_describe_and_alter_configs(broker: BrokerProcess) -> None:
    topic = name("configs")
    create_topic(broker, topic)
    allow(broker, ResourceType.TOPIC, topic, "User:alice", AclOperation.ALTER_CONFIGS)
    allow(broker, ResourceType.TOPIC, topic, "User:bob", AclOperation.DESCRIBE_CONFIGS)

    def retention(user: str) -> str:
        res = ConfigResource(ResourceType.TOPIC, topic)
        return str(admin(broker, user).describe_configs([res], request_timeout=T)[res].result(timeout=T)[
            "retention.ms"].value)

    def alter(user: str, value: str) -> None:
        res = ConfigResource(ResourceType.TOPIC, topic, set_config={"retention.ms": value})
        admin(broker, user).alter_configs([res], request_timeout=T)[res].result(timeout=T)

    before = retention("bob")  # bob may describe (AlterConfigs implies DescribeConfigs for alice)
    with pytest.raises(KafkaException) as info:
        alter("bob", "1000")
    assert info.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    assert retention("admin") == before
    alter("alice", "123456")
    assert retention("alice") == "123456"
    with pytest.raises(KafkaException) as info:
        retention("carol")
    assert info.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    broker_res = ConfigResource(ResourceType.BROKER, "0")
    with pytest.raises(KafkaException) as info:
        admin(broker, "bob").describe_configs([broker_res], request_timeout=T)[broker_res].result(timeout=T)
    assert info.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED


# -- metadata, patterns, deny, super users, anonymous -------------------------------------------


def test_metadata_lists_only_describable_topics(broker: BrokerProcess) -> None:
    seen, hidden = name("seen"), name("hidden")
    create_topic(broker, seen)
    create_topic(broker, hidden)
    allow(broker, ResourceType.TOPIC, seen, "User:carol", AclOperation.DESCRIBE)
    topics = admin(broker, "carol").list_topics(timeout=T).topics
    assert seen in topics and hidden not in topics
    assert "__consumer_offsets" not in topics
    everything = admin(broker, "admin").list_topics(timeout=T).topics
    assert {seen, hidden} <= set(everything)
    # named: the unauthorized topic's existence is not disclosed
    md = admin(broker, "carol").list_topics(hidden, timeout=T)
    assert md.topics[hidden].error is not None
    assert md.topics[hidden].error.code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_prefixed_wildcard_and_deny(broker: BrokerProcess) -> None:
    base = name("pfx")
    create_topic(broker, f"{base}-a")
    create_topic(broker, f"{base}-b")
    allow(broker, ResourceType.TOPIC, f"{base}-", "User:alice", AclOperation.WRITE,
          pattern=ResourcePatternType.PREFIXED)
    allow(broker, ResourceType.TOPIC, "*", "User:bob", AclOperation.WRITE)
    allow(broker, ResourceType.TOPIC, f"{base}-b", "User:bob", AclOperation.WRITE,
          permission=AclPermissionType.DENY)
    assert produce(broker, "alice", f"{base}-a", 2) == [0, 0]
    assert produce(broker, "alice", f"{base}-b", 2) == [0, 0]
    assert produce(broker, "bob", f"{base}-a", 2) == [0, 0]  # the wildcard
    assert set(produce(broker, "bob", f"{base}-b", 2)) == {KafkaError.TOPIC_AUTHORIZATION_FAILED}  # DENY wins
    assert end_offset(broker, f"{base}-a") == 4
    assert end_offset(broker, f"{base}-b") == 2
    # the super user is allowed whatever the ACLs say
    allow(broker, ResourceType.TOPIC, f"{base}-b", "User:admin", AclOperation.ALL, permission=AclPermissionType.DENY)
    assert produce(broker, "admin", f"{base}-b", 1) == [0]
    # remove bob's wildcard: his writes to -a stop
    removal = admin(broker).delete_acls(
        [AclBindingFilter(ResourceType.TOPIC, "*", ResourcePatternType.LITERAL, "User:bob", None,
                          AclOperation.ANY, AclPermissionType.ANY)], request_timeout=T,
    )
    removed = [b for f in removal.values() for b in f.result(timeout=T)]
    assert [(b.principal, b.name, b.operation) for b in removed] == [("User:bob", "*", AclOperation.WRITE)]
    assert set(produce(broker, "bob", f"{base}-a", 1)) == {KafkaError.TOPIC_AUTHORIZATION_FAILED}


def test_anonymous_on_plaintext_needs_acls(broker: BrokerProcess) -> None:
    topic = name("anon")
    create_topic(broker, topic)
    assert set(produce(broker, None, topic, 2)) == {KafkaError.TOPIC_AUTHORIZATION_FAILED}
    allow(broker, ResourceType.TOPIC, topic, "User:ANONYMOUS", AclOperation.WRITE)
    assert produce(broker, None, topic, 2) == [0, 0]
    assert end_offset(broker, topic) == 2


def kp_describe_acls(bootstrap: str, user: str | None) -> Any:
    """DescribeAcls (every binding) through kafka-python's admin client, as ``user`` over SASL/PLAIN."""
    from kafka.admin import (
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as KpResourceType

    kw: dict[str, Any] = {}
    if user is not None:
        kw = {"security_protocol": "SASL_PLAINTEXT", "sasl_mechanism": "PLAIN", "sasl_plain_username": user,
              "sasl_plain_password": f"{user}-secret"}
    a = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=int(T * 1000), **kw)
    try:
        return a.describe_acls(ACLFilter(
            principal=None, host=None, operation=ACLOperation.ANY, permission_type=ACLPermissionType.ANY,
            resource_pattern=ResourcePatternFilter(KpResourceType.ANY, None, ACLResourcePatternType.ANY),
        ))
    finally:
        a.close()


def test_acl_apis_need_cluster_permissions(broker: BrokerProcess) -> None:
    # a binding of this test's own (the module's broker is per test worker: which other tests
    # ran on it, and left bindings, depends on how the tests were spread over the workers)
    listable = name("acl-list")
    allow(broker, ResourceType.TOPIC, listable, "User:alice", AclOperation.READ)
    binding = AclBinding(ResourceType.TOPIC, "x", ResourcePatternType.LITERAL, "User:bob", "*", AclOperation.READ,
                         AclPermissionType.ALLOW)
    with pytest.raises(KafkaException) as info:
        admin(broker, "bob").create_acls([binding], request_timeout=T)[binding].result(timeout=T)
    assert info.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    # DescribeAcls through kafka-python: librdkafka (2.16) drops DescribeAcls' top-level error code
    from kafka.errors import ClusterAuthorizationFailedError

    with pytest.raises(ClusterAuthorizationFailedError):
        kp_describe_acls(broker.bootstrap_of("SASL_PLAINTEXT"), "bob")
    flt = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None, AclOperation.ANY,
                           AclPermissionType.ANY)
    listed = admin(broker).describe_acls(flt, request_timeout=T).result(timeout=T)
    assert any(b.principal == "User:alice" and b.name == listable for b in listed)
    assert not any(b.principal == "User:bob" and b.name == "x" for b in listed)


def test_audit_log(broker: BrokerProcess) -> None:
    topic = name("audit")
    create_topic(broker, topic)
    allow(broker, ResourceType.TOPIC, topic, "User:bob", AclOperation.DESCRIBE)
    produce(broker, "bob", topic, 1)
    line = broker.wait_for_log("User:bob is Denied Operation = Write", topic, timeout=T)
    assert "from host = 127.0.0.1 on resource = Topic:LITERAL:" in line
    assert "for request = Produce" in line


def test_allow_everyone_if_no_acl_found(tmp_path: Path) -> None:
    b = _broker(tmp_path / "open", **{"allow.everyone.if.no.acl.found": "true"})
    try:
        open_topic, guarded = name("open"), name("guarded")
        create_topic(b, open_topic)
        create_topic(b, guarded)
        allow(b, ResourceType.TOPIC, guarded, "User:alice", AclOperation.WRITE)
        assert produce(b, "bob", open_topic, 1) == [0]  # no ACL on it: everyone
        assert produce(b, None, open_topic, 1) == [0]
        assert set(produce(b, "bob", guarded, 1)) == {KafkaError.TOPIC_AUTHORIZATION_FAILED}  # ACLs decide
        assert produce(b, "alice", guarded, 1) == [0]
    finally:
        _ADMINS.clear()
        b.stop()


def test_no_authorizer_answers_security_disabled(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "plain").start()
    try:
        a = _ADMINS[(b.bootstrap, "-")] = AdminClient({"bootstrap.servers": b.bootstrap})
        from kafka.errors import SecurityDisabledError

        with pytest.raises(SecurityDisabledError):
            kp_describe_acls(b.bootstrap, None)
        binding = AclBinding(ResourceType.TOPIC, "x", ResourcePatternType.LITERAL, "User:a", "*", AclOperation.READ,
                             AclPermissionType.ALLOW)
        with pytest.raises(KafkaException) as info:
            a.create_acls([binding], request_timeout=T)[binding].result(timeout=T)
        assert info.value.args[0].code() == KafkaError.SECURITY_DISABLED
    finally:
        _ADMINS.clear()
        b.stop()


def test_odradek_cli_and_typed_errors(broker: BrokerProcess, tmp_path: Path) -> None:
    from odradek.cli.__main__ import main
    from odradek.client import Admin
    from odradek.client import Producer as OProducer
    from odradek.client.admin import AdminError
    from odradek.errors import ClusterAuthorizationError, TopicAuthorizationError

    cfg = tmp_path / "admin.properties"
    cfg.write_text(
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.username=admin\nsasl.password=admin-secret\n"
    )
    topic = name("cli")
    create_topic(broker, topic)
    common = ["--bootstrap-server", broker.bootstrap_of("SASL_PLAINTEXT"), "--command-config", str(cfg)]
    assert main(["acls", *common, "add", "--allow-principal", "User:carol", "--producer", "--topic", topic]) == 0
    assert produce(broker, "carol", topic, 1) == [0]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["acls", *common, "list", "--topic", topic, "--output", "json"]) == 0
    rows = json.loads(out.getvalue())
    assert {(r["principal"], r["operation"]) for r in rows} == {
        ("User:carol", "Write"), ("User:carol", "Describe"), ("User:carol", "Create")
    }
    assert main(["acls", *common, "remove", "--allow-principal", "User:carol", "--operation", "Write",
                 "--topic", topic]) == 0
    assert set(produce(broker, "carol", topic, 1)) == {KafkaError.TOPIC_AUTHORIZATION_FAILED}
    # Odradek's client: denials are typed exceptions naming the resource.  carol may Describe the
    # topic now, not Write it (a plain producer) nor any topic (an idempotent one)
    sasl = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN", "sasl.username": "carol",
            "sasl.password": "carol-secret", "bootstrap.servers": broker.bootstrap_of("SASL_PLAINTEXT")}
    with OProducer({**sasl, "enable.idempotence": False, "delivery.timeout.ms": 10000}) as p:
        with pytest.raises(TopicAuthorizationError) as err:
            p.send(topic, b"x").result(timeout=T)
        assert topic in str(err.value)
    with OProducer({**sasl, "delivery.timeout.ms": 10000}) as p, pytest.raises(ClusterAuthorizationError):
        p.send(topic, b"x").result(timeout=T)
    with Admin({**sasl}) as a, pytest.raises(AdminError) as failed:
        a.delete_topics([topic], timeout=T)
    assert isinstance(failed.value.errors[topic], TopicAuthorizationError)
    assert end_offset(broker, topic) == 1


def test_authorized_operations_kip_430(broker: BrokerProcess) -> None:
    """describe_topics / describe_cluster / describe_consumer_groups with
    include_authorized_operations answer what the principal may do (KIP-430)."""
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AclOperation as Op

    topic, group = name("ops"), name("opsgroup")
    create_topic(broker, topic)
    assert produce(broker, "admin", topic, 1) == [0]
    assert consume(broker, "admin", topic, group, 1) == (1, None)
    allow(broker, ResourceType.TOPIC, topic, "User:alice", Op.READ)
    allow(broker, ResourceType.GROUP, group, "User:alice", Op.DESCRIBE)
    a = admin(broker, "alice")
    desc = a.describe_topics(TopicCollection([topic]), include_authorized_operations=True, request_timeout=T)
    assert set(desc[topic].result(timeout=T).authorized_operations) == {Op.READ, Op.DESCRIBE}
    cluster = a.describe_cluster(include_authorized_operations=True, request_timeout=T).result(timeout=T)
    assert not cluster.authorized_operations  # alice has nothing on the cluster
    full = admin(broker).describe_cluster(include_authorized_operations=True, request_timeout=T).result(timeout=T)
    assert {Op.ALTER, Op.DESCRIBE, Op.CLUSTER_ACTION} <= set(full.authorized_operations)  # the super user
    g = a.describe_consumer_groups([group], include_authorized_operations=True, request_timeout=T)[group].result(
        timeout=T
    )
    assert set(g.authorized_operations) == {Op.DESCRIBE}
