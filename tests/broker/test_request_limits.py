"""Bounds on one request's cost: topic counts read before decoding (the reading itself is tested
in tests/protocol/test_inspection.py), auto-creation per request."""

from __future__ import annotations

import socket
import struct
from pathlib import Path

from odradek.protocol.messages.metadata import MetadataRequest
from odradek.testing import BrokerProcess, WireClient


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
