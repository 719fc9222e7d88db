"""Client telemetry (KIP-714): the receiver's rules on fake time, the pushes it refuses (a
hypothesis property test of hostile payloads), and the two APIs and client-metrics configs on a
broker in this process.

Kafka's ClientMetricsManager is the oracle for the error codes: a push with another subscription
id is UNKNOWN_SUBSCRIPTION_ID, one before the push interval THROTTLING_QUOTA_EXCEEDED (but the
first after a GetTelemetrySubscriptions, and a terminating one, are taken), anything after a
terminating push INVALID_REQUEST, a payload over telemetry.max.bytes (compressed, or once
decompressed) TELEMETRY_TOO_LARGE, an undecodable one INVALID_RECORD, an unknown codec
UNSUPPORTED_COMPRESSION_TYPE.
"""

from __future__ import annotations

import asyncio
import gzip
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from opentelemetry.proto.metrics.v1 import metrics_pb2

from odradek.broker import telemetry as telemetry_module
from odradek.broker.telemetry import ClientTelemetry
from odradek.cluster.client_metrics import ClientInfo, decode_push, subscription_id, subscriptions, validate
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol.messages.api_versions import ApiVersionsRequest
from odradek.protocol.messages.describe_configs import DescribeConfigsRequest
from odradek.protocol.messages.get_telemetry_subscriptions import GetTelemetrySubscriptionsRequest
from odradek.protocol.messages.incremental_alter_configs import IncrementalAlterConfigsRequest
from odradek.protocol.messages.list_config_resources import ListConfigResourcesRequest
from odradek.protocol.messages.push_telemetry import PushTelemetryRequest
from odradek.records.compression import Compression, compress
from odradek.testing import BrokerProcess, FakeScheduler, WireClient, running_broker

ZERO = uuid.UUID(int=0)
CLIENT = ClientInfo("", "app-1", "librdkafka", "2.16.0", "127.0.0.1", "")
MAX = 64 * 1024


def metrics_data(points: dict[str, float], *, sum_: bool = False, attrs: dict[str, str] | None = None) -> bytes:
    md = metrics_pb2.MetricsData()
    sm = md.resource_metrics.add().scope_metrics.add()
    for name, value in points.items():
        m = sm.metrics.add()
        m.name = name
        dp = m.sum.data_points.add() if sum_ else m.gauge.data_points.add()
        if sum_:
            m.sum.is_monotonic = True
            m.sum.aggregation_temporality = metrics_pb2.AGGREGATION_TEMPORALITY_CUMULATIVE
        dp.as_double = value
        for k, v in (attrs or {}).items():
            a = dp.attributes.add()
            a.key, a.value.string_value = k, v
    return md.SerializeToString()


def receiver(stored: dict[str, dict[str, str]] | None = None) -> tuple[ClientTelemetry, FakeScheduler]:
    fake = FakeScheduler()
    subs = {"all": {"metrics": "org.apache.kafka.", "interval.ms": "1000"}} if stored is None else stored
    return ClientTelemetry(fake, MAX, lambda: subs), fake


def code(fn: object, *args: object) -> ErrorCode:
    try:
        fn(*args)  # type: ignore[operator]
    except KafkaError as exc:
        return exc.code
    return ErrorCode.NONE


# -- subscriptions -------------------------------------------------------------------------------


def test_subscription_configs_are_checked_as_kafka_does() -> None:
    assert code(validate, "s", {"metrics": "a", "interval.ms": "100", "match": "client_id=a.*"}) == ErrorCode.NONE
    assert code(validate, "s", {"interval": "100"}) == ErrorCode.INVALID_REQUEST  # unknown name
    assert code(validate, "s", {"interval.ms": "99"}) == ErrorCode.INVALID_CONFIG
    assert code(validate, "s", {"interval.ms": "3600001"}) == ErrorCode.INVALID_CONFIG
    assert code(validate, "s", {"match": "client_colour=red"}) == ErrorCode.INVALID_CONFIG
    assert code(validate, "s", {"match": "client_id=("}) == ErrorCode.INVALID_CONFIG
    assert code(validate, " ", {}) == ErrorCode.INVALID_REQUEST


