"""Admin / AsyncAdmin against a real broker, cross-checked with confluent-kafka (librdkafka).

One broker process per module; each test uses topics of its own.
"""

from __future__ import annotations

import asyncio
import base64
import re
import socket
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin import ConfigResource as CKConfigResource
from confluent_kafka.admin import NewTopic as CKNewTopic

from odradek.client import (
    Admin,
    AdminError,
    AlterConfigOp,
    AsyncAdmin,
    ClientConfigError,
    ConfigResource,
    ConfigResourceType,
    NewPartitions,
    NewTopic,
)
from odradek.client.admin import ConfigSource
from odradek.errors import ErrorCode, KafkaError
from odradek.testing import BrokerProcess

OVERRIDES = {"num.partitions": 2, "group.initial.rebalance.delay.ms": 0}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("admin") / "data", overrides=OVERRIDES)
    proc.start()
    try:
        yield proc
    finally:
        _CK.pop(proc.bootstrap, None)  # destroyed with the broker, not left reconnecting to it
        assert proc.stop() == 0, "".join(proc.stderr_lines[-40:])


@pytest.fixture(scope="module")
def admin(broker: BrokerProcess) -> Iterator[Admin]:
    with Admin(bootstrap_servers=broker.bootstrap, default_api_timeout_ms=20000) as a:
        yield a


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    base = re.sub(r"[^A-Za-z0-9._-]+", "-", request.node.name).strip("-")[:80]
    return f"{base}-{uuid.uuid4().hex[:6]}"


_CK: dict[str, AdminClient] = {}


def _ck(broker: BrokerProcess) -> AdminClient:
    """confluent's AdminClient (kept: librdkafka fails the futures of a client being destroyed)."""
    if broker.bootstrap not in _CK:
        _CK[broker.bootstrap] = AdminClient({"bootstrap.servers": broker.bootstrap})
    return _CK[broker.bootstrap]


def _produce(broker: BrokerProcess, topic: str, partition: int, timestamps: list[int]) -> None:
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    failed: list[object] = []

    def on_delivery(err: object, _msg: object) -> None:
        if err is not None:
            failed.append(err)

    for i, ts in enumerate(timestamps):
        p.produce(topic, value=b"v%d" % i, partition=partition, timestamp=ts, on_delivery=on_delivery)
    assert p.flush(15) == 0 and failed == []


def _ck_uuid(value: object) -> uuid.UUID:
    """librdkafka prints topic ids in standard base64 (Kafka's Java client: URL-safe)."""
    return uuid.UUID(bytes=base64.b64decode(str(value) + "=="))


def _code(exc: pytest.ExceptionInfo[KafkaError]) -> ErrorCode:
    return exc.value.code


# -- configuration and cluster -------------------------------------------------------------------


def test_configuration_styles(broker: BrokerProcess) -> None:
    with Admin({"bootstrap.servers": broker.bootstrap, "client.id": "a1"}) as a1:
        assert a1.config["client.id"] == "a1"
        assert a1.describe_cluster().brokers
    with Admin(bootstrap_servers=broker.bootstrap, request_timeout_ms=5000) as a2:
        assert a2.config["request.timeout.ms"] == 5000
        assert a2.describe_cluster().brokers
    with pytest.raises(ClientConfigError, match=r"linger\.ms"):
        Admin(bootstrap_servers=broker.bootstrap, linger_ms=5)


def test_describe_cluster(broker: BrokerProcess, admin: Admin) -> None:
    desc = admin.describe_cluster()
    ck = _ck(broker).describe_cluster().result(10)
    assert desc.cluster_id == ck.cluster_id
    assert desc.controller is not None and desc.controller_id == ck.controller.id == 0
    assert [(b.id, b.host, b.port) for b in desc.brokers] == [(n.id, n.host, n.port) for n in ck.nodes]
    assert f"{desc.brokers[0].host}:{desc.brokers[0].port}" == broker.bootstrap


def test_closed_admin_refuses_work(broker: BrokerProcess) -> None:
    a = Admin(bootstrap_servers=broker.bootstrap)
    a.close()
    a.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        a.list_topics()


# -- topics --------------------------------------------------------------------------------------


