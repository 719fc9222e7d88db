"""Settings as Kafka has them: no misspelt name passes in any prefix family or from any source,
every config name Kafka defines is accepted (those Odradek does not act on are stored, described
and logged), DescribeConfigs answers can be given back to CreateTopics, config errors carry Kafka's
wording, and ``advertised.listeners`` is a dynamic per-broker config."""

from __future__ import annotations

import ast
import logging
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from odradek.client import ClientConfigError, Consumer, Producer
from odradek.config import BROKER_CONFIGS, TOPIC_KEYS, BrokerConfig, ConfigError
from odradek.protocol.messages.alter_configs import AlterConfigsRequest
from odradek.protocol.messages.create_topics import CreateTopicsRequest
from odradek.protocol.messages.describe_configs import DescribeConfigsRequest
from odradek.protocol.messages.incremental_alter_configs import IncrementalAlterConfigsRequest
from odradek.protocol.messages.metadata import MetadataRequest
from odradek.testing import BrokerProcess, WireClient, wait_for
from tests.source_trees import parse

T = 30  # seconds any one admin call may take

#: (misspelt key, the key meant): one per prefix family and per-listener form
TYPOS = [
    ("authorizer.class.nam", "authorizer.class.name"),
    ("ssl.client.auht", "ssl.client.auth"),
    ("ssl.keystore.locaton", "ssl.keystore.location"),
    ("sasl.enabled.mechanism", "sasl.enabled.mechanisms"),
    ("sasl.kerberos.kinit.cdm", "sasl.kerberos.kinit.cmd"),
    ("security.inter.broker.protocl", "security.inter.broker.protocol"),
    ("metric.reporter", "metric.reporters"),
    ("metrics.sample.window", "metrics.sample.window.ms"),
    ("kafka.metrics.reporter", "kafka.metrics.reporters"),
    ("listener.name.sasl_ssl.scram-sha-265.sasl.jaas.config", "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config"),
    ("listener.name.sasl_ssl.scram-sha-256.sasl.jaas.confg", "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config"),
    ("listener.name.x.oauthbearer.sasl.login.callback.handler.clas",
     "listener.name.x.oauthbearer.sasl.login.callback.handler.class"),
    ("listener.name.sasl-ssl.ssl.client.auth", "listener.name.sasl_ssl.ssl.client.auth"),
]
#: a listener X beside Kafka's four, so that the per-listener forms for X name a listener
MAP = "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL,X:SASL_PLAINTEXT"


@pytest.mark.parametrize(("typo", "meant"), TYPOS)
def test_a_misspelt_key_of_any_family_is_refused_naming_the_one_meant(tmp_path: Path, typo: str, meant: str) -> None:
    props = tmp_path / "server.properties"
    props.write_text(f"{MAP}\n{typo}=value\n")
    with pytest.raises(ConfigError) as info:
        BrokerConfig.load(props, env={})
    assert f"(did you mean {meant!r}?)" in info.value.message and str(props) in info.value.message
    with pytest.raises(ConfigError) as info:
        BrokerConfig.load(None, [MAP, f"{typo}=value"], env={})
    assert f"(did you mean {meant!r}?)" in info.value.message and "--override" in info.value.message


def test_the_names_meant_are_accepted_with_their_per_listener_forms(tmp_path: Path) -> None:
    props = tmp_path / "server.properties"
    props.write_text(
        f"{MAP}\n"
        "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required;\n"
        "listener.name.x.oauthbearer.sasl.login.callback.handler.class=com.example.Login\n"
        "listener.name.sasl_ssl.ssl.client.auth=required\n"
        "authorizer.class.name=odradek.acl\n"
    )
    config = BrokerConfig.load(props, env={})
    assert config.for_listener("SASL_SSL", "ssl.client.auth") == "required"
    assert config.for_listener("SASL_PLAINTEXT", "ssl.client.auth") == "none"
    assert config.for_listener("X", "sasl.login.callback.handler.class", "OAUTHBEARER") == "com.example.Login"
    assert config.get("authorizer.class.name") == "odradek.acl"