def test_a_client_gets_the_union_of_the_subscriptions_it_matches_and_the_shortest_interval() -> None:
    tel, _ = receiver({
        "producers": {"metrics": "org.apache.kafka.producer.", "interval.ms": "5000", "match": "client_id=app-.*"},
        "rdkafka": {"metrics": "org.apache.kafka.consumer.", "interval.ms": "2000",
                    "match": "client_software_name=librdkafka,client_software_version=2\\..*"},
        "others": {"metrics": "*", "interval.ms": "100", "match": "client_id=other"},
    })
    got = tel.get_subscriptions(ZERO, CLIENT)
    assert got.client_instance_id != ZERO  # a new instance id for a client that sent zero
    assert got.metrics == ("org.apache.kafka.consumer.", "org.apache.kafka.producer.")
    assert got.push_interval_ms == 2000
    assert got.subscription_id == subscription_id(got.metrics, 2000, got.client_instance_id)
    assert got.accepted_compression[0] == Compression.ZSTD
    # a client no subscription matches: no metrics, the default interval (5 minutes)
    none = tel.get_subscriptions(ZERO, ClientInfo("", "x", "java", "4.3", "10.0.0.1", ""))
    assert none.metrics == () and none.push_interval_ms == 300_000
    # '*' wins: every metric
    other = tel.get_subscriptions(ZERO, ClientInfo("", "other", "java", "4.3", "10.0.0.1", ""))
    assert other.metrics == ("*",) and other.push_interval_ms == 100


def test_an_invalid_stored_subscription_is_ignored() -> None:
    assert [s.name for s in subscriptions({"bad": {"interval.ms": "5"}, "good": {"metrics": "a"}})] == ["good"]


# -- the push rules, on fake time -----------------------------------------------------------------


def test_push_rules() -> None:
    tel, fake = receiver()
    got = tel.get_subscriptions(ZERO, CLIENT)
    iid, sid = got.client_instance_id, got.subscription_id
    body = gzip.compress(metrics_data({"org.apache.kafka.producer.record.send.total": 7.0}))
    # asking again before the interval: throttled
    assert code(tel.get_subscriptions, iid, CLIENT) == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    # the first push after the fetch is taken at once
    tel.push(iid, CLIENT, sid, False, Compression.GZIP, body)
    # the next one before the interval is throttled, after it is taken
    assert code(tel.push, iid, CLIENT, sid, False, Compression.GZIP, body) == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    fake.tick(1000)
    assert code(tel.push, iid, CLIENT, sid + 1, False, Compression.GZIP, body) == ErrorCode.UNKNOWN_SUBSCRIPTION_ID
    # after UNKNOWN_SUBSCRIPTION_ID the client may fetch its subscription again at once
    again = tel.get_subscriptions(iid, CLIENT)
    assert again.client_instance_id == iid and again.subscription_id == sid
    fake.tick(1000)
    assert code(tel.push, iid, CLIENT, sid, False, 9, body) == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    fake.tick(1000)
    # a terminating push is taken even before the interval; nothing is taken after it
    tel.push(iid, CLIENT, sid, True, Compression.GZIP, body)
    assert code(tel.push, iid, CLIENT, sid, True, Compression.GZIP, body) == ErrorCode.INVALID_REQUEST
    assert code(tel.push, ZERO, CLIENT, sid, False, Compression.NONE, b"") == ErrorCode.INVALID_REQUEST


def test_a_changed_subscription_gives_a_new_subscription_id() -> None:
    stored = {"s": {"metrics": "org.apache.kafka.producer.", "interval.ms": "1000"}}
    tel, fake = receiver(stored)
    got = tel.get_subscriptions(ZERO, CLIENT)
    stored["s"] = {"metrics": "org.apache.kafka.", "interval.ms": "1000"}
    fake.tick(1000)
    assert code(tel.push, got.client_instance_id, CLIENT, got.subscription_id, False, 0, b"") == (
        ErrorCode.UNKNOWN_SUBSCRIPTION_ID
    )
    new = tel.get_subscriptions(got.client_instance_id, CLIENT)
    assert new.subscription_id != got.subscription_id and new.metrics == ("org.apache.kafka.",)


def _samples(tel: ClientTelemetry) -> dict[str, list[tuple[dict[str, str], float]]]:
    return {f.name: [(s.labels, s.value) for s in f.samples] for f in tel.families()}


