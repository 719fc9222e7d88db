"""Bounds on one request's cost: topic counts read before decoding, auto-creation per request."""

from __future__ import annotations

import socket
import struct
from pathlib import Path

import pytest

from odradek.broker.server import RequestTooLarge, check_request_size, request_topic_count
from odradek.protocol import RequestHeader, encode_request
from odradek.protocol.messages.create_topics import CreateTopicsRequest
from odradek.protocol.messages.delete_records import DeleteRecordsRequest
from odradek.protocol.messages.delete_topics import DeleteTopicsRequest
from odradek.protocol.messages.list_offsets import ListOffsetsRequest
from odradek.protocol.messages.metadata import MetadataRequest
from odradek.testing import BrokerProcess, WireClient


def _encoded(message: object, version: int, client_id: str | None = "a-client") -> bytearray:
    header = RequestHeader(api_key=message.API_KEY, api_version=version, correlation_id=7, client_id=client_id)  # type: ignore[attr-defined]
    return bytearray(encode_request(header, message))  # type: ignore[arg-type]


@pytest.mark.parametrize("version", range(0, 13))
@pytest.mark.parametrize("count", [0, 1, 3, 200])
def test_metadata_topic_count_is_read_from_the_raw_frame(version: int, count: int) -> None:
    if version == 0 and count == 0:
        return  # v0: an empty list means every topic (same bytes as any empty array)
    topics = [MetadataRequest.MetadataRequestTopic(name=f"t{i}") for i in range(count)]
    assert request_topic_count(_encoded(MetadataRequest(topics=topics), version)) == count
    assert request_topic_count(_encoded(MetadataRequest(topics=topics), version, client_id=None)) == count


@pytest.mark.parametrize("version", range(1, 13))
def test_a_null_metadata_topic_list_has_no_count(version: int) -> None:
    assert request_topic_count(_encoded(MetadataRequest(topics=None), version)) is None


def test_other_apis_with_a_leading_topic_array() -> None:
    for v in range(0, 8):
        t = [CreateTopicsRequest.CreatableTopic(name=f"t{i}", num_partitions=1, replication_factor=1) for i in range(4)]
        assert request_topic_count(_encoded(CreateTopicsRequest(topics=t), v)) == 4
    for v in range(0, 3):
        d = [DeleteRecordsRequest.DeleteRecordsTopic(name=f"t{i}") for i in range(5)]
        assert request_topic_count(_encoded(DeleteRecordsRequest(topics=d), v)) == 5
    for v in range(0, 6):
        assert request_topic_count(_encoded(DeleteTopicsRequest(topic_names=["a", "b"]), v)) == 2
    for v in range(0, 9):
        lo = [ListOffsetsRequest.ListOffsetsTopic(name=f"t{i}") for i in range(6)]
        assert request_topic_count(_encoded(ListOffsetsRequest(replica_id=-1, topics=lo), v)) == 6


def test_garbage_has_no_count_and_the_check_refuses_only_above_the_limit() -> None:
    assert request_topic_count(bytearray(b"\x00\x03")) is None
    assert request_topic_count(bytearray(b"\xff\xff\x00\x01" + b"\x00" * 20)) is None
    frame = _encoded(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="x")] * 11), 1)
    check_request_size(11, frame)
    with pytest.raises(RequestTooLarge, match="11 topics"):
        check_request_size(10, frame)


def test_a_request_naming_too_many_topics_closes_only_its_connection(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "data", log_level="INFO", overrides={"request.max.topics": 100}) as broker:
        s = socket.create_connection((broker.host, broker.port), timeout=10)
        count = 101
        body = struct.pack(">hhih", 3, 1, 1, -1) + struct.pack(">i", count) + b"\x00\x01x" * count
        s.sendall(struct.pack(">i", len(body)) + body)
        assert s.recv(100) == b""  # closed, no answer (Metadata has no top-level error code)
        s.close()
        c = WireClient(broker.host, broker.port)
        ok = c.request(MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="x")] * 100), 1)
        assert len(ok.topics) == 100
        c.close()
        broker.wait_for_log("request.max.topics=100", "WARNING")


def test_auto_creation_per_request_is_bounded(tmp_path: Path) -> None:
    with BrokerProcess(
        tmp_path / "data", log_level="INFO", overrides={"auto.create.topics.max.per.request": 5}
    ) as broker:
        c = WireClient(broker.host, broker.port)
        names = [f"auto-{i}" for i in range(8)]
        req = MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name=n) for n in names])
        first = c.request(req, 12)
        codes = {t.name: t.error_code for t in first.topics}
        assert [codes[n] for n in names[:5]] == [0] * 5
        assert [codes[n] for n in names[5:]] == [5] * 3  # LEADER_NOT_AVAILABLE: retriable
        again = c.request(req, 12)  # asking again creates the rest
        assert all(t.error_code == 0 for t in again.topics)
        c.close()
        broker.wait_for_log("auto.create.topics.max.per.request=5")