def test_environment_variables_and_client_configs_of_the_prefixed_families() -> None:
    config = BrokerConfig.load(None, env={"ODRADEK_SASL_KERBEROS_KINIT_CMD": "/bin/kinit"})
    assert config.get("sasl.kerberos.kinit.cmd") == "/bin/kinit"
    with pytest.raises(ConfigError) as info:
        BrokerConfig.load(None, env={"ODRADEK_SASL_KERBEROS_KINIT_CDM": "/bin/kinit"})
    assert "(did you mean 'ODRADEK_SASL_KERBEROS_KINIT_CMD'?)" in info.value.message
    # the clients' own configs: ssl.* and sasl.* names are checked as every other
    with pytest.raises(ClientConfigError, match=r"'ssl\.ca\.locaton' \(did you mean 'ssl\.ca\.location'\?\)"):
        Producer({"bootstrap.servers": "127.0.0.1:1", "ssl.ca.locaton": "/ca.pem"})
    with pytest.raises(ClientConfigError, match=r"'sasl\.mechanim' \(did you mean 'sasl\.mechanism'\?\)"):
        Consumer({"bootstrap.servers": "127.0.0.1:1", "group.id": "g", "sasl.mechanim": "PLAIN"})


def test_a_server_properties_written_for_kafka_starts_with_one_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    props = tmp_path / "server.properties"
    props.write_text(
        "process.roles=broker,controller\n"
        "controller.quorum.voters=1@localhost:9093\n"
        "zookeeper.set.acl=false\n"
        "sasl.kerberos.min.time.before.relogin=58000\n"
        "log.cleaner.threads=4\n"
        "num.network.threads=3\n"
        "listener.name.sasl_ssl.plain.sasl.login.class=com.example.Login\n"
    )
    with caplog.at_level(logging.INFO, logger="odradek.config"):
        config = BrokerConfig.load(props, env={})
    assert config.get("log.cleaner.threads") == 4 and config.get("process.roles") == "broker,controller"
    lines = [r.getMessage() for r in caplog.records if "accepted, not used by Odradek" in r.getMessage()]
    assert len(lines) == 1 and caplog.records[0].levelno == logging.WARNING
    for name in ("process.roles", "controller.quorum.voters", "zookeeper.set.acl",
                 "sasl.kerberos.min.time.before.relogin", "log.cleaner.threads",
                 "listener.name.sasl_ssl.plain.sasl.login.class"):
        assert name in lines[0]
    assert "num.network.threads" not in lines[0]  # Odradek uses it


