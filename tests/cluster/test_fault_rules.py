"""The fault rules of test brokers (odradek.cluster.faults): parsing, matching, counting."""

from __future__ import annotations

import uuid

import pytest

from odradek.cluster.faults import (
    FaultScript,
    FaultSpecError,
    api_key,
    api_name,
    named_partitions,
    parse_rule,
)
from odradek.errors import ErrorCode
from odradek.protocol.messages import ApiKey
from odradek.protocol.messages.fetch import FetchRequest
from odradek.protocol.messages.produce import ProduceRequest


def _produce(*pairs: tuple[str, int]) -> ProduceRequest:
    topics: dict[str, list[int]] = {}
    for t, p in pairs:
        topics.setdefault(t, []).append(p)
    return ProduceRequest(acks=1, timeout_ms=1000, topic_data=[
        ProduceRequest.TopicProduceData(name=t, partition_data=[ProduceRequest.PartitionProduceData(index=p)
                                                                for p in ps])
        for t, ps in topics.items()
    ])


def test_api_and_error_names() -> None:
    assert api_key("Produce") == api_key("PRODUCE") == api_key(0) == ApiKey.PRODUCE
    assert api_key("OffsetCommit") == ApiKey.OFFSET_COMMIT
    assert api_name(int(ApiKey.FIND_COORDINATOR)) == "FindCoordinator"
    for bad in ("Produse", 99999, True, 1.5, None):
        with pytest.raises(FaultSpecError):
            api_key(bad)
    rule = parse_rule({"kind": "error", "api": "Fetch", "error": "not_leader_or_follower"})
    assert rule.error == ErrorCode.NOT_LEADER_OR_FOLLOWER


@pytest.mark.parametrize("spec, message", [
    ({"kind": "error", "api": "Produce"}, "needs error"),
    ({"kind": "error", "api": "Produce", "error": "NONE"}, "NONE is not an error"),
    ({"kind": "delay", "api": "Produce"}, "needs delay_ms"),
    ({"kind": "delay", "delay_ms": -1}, "delay_ms"),
    ({"kind": "hold", "delay_ms": 5}, "delay_ms is for delay"),
    ({"kind": "drop", "error": 6}, "error is for error"),
    ({"kind": "offline", "topic": "t"}, "names a topic and a partition"),
    ({"kind": "offline", "topic": "t", "partition": 0, "api": "Produce"}, "no api"),
    ({"kind": "error", "api": "Produce", "error": 6, "times": 0}, "times"),
    ({"kind": "error", "api": "Produce", "error": 6, "topic": ""}, "topic"),
    ({"kind": "error", "api": "Produce", "error": 6, "color": "red"}, "unknown field"),
    ({"kind": "explode"}, "kind"),
    ([1, 2], "JSON object"),
])
def test_bad_rules_are_refused_with_what_is_wrong(spec: object, message: str) -> None:
    with pytest.raises(FaultSpecError, match=message):
        parse_rule(spec)


def test_the_first_matching_rule_applies_and_is_counted_down() -> None:
    script = FaultScript()
    first = script.arm(parse_rule({"kind": "error", "api": "Produce", "error": 6, "times": 2, "topic": "a"}))
    script.arm(parse_rule({"kind": "delay", "api": "Produce", "delay_ms": 10}))
    assert script.match(ApiKey.PRODUCE, "c", _produce(("b", 0))).kind == "delay"  # type: ignore[union-attr]
    assert script.match(ApiKey.PRODUCE, "c", _produce(("b", 0), ("a", 3))) is first
    assert script.match(ApiKey.PRODUCE, "c", _produce(("a", 0))) is first
    assert first not in script.rules  # used up
    assert script.match(ApiKey.PRODUCE, "c", _produce(("a", 0))).kind == "delay"  # type: ignore[union-attr]
    assert script.match(ApiKey.FETCH, "c", FetchRequest()) is None
    assert [i["kind"] for i in script.injected] == ["delay", "error", "error", "delay"]


def test_client_id_partition_and_wildcard_matching() -> None:
    script = FaultScript()
    script.arm(parse_rule({"kind": "hold", "client_id": "app"}))
    assert script.match(ApiKey.METADATA, "other", None) is None
    assert script.match(ApiKey.METADATA, "app", None) is not None
    assert script.match(ApiKey.SASL_HANDSHAKE, "app", None) is None  # a wildcard never holds the SASL exchange
    script.clear()
    script.arm(parse_rule({"kind": "offline", "topic": "t", "partition": 1}))
    assert script.match(ApiKey.PRODUCE, "c", _produce(("t", 0))) is None
    rule = script.match(ApiKey.PRODUCE, "c", _produce(("t", 1)))
    assert rule is not None and rule.error == ErrorCode.KAFKA_STORAGE_ERROR
    assert script.match(ApiKey.METADATA, "c", None) is None  # offline: only the APIs that read or write it


def test_named_partitions_resolves_topic_ids() -> None:
    tid = uuid.uuid4()
    request = FetchRequest(topics=[FetchRequest.FetchTopic(topic_id=tid, partitions=[
        FetchRequest.FetchPartition(partition=2), FetchRequest.FetchPartition(partition=5)])])
    assert list(named_partitions(request, {tid: "orders"}.get)) == [("orders", 2), ("orders", 5)]
    assert list(named_partitions(_produce(("a", 1)))) == [("a", 1)]
    assert list(named_partitions(object())) == []
