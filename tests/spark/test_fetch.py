"""The executors' read of one offset range (``read_range``) against a real broker, without Spark:
the records the client reads, and data loss at either end of a range as ``failOnDataLoss``
says (raise, or skip what is gone)."""

from __future__ import annotations

import logging
from collections.abc import Generator
from typing import Any, cast

import pytest

pa = pytest.importorskip("pyarrow")

from odradek.client import Admin, SimpleConsumer  # noqa: E402
from odradek.spark import _fetch  # noqa: E402
from odradek.spark._fetch import DataLossError, read_range  # noqa: E402
from odradek.testing import BrokerProcess  # noqa: E402

from .spark_helpers import create_topic, produce  # noqa: E402


def _read(broker: BrokerProcess, topic: str, start: int, end: int, **kwargs: object) -> list[dict]:
    rows: list[dict] = []
    for batch in read_range({"bootstrap.servers": broker.bootstrap}, topic, 0, start, end, **kwargs):  # type: ignore[arg-type]
        rows.extend(batch.to_pylist())
    return rows


@pytest.mark.parametrize("direct", [True, False])
def test_a_range_reads_what_the_client_reads(broker: BrokerProcess, topic: str, direct: bool) -> None:
    create_topic(broker.bootstrap, topic, 1)
    produce(broker.bootstrap, topic, [{"value": b"v%d" % i, "key": b"k" if i % 2 else None, "partition": 0} for i in range(3000)])
    rows = _read(broker, topic, 1234, 2345, fetch_bytes=16384, direct=direct)  # many small fetches
    with SimpleConsumer({"bootstrap.servers": broker.bootstrap}) as c:
        expected, at = [], 1234
        while at < 2345:
            got = c.fetch(topic, 0, at)
            expected += [r for r in got if r.offset < 2345]
            at = got.next_offset
    assert [(r["offset"], r["key"], r["value"]) for r in rows] == [(r.offset, r.key, r.value) for r in expected]
    assert _read(broker, topic, 7, 7) == []
    # with headers, through the general path: the same rows, and no headers
    assert _read(broker, topic, 1234, 2345, include_headers=True, direct=False) == [{**r, "headers": None} for r in rows]


@pytest.mark.parametrize("direct", [True, False])
def test_the_direct_read_hands_what_it_cannot_read_to_the_general_path(
    broker: BrokerProcess, topic: str, monkeypatch: pytest.MonkeyPatch, direct: bool
) -> None:
    create_topic(broker.bootstrap, topic, 1)
    produce(broker.bootstrap, topic, [{"value": b"v%d" % i, "partition": 0} for i in range(50)])
    general: list[int] = []  # where the general path started
    real = _fetch._read

    def spy(consumer: object, pump: object, topic: str, partition: int, start: int, *args: object) -> object:
        general.append(start)
        return real(consumer, pump, topic, partition, start, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(_fetch, "_read", spy)
    assert [r["offset"] for r in _read(broker, topic, 5, 50, fetch_bytes=1024, direct=direct)] == list(range(5, 50))
    assert general == ([] if direct else [5])
    # the log ends at 50: the direct read stops there and the general path reports the loss
    rows = _read(broker, topic, 40, 100, fail_on_data_loss=False, direct=direct)
    assert [r["offset"] for r in rows] == list(range(40, 50))
    assert general == ([50] if direct else [5, 40])


def test_records_gone_at_the_start_of_a_range(broker: BrokerProcess, topic: str, caplog: pytest.LogCaptureFixture) -> None:
    create_topic(broker.bootstrap, topic, 1)
    produce(broker.bootstrap, topic, [{"value": b"v%d" % i, "partition": 0} for i in range(100)])
    with Admin({"bootstrap.servers": broker.bootstrap}) as admin:
        admin.delete_records({(topic, 0): 60})
    with pytest.raises(DataLossError, match="log now starts at offset 60"):
        _read(broker, topic, 10, 80)
    with caplog.at_level(logging.WARNING):
        rows = _read(broker, topic, 10, 80, fail_on_data_loss=False)
    assert [r["offset"] for r in rows] == list(range(60, 80))
    assert "failOnDataLoss" in caplog.text


def test_records_gone_at_the_end_of_a_range(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, 1)
    produce(broker.bootstrap, topic, [{"value": b"v%d" % i, "partition": 0} for i in range(50)])
    # planned before the topic lost its tail (recreated, unclean election): 50..99 are not there
    with pytest.raises(DataLossError, match=r"(log|now) ends at offset 50"):
        _read(broker, topic, 40, 100)
    rows = _read(broker, topic, 40, 100, fail_on_data_loss=False)
    assert [r["offset"] for r in rows] == list(range(40, 50))


def _count_opens(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    from odradek.transport.cluster import Cluster

    opened: list[int] = []
    real = Cluster.open

    def counting(self: Cluster, node_id: int, host: str, port: int) -> object:
        opened.append(node_id)
        return real(self, node_id, host, port)

    monkeypatch.setattr(Cluster, "open", counting)
    return opened


def test_the_direct_read_keeps_its_connections_for_the_next_read(
    broker: BrokerProcess, topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spark runs a worker's tasks one after another: the second range is read over the
    connection the first one opened (no new connection, no new handshake), with the same rows."""
    create_topic(broker.bootstrap, topic, 1)
    produce(broker.bootstrap, topic, [{"value": b"v%d" % i, "partition": 0} for i in range(200)])
    getattr(_fetch, "close_idle_clusters", lambda: None)()
    opened = _count_opens(monkeypatch)
    assert [r["offset"] for r in _read(broker, topic, 0, 100)] == list(range(100))
    first = len(opened)
    assert first >= 1
    assert [r["offset"] for r in _read(broker, topic, 100, 200)] == list(range(100, 200))
    assert len(opened) == first
    # a read left before its end (Spark stopping a task) does not keep a connection with a
    # fetch in flight: the next read opens its own
    batches = cast(Generator[Any, None, None], read_range({"bootstrap.servers": broker.bootstrap}, topic, 0, 0, 200, fetch_bytes=1024))
    assert next(batches).num_rows > 0
    batches.close()
    assert [r["offset"] for r in _read(broker, topic, 0, 200)] == list(range(200))
    assert len(opened) > first
    _fetch.close_idle_clusters()


def test_a_kept_connection_that_went_away_is_replaced(
    broker: BrokerProcess, topic: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kept connection the broker closed while it was idle: the next read opens new ones and
    still reads directly (not through the general path)."""
    import socket

    create_topic(broker.bootstrap, topic, 1)
    produce(broker.bootstrap, topic, [{"value": b"v%d" % i, "partition": 0} for i in range(100)])
    _fetch.close_idle_clusters()
    assert len(_read(broker, topic, 0, 100)) == 100
    kept = list(_fetch._IDLE_CLUSTERS.values())
    assert len(kept) == 1
    for conn in kept[0]._opened:  # the sockets die under the kept connections
        cast(socket.socket, conn.sock).shutdown(socket.SHUT_RDWR)
    general: list[int] = []
    real = _fetch._read

    def spy(consumer: object, pump: object, topic: str, partition: int, start: int, *args: object) -> object:
        general.append(start)
        return real(consumer, pump, topic, partition, start, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(_fetch, "_read", spy)
    opened = _count_opens(monkeypatch)
    assert [r["offset"] for r in _read(broker, topic, 0, 100)] == list(range(100))
    assert opened and general == []
    _fetch.close_idle_clusters()