def test_every_kafka_config_has_its_row_and_each_unused_one_a_description() -> None:
    from odradek.config import KAFKA_BROKER_CONFIGS

    # a sample across the families Kafka defines (the table holds all of them)
    for name in ("sasl.kerberos.min.time.before.relogin", "process.roles", "controller.quorum.voters",
                 "remote.log.storage.system.enable", "group.consumer.assignors", "share.coordinator.threads",
                 "delegation.token.secret.key", "password.encoder.secret", "principal.builder.class",
                 "metric.reporters", "kafka.metrics.polling.interval.secs", "zookeeper.ssl.client.enable",
                 "authorizer.zookeeper.url", "compression.zstd.level", "log.local.retention.ms"):
        assert name in BROKER_CONFIGS, name
    for name in ("compression.gzip.level", "remote.log.copy.disable", "remote.log.delete.on.disable",
                 "local.retention.ms", "remote.storage.enable"):
        assert name in TOPIC_KEYS and not TOPIC_KEYS[name].used, name
    for d in KAFKA_BROKER_CONFIGS.values():
        assert not d.used and d.doc.strip(), d.name
    assert len(KAFKA_BROKER_CONFIGS) >= 190
    assert BROKER_CONFIGS["sasl.kerberos.min.time.before.relogin"].update_mode == "per-broker"
    assert BROKER_CONFIGS["log.cleaner.threads"].update_mode == "cluster-wide"
    assert BROKER_CONFIGS["process.roles"].update_mode == "read-only"
    # and no code reads one of them: "not used" stays true
    src = Path(__file__).resolve().parents[1] / "src" / "odradek"
    read = set()
    for path in src.rglob("*.py"):
        for node in ast.walk(parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in (
                "get", "for_listener", "is_set", "source"
            ):
                read.update(a.value for a in node.args[:2] if isinstance(a, ast.Constant) and isinstance(a.value, str))
    # the typed settings (generated) read the configs they hold by name
    generated = parse((src / "settings" / "_generated.py").read_text())
    read.update(n.value for n in ast.walk(generated) if isinstance(n, ast.Constant) and isinstance(n.value, str))
    assert len(read & set(BROKER_CONFIGS)) >= 40
    assert not {n for n in read if n in BROKER_CONFIGS and not BROKER_CONFIGS[n].used}
    assert not {n for n in read if n in TOPIC_KEYS and not TOPIC_KEYS[n].used}


# -- against a broker ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path_factory.mktemp("settings") / "data", log_level="INFO") as b:
        yield b


def _admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient({"bootstrap.servers": broker.bootstrap})


def _describe(admin: AdminClient, resource: ConfigResource) -> dict[str, ConfigEntry]:
    return admin.describe_configs([resource])[resource].result(timeout=T)


def _log(broker: BrokerProcess) -> str:
    return "".join(broker.stderr_lines)


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated")
def test_confluent_admin_alters_a_kafka_config_odradek_does_not_use(broker: BrokerProcess) -> None:
    """librdkafka's own AlterConfigs test sets sasl.kerberos.min.time.before.relogin on a broker."""
    admin = _admin(broker)
    legacy = ConfigResource(ConfigResource.Type.BROKER, "0", set_config={"sasl.kerberos.min.time.before.relogin": "58000"})
    admin.alter_configs([legacy])[legacy].result(timeout=T)
    inc = ConfigResource(ConfigResource.Type.BROKER, "0", incremental_configs=[
        ConfigEntry("log.cleaner.threads", "2", incremental_operation=AlterConfigOpType.SET)])
    admin.incremental_alter_configs([inc])[inc].result(timeout=T)
    described = _describe(admin, ConfigResource(ConfigResource.Type.BROKER, "0"))
    relogin = described["sasl.kerberos.min.time.before.relogin"]
    assert (relogin.value, relogin.is_read_only, relogin.source) == ("58000", False, 2)  # DYNAMIC_BROKER_CONFIG
    assert described["log.cleaner.threads"].value == "2"
    assert described["zookeeper.set.acl"].value == "false" and described["zookeeper.set.acl"].is_read_only
    broker.wait_for_log("accepted, not used by Odradek", "log.cleaner.threads")
    # Kafka's read-only ones are refused as Kafka refuses them
    ro = ConfigResource(ConfigResource.Type.BROKER, "0", incremental_configs=[
        ConfigEntry("process.roles", "broker", incremental_operation=AlterConfigOpType.SET)])
    with pytest.raises(KafkaException) as failure:
        admin.incremental_alter_configs([ro])[ro].result(timeout=T)
    error = failure.value.args[0]
    assert error.code() == KafkaError.INVALID_REQUEST
    assert "Cannot update these configs dynamically: Set(process.roles)" in error.str()


def test_describe_gives_the_documentation_of_the_unused_ones(broker: BrokerProcess) -> None:
    client = WireClient(broker.host, broker.port)
    try:
        resp = client.request(DescribeConfigsRequest(
            resources=[DescribeConfigsRequest.DescribeConfigsResource(
                resource_type=4, resource_name="0", configuration_keys=["sasl.kerberos.kinit.cmd", "num.io.threads"])],
            include_synonyms=False, include_documentation=True), 4)
    finally:
        client.close()
    docs = {c.name: c.documentation for c in resp.results[0].configs}
    assert docs["sasl.kerberos.kinit.cmd"].startswith("Accepted, not used by Odradek. ")
    assert not (docs["num.io.threads"] or "").startswith("Accepted, not used")


@pytest.mark.parametrize(
    ("typo", "meant"),
    [("sasl.kerberos.min.time.before.relogn", "sasl.kerberos.min.time.before.relogin"),
     ("ssl.client.auht", "ssl.client.auth"),
     ("listener.name.plaintext.ssl.client.auht", "listener.name.plaintext.ssl.client.auth")],
)
def test_a_misspelt_dynamic_broker_config_is_refused_naming_the_one_meant(
    broker: BrokerProcess, typo: str, meant: str
) -> None:
    client = WireClient(broker.host, broker.port)
    try:
        legacy = client.request(AlterConfigsRequest(resources=[AlterConfigsRequest.AlterConfigsResource(
            resource_type=4, resource_name="0",
            configs=[AlterConfigsRequest.AlterableConfig(name=typo, value="1")])], validate_only=False), 1)
        incremental = client.request(IncrementalAlterConfigsRequest(resources=[
            IncrementalAlterConfigsRequest.AlterConfigsResource(
                resource_type=4, resource_name="0",
                configs=[IncrementalAlterConfigsRequest.AlterableConfig(name=typo, config_operation=0, value="1")])],
            validate_only=False), 1)
    finally:
        client.close()
    for result in (legacy.responses[0], incremental.responses[0]):
        assert result.error_code == KafkaError.INVALID_CONFIG
        assert f"(did you mean {meant!r}?)" in (result.error_message or "")


def test_a_topic_created_with_another_topics_described_configs(broker: BrokerProcess) -> None:
    """A client copying a topic: describe every config, create a new topic with all that are not
    read-only, as given; the copy describes equal (the empty-list defaults are "", not null)."""
    admin = _admin(broker)
    overrides = {"retention.ms": "3600000", "cleanup.policy": "compact,delete", "leader.replication.throttled.replicas": "0:0"}
    admin.create_topics([NewTopic("copied-from", 1, 1, config=overrides)])["copied-from"].result(timeout=T)
    source = _describe(admin, ConfigResource(ConfigResource.Type.TOPIC, "copied-from"))
    assert source["follower.replication.throttled.replicas"].value == ""
    assert source["remote.storage.enable"].value == "false"
    given = {name: e.value for name, e in source.items() if not e.is_read_only}
    assert None not in given.values(), [n for n, v in given.items() if v is None]
    admin.create_topics([NewTopic("copied-to", 1, 1, config=given)])["copied-to"].result(timeout=T)
    copy = _describe(admin, ConfigResource(ConfigResource.Type.TOPIC, "copied-to"))
    assert {n: e.value for n, e in copy.items()} == {n: e.value for n, e in source.items()}
    # kafka-python, the same
    from kafka.admin import ConfigResource as KpResource
    from kafka.admin import ConfigResourceType, KafkaAdminClient
    from kafka.admin import NewTopic as KpNewTopic

    kp = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=T * 1000)
    try:
        described = kp.describe_configs([KpResource(ConfigResourceType.TOPIC, "copied-from")], config_filter="all")
        entries = described["topic"]["copied-from"]
        kp_given = {n: e["value"] for n, e in entries.items() if not e["read_only"]}
        assert kp_given == given
        kp.create_topics([KpNewTopic("copied-by-kafka-python", 1, 1, topic_configs=kp_given)])
        again = kp.describe_configs([KpResource(ConfigResourceType.TOPIC, "copied-by-kafka-python")], config_filter="all")
        assert {n: e["value"] for n, e in again["topic"]["copied-by-kafka-python"].items()} == {
            n: e["value"] for n, e in entries.items()
        }
    finally:
        kp.close()


