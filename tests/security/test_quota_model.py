"""Client quotas as pure logic: Kafka's sanitized entity paths, its precedence order, and its
Rate/SampledStat window and throttle-time math (odradek.security.quota)."""

from __future__ import annotations

import pytest

from odradek.security.quota import (
    QuotaError,
    QuotaIndex,
    Rate,
    Sensor,
    entity_path,
    parse_entity_path,
    sanitize,
    throttle_time,
    validate_quota,
)

P = "producer_byte_rate"


def test_sanitize_is_kafkas_url_encoding() -> None:
    assert sanitize("alice") == "alice"
    assert sanitize("a.b-c_d~e") == "a.b-c_d~e"
    assert sanitize("CN=alice,O=x") == "CN%3Dalice%2CO%3Dx"
    assert sanitize("a b*c/d") == "a%20b%2Ac%2Fd"
    assert sanitize("<default>") == "%3Cdefault%3E"  # a user really named so is not the default


@pytest.mark.parametrize(
    ("entity", "path"),
    [
        ({"user": "alice"}, "users/alice"),
        ({"user": None}, "users/<default>"),
        ({"client-id": "c 1"}, "clients/c%201"),
        ({"client-id": None}, "clients/<default>"),
        ({"user": "alice", "client-id": "c1"}, "users/alice/clients/c1"),
        ({"user": None, "client-id": None}, "users/<default>/clients/<default>"),
        ({"client-id": "c1", "user": None}, "users/<default>/clients/c1"),
        ({"ip": "10.0.0.1"}, "ips/10.0.0.1"),
        ({"ip": None}, "ips/<default>"),
    ],
)
def test_entity_paths_round_trip(entity: dict[str, str | None], path: str) -> None:
    assert entity_path(entity) == path
    assert parse_entity_path(path) == entity


@pytest.mark.parametrize(
    "entity", [{}, {"ip": "1.2.3.4", "user": "a"}, {"ip": "1.2.3.4", "client-id": "c"}, {"group": "g"}]
)
def test_invalid_entities(entity: dict[str, str | None]) -> None:
    with pytest.raises(QuotaError):
        entity_path(entity)


def test_quota_validation() -> None:
    validate_quota({"user": "a"}, P, 1024)
    validate_quota({"user": "a"}, "request_percentage", 12.5)
    validate_quota({"ip": None}, "connection_creation_rate", 10)
    for entity, key, value in [
        ({"user": "a"}, "producer_byte_rat", 1.0),  # unknown
        ({"user": "a"}, "connection_creation_rate", 1.0),  # an IP quota
        ({"ip": "1.2.3.4"}, P, 1.0),  # a user/client quota
        ({"user": "a"}, P, 0.0),
        ({"user": "a"}, P, -5.0),
        ({"user": "a"}, P, 10.5),  # a byte rate is a whole number
    ]:
        with pytest.raises(QuotaError):
            validate_quota(entity, key, value)


# the eight places Kafka looks, most specific first
LEVELS = [
    "users/alice/clients/app",
    "users/alice/clients/<default>",
    "users/alice",
    "users/<default>/clients/app",
    "users/<default>/clients/<default>",
    "users/<default>",
    "clients/app",
    "clients/<default>",
]
# the sensor (Kafka's metric tags) each level charges: a user quota is the user's, whichever client
TAGS = [
    ("alice", "app"),
    ("alice", "app"),
    ("alice", ""),
    ("alice", "app"),
    ("alice", "app"),
    ("alice", ""),
    ("", "app"),
    ("", "app"),
]


@pytest.mark.parametrize("level", range(len(LEVELS)))
def test_precedence_most_specific_wins(level: int) -> None:
    # every level from this one down is configured, each with a distinct value
    quotas = {path: {P: float(1000 + i)} for i, path in enumerate(LEVELS) if i >= level}
    found = QuotaIndex(P, quotas).resolve("alice", "app")
    assert found is not None
    assert found.bound == 1000 + level
    assert (found.user, found.client_id) == TAGS[level]


