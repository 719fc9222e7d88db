"""The broker's typed settings (odradek.settings): generated from the config table, in their units,
checked against Kafka's ranges at start-up and on every run-time change, with per-listener views."""

from __future__ import annotations

import copy
import dataclasses
import pickle
import time
from pathlib import Path

import pytest

from odradek.config import BROKER_CONFIGS, BrokerConfig, ConfigError
from odradek.settings import LiveSettings, Settings, settings_from
from tools.settingsgen.__main__ import OUT, _sources, check_spec, field_name, render
from tools.settingsgen.spec import GROUPS


def test_the_generated_settings_are_current_and_cover_every_config_odradek_uses() -> None:
    assert check_spec() == []
    assert OUT.read_text() == render(), "run python -m tools.settingsgen"
    fields = set(Settings._fields)
    assert {g.attr for g in GROUPS} <= fields
    fields_of, resolved = set(), set()
    settings = settings_from(BrokerConfig({}))
    for g in GROUPS:
        group = getattr(settings, g.attr)
        for name in g.configs:
            assert hasattr(group, field_name(g, name)), name
            fields_of.add(name)
        for r in g.resolved:
            assert isinstance(getattr(group, r.field), int)
            resolved.update(name for name, _factor in _sources(r))
    used = {n for n, d in BROKER_CONFIGS.items() if d.used}
    assert used == fields_of | resolved
    # the configs given in several units are one field each, never read apart
    assert used - fields_of == {
        "log.roll.ms", "log.roll.hours", "log.roll.jitter.ms", "log.roll.jitter.hours", "log.retention.ms",
        "log.retention.minutes", "log.retention.hours", "log.flush.interval.ms", "offsets.retention.minutes",
    }


def test_values_are_typed_and_defaults_are_the_tables() -> None:
    s = settings_from(BrokerConfig({}))
    assert s.server.num_partitions == 1 and isinstance(s.server.num_partitions, int)
    assert s.server.auto_create_topics_enable is True
    assert s.log.cleaner_min_cleanable_ratio == 0.5 and isinstance(s.log.cleaner_min_cleanable_ratio, float)
    assert s.sasl.enabled_mechanisms == ("GSSAPI",)
    assert s.ssl.enabled_protocols == ("TLSv1.2", "TLSv1.3")
    assert s.ssl.cipher_suites == ()
    assert s.metrics.port is None and s.zookeeper.connect is None
    assert s.log.directories == (Path("./odradek-data"),)
    [listener] = s.socket.listener_endpoints
    assert (listener.name, listener.host, listener.port) == ("PLAINTEXT", "127.0.0.1", 9092)
    assert s.socket.advertised_endpoints == s.socket.listener_endpoints


def test_passwords_are_not_in_the_repr() -> None:
    s = settings_from(BrokerConfig({"ssl.key.password": "hunter2", "sasl.jaas.config": "x required password=\"pw\";"}))
    assert s.ssl.key_password == "hunter2"
    assert "hunter2" not in repr(s) and "pw" not in repr(s.sasl)


def test_settings_are_frozen_values() -> None:
    """The generated classes behave as frozen dataclasses: compared and hashed by their fields,
    shown by them, never changed in place, copied with changes by ``replace``."""
    a, b = settings_from(BrokerConfig({})), settings_from(BrokerConfig({}))
    assert a is not b and a == b and a.quotas == b.quotas and hash(a.quotas) == hash(b.quotas)
    other = settings_from(BrokerConfig({"quota.window.num": 7}))
    assert other != a and other.quotas != a.quotas and other.server == a.server
    assert a.quotas != object() and a.server != a.quotas
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.quotas.quota_window_num = 3  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        del a.server.broker_id  # type: ignore[misc]
    with pytest.raises(AttributeError):
        a.quotas.__dict__  # noqa: B018 - slots only
    assert repr(a.quotas).startswith("QuotaSettings(quota_window_num=11, ")
    changed = a.quotas.replace(quota_window_num=3)
    assert changed.quota_window_num == 3 and a.quotas.quota_window_num == 11
    assert changed.replace(quota_window_num=11) == a.quotas
    with pytest.raises(TypeError, match="no field 'window'"):
        a.quotas.replace(window=3)
    for group in (a.ssl, a.tables, a.quotas):  # (LogSettings' topic defaults are a mappingproxy: no pickle)
        for copied in (pickle.loads(pickle.dumps(group)), copy.deepcopy(group), copy.copy(group)):
            assert copied == group and repr(copied) == repr(group) and copied is not group
    assert copy.copy(a) == a and copy.copy(a).for_listener("PLAINTEXT") == a.for_listener("PLAINTEXT")
    whole = a.replace(quotas=changed)
    assert whole.quotas is changed and whole.server is a.server and whole != a
    assert whole.for_listener("PLAINTEXT").server == a.server