def test_a_topic_created_with_kafka_topic_configs_odradek_does_not_use(broker: BrokerProcess) -> None:
    admin = _admin(broker)
    unused = {"compression.gzip.level": "5", "local.retention.ms": "60000", "remote.log.copy.disable": "true"}
    admin.create_topics([NewTopic("kafka-only-configs", 1, 1, config=unused)])["kafka-only-configs"].result(timeout=T)
    described = _describe(admin, ConfigResource(ConfigResource.Type.TOPIC, "kafka-only-configs"))
    assert {n: described[n].value for n in unused} == unused
    line = broker.wait_for_log("Topic `kafka-only-configs`: accepted, not used by Odradek")
    assert all(f"{n}={v}" in line for n, v in unused.items())


def test_config_errors_carry_kafkas_messages(broker: BrokerProcess) -> None:
    admin = _admin(broker)
    with pytest.raises(KafkaException) as failure:
        admin.create_topics([NewTopic("bad-config", 1, 1, config={"no.such.config": "1"})])["bad-config"].result(timeout=T)
    assert failure.value.args[0].code() == KafkaError.INVALID_CONFIG
    assert failure.value.args[0].str() == "Unknown topic config name: no.such.config"
    client = WireClient(broker.host, broker.port)
    try:
        created = client.request(CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
            name="typo-config", num_partitions=1, replication_factor=1,
            configs=[CreateTopicsRequest.CreatableTopicConfig(name="retention.m", value="1000")])], timeout_ms=10000), 5)
        assert created.topics[0].error_message == "Unknown topic config name: retention.m (did you mean 'retention.ms'?)"
        client.request(CreateTopicsRequest(topics=[CreateTopicsRequest.CreatableTopic(
            name="altered", num_partitions=1, replication_factor=1)], timeout_ms=10000), 5)
        altered = client.request(IncrementalAlterConfigsRequest(resources=[
            IncrementalAlterConfigsRequest.AlterConfigsResource(resource_type=2, resource_name="altered", configs=[
                IncrementalAlterConfigsRequest.AlterableConfig(name="retention.ms", config_operation=2, value="5")])],
            validate_only=False), 1)
        assert altered.responses[0].error_code == KafkaError.INVALID_CONFIG
        assert altered.responses[0].error_message == "Config value append is not allowed for config key: retention.ms"
        bad = client.request(AlterConfigsRequest(resources=[AlterConfigsRequest.AlterConfigsResource(
            resource_type=2, resource_name="altered",
            configs=[AlterConfigsRequest.AlterableConfig(name="retention.ms", value="soon")])], validate_only=False), 1)
        assert bad.responses[0].error_code == KafkaError.INVALID_CONFIG
        assert bad.responses[0].error_message == "Invalid value soon for configuration retention.ms: Not a number of type LONG"
        tiered = client.request(AlterConfigsRequest(resources=[AlterConfigsRequest.AlterConfigsResource(
            resource_type=2, resource_name="altered",
            configs=[AlterConfigsRequest.AlterableConfig(name="remote.storage.enable", value="true")])],
            validate_only=False), 1)
        assert tiered.responses[0].error_code == KafkaError.INVALID_CONFIG
        assert (tiered.responses[0].error_message or "").startswith("Tiered Storage functionality is disabled in the broker")
    finally:
        client.close()


