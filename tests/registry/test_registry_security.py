"""The registry of a secured broker: HTTP Basic against the broker's own users (SASL/PLAIN and
SCRAM), 401 for anonymous callers, ACLs on the topic a subject names, and no password in the log."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from odradek.testing import BrokerProcess, wait_for
from tests.registry.conftest import avro_user, call

PASSWORDS = {"admin": "admin-Pw-1", "alice": "alice-Pw-2", "bob": "bob-Pw-3"}
SCRAM_USER, SCRAM_PASSWORD = "carol", "carol-Scram-Pw-4"
WRONG_PASSWORD = "not-Alices-Pw-5"
JAAS = "org.apache.kafka.common.security.plain.PlainLoginModule required " + " ".join(
    f'user_{u}="{p}"' for u, p in PASSWORDS.items()
) + ";"
DELAY_MS = 400


def admin_client(broker: BrokerProcess) -> AdminClient:
    return AdminClient({
        "bootstrap.servers": broker.bootstrap_of("SASL_PLAINTEXT"), "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN", "sasl.username": "admin", "sasl.password": PASSWORDS["admin"],
    })


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    broker = BrokerProcess(
        Path(tmp_path_factory.mktemp("secured")) / "data",
        listeners="SASL_PLAINTEXT://127.0.0.1:0",
        overrides={
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS,
            "authorizer.class.name": "odradek.acl",
            "super.users": "User:admin",
            "schema.registry.listeners": "http://127.0.0.1:0",
            "connection.failed.authentication.delay.ms": DELAY_MS,
            "offsets.topic.num.partitions": 1,
        },
        log_level="DEBUG",
    ).start()
    try:
        admin = admin_client(broker)
        futures = admin.alter_user_scram_credentials([UserScramCredentialUpsertion(
            SCRAM_USER, ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), SCRAM_PASSWORD.encode())])
        for f in futures.values():
            f.result(30)
        acls = [
            AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, "User:alice", "*",
                       AclOperation.WRITE, AclPermissionType.ALLOW),
            AclBinding(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, "User:bob", "*",
                       AclOperation.READ, AclPermissionType.ALLOW),
        ]
        for f in admin.create_acls(acls).values():
            f.result(30)
        yield broker
    finally:
        broker.stop()


def registry(broker: BrokerProcess) -> str:
    assert broker.registry_url is not None
    return broker.registry_url


def creds(user: str) -> tuple[str, str]:
    return (user, PASSWORDS[user])


def test_anonymous_callers_get_401(secured: BrokerProcess) -> None:
    url = registry(secured)
    for method, path, body in [("GET", "/subjects", None), ("GET", "/schemas/ids/1", None),
                               ("POST", "/subjects/orders-value/versions", {"schema": avro_user()}),
                               ("GET", "/config", None), ("GET", "/schemas/types", None)]:
        answer = call(method, url + path, body)
        assert (answer.status, answer.code) == (401, 401), path
        assert answer.headers["WWW-Authenticate"].startswith("Basic")
    assert call("GET", url + "/").status == 200  # the root says nothing
    assert call("GET", url + "/subjects", auth=("alice", WRONG_PASSWORD)).status == 401
    assert call("GET", url + "/subjects", auth=("nobody", "x")).status == 401


def test_failed_authentication_is_answered_after_the_delay(secured: BrokerProcess) -> None:
    url = registry(secured)
    started = time.monotonic()
    assert call("GET", url + "/subjects", auth=("alice", WRONG_PASSWORD)).status == 401
    assert time.monotonic() - started >= DELAY_MS / 1000 * 0.9
    secured.wait_for_log("Failed authentication", "schema registry", "alice")


def test_users_of_either_mechanism_authenticate(secured: BrokerProcess) -> None:
    url = registry(secured)
    assert call("GET", url + "/schemas/types", auth=creds("alice")).status == 200
    assert call("GET", url + "/schemas/types", auth=(SCRAM_USER, SCRAM_PASSWORD)).status == 200
    assert call("GET", url + "/schemas/types", auth=(SCRAM_USER, "wrong")).status == 401


def test_acls_on_the_subjects_topic(secured: BrokerProcess) -> None:
    url = registry(secured)
    # alice may write orders: she registers orders-value
    first = call("POST", url + "/subjects/orders-value/versions", {"schema": avro_user()}, auth=creds("alice"))
    assert first.status == 200, first.body
    schema_id = first.json["id"]
    # ... not payments-value
    denied = call("POST", url + "/subjects/payments-value/versions", {"schema": avro_user()}, auth=creds("alice"))
    assert (denied.status, denied.code) == (403, 40301)
    secured.wait_for_log("Denied", "User:alice", "payments")
    admin_id = call("POST", url + "/subjects/payments-value/versions", {"schema": avro_user(name="Pay")},
                    auth=creds("admin")).json["id"]
    # listings show what the caller may describe
    assert call("GET", url + "/subjects", auth=creds("alice")).json == ["orders-value"]
    assert call("GET", url + "/subjects", auth=creds("admin")).json == ["orders-value", "payments-value"]
    assert call("GET", url + "/subjects", auth=(SCRAM_USER, SCRAM_PASSWORD)).json == []
    # bob may read orders: he reads its schemas, and may not register
    assert call("GET", url + "/subjects/orders-value/versions/1", auth=creds("bob")).json["id"] == schema_id
    assert call("GET", f"{url}/schemas/ids/{schema_id}", auth=creds("bob")).status == 200
    assert call("POST", url + "/subjects/orders-value/versions", {"schema": avro_user(name="B")},
                auth=creds("bob")).status == 403
    assert call("GET", f"{url}/schemas/ids/{admin_id}", auth=creds("bob")).status == 403
    assert call("DELETE", url + "/subjects/orders-value", auth=creds("bob")).status == 403
    # the global config is the cluster's
    assert call("PUT", url + "/config", {"compatibility": "FULL"}, auth=creds("alice")).status == 403
    assert call("PUT", url + "/config", {"compatibility": "BACKWARD"}, auth=creds("admin")).status == 200


def test_serializers_with_basic_auth(secured: BrokerProcess) -> None:
    client = SchemaRegistryClient({"url": registry(secured), "basic.auth.user.info": f"alice:{PASSWORDS['alice']}"})
    ctx = SerializationContext("orders", MessageField.VALUE)
    schema = avro_user({"name": "n", "type": "int", "default": 0})
    data = AvroSerializer(client, schema)({"name": "x", "n": 3}, ctx)
    assert AvroDeserializer(client)(data, ctx) == {"name": "x", "n": 3}
    assert client.lookup_schema("orders-value", Schema(schema, "AVRO")).version >= 1
    anonymous = SchemaRegistryClient({"url": registry(secured)})
    with pytest.raises(Exception, match=r"401|Unauthorized"):
        anonymous.get_subjects()


def test_odradeks_serializers_with_basic_auth(secured: BrokerProcess) -> None:
    """odradek.client.serde's clients, blocking and asyncio, send the user's credentials; without
    them the registry's 401 is a SerializationError naming it."""
    import asyncio

    from odradek.client import serde

    url = registry(secured)
    user_info = f"alice:{PASSWORDS['alice']}"
    schema = avro_user({"name": "m", "type": "long", "default": 0})
    blocking = serde.SchemaRegistryClient({"url": url, "basic.auth.user.info": user_info})
    framed = serde.AvroSerializer(blocking, schema).serialize("orders", {"name": "x", "m": 5})
    assert framed is not None
    assert serde.AvroDeserializer(blocking).deserialize("orders", framed) == {"name": "x", "m": 5}
    with pytest.raises(serde.SerializationError, match="401") as refused:
        serde.AvroDeserializer(serde.SchemaRegistryClient(url)).deserialize("orders", framed)
    assert isinstance(refused.value.__cause__, serde.SchemaRegistryError)
    assert refused.value.__cause__.http_status == 401

    async def main() -> None:
        client = serde.AsyncSchemaRegistryClient({"url": url, "basic.auth.user.info": user_info})
        assert await serde.AsyncAvroDeserializer(client).deserialize("orders", framed) == {"name": "x", "m": 5}
        with pytest.raises(serde.SerializationError, match="401"):
            await serde.AsyncAvroDeserializer(serde.AsyncSchemaRegistryClient(url)).deserialize("orders", framed)

    asyncio.run(asyncio.wait_for(main(), 60))


def test_passwords_never_reach_the_log(secured: BrokerProcess) -> None:
    url = registry(secured)
    call("GET", url + "/subjects", auth=("alice", WRONG_PASSWORD))
    call("GET", url + "/subjects", auth=creds("alice"))
    call("GET", url + "/subjects", auth=(SCRAM_USER, SCRAM_PASSWORD))
    wait_for(lambda: any("Failed authentication" in line for line in secured.stderr_lines), 10, "a failure line")
    secured.stop()
    text = "".join(secured.stderr_lines)
    assert "GET /subjects" in text  # the access log (DEBUG) was on
    for secret in (*PASSWORDS.values(), SCRAM_PASSWORD, WRONG_PASSWORD):
        assert secret not in text
    assert json.dumps(PASSWORDS["alice"])[1:-1] not in text