def test_pushed_metrics_are_shown_per_client_and_forgotten_after_three_intervals() -> None:
    tel, fake = receiver()
    got = tel.get_subscriptions(ZERO, CLIENT)
    payload = compress(Compression.ZSTD, metrics_data({"org.apache.kafka.producer.record-send.total": 7.0},
                                                      sum_=True, attrs={"topic": "t"}))
    tel.push(got.client_instance_id, CLIENT, got.subscription_id, False, Compression.ZSTD, payload)
    name = "kafka_client_org_apache_kafka_producer_record_send_total"
    labels = {"topic": "t", "client_instance_id": str(got.client_instance_id), "client_id": "app-1"}
    assert _samples(tel)[name] == [(labels, 7.0)]
    fake.tick(59_999)  # three intervals are 3 s, but an instance is kept a minute at least
    assert name in _samples(tel)
    fake.tick(1)
    assert name not in _samples(tel)
    assert _samples(tel)["odradek_client_telemetry_instances"] == [({}, 0)]


def test_clients_and_series_are_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(telemetry_module, "MAX_CLIENTS", 5)
    monkeypatch.setattr(telemetry_module, "MAX_SERIES_PER_CLIENT", 3)
    monkeypatch.setattr(telemetry_module, "MAX_SERIES", 8)
    tel, _ = receiver()
    many = metrics_data({f"org.apache.kafka.m{i}": float(i) for i in range(10)})
    for _ in range(20):
        got = tel.get_subscriptions(ZERO, CLIENT)
        tel.push(got.client_instance_id, CLIENT, got.subscription_id, False, 0, many)
    samples = _samples(tel)
    assert samples["odradek_client_telemetry_instances"] == [({}, 5)]
    series = sum(len(v) for k, v in samples.items() if k.startswith("kafka_client_"))
    assert series == samples["odradek_client_telemetry_series"][0][1] <= 8
    assert samples["odradek_client_telemetry_dropped_points"][0][1] > 0


# -- hostile payloads ------------------------------------------------------------------------------


def test_a_compression_bomb_is_refused_without_decompressing_it_all() -> None:
    for codec in (Compression.GZIP, Compression.LZ4, Compression.ZSTD, Compression.SNAPPY):
        # snappy packs at most ~21:1
        packed = compress(codec, b"\0" * ((4 if codec == Compression.SNAPPY else 64) * MAX))
        assert len(packed) < MAX
        with pytest.raises(KafkaError) as info:
            decode_push(packed, codec, MAX)
        assert info.value.code == ErrorCode.TELEMETRY_TOO_LARGE, codec
    with pytest.raises(KafkaError) as info:
        decode_push(b"\0" * (MAX + 1), 0, MAX)
    assert info.value.code == ErrorCode.TELEMETRY_TOO_LARGE


def test_every_codec_is_decoded() -> None:
    raw = metrics_data({"org.apache.kafka.a": 1.5})
    for codec in Compression:
        points = decode_push(compress(codec, raw) if codec else raw, codec, MAX)
        assert [(p.name, p.value) for p in points] == [("org_apache_kafka_a", 1.5)], codec


_EXPECTED_REFUSALS = {
    ErrorCode.NONE, ErrorCode.INVALID_RECORD, ErrorCode.TELEMETRY_TOO_LARGE, ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
    ErrorCode.UNKNOWN_SUBSCRIPTION_ID,
}


@st.composite
def hostile_pushes(draw: st.DrawFn) -> tuple[int, int, bytes]:
    """(subscription id offset, codec, payload): garbage, truncated or corrupted OTLP, bombs."""
    kind = draw(st.sampled_from(["garbage", "otlp", "truncated", "flipped", "bomb"]))
    codec = draw(st.sampled_from([0, 1, 2, 3, 4, 5, 7, -1, 127]))
    real = int(codec) in Compression._value2member_map_
    if kind == "garbage":
        payload = draw(st.binary(max_size=512))
    elif kind == "bomb" and real:
        payload = compress(codec, b"\x0a" * draw(st.integers(MAX + 1, 8 * MAX)))
    else:
        points = draw(st.dictionaries(st.text(max_size=20), st.floats(allow_nan=False), max_size=5))
        raw = metrics_data(points)
        payload = compress(codec, raw) if real and codec else raw
        if kind == "truncated" and payload:
            payload = payload[: draw(st.integers(0, len(payload) - 1))]
        elif kind == "flipped" and payload:
            i = draw(st.integers(0, len(payload) - 1))
            payload = payload[:i] + bytes([payload[i] ^ draw(st.integers(1, 255))]) + payload[i + 1 :]
    return draw(st.sampled_from([0, 0, 0, 1, -1])), codec, payload