def test_advertised_listeners_is_altered_per_broker_and_metadata_follows(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "data", log_level="INFO") as broker:
        admin = _admin(broker)
        described = _describe(admin, ConfigResource(ConfigResource.Type.BROKER, "0"))["advertised.listeners"]
        assert (described.is_read_only, described.source) == (False, 5)  # dynamic, DEFAULT_CONFIG, as Kafka 3.x
        advertised = f"PLAINTEXT://localhost:{broker.port}"
        change = ConfigResource(ConfigResource.Type.BROKER, "0", incremental_configs=[
            ConfigEntry("advertised.listeners", advertised, incremental_operation=AlterConfigOpType.SET)])
        admin.incremental_alter_configs([change])[change].result(timeout=T)
        entry = _describe(admin, ConfigResource(ConfigResource.Type.BROKER, "0"))["advertised.listeners"]
        assert (entry.value, entry.source) == (advertised, 2)  # DYNAMIC_BROKER_CONFIG
        client = WireClient(broker.host, broker.port)
        try:
            def hosts() -> list[tuple[str, int]]:
                return [(b.host, b.port) for b in client.request(MetadataRequest(topics=[]), 1).brokers]

            wait_for(lambda: hosts() == [("localhost", broker.port)], 10, "Metadata advertising the new endpoint")
            # Kafka's refusals: only for a broker id, only listeners the broker has
            for name, value, message in (
                ("", advertised, "Cannot update these configs at default cluster level, broker id must be specified: "
                                 "Set(advertised.listeners)"),
                ("0", "SSL://localhost:9093", "must be a subset of listeners"),
            ):
                refused = client.request(IncrementalAlterConfigsRequest(resources=[
                    IncrementalAlterConfigsRequest.AlterConfigsResource(resource_type=4, resource_name=name, configs=[
                        IncrementalAlterConfigsRequest.AlterableConfig(
                            name="advertised.listeners", config_operation=0, value=value)])], validate_only=False), 1)
                assert refused.responses[0].error_code == KafkaError.INVALID_REQUEST
                assert message in (refused.responses[0].error_message or "")
        finally:
            client.close()
        broker.stop()
        broker.start()  # a dynamic broker config is kept over a restart, and still advertised
        client = WireClient(broker.host, broker.port)
        try:
            assert [(b.host, b.port) for b in client.request(MetadataRequest(topics=[]), 1).brokers] == [
                ("localhost", broker.port)
            ]
        finally:
            client.close()
        # removed: back to the listener's own address
        remove = ConfigResource(ConfigResource.Type.BROKER, "0", incremental_configs=[
            ConfigEntry("advertised.listeners", None, incremental_operation=AlterConfigOpType.DELETE)])
        admin = _admin(broker)
        admin.incremental_alter_configs([remove])[remove].result(timeout=T)
        client = WireClient(broker.host, broker.port)
        try:
            wait_for(lambda: [(b.host, b.port) for b in client.request(MetadataRequest(topics=[]), 1).brokers]
                     == [("127.0.0.1", broker.port)], 10, "Metadata advertising the listener again")
        finally:
            client.close()


