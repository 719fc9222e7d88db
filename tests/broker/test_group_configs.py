"""Group configs (resource type GROUP, 32) with confluent-kafka's AdminClient against a real broker.

Set before the group exists (as a share consumer's application does before it subscribes),
described with their source (GROUP_CONFIG when set, DEFAULT_CONFIG with the broker setting's value
otherwise), deleted back to the default, refused with INVALID_CONFIG and Kafka's message (unknown
name, bad value, outside the broker's group.share.* bounds) with nothing stored, kept across a
restart, and guarded by the ACLs Kafka asks for (DESCRIBE_CONFIGS / ALTER_CONFIGS on the group).
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka import KafkaError, KafkaException  # noqa: E402
from confluent_kafka.admin import (  # noqa: E402
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    ResourcePatternType,
    ResourceType,
)

from odradek.protocol.messages.describe_configs import DescribeConfigsRequest  # noqa: E402
from odradek.protocol.messages.list_config_resources import ListConfigResourcesRequest  # noqa: E402
from odradek.testing import BrokerProcess, WireClient  # noqa: E402

T = 20.0


def group() -> str:
    return f"g-{uuid.uuid4().hex[:8]}"


def op(name: str, value: str | None, kind: AlterConfigOpType = AlterConfigOpType.SET) -> ConfigEntry:
    return ConfigEntry(name, value, incremental_operation=kind)


def alter(admin: AdminClient, group_id: str, *entries: ConfigEntry, validate_only: bool = False) -> None:
    res = ConfigResource(ResourceType.GROUP, group_id, incremental_configs=list(entries))
    for f in admin.incremental_alter_configs([res], request_timeout=T, validate_only=validate_only).values():
        f.result(timeout=T)


def describe(admin: AdminClient, group_id: str) -> dict[str, Any]:
    res = ConfigResource(ResourceType.GROUP, group_id)
    return {name: e for f in admin.describe_configs([res], request_timeout=T).values()
            for name, e in f.result(timeout=T).items()}


def refused(admin: AdminClient, group_id: str, *entries: ConfigEntry) -> KafkaError:
    with pytest.raises(KafkaException) as info:
        alter(admin, group_id, *entries)
    err: KafkaError = info.value.args[0]
    return err


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(
        tmp_path_factory.mktemp("group-configs") / "data",
        overrides={"group.share.record.lock.duration.ms": 20000, "group.share.max.record.lock.duration.ms": 90000},
    ).start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="module")
def admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def test_every_group_config_is_described_with_the_broker_default(admin: AdminClient) -> None:
    configs = describe(admin, group())  # a group that does not exist
    assert {
        "consumer.session.timeout.ms", "consumer.heartbeat.interval.ms", "share.session.timeout.ms",
        "share.heartbeat.interval.ms", "share.record.lock.duration.ms", "share.auto.offset.reset",
        "share.isolation.level", "share.delivery.count.limit",
    } <= set(configs)
    assert not any(name.startswith("streams.") for name in configs)
    lock = configs["share.record.lock.duration.ms"]
    assert lock.value == "20000"  # group.share.record.lock.duration.ms as this broker is configured
    assert lock.source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["share.auto.offset.reset"].value == "latest"
    assert configs["share.isolation.level"].value == "read_uncommitted"
    assert configs["share.delivery.count.limit"].value == "5"


def test_set_describe_delete(admin: AdminClient) -> None:
    g = group()
    alter(admin, g, op("share.auto.offset.reset", "earliest"), op("share.record.lock.duration.ms", "75000"),
          op("share.isolation.level", "read_committed"), op("share.delivery.count.limit", "3"))
    configs = describe(admin, g)
    for name, value in (("share.auto.offset.reset", "earliest"), ("share.record.lock.duration.ms", "75000"),
                        ("share.isolation.level", "read_committed"), ("share.delivery.count.limit", "3")):
        assert configs[name].value == value
        assert configs[name].source == ConfigSource.GROUP_CONFIG.value
    assert configs["share.session.timeout.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    # an incremental change keeps the others; DELETE goes back to the default
    alter(admin, g, op("share.auto.offset.reset", "by_duration:PT1H"),
          op("share.record.lock.duration.ms", None, AlterConfigOpType.DELETE))
    configs = describe(admin, g)
    assert configs["share.auto.offset.reset"].value == "by_duration:PT1H"
    assert configs["share.record.lock.duration.ms"].value == "20000"
    assert configs["share.record.lock.duration.ms"].source == ConfigSource.DEFAULT_CONFIG.value
    assert configs["share.isolation.level"].value == "read_committed"


def test_list_config_resources_names_the_groups_with_configs(broker: BrokerProcess, admin: AdminClient) -> None:
    g = group()
    alter(admin, g, op("share.delivery.count.limit", "4"))
    w = WireClient(broker.host, broker.port, "lister")
    try:
        res = w.request(ListConfigResourcesRequest(resource_types=[32]), 1)
    finally:
        w.close()
    assert res.error_code == 0
    assert (g, 32) in {(r.resource_name, r.resource_type) for r in res.config_resources}


def test_documentation_and_types_when_asked(broker: BrokerProcess) -> None:
    D = DescribeConfigsRequest
    w = WireClient(broker.host, broker.port, "doc")
    try:
        res = w.request(D(resources=[D.DescribeConfigsResource(resource_type=32, resource_name=group(),
                                                              configuration_keys=None)],
                          include_documentation=True), 4)
    finally:
        w.close()
    entries = {c.name: c for c in res.results[0].configs}
    assert res.results[0].error_code == 0
    assert "ISO-8601" in (entries["share.auto.offset.reset"].documentation or "")
    assert entries["share.record.lock.duration.ms"].config_type == 3  # INT
    assert entries["share.renew.acknowledge.enable"].config_type == 1  # BOOLEAN
    assert not any(c.read_only for c in entries.values())


def test_validate_only_stores_nothing(admin: AdminClient) -> None:
    g = group()
    alter(admin, g, op("share.auto.offset.reset", "earliest"), validate_only=True)
    assert describe(admin, g)["share.auto.offset.reset"].source == ConfigSource.DEFAULT_CONFIG.value


@pytest.mark.parametrize(("name", "value", "message"), [
    ("share.auto.offset.reset", "none", "The value must be either 'earliest', 'latest'"),
    ("share.auto.offset.reset", "LATEST", "The value must be either 'earliest', 'latest'"),
    ("share.auto.offset.reset", "by_duration:-PT1H", "by_duration"),
    ("share.auto.offset.reset", "by_duration:1h", "by_duration"),
    ("share.isolation.level", "serializable", "String must be one of: read_committed, read_uncommitted"),
    ("share.record.lock.duration.ms", "abc", "Not a number of type INT"),
    ("share.record.lock.duration.ms", "999", "Value must be at least 1000"),
    ("share.delivery.count.limit", "1.5", "Not a number of type INT"),
    # outside the broker's bounds (group.share.min/max.*)
    ("share.record.lock.duration.ms", "10000",
     "share.record.lock.duration.ms must be greater than or equal to group.share.min.record.lock.duration.ms"),
    ("share.record.lock.duration.ms", "95000",
     "share.record.lock.duration.ms must be less than or equal to group.share.max.record.lock.duration.ms"),
    ("share.delivery.count.limit", "11",
     "share.delivery.count.limit must be less than or equal to group.share.max.delivery.count.limit"),
    ("share.session.timeout.ms", "30000",
     "share.session.timeout.ms must be greater than or equal to group.share.min.session.timeout.ms"),
    ("consumer.heartbeat.interval.ms", "20000",
     "consumer.heartbeat.interval.ms must be less than or equal to group.consumer.max.heartbeat.interval.ms"),
    ("no.such.config", "1", "Unknown group config name: no.such.config"),
    ("share.record.lock.duration", "30000", "Unknown group config name: share.record.lock.duration"),
])
def test_bad_values_are_invalid_config_and_nothing_is_stored(
    admin: AdminClient, name: str, value: str, message: str
) -> None:
    g = group()
    # a good change in the same request is not made either
    err = refused(admin, g, op("share.renew.acknowledge.enable", "false"), op(name, value))
    assert err.code() == KafkaError.INVALID_CONFIG
    assert message in err.str()
    configs = describe(admin, g)
    assert all(e.source == ConfigSource.DEFAULT_CONFIG.value for e in configs.values())


_NAMES = ["share.record.lock.duration.ms", "share.delivery.count.limit", "share.auto.offset.reset",
          "share.isolation.level", "share.session.timeout.ms", "consumer.heartbeat.interval.ms"]
# values that look nearly right: numbers with junk, durations, case changes, control characters
_VALUES = st.one_of(
    st.text(max_size=30),
    st.from_regex(r"\A(by_duration:)?[-+]?P?T?[0-9.,]{0,6}[DHMSdhms]?\s?\Z"),
    st.sampled_from(["LATEST", "Earliest", "read-committed", " 1000x", "0x10", "1e4", "\uff12\uff10\uff10\uff10", "\x00", "30000\n1"]),
)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow], deadline=None)
@given(name=st.sampled_from(_NAMES), value=_VALUES)
def test_any_value_is_stored_valid_or_refused_and_not_stored(admin: AdminClient, name: str, value: str) -> None:
    """A malformed value gets INVALID_CONFIG and leaves the group's configs as they were; an
    accepted one is described as set."""
    g = group()
    try:
        alter(admin, g, op(name, value))
    except KafkaException as exc:
        assert exc.args[0].code() == KafkaError.INVALID_CONFIG, exc
        configs = describe(admin, g)
        assert all(e.source == ConfigSource.DEFAULT_CONFIG.value for e in configs.values())
        return
    entry = describe(admin, g)[name]
    assert entry.source == ConfigSource.GROUP_CONFIG.value
    assert entry.value == value.strip()


def test_append_to_a_group_config_is_refused(admin: AdminClient) -> None:
    err = refused(admin, group(), op("share.auto.offset.reset", "earliest", AlterConfigOpType.APPEND))
    assert err.code() == KafkaError.INVALID_CONFIG
    assert "Config value append is not allowed for config key: share.auto.offset.reset" in err.str()


def test_alter_configs_replaces_the_whole_set(admin: AdminClient) -> None:
    g = group()
    alter(admin, g, op("share.auto.offset.reset", "earliest"), op("share.delivery.count.limit", "4"))
    res = ConfigResource(ResourceType.GROUP, g, set_config={"share.delivery.count.limit": "6"})
    for f in admin.alter_configs([res], request_timeout=T).values():
        f.result(timeout=T)
    configs = describe(admin, g)
    assert configs["share.delivery.count.limit"].value == "6"
    assert configs["share.auto.offset.reset"].source == ConfigSource.DEFAULT_CONFIG.value


def test_configs_survive_a_restart(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "data").start()
    try:
        a = AdminClient({"bootstrap.servers": b.bootstrap})
        alter(a, "orders-workers", op("share.auto.offset.reset", "earliest"), op("share.delivery.count.limit", "7"))
        del a
        b.stop()
        b.start()
        a = AdminClient({"bootstrap.servers": b.bootstrap})
        configs = describe(a, "orders-workers")
        assert configs["share.auto.offset.reset"].value == "earliest"
        assert configs["share.delivery.count.limit"].value == "7"
        assert configs["share.delivery.count.limit"].source == ConfigSource.GROUP_CONFIG.value
        del a
    finally:
        b.stop()


# -- ACLs -------------------------------------------------------------------------------------------

USERS = ("admin", "alice")
JAAS = "org.apache.kafka.common.security.plain.PlainLoginModule required " + " ".join(
    f'user_{u}="{u}-secret"' for u in USERS
) + ";"


def _user(b: BrokerProcess, user: str) -> AdminClient:
    return AdminClient({
        "bootstrap.servers": b.bootstrap_of("SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN", "sasl.username": user, "sasl.password": f"{user}-secret",
    })


def test_acls_guard_group_configs(tmp_path: Path) -> None:
    b = BrokerProcess(
        tmp_path / "data",
        listeners="SASL_PLAINTEXT://127.0.0.1:0",
        overrides={
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
            "sasl.mechanism.inter.broker.protocol": "PLAIN",
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": "User:admin",
        },
    ).start()
    try:
        admin, alice = _user(b, "admin"), _user(b, "alice")
        g = group()
        with pytest.raises(KafkaException) as info:
            describe(alice, g)
        assert info.value.args[0].code() == KafkaError.GROUP_AUTHORIZATION_FAILED
        err = refused(alice, g, op("share.auto.offset.reset", "earliest"))
        assert err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED
        assert describe(admin, g)["share.auto.offset.reset"].source == ConfigSource.DEFAULT_CONFIG.value

        def allow(operation: AclOperation) -> None:
            binding = AclBinding(ResourceType.GROUP, g, ResourcePatternType.LITERAL, "User:alice", "*", operation,
                                 AclPermissionType.ALLOW)
            for f in admin.create_acls([binding], request_timeout=T).values():
                f.result(timeout=T)

        allow(AclOperation.DESCRIBE_CONFIGS)
        assert describe(alice, g)["share.auto.offset.reset"].value == "latest"
        err = refused(alice, g, op("share.auto.offset.reset", "earliest"))  # describe is not alter
        assert err.code() == KafkaError.GROUP_AUTHORIZATION_FAILED
        allow(AclOperation.ALTER_CONFIGS)
        alter(alice, g, op("share.auto.offset.reset", "earliest"))
        assert describe(admin, g)["share.auto.offset.reset"].value == "earliest"
    finally:
        b.stop()


def test_the_cli_sets_and_describes_group_configs(broker: BrokerProcess, admin: AdminClient) -> None:
    g = group()

    def cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "odradek", "configs", "--bootstrap-server", broker.bootstrap,
                               *args], capture_output=True, text=True, timeout=60)

    done = cli("alter", "--group", g, "--set", "share.auto.offset.reset=earliest")
    assert done.returncode == 0, done.stderr
    assert describe(admin, g)["share.auto.offset.reset"].value == "earliest"
    shown = cli("--entity-type", "groups", "--entity-name", g, "--describe", "--output", "json")
    assert shown.returncode == 0, shown.stderr
    configs = json.loads(shown.stdout)["configs"]
    assert [(c["name"], c["value"], c["source"]) for c in configs] == [
        ("share.auto.offset.reset", "earliest", "GROUP_CONFIG")]
    bad = cli("alter", "--group", g, "--set", "share.isolation.level=dirty")
    assert bad.returncode == 1 and "INVALID_CONFIG" in bad.stderr