@given(hostile_pushes())
def test_hostile_pushes_get_kafkas_errors_and_store_nothing_bad(push: tuple[int, int, bytes]) -> None:
    offset, codec, payload = push
    tel, _ = receiver()
    got = tel.get_subscriptions(ZERO, CLIENT)
    result = code(tel.push, got.client_instance_id, CLIENT, got.subscription_id + offset, False, codec, payload)
    assert result in _EXPECTED_REFUSALS
    if offset:
        assert result == ErrorCode.UNKNOWN_SUBSCRIPTION_ID
    elif int(codec) not in Compression._value2member_map_:
        assert result == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    if result != ErrorCode.NONE:
        assert _samples(tel)["odradek_client_telemetry_series"] == [({}, 0)]
    # the receiver goes on serving: another client's push is taken
    other = tel.get_subscriptions(ZERO, CLIENT)
    tel.push(other.client_instance_id, CLIENT, other.subscription_id, False, 0, metrics_data({"org.apache.kafka.x": 1}))


# -- on a broker -----------------------------------------------------------------------------------


def _alter(name: str, **configs: str | None) -> IncrementalAlterConfigsRequest:
    R = IncrementalAlterConfigsRequest
    return R(resources=[R.AlterConfigsResource(resource_type=16, resource_name=name, configs=[
        R.AlterableConfig(name=k.replace("_", "."), config_operation=0 if v is not None else 1, value=v)
        for k, v in configs.items()
    ])])


def test_the_apis_and_client_metrics_configs_on_a_broker(tmp_path: Path) -> None:
    async def run() -> None:
        async with running_broker(tmp_path / "on", overrides={"metrics.port": 0, "telemetry.max.bytes": 4096}) as b:
            host, port = b.bound["PLAINTEXT"]
            url = b.metrics_url
            assert url is not None
            await asyncio.to_thread(_on_broker, host, port, url)
        async with running_broker(tmp_path / "off", overrides={"metrics.port": -1}) as b:
            host, port = b.bound["PLAINTEXT"]
            await asyncio.to_thread(_not_advertised, host, port)

    asyncio.run(run())


def _not_advertised(host: str, port: int) -> None:
    w = WireClient(host, port, "app-1")
    try:
        keys = {k.api_key for k in w.request(ApiVersionsRequest(), 3).api_keys}
        assert not keys & {71, 72}
    finally:
        w.close()


#: the client software from ApiVersions, the address and port of the connection
MATCH = r"client_software_name=odradek-test,client_source_address=127\.0\.0\.1,client_source_port=\d+"


