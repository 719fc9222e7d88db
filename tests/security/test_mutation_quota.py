"""KIP-599: the controller mutation quota (``controller_mutation_rate``, partitions created or
deleted per second) on CreateTopics, CreatePartitions and DeleteTopics: strict for the versions
that know THROTTLING_QUOTA_EXCEEDED, permissive (charged, throttle_time_ms) for older ones."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from odradek.client import Admin
from odradek.errors import ErrorCode
from odradek.protocol.messages.create_topics import CreateTopicsRequest as C
from odradek.testing import BrokerProcess, WireClient


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(tmp_path_factory.mktemp("mutations") / "data").start()
    try:
        with Admin(bootstrap_servers=b.bootstrap) as a:
            # two partitions a second for client "tight", on average over the sample windows
            a.alter_client_quotas([({"client-id": "tight"}, {"controller_mutation_rate": 2.0})], timeout=30)
        yield b
    finally:
        b.stop()


def _create(conn: WireClient, version: int, name: str, partitions: int) -> tuple[int, int]:
    req = C(topics=[C.CreatableTopic(name=name, num_partitions=partitions, replication_factor=1)], timeout_ms=30000)
    resp = conn.request(req, version)
    return resp.topics[0].error_code, resp.throttle_time_ms


def test_strict_versions_refuse_once_over_the_quota(broker: BrokerProcess) -> None:
    conn = WireClient("127.0.0.1", broker.port, client_id="tight")
    free = WireClient("127.0.0.1", broker.port, client_id="other")
    try:
        results = [_create(conn, 7, f"mut-{uuid.uuid4().hex[:6]}-{i}", 10) for i in range(6)]
        codes = [c for c, _t in results]
        # 10 partitions a request against 2/s over ~10 s of windows: a few pass, then refusals
        assert codes[0] == 0
        assert ErrorCode.THROTTLING_QUOTA_EXCEEDED in codes, results
        refused = codes.index(ErrorCode.THROTTLING_QUOTA_EXCEEDED)
        assert results[refused][1] > 0  # and says how long to wait
        # another client id has no quota: not held
        assert _create(free, 7, f"mut-free-{uuid.uuid4().hex[:6]}", 10)[0] == 0
    finally:
        conn.close()
        free.close()
    with Admin(bootstrap_servers=broker.bootstrap) as a:
        listed = a.list_topics()
    created = sum(1 for c in codes if c == 0)
    assert sum(1 for n in listed if n.startswith("mut-") and not n.startswith("mut-free-")) == created


def test_old_versions_are_charged_and_throttled(broker: BrokerProcess) -> None:
    conn = WireClient("127.0.0.1", broker.port, client_id="tight")
    try:
        results = [_create(conn, 5, f"old-{uuid.uuid4().hex[:6]}-{i}", 10) for i in range(4)]
    finally:
        conn.close()
    assert all(c == 0 for c, _t in results), results  # CreateTopics v5 knows no such error
    assert max(t for _c, t in results) > 0