def test_create_describe_and_list_topics(broker: BrokerProcess, admin: Admin, topic: str) -> None:
    results = admin.create_topics([NewTopic(topic, 3, 1, {"retention.ms": 3_600_000, "cleanup.policy": "compact"})])
    r = results[topic]
    assert (r.name, r.num_partitions, r.replication_factor) == (topic, 3, 1)
    assert r.topic_id is not None
    assert r.configs["retention.ms"].value == "3600000"
    assert r.configs["retention.ms"].source == ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert r.configs["segment.bytes"].source == ConfigSource.DEFAULT_CONFIG

    desc = admin.describe_topics([topic])[topic]
    assert desc.topic_id == r.topic_id and not desc.internal
    assert [p.partition for p in desc.partitions] == [0, 1, 2]
    for p in desc.partitions:
        assert (p.leader, p.replicas, p.isr, p.error) == (0, [0], [0], None)
        assert p.leader_epoch >= 0
    assert desc.replication_factor == 1

    listing = admin.list_topics()
    assert listing[topic].topic_id == r.topic_id and not listing[topic].internal

    # librdkafka sees the same topic, partitions and id
    ck = _ck(broker)
    td = ck.describe_topics(TopicCollection([topic]))[topic].result(10)
    assert _ck_uuid(td.topic_id) == r.topic_id
    assert [(p.id, p.leader.id, [n.id for n in p.replicas], [n.id for n in p.isr]) for p in td.partitions] == [
        (i, 0, [0], [0]) for i in range(3)
    ]
    assert topic in ck.list_topics(timeout=10).topics


def test_create_topics_defaults_assignments_and_validate_only(admin: Admin, topic: str) -> None:
    defaults, placed, checked = f"{topic}-d", f"{topic}-a", f"{topic}-v"
    res = admin.create_topics([NewTopic(defaults), NewTopic(placed, assignments={0: [0], 1: [0], 2: [0]})])
    assert res[defaults].num_partitions == OVERRIDES["num.partitions"]
    assert res[placed].num_partitions == 3 and res[placed].replication_factor == 1
    described = admin.describe_topics([defaults, placed])
    assert list(described) == [defaults, placed]
    assert len(described[defaults].partitions) == 2
    assert [p.replicas for p in described[placed].partitions] == [[0], [0], [0]]

    v = admin.create_topics([NewTopic(checked, 4, 1)], validate_only=True)
    assert v[checked].num_partitions == 4
    assert checked not in admin.list_topics()
    with pytest.raises(KafkaError) as exc:
        admin.describe_topics([checked])
    assert _code(exc) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