@pytest.mark.parametrize(
    ("given", "retention_ms"),
    [
        ({}, 168 * 3600000),
        ({"log.retention.hours": 2}, 2 * 3600000),
        ({"log.retention.hours": 2, "log.retention.minutes": 3}, 3 * 60000),
        ({"log.retention.hours": 2, "log.retention.minutes": 3, "log.retention.ms": 4}, 4),
        ({"log.retention.ms": -1}, -1),
    ],
)
def test_units_are_resolved_as_kafka_resolves_them(given: dict[str, int], retention_ms: int) -> None:
    s = settings_from(BrokerConfig(given))
    assert s.log.retention_ms == retention_ms
    # the topic default a new log gets is the same value
    assert s.log.topic_defaults["retention.ms"] == retention_ms


def test_the_other_synonyms_and_units() -> None:
    s = settings_from(BrokerConfig({"log.roll.hours": 2, "log.roll.jitter.hours": 1, "offsets.retention.minutes": 7}))
    assert (s.log.roll_ms, s.log.roll_jitter_ms) == (2 * 3600000, 3600000)
    assert s.groups.offsets_retention_ms == 7 * 60000
    assert settings_from(BrokerConfig({"log.roll.hours": 2, "log.roll.ms": 5})).log.roll_ms == 5
    # log.flush.interval.ms falls back to log.flush.scheduler.interval.ms, as in Kafka
    assert settings_from(BrokerConfig({"log.flush.scheduler.interval.ms": 900})).log.flush_interval_ms == 900
    assert settings_from(BrokerConfig({"log.flush.interval.ms": 7})).log.flush_interval_ms == 7


def test_topic_defaults_are_the_broker_configs() -> None:
    config = BrokerConfig({"log.segment.bytes": 1 << 20, "compression.type": "zstd", "log.cleanup.policy": "compact"})
    assert dict(settings_from(config).log.topic_defaults) == config.topic_defaults()


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("num.partitions", 0, "Invalid value 0 for configuration num.partitions: Value must be at least 1"),
        ("log.segment.bytes", 13, "Invalid value 13 for configuration log.segment.bytes: Value must be at least 14"),
        ("log.cleaner.min.cleanable.ratio", 1.5,
         "Invalid value 1.5 for configuration log.cleaner.min.cleanable.ratio: Value must be between 0 and 1"),
        ("quota.window.num", 0, "Invalid value 0 for configuration quota.window.num: Value must be at least 1"),
        ("fetch.max.bytes", 1000, "Invalid value 1000 for configuration fetch.max.bytes: Value must be at least 1024"),
    ],
)
def test_kafkas_ranges_are_checked_when_the_settings_are_built(name: str, value: object, message: str) -> None:
    config = BrokerConfig({name: value})  # the value is of its type: the table takes it
    with pytest.raises(ConfigError) as err:
        settings_from(config)
    assert err.value.message == message