def _on_broker(host: str, port: int, url: str) -> None:
    w = WireClient(host, port, "app-1")
    try:
        keys = {k.api_key for k in w.request(
            ApiVersionsRequest(client_software_name="odradek-test", client_software_version="1.0"), 3
        ).api_keys}
        assert {71, 72, 74} <= keys
        # Kafka's checks of a subscription's configs
        bad = w.request(_alter("s", interval_ms="50"), 1).responses[0]
        assert bad.error_code == ErrorCode.INVALID_CONFIG
        bad = w.request(_alter("s", colour="red"), 1).responses[0]
        assert bad.error_code == ErrorCode.INVALID_REQUEST
        ok = w.request(_alter("s", metrics="org.apache.kafka.producer.", interval_ms="1000",
                              match=MATCH), 1).responses[0]
        assert ok.error_code == 0
        described = w.request(DescribeConfigsRequest(resources=[DescribeConfigsRequest.DescribeConfigsResource(
            resource_type=16, resource_name="s", configuration_keys=None)]), 4).results[0]
        assert {c.name: c.value for c in described.configs} == {
            "metrics": "org.apache.kafka.producer.", "interval.ms": "1000", "match": MATCH
        }
        listed = w.request(ListConfigResourcesRequest(resource_types=[16]), 1).config_resources
        assert [(r.resource_name, r.resource_type) for r in listed] == [("s", 16)]
        assert [r.resource_name for r in w.request(ListConfigResourcesRequest(), 0).config_resources] == ["s"]
        # the subscription reaches the client, telemetry.max.bytes too
        got = w.request(GetTelemetrySubscriptionsRequest(), 0)
        assert got.error_code == 0 and got.client_instance_id != ZERO
        assert got.requested_metrics == ["org.apache.kafka.producer."] and got.push_interval_ms == 1000
        assert got.telemetry_max_bytes == 4096
        body = metrics_data({"org.apache.kafka.producer.record.send.total": 42.0})
        wrong = w.request(PushTelemetryRequest(client_instance_id=got.client_instance_id,
                                               subscription_id=got.subscription_id + 1, metrics=body), 0)
        assert wrong.error_code == ErrorCode.UNKNOWN_SUBSCRIPTION_ID
        again = w.request(GetTelemetrySubscriptionsRequest(client_instance_id=got.client_instance_id), 0)
        assert again.error_code == 0 and again.subscription_id == got.subscription_id
        pushed = w.request(PushTelemetryRequest(client_instance_id=got.client_instance_id,
                                                subscription_id=got.subscription_id, metrics=body), 0)
        assert pushed.error_code == 0
        # another instance's push that decompresses beyond telemetry.max.bytes
        other = w.request(GetTelemetrySubscriptionsRequest(), 0)
        big = w.request(PushTelemetryRequest(client_instance_id=other.client_instance_id,
                                             subscription_id=other.subscription_id, compression_type=1,
                                             metrics=gzip.compress(b"\0" * 100_000)), 0)
        assert big.error_code == ErrorCode.TELEMETRY_TOO_LARGE
        with urllib.request.urlopen(url, timeout=10) as response:
            text = response.read().decode()
        assert (
            f'kafka_client_org_apache_kafka_producer_record_send_total{{client_id="app-1",'
            f'client_instance_id="{got.client_instance_id}"}} 42.0'
        ) in text
        # removing every config removes the subscription
        assert w.request(_alter("s", metrics=None, interval_ms=None, match=None), 1).responses[0].error_code == 0
        assert w.request(ListConfigResourcesRequest(resource_types=[16]), 1).config_resources == []
    finally:
        w.close()


@pytest.fixture(scope="module")
def broker_process(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(
        tmp_path_factory.mktemp("telemetry-wire") / "data", overrides={"telemetry.max.bytes": MAX},
        extra_args=["--metrics-port", "0"],
    ) as b:
        w = WireClient(b.host, b.port, "setup")
        try:
            assert w.request(_alter("all", metrics="*", interval_ms="60000"), 1).responses[0].error_code == 0
        finally:
            w.close()
        yield b


@given(push=hostile_pushes())
def test_hostile_pushes_on_the_wire_get_kafkas_errors_and_the_broker_keeps_serving(
    broker_process: BrokerProcess, push: tuple[int, int, bytes]
) -> None:
    offset, codec, payload = push
    w = WireClient(broker_process.host, broker_process.port, "hostile")
    try:
        got = w.request(GetTelemetrySubscriptionsRequest(), 0)
        assert got.error_code == 0
        answer = w.request(PushTelemetryRequest(
            client_instance_id=got.client_instance_id, subscription_id=got.subscription_id + offset,
            compression_type=codec, metrics=payload,
        ), 0)
        assert answer.error_code in _EXPECTED_REFUSALS
        if offset:
            assert answer.error_code == ErrorCode.UNKNOWN_SUBSCRIPTION_ID
        elif int(codec) not in Compression._value2member_map_:
            assert answer.error_code == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
        # the same connection, and a new one, are still served
        assert w.request(ApiVersionsRequest(), 3).error_code == 0
    finally:
        w.close()
    other = WireClient(broker_process.host, broker_process.port, "bystander")
    try:
        assert other.request(ApiVersionsRequest(), 3).error_code == 0
    finally:
        other.close()