def test_precedence_details() -> None:
    index = QuotaIndex(P, {"users/<default>": {P: 10.0}, "clients/app": {P: 20.0}})
    # any user quota beats any client-id-only quota
    r = index.resolve("bob", "app")
    assert r is not None and (r.user, r.client_id, r.bound) == ("bob", "", 10.0)
    # no quota of that kind at all
    assert QuotaIndex("consumer_byte_rate", {"users/alice": {P: 1.0}}).resolve("alice", "x") is None
    # a client-id quota is shared by every user of the client id
    index = QuotaIndex(P, {"clients/app": {P: 5.0}})
    a, b = index.resolve("alice", "app"), index.resolve("bob", "app")
    assert a is not None and b is not None and (a.user, a.client_id) == (b.user, b.client_id) == ("", "app")
    assert index.resolve("alice", "other") is None
    # users/<user> beats users/<default>/clients/<client-id>
    index = QuotaIndex(P, {"users/alice": {P: 1.0}, "users/<default>/clients/app": {P: 2.0}})
    r = index.resolve("alice", "app")
    assert r is not None and r.bound == 1.0
    r = index.resolve("bob", "app")
    assert r is not None and (r.user, r.client_id, r.bound) == ("bob", "app", 2.0)


def test_rate_has_a_minimum_window_of_num_minus_one_samples() -> None:
    rate = Rate(11, 1000)
    rate.record(10_000, 0)
    # 10 KB at once over the first 10 windows: 1 KB/s, not infinite
    assert rate.window_size(0) == 10_000
    assert rate.measure(0) == pytest.approx(1000.0)
    assert rate.window_size(500) == 10_500
    rate.record(0, 12_000)  # 12 s later: the elapsed time counts, older samples go
    assert rate.total(12_000) == 0


def test_samples_roll_and_expire() -> None:
    rate = Rate(3, 1000)
    rate.record(100, 0)
    rate.record(100, 999)  # same sample
    rate.record(100, 1000)  # the next one
    rate.record(100, 2500)
    assert rate.total(2500) == 400
    rate.record(100, 3100)  # the fourth sample reuses the first slot
    assert rate.total(3100) == 300
    assert rate.total(10_000) == 0  # every sample older than num * window: reset


def test_throttle_time_formula() -> None:
    # Kafka: (rate - bound) / bound * window
    assert throttle_time(2000.0, 1000.0, 10_000, 11_000) == 10_000
    assert throttle_time(1100.0, 1000.0, 10_000, 11_000) == 1000
    assert throttle_time(999.0, 1000.0, 10_000, 11_000) == 0
    assert throttle_time(1e9, 1.0, 10_000, 11_000) == 11_000  # capped at the whole quota window


def test_sensor_throttles_when_over_and_recovers() -> None:
    s = Sensor(11, 1000)
    bound = 1000.0
    assert s.record(10_000, bound, 0) == 0  # exactly at the bound over the 10 s minimum
    t = s.record(1000, bound, 0)  # 11 KB over 10 s: 10 % over
    assert t == 1000
    # in steady state, waiting the throttle time brings the rate back to the bound
    s = Sensor(11, 1000)
    for second in range(20):
        assert s.record(0.8 * bound, bound, second * 1000.0) == 0
    now = 20_000.0
    t = s.record(3 * bound, bound, now)
    assert t > 0
    assert s.rate.measure(now + t) == pytest.approx(bound, rel=0.05)  # samples roll meanwhile


def _simulate(
    num: int, window_ms: float, request: int, quota: float, seconds: float
) -> list[tuple[float, int]]:
    """A producer as fast as the broker lets it: each request waits the throttle time of the last."""
    s = Sensor(num, window_ms)
    now, sent = 0.0, []
    while now < seconds * 1000:
        throttle = s.record(request, quota, now)
        sent.append((now, request))
        now += 1.0 + throttle
    return sent


def test_a_greedy_producer_is_held_to_the_quota() -> None:
    q = 1_048_576.0
    sent = _simulate(5, 1000, 65536, q, 60)
    # the first window set lets about (num - 1) windows' worth through at once, then the rate holds
    for start in range(5_000, 40_000, 1000):
        got = sum(n for t, n in sent if start <= t < start + 20_000) / 20.0
        assert got == pytest.approx(q, rel=0.05)
    assert sum(n for t, n in sent if t < 100) == pytest.approx(4 * q, rel=0.05)
