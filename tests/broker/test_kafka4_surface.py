"""The Kafka 4.x requests clients probe for, answered as a Kafka 4 broker answers them:

- DescribeTopicPartitions (75, KIP-966) pages through topics and partitions with a cursor, at most
  ``ResponsePartitionLimit`` partitions a page (kafka-python's describe_topic_partitions);
- ListOffsets v9-v11: EARLIEST_LOCAL (-4) is the log start, LATEST_TIERED (-5) and
  EARLIEST_PENDING_UPLOAD (-6) are offset -1 without tiered storage, and a special timestamp the
  request's version does not know is UNSUPPORTED_VERSION;
- Produce v13 names topics by id (UNKNOWN_TOPIC_ID for an unknown one) and answers with the ids;
  Fetch v18 and Metadata v13 are served.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.admin import KafkaAdminClient

from odradek.errors import ErrorCode
from odradek.protocol.messages.describe_topic_partitions import DescribeTopicPartitionsRequest
from odradek.protocol.messages.fetch import FetchRequest
from odradek.protocol.messages.list_offsets import ListOffsetsRequest
from odradek.protocol.messages.metadata import MetadataRequest
from odradek.protocol.messages.produce import ProduceRequest
from odradek.records import BatchBuilder
from odradek.testing import BrokerProcess, WireClient

T = 30.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path_factory.mktemp("kafka4") / "data") as b:
        yield b


@pytest.fixture
def wire(broker: BrokerProcess) -> Iterator[WireClient]:
    w = WireClient(broker.host, broker.port, "kafka4-test")
    try:
        yield w
    finally:
        w.close()


def _topics(broker: BrokerProcess, counts: dict[str, int]) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic(n, c, 1) for n, c in counts.items()]).values():
        f.result(T)


def _topic_id(wire: WireClient, name: str) -> uuid.UUID:
    r = wire.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=name)]), 12)
    return r.topics[0].topic_id  # type: ignore[no-any-return]


def test_describe_topic_partitions_pages_with_a_cursor(broker: BrokerProcess) -> None:
    prefix = f"dtp-{uuid.uuid4().hex[:6]}"
    a, b, c = f"{prefix}-a", f"{prefix}-b", f"{prefix}-c"
    _topics(broker, {a: 3, b: 4, c: 2})
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
    try:
        # named topics (given out of order, with an unknown one): sorted, 2 partitions a page
        seen: list[tuple[str, int]] = []
        errors: dict[str, int] = {}
        cursor = None
        pages = 0
        while True:
            page = admin.describe_topic_partitions([c, "nope-" + prefix, a, b], response_partition_limit=2,
                                                   cursor=cursor)
            pages += 1
            assert sum(len(t["partitions"]) for t in page["topics"]) <= 2
            for t in page["topics"]:
                if t["error_code"]:
                    errors[t["name"]] = t["error_code"]
                    continue
                assert t["topic_id"] != uuid.UUID(int=0)
                seen += [(t["name"], p["partition_index"]) for p in t["partitions"]]
                assert all(p["leader_id"] == 0 and p["isr_nodes"] == [0] for p in t["partitions"])
            cursor = page["next_cursor"]
            if cursor is None:
                break
            assert pages < 20
        expected = [(a, i) for i in range(3)] + [(b, i) for i in range(4)] + [(c, i) for i in range(2)]
        assert seen == expected
        assert pages == 5
        assert errors == {"nope-" + prefix: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
        # a page that ends with a topic points to the start of the next
        page = admin.describe_topic_partitions([a, b, c], response_partition_limit=7)
        assert [(t["name"], len(t["partitions"])) for t in page["topics"]] == [(a, 3), (b, 4)]
        assert page["next_cursor"] == {"topic_name": c, "partition_index": 0}
        # a page that ends inside a topic points into it
        page = admin.describe_topic_partitions([a, b, c], response_partition_limit=5)
        assert page["next_cursor"] == {"topic_name": b, "partition_index": 2}
    finally:
        admin.close()


def test_the_broker_caps_the_partitions_a_page_may_carry(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "data", overrides={"max.request.partition.size.limit": 2}) as broker:
        name = f"dtp-cap-{uuid.uuid4().hex[:6]}"
        _topics(broker, {name: 5})
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=10000)
        try:
            page = admin.describe_topic_partitions([name], response_partition_limit=2000)
        finally:
            admin.close()
    assert [len(t["partitions"]) for t in page["topics"]] == [2]
    assert page["next_cursor"] == {"topic_name": name, "partition_index": 2}


def test_describe_topic_partitions_refuses_a_cursor_outside_the_topics(broker: BrokerProcess, wire: WireClient) -> None:
    name = f"dtp-cursor-{uuid.uuid4().hex[:6]}"
    _topics(broker, {name: 1})
    Q = DescribeTopicPartitionsRequest
    r = wire.request(Q(topics=[Q.TopicRequest(name=name)], cursor=Q.Cursor(topic_name="zzz", partition_index=0)), 0)
    assert [t.error_code for t in r.topics] == [ErrorCode.INVALID_REQUEST]
    r = wire.request(Q(topics=[Q.TopicRequest(name=name)], cursor=Q.Cursor(topic_name=name, partition_index=-1)), 0)
    assert [t.error_code for t in r.topics] == [ErrorCode.INVALID_REQUEST]
    # every topic: this one among them, from the cursor on
    r = wire.request(Q(topics=[], cursor=Q.Cursor(topic_name=name, partition_index=0)), 0)
    assert r.topics[0].name == name and r.topics[0].error_code == 0


def _list_offsets(wire: WireClient, topic: str, timestamp: int, version: int) -> tuple[int, int, int, int]:
    Q = ListOffsetsRequest
    r = wire.request(Q(replica_id=-1, topics=[Q.ListOffsetsTopic(name=topic, partitions=[
        Q.ListOffsetsPartition(partition_index=0, timestamp=timestamp)
    ])]), version)
    p = r.topics[0].partitions[0]
    return p.error_code, p.timestamp, p.offset, p.leader_epoch


def _produce(wire: WireClient, topic: str, n: int) -> None:
    b = BatchBuilder()
    for i in range(n):
        b.append(int(time.time() * 1000), None, b"v%d" % i)
    req = ProduceRequest(acks=-1, timeout_ms=10000, topic_data=[ProduceRequest.TopicProduceData(
        name=topic, partition_data=[ProduceRequest.PartitionProduceData(index=0, records=bytes(b.build()))]
    )])
    assert wire.request(req, 9).responses[0].partition_responses[0].error_code == 0


def test_list_offsets_special_timestamps_without_tiered_storage(broker: BrokerProcess, wire: WireClient) -> None:
    topic = f"lo-{uuid.uuid4().hex[:6]}"
    _topics(broker, {topic: 1})
    _produce(wire, topic, 3)
    assert _list_offsets(wire, topic, -4, 11) == (0, -1, 0, 0)  # earliest local: the log start
    assert _list_offsets(wire, topic, -5, 11) == (0, -1, -1, -1)  # latest tiered: none
    assert _list_offsets(wire, topic, -6, 11) == (0, -1, -1, -1)  # earliest pending upload: none
    assert _list_offsets(wire, topic, -1, 11)[2] == 3
    # a special timestamp the version does not know
    assert _list_offsets(wire, topic, -5, 8)[0] == ErrorCode.UNSUPPORTED_VERSION
    assert _list_offsets(wire, topic, -6, 10)[0] == ErrorCode.UNSUPPORTED_VERSION
    assert _list_offsets(wire, topic, -4, 7)[0] == ErrorCode.UNSUPPORTED_VERSION
    assert _list_offsets(wire, topic, -3, 6)[0] == ErrorCode.UNSUPPORTED_VERSION
    assert _list_offsets(wire, topic, -9, 11)[0] == ErrorCode.UNSUPPORTED_VERSION


def test_produce_v13_by_topic_id_and_the_newest_fetch_and_metadata(broker: BrokerProcess, wire: WireClient) -> None:
    topic = f"ids-{uuid.uuid4().hex[:6]}"
    _topics(broker, {topic: 1})
    tid = _topic_id(wire, topic)
    b = BatchBuilder()
    b.append(int(time.time() * 1000), None, b"by-id")
    P = ProduceRequest
    unknown = uuid.uuid4()
    r = wire.request(P(acks=-1, timeout_ms=10000, topic_data=[
        P.TopicProduceData(topic_id=tid, partition_data=[P.PartitionProduceData(index=0, records=bytes(b.build()))]),
        P.TopicProduceData(topic_id=unknown, partition_data=[P.PartitionProduceData(index=0, records=bytes(b.build()))]),
    ]), 13)
    assert [(t.topic_id, t.partition_responses[0].error_code) for t in r.responses] == [
        (tid, 0), (unknown, ErrorCode.UNKNOWN_TOPIC_ID),
    ]
    F = FetchRequest
    f = wire.request(F(max_wait_ms=0, min_bytes=0, max_bytes=1 << 20, topics=[F.FetchTopic(topic_id=tid, partitions=[
        F.FetchPartition(partition=0, fetch_offset=0, partition_max_bytes=1 << 20)
    ])]), 18)
    assert f.responses[0].topic_id == tid and f.responses[0].partitions[0].high_watermark == 1
    m = wire.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(topic_id=tid, name=None)]), 13)
    assert (m.error_code, m.topics[0].name) == (0, topic)


def test_a_request_over_the_decoding_limits_closes_its_connection_only(broker: BrokerProcess) -> None:
    """Kafka 4.4 refuses a request declaring more than 1,000,000 array elements (the frame is
    2 MB, well under socket.request.max.bytes): the connection is closed, others go on."""
    import socket
    import struct

    body = struct.pack(">i", 1_000_001) + b"\x00\x00" * 1_000_001  # DescribeGroups v0: empty group ids
    header = struct.pack(">hhih", 15, 0, 1, 1) + b"x"
    frame = struct.pack(">i", len(header) + len(body)) + header + body
    s = socket.create_connection((broker.host, broker.port), timeout=T)
    try:
        s.sendall(frame)
        s.settimeout(T)
        assert s.recv(4) == b""  # closed, unanswered
    finally:
        s.close()
    w = WireClient(broker.host, broker.port, "after")
    try:
        r = w.request(MetadataRequest(topics=[]), 12)
        assert r.topics == []
    finally:
        w.close()