def test_did_you_mean_searches_are_budgeted() -> None:
    """A search for the nearest name costs milliseconds on the event loop: a flood of unknown
    names gets Kafka's message without the hint once the budget is spent, and the budget refills."""
    from odradek._clock import FakeClock
    from odradek.broker.handlers.configs import _HintBudget

    clock = FakeClock()
    budget = _HintBudget(3, clock)
    assert [budget.take() for _ in range(5)] == [True, True, True, False, False]
    clock.advance(1000)
    assert [budget.take() for _ in range(4)] == [True, True, True, False]


def test_a_request_naming_many_unknown_configs_gets_a_bounded_number_of_hints(broker: BrokerProcess) -> None:
    R = IncrementalAlterConfigsRequest
    resources = [R.AlterConfigsResource(resource_type=4, resource_name="0", configs=[
        R.AlterableConfig(name=f"sasl.kerberos.min.time.before.relogn{i}", config_operation=0, value="1")])
        for i in range(200)]
    client = WireClient(broker.host, broker.port)
    try:
        answer = client.request(R(resources=resources, validate_only=False), 1)
        messages = [r.error_message or "" for r in answer.responses]
        assert all(r.error_code == KafkaError.INVALID_CONFIG for r in answer.responses)
        assert all(m.startswith("Unknown broker config name: sasl.kerberos.min.time.before.relogn") for m in messages)
        hinted = sum("(did you mean 'sasl.kerberos.min.time.before.relogin'?)" in m for m in messages)
        assert hinted < 100, hinted  # the first ones (up to the budget) name the one meant
        assert client.request(MetadataRequest(topics=[]), 1).brokers  # and the broker serves on
    finally:
        client.close()
