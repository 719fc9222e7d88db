"""DescribeClientQuotas / AlterClientQuotas on a real broker, through Odradek's Admin client and
the ``odradek configs`` CLI: entities and defaults, filters (exact, default, specified, strict),
Kafka's refusals, validate_only, persistence across a restart, and authorization."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.client import Admin
from odradek.client.admin import SPECIFIED, AdminError, ClientQuotaEntity
from odradek.errors import ErrorCode, KafkaError
from odradek.testing import BrokerProcess

JAAS = (
    "org.apache.kafka.common.security.plain.PlainLoginModule required "
    'user_alice="alice-secret" user_admin="admin-secret";'
)
P, C, R = "producer_byte_rate", "consumer_byte_rate", "request_percentage"


def E(**parts: str | None) -> ClientQuotaEntity:
    return ClientQuotaEntity.of({k.replace("_", "-"): v for k, v in parts.items()})


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(Path(tmp_path_factory.mktemp("quota-api")) / "data")
    b.start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def admin(broker: BrokerProcess) -> Iterator[Admin]:
    with Admin(bootstrap_servers=broker.bootstrap) as a:
        yield a
        # leave no quota behind for the next test
        left = a.describe_client_quotas()
        if left:
            a.alter_client_quotas([(e, dict.fromkeys(q)) for e, q in left.items()])


def test_alter_and_describe_every_kind_of_entity(admin: Admin) -> None:
    changes = [
        ({"user": "alice"}, {P: 1048576.0, C: 2097152.0}),
        ({"user": None}, {P: 100.0}),
        ({"client-id": "app 1"}, {R: 12.5}),
        ({"client-id": None}, {C: 300.0}),
        ({"user": "alice", "client-id": "app 1"}, {P: 400.0}),
        ({"user": None, "client-id": None}, {P: 500.0}),
        ({"user": "CN=bob,O=x", "client-id": None}, {"controller_mutation_rate": 10.0}),
        ({"ip": "10.1.2.3"}, {"connection_creation_rate": 7.0}),
        ({"ip": None}, {"connection_creation_rate": 20.0}),
    ]
    admin.alter_client_quotas(changes)
    everything = {ClientQuotaEntity.of(e): q for e, q in changes}
    assert admin.describe_client_quotas() == everything
    # non-strict: alice's own entity and her (user, client id) ones
    assert admin.describe_client_quotas({"user": "alice"}) == {
        E(user="alice"): {P: 1048576.0, C: 2097152.0},
        E(user="alice", client_id="app 1"): {P: 400.0},
    }
    # strict: only entities with exactly the filtered types
    assert admin.describe_client_quotas({"user": "alice"}, strict=True) == {
        E(user="alice"): {P: 1048576.0, C: 2097152.0}
    }
    # the default entity, and any non-default one
    assert admin.describe_client_quotas({"user": None}, strict=True) == {E(user=None): {P: 100.0}}
    assert admin.describe_client_quotas({"client-id": SPECIFIED}, strict=True) == {
        E(client_id="app 1"): {R: 12.5}
    }
    assert admin.describe_client_quotas({"user": SPECIFIED, "client-id": None}) == {
        E(user="CN=bob,O=x", client_id=None): {"controller_mutation_rate": 10.0}
    }
    assert admin.describe_client_quotas({"ip": SPECIFIED}) == {
        E(ip="10.1.2.3"): {"connection_creation_rate": 7.0}
    }
    assert admin.describe_client_quotas({"user": "nobody"}) == {}
    # removing one quota keeps the others; removing the last removes the entity
    admin.alter_client_quotas(
        [({"user": "alice"}, {C: None}), ({"ip": None}, {"connection_creation_rate": None})]
    )
    found = admin.describe_client_quotas()
    assert found[E(user="alice")] == {P: 1048576.0}
    assert E(ip=None) not in found


def test_refusals(admin: Admin) -> None:
    for entity, ops in [
        ({"user": "alice"}, {"producer_byte_rat": 1.0}),  # unknown quota
        ({"user": "alice"}, {"connection_creation_rate": 1.0}),  # an IP quota
        ({"ip": "10.0.0.1"}, {P: 1.0}),  # a user / client quota
        ({"ip": "not-an-ip"}, {"connection_creation_rate": 1.0}),
        ({"user": "alice"}, {P: -1.0}),
        ({"user": "alice"}, {P: 10.5}),
        ({"user": "alice", "ip": "10.0.0.1"}, {P: 1.0}),
        ({"group": "g"}, {P: 1.0}),
        ({}, {P: 1.0}),
    ]:
        with pytest.raises(KafkaError) as info:
            admin.alter_client_quotas([(entity, ops)])
        assert info.value.code == ErrorCode.INVALID_REQUEST, (entity, ops)
    # several entities: the good ones are changed, the refused ones reported by entity
    with pytest.raises(AdminError) as many:
        admin.alter_client_quotas([({"user": "alice"}, {P: 5.0}), ({"user": "bob"}, {"nope": 1.0})])
    assert set(many.value.errors) == {E(user="bob")}
    assert admin.describe_client_quotas() == {E(user="alice"): {P: 5.0}}
    # validate_only checks and changes nothing
    admin.alter_client_quotas([({"user": "carol"}, {P: 9.0})], validate_only=True)
    assert E(user="carol") not in admin.describe_client_quotas()
    # a filter may not mix IPs with users or client ids
    with pytest.raises(KafkaError) as info:
        admin.describe_client_quotas({"user": "alice", "ip": "10.0.0.1"})
    assert info.value.code == ErrorCode.INVALID_REQUEST


def _configs(broker: BrokerProcess, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "odradek", "configs", "--bootstrap-server", broker.bootstrap, *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_cli_kafka_configs_syntax(broker: BrokerProcess, admin: Admin) -> None:
    r = _configs(
        broker, "--entity-type", "users", "--entity-name", "alice", "--alter", "--add-config",
        "producer_byte_rate=1048576,consumer_byte_rate=2097152",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    assert "Completed updating config for user-principal 'alice'" in r.stdout
    r = _configs(
        broker, "--entity-type", "users", "--entity-name", "alice", "--entity-type", "clients", "--entity-default",
        "--alter", "--add-config", "request_percentage=50",
    )  # fmt: skip
    assert r.returncode == 0, r.stderr
    r = _configs(
        broker, "--entity-type", "clients", "--entity-default", "--alter", "--add-config", f"{C}=1000"
    )
    assert r.returncode == 0, r.stderr
    assert admin.describe_client_quotas() == {
        E(user="alice"): {P: 1048576.0, C: 2097152.0},
        E(user="alice", client_id=None): {R: 50.0},
        E(client_id=None): {C: 1000.0},
    }
    r = _configs(broker, "--entity-type", "users", "--entity-name", "alice", "--describe")
    assert r.returncode == 0, r.stderr
    assert r.stdout == (
        "Quota configs for user-principal 'alice' are consumer_byte_rate=2097152.0, producer_byte_rate=1048576.0\n"
    )
    r = _configs(broker, "--entity-type", "clients", "--describe")  # every named client id: none
    assert r.returncode == 0 and r.stdout == ""
    r = _configs(broker, "describe", "--client-defaults")
    assert r.stdout == "Quota configs for the default client-id are consumer_byte_rate=1000.0\n"
    r = _configs(broker, "alter", "--user", "alice", "--delete-config", f"{C},{P}")
    assert r.returncode == 0, r.stderr
    r = _configs(
        broker, "--entity-type", "users", "--entity-name", "alice", "--alter", "--add-config", "nope=1"
    )
    assert r.returncode == 1 and "INVALID_REQUEST" in r.stderr
    assert E(user="alice") not in admin.describe_client_quotas()


def test_quotas_survive_a_restart(tmp_path: Path) -> None:
    b = BrokerProcess(tmp_path / "data").start()
    try:
        with Admin(bootstrap_servers=b.bootstrap) as a:
            a.alter_client_quotas([({"user": "alice", "client-id": "c/1"}, {P: 123.0})])
        b.stop()
        b.start()
        with Admin(bootstrap_servers=b.bootstrap) as a:
            assert a.describe_client_quotas() == {E(user="alice", client_id="c/1"): {P: 123.0}}
    finally:
        b.stop()


def test_authorization(tmp_path: Path) -> None:
    """DescribeConfigs on the Cluster to describe, AlterConfigs on the Cluster to alter."""
    b = BrokerProcess(
        tmp_path / "data",
        listeners="PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
        overrides={
            "sasl.enabled.mechanisms": "PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
            "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
            "super.users": "User:admin",
        },
    ).start()

    def client(user: str) -> Admin:
        return Admin(
            {
                "bootstrap.servers": b.bootstrap_of("SASL_PLAINTEXT"),
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.username": user,
                "sasl.password": f"{user}-secret",
            }
        )

    try:
        with client("alice") as alice:
            with pytest.raises(KafkaError) as info:
                alice.describe_client_quotas()
            assert info.value.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            with pytest.raises(KafkaError) as info:
                alice.alter_client_quotas([({"user": "alice"}, {P: 1e9})])
            assert info.value.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        with client("admin") as admin:
            admin.alter_client_quotas([({"user": "alice"}, {P: 1000.0})])
            assert admin.describe_client_quotas() == {E(user="alice"): {P: 1000.0}}
    finally:
        b.stop()