@pytest.mark.parametrize(
    ("new", "code"),
    [
        (lambda t: NewTopic(t, 0, 1), ErrorCode.INVALID_PARTITIONS),
        (lambda t: NewTopic(t, 1, 3), ErrorCode.INVALID_REPLICATION_FACTOR),
        (lambda t: NewTopic(t, 1, 1, {"no.such.config": "1"}), ErrorCode.INVALID_CONFIG),
        (lambda t: NewTopic(t, 1, 1, {"retention.ms": "soon"}), ErrorCode.INVALID_CONFIG),
        (lambda t: NewTopic(t + " has spaces!", 1, 1), ErrorCode.INVALID_TOPIC_EXCEPTION),
        (lambda t: NewTopic(t, assignments={0: [7]}), ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        (lambda t: NewTopic(t, 2, 1, assignments={0: [0]}), ErrorCode.INVALID_REQUEST),
    ],
    ids=["partitions", "replication", "config-name", "config-value", "name", "assignment", "both"],
)
def test_create_topics_errors(admin: Admin, topic: str, new: object, code: ErrorCode) -> None:
    t0 = time.monotonic()
    with pytest.raises(KafkaError) as exc:
        admin.create_topics([new(topic)])  # type: ignore[operator]
    assert _code(exc) == code
    assert "create topic" in str(exc.value)
    assert time.monotonic() - t0 < 5  # final errors are not retried
    assert topic not in admin.list_topics()


def test_create_existing_topic_and_partial_failure(broker: BrokerProcess, admin: Admin, topic: str) -> None:
    admin.create_topics([NewTopic(topic, 1, 1)])
    with pytest.raises(KafkaError) as exc:
        admin.create_topics([NewTopic(topic, 1, 1)])
    assert _code(exc) == ErrorCode.TOPIC_ALREADY_EXISTS
    assert f"'{topic}' already exists" in str(exc.value)

    # confluent's AdminClient gets the same code for the same request
    fut = _ck(broker).create_topics([CKNewTopic(topic, 1, 1)])[topic]
    with pytest.raises(Exception) as ck_exc:
        fut.result(10)
    assert ck_exc.value.args[0].code() == ErrorCode.TOPIC_ALREADY_EXISTS

    fresh = f"{topic}-new"
    with pytest.raises(AdminError) as many:
        admin.create_topics([NewTopic(topic, 1, 1), NewTopic(fresh, 1, 1), NewTopic(f"{topic}-bad", 0, 1)])
    err = many.value
    assert isinstance(err, KafkaError) and err.code == ErrorCode.TOPIC_ALREADY_EXISTS
    assert {k: e.code for k, e in err.errors.items()} == {
        topic: ErrorCode.TOPIC_ALREADY_EXISTS,
        f"{topic}-bad": ErrorCode.INVALID_PARTITIONS,
    }
    assert list(err.results) == [fresh] and err.results[fresh].num_partitions == 1
    assert "1 more failed" in str(err)
    assert fresh in admin.list_topics()


def test_delete_topics(broker: BrokerProcess, admin: Admin, topic: str) -> None:
    admin.create_topics([NewTopic(topic, 2, 1), NewTopic(f"{topic}-2", 1, 1)])
    _produce(broker, topic, 0, [1000, 2000])
    admin.delete_topics([topic, f"{topic}-2"])
    listing = admin.list_topics()
    assert topic not in listing and f"{topic}-2" not in listing
    assert topic not in _ck(broker).list_topics(timeout=10).topics
    t0 = time.monotonic()
    with pytest.raises(KafkaError) as exc:
        admin.delete_topics([topic])
    assert _code(exc) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert time.monotonic() - t0 < 5
    # a topic of the same name is a new topic: new id, empty
    admin.create_topics([NewTopic(topic, 1, 1)])
    assert admin.list_offsets({(topic, 0): "latest"})[(topic, 0)].offset == 0


def test_internal_topics(broker: BrokerProcess, admin: Admin) -> None:
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "admin-internal"})
    try:
        c.committed([TopicPartition("any", 0)], 10)  # makes the group coordinator create __consumer_offsets
    finally:
        c.close()
    assert "__consumer_offsets" not in admin.list_topics()
    internal = admin.list_topics(include_internal=True)["__consumer_offsets"]
    assert internal.internal
    desc = admin.describe_topics(["__consumer_offsets"])["__consumer_offsets"]
    assert desc.internal and len(desc.partitions) == 50
    assert "__consumer_offsets" in admin.describe_topics()  # every topic
    with pytest.raises(KafkaError) as exc:
        admin.delete_topics(["__consumer_offsets"])
    assert _code(exc) == ErrorCode.INVALID_REQUEST


def test_describe_unknown_topics(admin: Admin, topic: str) -> None:
    admin.create_topics([NewTopic(topic, 1, 1)])
    t0 = time.monotonic()
    with pytest.raises(AdminError) as exc:
        admin.describe_topics([topic, f"{topic}-missing"])
    assert time.monotonic() - t0 < 5
    assert exc.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert list(exc.value.errors) == [f"{topic}-missing"] and list(exc.value.results) == [topic]
    assert admin.describe_topics(topic)[topic].name == topic  # one name as a plain string


# -- partitions ----------------------------------------------------------------------------------


