"""The message browser shows any record timestamp a producer may set (a 64-bit number of ms):
datetime covers only the years 1-9999, and a record timestamped 2^62 answered HTTP 500.  A time
to search from that Kafka cannot search for (negative, or beyond 64 bits) is the user's mistake:
400, not 500."""

from __future__ import annotations

from odradek.client import Admin, NewTopic
from odradek.records import BatchBuilder
from odradek.testing import BrokerProcess, WireClient, produce_request
from tests.console.conftest import Console
from tests.console.test_pages import _cells

STAMPS = [1_700_000_000_000, 1 << 62, (1 << 63) - 1, -1, -7, 0, 253_402_300_800_000]
SHOWN = [
    "2023-11-14 22:13:20.000Z",
    "4611686018427387904 ms",
    "9223372036854775807 ms",
    "-",
    "-7 ms",
    "1970-01-01 00:00:00.000Z",
    "253402300800000 ms",  # the first ms of the year 10000
]


def _produce_stamped(broker: BrokerProcess, topic: str) -> None:
    """One batch per record (a batch's timestamp deltas are 64-bit too), straight on the wire:
    librdkafka takes 0 and negative timestamps for "now"."""
    w = WireClient(broker.host, broker.port)
    try:
        for i, ts in enumerate(STAMPS):
            b = BatchBuilder()
            b.append(ts, f"k{i}".encode(), f"v{i}".encode())
            r = w.request(produce_request(topic, b.build(), acks=-1), 8)
            [t] = r.responses
            [p] = t.partition_responses
            assert p.error_code == 0, (ts, p.error_code)
    finally:
        w.close()


def test_any_record_timestamp_is_shown(broker: BrokerProcess, console: Console) -> None:
    with Admin(bootstrap_servers=broker.bootstrap) as admin:
        admin.create_topics([NewTopic("stamped", 1, 1)])
    _produce_stamped(broker, "stamped")
    status, body = console.get("/topics/stamped/messages?partition=0")
    assert status == 200, body[-2000:]
    rows = _cells(body, "records")
    assert [r[2] for r in rows] == SHOWN
    # every partition at once (sorted by timestamp) and the newest ones
    assert console.get("/topics/stamped/messages")[0] == 200
    assert console.get("/topics/stamped/messages?partition=0&position=latest&limit=3")[0] == 200


def test_a_time_kafka_cannot_search_for_is_refused(broker: BrokerProcess, console: Console) -> None:
    with Admin(bootstrap_servers=broker.bootstrap) as admin:
        admin.create_topics([NewTopic("searched", 1, 1)])
    for when in ("99999999999999999999", "1969-12-31T23:59:59", "0001-01-01T00:00:00"):
        status, body = console.get(f"/topics/searched/messages?partition=0&position=timestamp&timestamp={when}")
        assert status == 400, (when, status, body[-500:])
    assert console.get("/topics/searched/messages?partition=0&position=timestamp&timestamp=9999-12-31T23:59:59")[0] == 200
