"""The rules of group configs (odradek.cluster.group_configs): Kafka's GroupConfig checks, the typed
view a group's code reads, ISO-8601 durations as Java's Duration.parse reads them, and the
share-group broker settings' start-up checks."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from odradek.cluster.group_configs import (
    GROUP_CONFIG_KEYS,
    AutoOffsetReset,
    check_share_settings,
    parse_auto_offset_reset,
    parse_iso_duration_ms,
    resolve,
    validate,
)
from odradek.config import BrokerConfig, ConfigError
from odradek.errors import ErrorCode
from odradek.settings import settings_from

SETTINGS = settings_from(BrokerConfig())
GROUPS, SHARE = SETTINGS.groups, SETTINGS.share_groups


def check(overrides: dict[str, str]) -> dict[str, object]:
    return validate(overrides, GROUPS, SHARE)


def test_share_settings_have_kafkas_defaults() -> None:
    assert (SHARE.record_lock_duration_ms, SHARE.min_record_lock_duration_ms, SHARE.max_record_lock_duration_ms) == (
        30000, 15000, 60000)
    assert (SHARE.delivery_count_limit, SHARE.min_delivery_count_limit, SHARE.max_delivery_count_limit) == (5, 2, 10)
    assert (SHARE.session_timeout_ms, SHARE.heartbeat_interval_ms, SHARE.max_size) == (45000, 5000, 200)
    assert SHARE.partition_max_record_locks == 2000
    assert SHARE.fetch_purgatory_purge_interval_requests == 1000


def test_share_settings_outside_kafkas_range_stop_the_start() -> None:
    with pytest.raises(ConfigError, match=re.escape("group.share.delivery.count.limit: Value must be between 2 and 10")):
        settings_from(BrokerConfig(overrides={"group.share.delivery.count.limit": "11"}))
    with pytest.raises(ConfigError, match=re.escape("Value must be between 1000 and 30000")):
        settings_from(BrokerConfig(overrides={"group.share.min.record.lock.duration.ms": "500"}))


def test_share_settings_checked_against_each_other() -> None:
    check_share_settings(SHARE)
    with pytest.raises(ConfigError, match=re.escape("group.share.heartbeat.interval.ms must be less than group.share.session")):
        check_share_settings(SHARE.replace(heartbeat_interval_ms=15000, session_timeout_ms=15000,
                                     min_session_timeout_ms=1000))
    with pytest.raises(ConfigError, match=re.escape("group.share.record.lock.duration.ms must be greater than or equal to")):
        check_share_settings(SHARE.replace(record_lock_duration_ms=10000))
    with pytest.raises(ConfigError, match=re.escape("group.share.max.share.sessions must be greater than or equal to")):
        check_share_settings(SHARE.replace(max_share_sessions=100))


@pytest.mark.parametrize(("text", "ms"), [
    ("PT1H", 3_600_000), ("P2D", 172_800_000), ("PT0.5S", 500), ("PT1M30S", 90_000), ("pt1h", 3_600_000),
    ("P1DT1S", 86_401_000), ("-PT1H", -3_600_000), ("PT-0.5S", -500), ("P-1DT25H", 3_600_000), ("PT0S", 0),
    ("PT1,5S", 1500),
])
def test_iso_durations_as_java_reads_them(text: str, ms: int) -> None:
    assert parse_iso_duration_ms(text) == ms


@pytest.mark.parametrize("text", ["", "P", "PT", "1H", "PT1", "P1H", "PT1D", "P1.5D", "PT1H ", "P1W", "PT\u0661H",
                                  "PT99999999999999999999H"])
def test_not_iso_durations(text: str) -> None:
    assert parse_iso_duration_ms(text) is None


def test_auto_offset_reset() -> None:
    assert parse_auto_offset_reset("x", "latest") == AutoOffsetReset("latest")
    assert parse_auto_offset_reset("x", "by_duration:PT1H") == AutoOffsetReset("by_duration", 3_600_000)
    assert AutoOffsetReset("by_duration", 1000).timestamp(5000) == 4000
    assert AutoOffsetReset("earliest").timestamp(5000) == -2
    for bad in ("LATEST", "none", "by_duration", "by_duration:", "by_duration:-PT1H", "by_duration:P"):
        with pytest.raises(ConfigError) as info:
            parse_auto_offset_reset("share.auto.offset.reset", bad)
        assert info.value.code == ErrorCode.INVALID_CONFIG
        assert "'by_duration:<PnDTnHnMn.nS.>'" in info.value.message


def test_validate_as_kafka() -> None:
    assert check({"share.record.lock.duration.ms": " 45000 ", "share.isolation.level": "read_committed"}) == {
        "share.record.lock.duration.ms": 45000, "share.isolation.level": "read_committed"}
    cases = {
        "Unknown group config name: streams.session.timeout.ms": {"streams.session.timeout.ms": "45000"},
        "share.session.timeout.ms must be greater than share.heartbeat.interval.ms": {
            "share.session.timeout.ms": "45000", "share.heartbeat.interval.ms": "45000"},
        "consumer.session.timeout.ms must be less than or equal to group.consumer.max.session.timeout.ms": {
            "consumer.session.timeout.ms": "60001"},
        "share.delivery.count.limit must be greater than or equal to group.share.min.delivery.count.limit": {
            "share.delivery.count.limit": "2", "share.renew.acknowledge.enable": "true"},
        "errors.deadletterqueue.topic.name: DLQ topic name must not start with '__'": {
            "errors.deadletterqueue.topic.name": "__consumer_offsets"},
        "Invalid value maybe for configuration share.renew.acknowledge.enable": {
            "share.renew.acknowledge.enable": "maybe"},
    }
    # a broker whose minimum delivery count is 3 and whose heartbeat may be as long as a session
    share3 = SHARE.replace(min_delivery_count_limit=3, max_heartbeat_interval_ms=60000)
    for message, overrides in cases.items():
        with pytest.raises(ConfigError) as info:
            validate(overrides, GROUPS, share3)
        assert message in info.value.message


def test_resolve_gives_overrides_else_broker_settings() -> None:
    c = resolve("g", {}, GROUPS, SHARE)
    assert (c.share_record_lock_duration_ms, c.share_delivery_count_limit) == (30000, 5)
    assert c.share_auto_offset_reset == AutoOffsetReset("latest")
    assert not c.share_read_committed and c.dlq_topic_name == ""
    c = resolve("g", {"share.record.lock.duration.ms": "20000", "share.isolation.level": "read_committed",
                      "share.auto.offset.reset": "by_duration:P1D"}, GROUPS, SHARE)
    assert c.share_record_lock_duration_ms == 20000 and c.share_read_committed
    assert c.share_auto_offset_reset.duration_ms == 86_400_000
    # stored before the broker's bounds changed, or by another version: within today's bounds / default
    c = resolve("g", {"share.record.lock.duration.ms": "5000", "share.delivery.count.limit": "x"}, GROUPS, SHARE)
    assert (c.share_record_lock_duration_ms, c.share_delivery_count_limit) == (15000, 5)


NAMES = sorted(GROUP_CONFIG_KEYS)


@given(st.dictionaries(st.sampled_from(NAMES) | st.text(max_size=40), st.text(max_size=60), max_size=4))
def test_any_overrides_are_accepted_or_invalid_config(overrides: dict[str, str]) -> None:
    """Malformed names and values are INVALID_CONFIG (never another exception); what is accepted
    resolves to the parsed values."""
    try:
        parsed = check(overrides)
    except ConfigError as exc:
        assert exc.code == ErrorCode.INVALID_CONFIG and exc.message
        return
    c = resolve("g", overrides, GROUPS, SHARE)
    fields = {"share.record.lock.duration.ms": c.share_record_lock_duration_ms,
              "share.delivery.count.limit": c.share_delivery_count_limit,
              "share.isolation.level": c.share_isolation_level,
              "share.auto.offset.reset": c.share_auto_offset_reset,
              "share.session.timeout.ms": c.share_session_timeout_ms}
    for name, value in parsed.items():
        if name in fields:
            assert fields[name] == value


@given(st.text(max_size=40))
def test_durations_never_raise(text: str) -> None:
    ms = parse_iso_duration_ms(text)
    assert ms is None or isinstance(ms, int)