def test_create_partitions(broker: BrokerProcess, admin: Admin, topic: str) -> None:
    admin.create_topics([NewTopic(topic, 1, 1)])
    admin.create_partitions({topic: 3})
    assert [p.partition for p in admin.describe_topics([topic])[topic].partitions] == [0, 1, 2]
    admin.create_partitions({topic: NewPartitions(4, [[0]])})
    admin.create_partitions({topic: 6}, validate_only=True)
    assert len(admin.describe_topics([topic])[topic].partitions) == 4
    # librdkafka can write to the new partition
    _produce(broker, topic, 3, [5000])
    assert admin.list_offsets({(topic, 3): "latest"})[(topic, 3)].offset == 1
    assert len(_ck(broker).list_topics(topic, timeout=10).topics[topic].partitions) == 4

    changes: list[tuple[dict[str, int | NewPartitions], ErrorCode]] = [
        ({topic: 4}, ErrorCode.INVALID_PARTITIONS),
        ({topic: 2}, ErrorCode.INVALID_PARTITIONS),
        ({topic: NewPartitions(6, [[0]])}, ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        ({topic: NewPartitions(5, [[9]])}, ErrorCode.INVALID_REPLICA_ASSIGNMENT),
        ({f"{topic}-missing": 2}, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    ]
    for change, code in changes:
        with pytest.raises(KafkaError) as exc:
            admin.create_partitions(change)
        assert _code(exc) == code, change
    assert len(admin.describe_topics([topic])[topic].partitions) == 4


# -- configs -------------------------------------------------------------------------------------


def test_describe_topic_configs_matches_confluent(broker: BrokerProcess, admin: Admin, topic: str) -> None:
    admin.create_topics([NewTopic(topic, 1, 1, {"retention.ms": 120000})])
    res = ConfigResource("topic", topic)
    entries = admin.describe_configs([res])[res]
    rm = entries["retention.ms"]
    assert (rm.value, rm.source, rm.read_only, rm.type) == ("120000", ConfigSource.DYNAMIC_TOPIC_CONFIG, False, "long")
    assert rm.synonyms[0].name == "retention.ms" and rm.synonyms[0].source == ConfigSource.DYNAMIC_TOPIC_CONFIG
    assert [s.name for s in rm.synonyms[1:]] == ["log.retention.hours"]
    sb = entries["segment.bytes"]
    assert sb.is_default and sb.synonyms[0].name == "log.segment.bytes"
    assert entries["cleanup.policy"].type == "list"

    ck = _ck(broker).describe_configs([CKConfigResource("topic", topic)])
    ck_entries = next(iter(ck.values())).result(10)
    assert set(ck_entries) == set(entries)
    for name, e in entries.items():
        assert ck_entries[name].value == e.value, name
        assert int(ck_entries[name].source) == int(e.source), name
        assert ck_entries[name].is_read_only == e.read_only, name

    only = admin.describe_configs([res], keys=["retention.ms", "segment.ms"])[res]
    assert sorted(only) == ["retention.ms", "segment.ms"]
    bare = admin.describe_configs([res], include_synonyms=False)[res]
    assert bare["retention.ms"].synonyms == []


def test_describe_broker_configs(broker: BrokerProcess, admin: Admin) -> None:
    res = ConfigResource(ConfigResourceType.BROKER, 0)
    assert res == ConfigResource("broker", "0")
    entries = admin.describe_configs([res])[res]
    assert entries["broker.id"].value == "0" and entries["broker.id"].read_only
    assert entries["num.partitions"].value == "2"
    assert entries["num.partitions"].source == ConfigSource.STATIC_BROKER_CONFIG
    assert entries["log.retention.bytes"].source == ConfigSource.DEFAULT_CONFIG
    ck = next(iter(_ck(broker).describe_configs([CKConfigResource("broker", "0")]).values())).result(10)
    assert ck["num.partitions"].value == "2"

    t0 = time.monotonic()
    with pytest.raises(KafkaError) as exc:
        admin.describe_configs([ConfigResource("broker", "99")])
    assert _code(exc) == ErrorCode.BROKER_NOT_AVAILABLE
    assert time.monotonic() - t0 < 5
    with pytest.raises(KafkaError) as exc:
        admin.describe_configs([ConfigResource("topic", "no-such-topic-here")])
    assert _code(exc) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    with pytest.raises(ValueError):
        ConfigResource("planet", "x")


def test_incremental_alter_configs(broker: BrokerProcess, admin: Admin, topic: str) -> None:
    admin.create_topics([NewTopic(topic, 1, 1, {"segment.ms": 600000})])
    res = ConfigResource("topic", topic)
    admin.incremental_alter_configs(
        {
            res: [
                AlterConfigOp.set("retention.ms", 7200000),
                AlterConfigOp.append("cleanup.policy", "compact"),
                AlterConfigOp.delete("segment.ms"),
            ]
        }
    )
    entries = admin.describe_configs([res])[res]
    assert entries["retention.ms"].value == "7200000"
    assert entries["cleanup.policy"].value == "delete,compact"
    assert entries["segment.ms"].source == ConfigSource.DEFAULT_CONFIG

    # what Odradek's Admin set, librdkafka reads
    ck = next(iter(_ck(broker).describe_configs([CKConfigResource("topic", topic)]).values())).result(10)
    assert ck["retention.ms"].value == "7200000" and ck["cleanup.policy"].value == "delete,compact"

    admin.incremental_alter_configs({res: [AlterConfigOp("cleanup.policy", "delete", "SUBTRACT")]})
    admin.incremental_alter_configs({res: {"max.message.bytes": 4096, "retention.ms": None}})  # SET / DELETE
    entries = admin.describe_configs([res], keys=["cleanup.policy", "max.message.bytes", "retention.ms"])[res]
    assert entries["cleanup.policy"].value == "compact"
    assert entries["max.message.bytes"].value == "4096"
    assert entries["retention.ms"].is_default

    admin.incremental_alter_configs({res: [AlterConfigOp.set("retention.ms", 1)]}, validate_only=True)
    assert admin.describe_configs([res], keys=["retention.ms"])[res]["retention.ms"].is_default

    for ops, code in [
        ([AlterConfigOp.set("no.such.config", "1")], ErrorCode.INVALID_CONFIG),
        ([AlterConfigOp.set("retention.ms", "forever")], ErrorCode.INVALID_CONFIG),
        ([AlterConfigOp.append("retention.ms", "1")], ErrorCode.INVALID_CONFIG),
    ]:
        with pytest.raises(KafkaError) as exc:
            admin.incremental_alter_configs({res: ops})
        assert _code(exc) == code, ops
    with pytest.raises(KafkaError) as exc:
        admin.incremental_alter_configs({ConfigResource("topic", f"{topic}-missing"): {"retention.ms": 1}})
    assert _code(exc) == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_alter_configs_replaces_all_overrides(admin: Admin, topic: str) -> None:
    admin.create_topics([NewTopic(topic, 1, 1, {"segment.ms": 600000, "retention.ms": 1000})])
    res = ConfigResource("topic", topic)
    admin.alter_configs({res: {"retention.ms": 2000}})
    entries = admin.describe_configs([res], keys=["retention.ms", "segment.ms"])[res]
    assert entries["retention.ms"].value == "2000"
    assert entries["segment.ms"].is_default  # not in the new set: back to the default
    with pytest.raises(KafkaError) as exc:
        admin.alter_configs({res: {"retention.ms": "x"}})
    assert _code(exc) == ErrorCode.INVALID_CONFIG
    admin.alter_configs({res: {}}, validate_only=True)
    assert admin.describe_configs([res], keys=["retention.ms"])[res]["retention.ms"].value == "2000"


def test_alter_broker_configs(broker: BrokerProcess, admin: Admin) -> None:
    res = ConfigResource("broker", "0")
    admin.incremental_alter_configs({res: [AlterConfigOp.set("log.retention.bytes", 123456789)]})
    try:
        e = admin.describe_configs([res], keys=["log.retention.bytes"])[res]["log.retention.bytes"]
        assert (e.value, e.source) == ("123456789", ConfigSource.DYNAMIC_BROKER_CONFIG)
        ck = next(iter(_ck(broker).describe_configs([CKConfigResource("broker", "0")]).values())).result(10)
        assert ck["log.retention.bytes"].value == "123456789"
    finally:
        admin.incremental_alter_configs({res: [AlterConfigOp.delete("log.retention.bytes")]})
    e = admin.describe_configs([res], keys=["log.retention.bytes"])[res]["log.retention.bytes"]
    assert (e.value, e.source) == ("-1", ConfigSource.DEFAULT_CONFIG)
    with pytest.raises(KafkaError) as exc:
        admin.incremental_alter_configs({res: [AlterConfigOp.set("broker.id", "5")]})
    assert _code(exc) == ErrorCode.INVALID_REQUEST  # read-only
    with pytest.raises(KafkaError) as exc:
        admin.incremental_alter_configs({res: [AlterConfigOp.set("no.such.broker.config", "5")]})
    assert _code(exc) == ErrorCode.INVALID_CONFIG


# -- offsets and records -------------------------------------------------------------------------


def test_list_offsets(broker: BrokerProcess, admin: Admin, topic: str) -> None:
    admin.create_topics([NewTopic(topic, 2, 1)])
    base = 1_700_000_000_000
    _produce(broker, topic, 0, [base + 1000 * i for i in range(5)] + [base + 500])  # max timestamp at offset 4
    res = admin.list_offsets(
        {
            (topic, 0): "earliest",
            (topic, 1): "latest",
        }
    )
    assert res[(topic, 0)].offset == 0 and res[(topic, 1)].offset == 0
    p = (topic, 0)
    assert admin.list_offsets({p: "latest"})[p] == (6, -1, res[p].leader_epoch)
    assert admin.list_offsets({p: "max_timestamp"})[p][:2] == (4, base + 4000)
    assert admin.list_offsets({p: base + 2500})[p][:2] == (3, base + 3000)
    assert admin.list_offsets({p: base})[p][:2] == (0, base)
    assert admin.list_offsets({p: base + 10_000})[p].offset == -1
    assert admin.list_offsets({p: "latest"}, isolation_level="read_committed")[p].offset == 6

    # the same answers as librdkafka's consumer
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": f"{topic}-g"})
    try:
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (0, 6)
        found = c.offsets_for_times([TopicPartition(topic, 0, base + 2500)], timeout=10)
        assert found[0].offset == admin.list_offsets({p: base + 2500})[p].offset
    finally:
        c.close()

    for spec, code in [
        ({(topic, 5): "latest"}, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ({(f"{topic}-missing", 0): "latest"}, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    ]:
        t0 = time.monotonic()
        with pytest.raises(KafkaError) as exc:
            admin.list_offsets(spec)
        assert _code(exc) == code and time.monotonic() - t0 < 5
    with pytest.raises(ValueError):
        admin.list_offsets({p: "newest"})


def test_delete_records(broker: BrokerProcess, admin: Admin, topic: str) -> None:
    admin.create_topics([NewTopic(topic, 2, 1)])
    _produce(broker, topic, 0, [1000 + i for i in range(10)])
    _produce(broker, topic, 1, [1000 + i for i in range(3)])
    assert admin.delete_records({(topic, 0): 4, (topic, 1): -1}) == {(topic, 0): 4, (topic, 1): 3}
    offsets = admin.list_offsets({(topic, 0): "earliest", (topic, 1): "earliest"})
    assert offsets[(topic, 0)].offset == 4 and offsets[(topic, 1)].offset == 3

    # a consumer from the beginning starts at the new low watermark
    c = Consumer(
        {"bootstrap.servers": broker.bootstrap, "group.id": f"{topic}-g", "auto.offset.reset": "earliest"}
    )
    try:
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10) == (4, 10)
        c.assign([TopicPartition(topic, 0)])
        seen: list[int] = []
        deadline = time.monotonic() + 20
        while len(seen) < 6 and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                offset = m.offset()
                assert offset is not None
                seen.append(offset)
        assert seen == list(range(4, 10))
    finally:
        c.close()

    assert admin.delete_records({(topic, 0): 4}) == {(topic, 0): 4}  # nothing more to delete
    for before, code in [
        ({(topic, 0): 11}, ErrorCode.OFFSET_OUT_OF_RANGE),
        ({(topic, 7): 0}, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ({(f"{topic}-missing", 0): 0}, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    ]:
        with pytest.raises(KafkaError) as exc:
            admin.delete_records(before)
        assert _code(exc) == code
    with pytest.raises(AdminError) as many:
        admin.delete_records({(topic, 0): 6, (topic, 1): 9})
    assert many.value.results == {(topic, 0): 6}
    assert many.value.errors[(topic, 1)].code == ErrorCode.OFFSET_OUT_OF_RANGE


# -- asyncio, retries, timeouts ------------------------------------------------------------------


def test_async_admin(broker: BrokerProcess, topic: str) -> None:
    async def main() -> None:
        async with AsyncAdmin({"bootstrap.servers": broker.bootstrap}) as admin:
            created = await admin.create_topics([NewTopic(topic, 2, 1)])
            assert created[topic].num_partitions == 2
            res = ConfigResource("topic", topic)
            # several operations at once on one client
            desc, cluster, offsets, _ = await asyncio.gather(
                admin.describe_topics([topic]),
                admin.describe_cluster(),
                admin.list_offsets({(topic, 0): "earliest", (topic, 1): "latest"}),
                admin.incremental_alter_configs({res: {"retention.ms": 5000}}),
            )
            assert len(desc[topic].partitions) == 2 and cluster.brokers[0].id == 0
            assert offsets == {(topic, 0): (0, -1, 0), (topic, 1): (0, -1, 0)}
            assert (await admin.describe_configs([res], keys=["retention.ms"]))[res]["retention.ms"].value == "5000"
            await admin.create_partitions({topic: 3})
            assert topic in await admin.list_topics()
            with pytest.raises(KafkaError) as exc:
                await admin.create_topics([NewTopic(topic, 1, 1)])
            assert exc.value.code == ErrorCode.TOPIC_ALREADY_EXISTS
            await admin.delete_topics([topic])
            assert topic not in await admin.list_topics()

    asyncio.run(main())


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def test_unreachable_cluster_times_out() -> None:
    port = _free_port()
    with Admin(bootstrap_servers=f"127.0.0.1:{port}", retry_backoff_ms=50) as admin:
        t0 = time.monotonic()
        with pytest.raises(KafkaError) as exc:
            admin.list_topics(timeout=1.0)
        elapsed = time.monotonic() - t0
    assert exc.value.code == ErrorCode.REQUEST_TIMED_OUT
    assert "timed out after 1 s" in str(exc.value) and "cannot connect" in str(exc.value)
    assert 0.9 < elapsed < 5


def test_deadline_cut_attempt_keeps_the_earlier_error() -> None:
    """The attempt the deadline cuts short (a bare TimeoutError) does not hide why the earlier
    ones failed; with nothing earlier, the timeout itself is named."""
    from odradek.client.admin._base import _Pending

    state: _Pending[str, int] = _Pending({"a": None, "b": None}, lambda k: f"item {k}")
    state.failed("a", ConnectionRefusedError("cannot connect to 127.0.0.1:1"))
    state.failed("a", TimeoutError())
    state.failed("b", TimeoutError())
    state.give_up(1.0)
    assert str(state.errors["a"]).endswith("item a: timed out after 1 s: cannot connect to 127.0.0.1:1")
    assert str(state.errors["b"]).endswith("item b: timed out after 1 s: TimeoutError")
    assert all(e.code == ErrorCode.REQUEST_TIMED_OUT for e in state.errors.values())


def test_retry_policy_without_a_broker() -> None:
    """Retriable codes are retried with backoff until they clear or time runs out; final codes
    (including UNKNOWN_TOPIC_OR_PARTITION for admin operations) are not."""
    from odradek.client.admin._base import _Pending

    async def main() -> None:
        admin = AsyncAdmin(bootstrap_servers="127.0.0.1:1", retry_backoff_ms=10, retry_backoff_max_ms=40)
        calls = 0
        state: _Pending[str, int] = _Pending({"a": None, "b": None, "c": None}, lambda k: f"item {k}")

        async def attempt() -> None:
            nonlocal calls
            calls += 1
            if "a" in state.todo:
                state.fail("a", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)  # final for admin
            if "b" in state.todo:
                if calls < 3:
                    state.fail("b", ErrorCode.NOT_CONTROLLER)  # retriable: clears on the third try
                else:
                    state.done("b", calls)
            state.fail("c", ErrorCode.LEADER_NOT_AVAILABLE)  # retriable, never clears

        t0 = time.monotonic()
        await admin._drive(state, admin._deadline(0.5), attempt)
        elapsed = time.monotonic() - t0
        assert state.results == {"b": 3}
        assert state.errors["a"].code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert state.errors["c"].code == ErrorCode.LEADER_NOT_AVAILABLE
        assert "still failing after 0.5 s" in str(state.errors["c"])
        assert 0.45 < elapsed < 2 and 5 < calls < 30  # backoff 10 ms doubling to 40 ms
        await admin.close()

    asyncio.run(main())