def test_odradek_serve_refuses_an_out_of_range_setting_before_it_starts(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from odradek.cli.__main__ import main

    code = main(["serve", "--data-dir", str(tmp_path / "data"), "--port", "0", "--override", "num.partitions=0"])
    assert code == 2
    assert "num.partitions: Value must be at least 1" in capsys.readouterr().err
    assert not (tmp_path / "data").exists()  # nothing was started or written


def test_per_listener_and_per_mechanism_views() -> None:
    config = BrokerConfig(
        {
            "listeners": "PLAINTEXT://127.0.0.1:0,SASL_SSL://127.0.0.1:0",
            "ssl.client.auth": "none",
            "listener.name.sasl_ssl.ssl.client.auth": "required",
            "sasl.jaas.config": "base",
            "listener.name.sasl_ssl.sasl.jaas.config": "listener",
            "listener.name.sasl_ssl.plain.sasl.jaas.config": "plain",
            "listener.name.sasl_ssl.max.connections": 7,
        }
    )
    s = settings_from(config)
    assert s.ssl.client_auth == "none"
    ssl_view = s.for_listener("SASL_SSL")
    assert ssl_view.ssl.client_auth == "required" and ssl_view.socket.max_connections == 7
    assert s.for_listener("sasl_ssl") is ssl_view  # one view per listener, any case
    assert ssl_view.sasl.jaas_config == "listener"
    assert s.for_listener("SASL_SSL", "PLAIN").sasl.jaas_config == "plain"
    assert s.for_listener("SASL_SSL", "SCRAM-SHA-256").sasl.jaas_config == "listener"
    assert s.for_listener("PLAINTEXT").sasl.jaas_config == "base"
    # the same answers as the configuration's own per-listener lookup
    for listener in ("SASL_SSL", "PLAINTEXT"):
        assert s.for_listener(listener).ssl.client_auth == config.for_listener(listener, "ssl.client.auth")


def test_a_dynamic_change_replaces_the_settings_whole() -> None:
    live = LiveSettings(BrokerConfig({"num.partitions": 2}))
    before = live.current
    live.apply({"num.partitions": "4", "log.retention.ms": "1000"})
    after = live.current
    assert after is not before
    assert (before.server.num_partitions, before.log.retention_ms) == (2, 168 * 3600000)  # the old one is unchanged
    assert (after.server.num_partitions, after.log.retention_ms) == (4, 1000)
    assert after.log.topic_defaults["retention.ms"] == 1000
    live.apply({"num.partitions": None, "log.retention.ms": None})  # back to the static values
    assert (live.current.server.num_partitions, live.current.log.retention_ms) == (2, 168 * 3600000)


def test_a_refused_dynamic_change_changes_nothing() -> None:
    config = BrokerConfig({})
    live = LiveSettings(config)
    before = live.current
    with pytest.raises(ConfigError, match="Value must be at least 1"):
        live.apply({"log.retention.ms": "5", "num.partitions": "0"})
    assert live.current is before
    assert config.get("log.retention.ms") is None and config.get("num.partitions") == 1
    with pytest.raises(ConfigError):
        live.check({"num.partitions": "zero"})


def test_a_running_broker_refuses_an_out_of_range_dynamic_change_and_applies_a_valid_one(tmp_path: Path) -> None:
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

    from odradek.testing import BrokerProcess

    with BrokerProcess(tmp_path / "data") as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})

        def alter(value: str) -> None:
            change = ConfigResource(ConfigResource.Type.BROKER, "0", incremental_configs=[
                ConfigEntry("num.partitions", value, incremental_operation=AlterConfigOpType.SET)])
            admin.incremental_alter_configs([change])[change].result(timeout=30)

        with pytest.raises(KafkaException) as failure:
            alter("0")
        error = failure.value.args[0]
        assert error.code() == KafkaError.INVALID_REQUEST
        assert error.str() == "Invalid value 0 for configuration num.partitions: Value must be at least 1"
        alter("3")  # the settings are replaced: auto-creation now makes 3 partitions
        deadline = time.monotonic() + 30
        while True:  # Metadata auto-creates it; asked again until its partitions are listed
            topic = admin.list_topics("after-the-change", timeout=30).topics["after-the-change"]
            if topic.partitions or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert len(topic.partitions) == 3


def test_every_view_of_one_configuration_sees_a_dynamic_change() -> None:
    """The replica fetchers' throttle is built from the configuration itself (not the broker's
    holder): a change made through the broker's holder reaches it all the same."""
    from odradek.broker.quotas import ReplicationQuota

    config = BrokerConfig({})
    broker = LiveSettings(config)
    follower = ReplicationQuota(config, "follower")
    leader = ReplicationQuota(broker, "leader")
    assert not follower.limited() and not leader.limited()
    broker.apply({"follower.replication.throttled.rate": "1000", "leader.replication.throttled.rate": "2000"})
    assert (follower.bound, leader.bound) == (1000.0, 2000.0)
    broker.apply({"follower.replication.throttled.rate": None})
    assert not follower.limited() and leader.limited()
