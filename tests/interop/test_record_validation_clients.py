"""Reading every record on append refuses nothing real clients write: confluent-kafka's
transactional and idempotent producers with every codec, headers, null keys and empty values,
on a compacted and a log-append-time topic, with the control batches the broker writes itself;
kafka-python's magic 0 and 1 message sets, compressed.  Everything is read back by librdkafka
(read_committed) and by Odradek's consumer, and ``dump-log --verify`` finds no problem in the
data the broker wrote (its record checks have no false alarm)."""

from __future__ import annotations

import io
from typing import Any

import confluent_kafka as ck
import pytest

from odradek.cli.dump_log import verify_paths
from odradek.client.consumer_simple import SimpleConsumer
from odradek.testing import BrokerProcess

from .interop_helpers import (
    consume,
    create_topic,
    kp_send,
    partition_dir,
    producer,
    stored_batches,
    wait_until,
)

pytestmark = pytest.mark.interop

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def _records(n: int, tag: str) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        rec: dict[str, Any] = {
            "key": None if i % 4 == 1 else f"{tag}-key-{i % 7}".encode(),
            "value": b"" if i % 5 == 2 else f"{tag}-value-{i}".encode() * (1 + i % 9),
        }
        if i % 3:
            rec["headers"] = [("h", b"x"), ("null", None), ("ü", b"")][: 1 + i % 3]
        out.append(rec)
    return out


def _verified(broker: BrokerProcess, topic: str) -> None:
    out = io.StringIO()
    status = verify_paths([str(partition_dir(broker.data_dir, topic))], out=out)
    assert status == 0, out.getvalue()


@pytest.mark.parametrize("codec", CODECS)
def test_transactional_batches_and_markers_of_every_codec(broker: BrokerProcess, topic: str, codec: str) -> None:
    create_topic(broker.bootstrap, topic)
    p = producer(broker.bootstrap, **{"transactional.id": f"txn-{topic}", "compression.type": codec, "linger.ms": 5})
    p.init_transactions(30)
    committed: list[dict[str, Any]] = []
    for t in range(4):
        recs = _records(25, f"t{t}")
        p.begin_transaction()
        for r in recs:
            p.produce(topic, partition=0, **r)
        if t == 2:
            p.flush(30)  # sent before the abort (else librdkafka drops them and no marker is needed)
            p.abort_transaction(30)
        else:
            p.commit_transaction(30)
            committed += recs
    p.flush(30)
    # the markers the broker writes (after the commit or abort is answered)
    wait_until(lambda: sum(b.is_control for b in stored_batches(broker.data_dir, topic)) == 4, what="the markers")
    batches = stored_batches(broker.data_dir, topic)
    assert {b.compression.name.lower() for b in batches if not b.is_control} == {codec}
    got = consume(broker.bootstrap, topic, len(committed), conf={"isolation.level": "read_committed"})
    assert [(m.key(), m.value() or b"") for m in got] == [(r["key"], r["value"]) for r in committed]
    with SimpleConsumer(bootstrap_servers=broker.bootstrap, isolation_level="read_committed") as c:
        seen: list[Any] = []
        offset = 0
        while len(seen) < len(committed):
            fetched = c.fetch(topic, 0, offset)
            seen += fetched
            offset = fetched.next_offset
    assert [(r.key, r.value, r.headers) for r in seen] == [
        (r["key"], r["value"], r.get("headers", [])) for r in committed
    ]
    _verified(broker, topic)


@pytest.mark.parametrize("codec", ("none", "lz4"))
def test_idempotent_producer_on_compacted_and_log_append_time_topics(
    broker: BrokerProcess, topic: str, codec: str
) -> None:
    for name, config in ((f"{topic}-c", {"cleanup.policy": "compact"}),
                         (f"{topic}-lat", {"message.timestamp.type": "LogAppendTime"})):
        create_topic(broker.bootstrap, name, config=config)
        p = producer(broker.bootstrap, **{"enable.idempotence": True, "compression.type": codec, "linger.ms": 5})
        recs = [r for r in _records(60, name) if r["key"] is not None]
        recs.append({"key": b"tombstone", "value": None})
        for r in recs:
            p.produce(name, partition=0, **r)
        assert p.flush(30) == 0
        got = consume(broker.bootstrap, name, len(recs))
        assert [m.key() for m in got] == [r["key"] for r in recs]
        if "message.timestamp.type" in config:
            assert {m.timestamp()[0] for m in got} == {ck.TIMESTAMP_LOG_APPEND_TIME}
        _verified(broker, name)


@pytest.mark.parametrize("version", [(0, 9), (0, 10, 1)])
@pytest.mark.parametrize("codec", [None, "gzip", "lz4"])
def test_legacy_message_sets(broker: BrokerProcess, topic: str, version: tuple[int, ...], codec: str | None) -> None:
    records = [{"key": None if i % 3 == 0 else b"k%d" % i, "value": b"" if i % 4 == 0 else b"v%d" % i}
               for i in range(40)]
    meta = kp_send(broker, topic, records, version, compression_type=codec, batch_size=512)
    assert [m.offset for m in meta] == list(range(len(records)))
    assert {b.magic for b in stored_batches(broker.data_dir, topic)} == {2}  # written as v2, as Kafka writes them
    got = consume(broker.bootstrap, topic, len(records))
    assert [(m.key(), m.value() or b"") for m in got] == [(r["key"], r["value"]) for r in records]
    _verified(broker, topic)
