"""Cross-client matrix: what one Kafka client writes, every other client reads back unchanged.

Producers cover every produced format (v2 batches from confluent-kafka, kafka-python, aiokafka and
kcat; magic 1 and magic 0 message sets from kafka-python's old protocol versions, which the broker
writes as v2 batches, as Kafka does) and several codecs; consumers cover every fetch path (modern
fetch, and Fetch v3 / v1 which make the broker down-convert v2 batches).  Keys, values, nulls and
offsets must match exactly, timestamps wherever both the produced format and the consumer's
format carry them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import confluent_kafka as ck
import pytest

from odradek.testing import BrokerProcess

from .interop_helpers import (
    V0_9,
    V0_10_1,
    aio_read,
    aio_send,
    consume,
    kp_read,
    kp_send,
    produce_all,
    producer,
    run_kcat,
    stored_batches,
)

pytestmark = pytest.mark.interop

BASE_TS = 1_710_000_000_000
N = 15

Row = tuple[int | None, bytes | None, bytes | None, int | None]


def _key(i: int) -> bytes | None:
    return None if i % 5 == 3 else b"key-%d" % i


def _value(i: int) -> bytes | None:
    return None if i % 4 == 2 else b"value-%d" % i


RECORDS = [(_key(i), _value(i), BASE_TS + 10 * i) for i in range(N)]


# -- producers: each returns (produced magic, whether the record timestamps are the ones above) ----


def by_confluent(broker: BrokerProcess, topic: str, kcat: str) -> tuple[int, bool]:
    produce_all(
        producer(broker.bootstrap, **{"compression.type": "zstd", "batch.num.messages": 4, "linger.ms": 5}),
        topic,
        [{"key": k, "value": v, "timestamp": ts} for k, v, ts in RECORDS],
    )
    return 2, True


def by_kafka_python(broker: BrokerProcess, topic: str, kcat: str) -> tuple[int, bool]:
    kp_send(
        broker,
        topic,
        [{"key": k, "value": v, "timestamp_ms": ts} for k, v, ts in RECORDS],
        compression_type="lz4",
    )
    return 2, True


def by_kafka_python_v1(broker: BrokerProcess, topic: str, kcat: str) -> tuple[int, bool]:
    kp_send(
        broker,
        topic,
        [{"key": k, "value": v, "timestamp_ms": ts} for k, v, ts in RECORDS],
        V0_10_1,
        compression_type="snappy",
    )
    return 1, True


def by_kafka_python_v0(broker: BrokerProcess, topic: str, kcat: str) -> tuple[int, bool]:
    kp_send(broker, topic, [{"key": k, "value": v} for k, v, _ts in RECORDS], V0_9, compression_type="gzip")
    return 0, False


def by_aiokafka(broker: BrokerProcess, topic: str, kcat: str) -> tuple[int, bool]:
    aio_send(
        broker.bootstrap,
        topic,
        [{"key": k, "value": v, "timestamp_ms": ts} for k, v, ts in RECORDS],
        compression_type="gzip",
        linger_ms=5,
    )
    return 2, True


def by_kcat(broker: BrokerProcess, topic: str, kcat: str) -> tuple[int, bool]:
    # -Z: an empty key or value is produced as NULL
    lines = b"".join((k or b"") + b"\t" + (v or b"") + b"\n" for k, v, _ts in RECORDS)
    run_kcat(kcat, broker, "-P", "-t", topic, "-p", "0", "-K", "\t", "-Z", "-z", "snappy", stdin=lines)
    return 2, False


PRODUCERS: dict[str, Callable[[BrokerProcess, str, str], tuple[int, bool]]] = {
    "confluent": by_confluent,
    "kafka-python": by_kafka_python,
    "kafka-python-v1": by_kafka_python_v1,
    "kafka-python-v0": by_kafka_python_v0,
    "aiokafka": by_aiokafka,
    "kcat": by_kcat,
}


# -- consumers: each returns rows (offset, key, value, timestamp or None) and the magic it reads --


def _ts(value: int | None) -> int | None:
    return None if value is None or value <= 0 else value


def read_confluent(broker: BrokerProcess, topic: str, kcat: str) -> list[Row]:
    return [
        (
            m.offset(),
            m.key(),
            m.value(),
            None if m.timestamp()[0] == ck.TIMESTAMP_NOT_AVAILABLE else _ts(m.timestamp()[1]),
        )
        for m in consume(broker.bootstrap, topic, N)
    ]


def _read_kp(version: tuple[int, ...] | None) -> Callable[[BrokerProcess, str, str], list[Row]]:
    def read(broker: BrokerProcess, topic: str, kcat: str) -> list[Row]:
        return [(r.offset, r.key, r.value, _ts(r.timestamp)) for r in kp_read(broker, topic, N, version)]

    return read


def read_aiokafka(broker: BrokerProcess, topic: str, kcat: str) -> list[Row]:
    return [(r.offset, r.key, r.value, _ts(r.timestamp)) for r in aio_read(broker.bootstrap, topic, N)]


def read_kcat(broker: BrokerProcess, topic: str, kcat: str) -> list[Row]:
    out = run_kcat(
        kcat, broker, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-Z", "-f", "%o\t%k\t%s\t%T\n"
    )
    rows: list[Row] = []
    for line in out.stdout.decode().splitlines():
        o, k, v, t = line.split("\t")
        rows.append(
            (int(o), None if k == "NULL" else k.encode(), None if v == "NULL" else v.encode(), _ts(int(t)))
        )
    return rows


CONSUMERS: dict[str, tuple[Callable[[BrokerProcess, str, str], list[Row]], int]] = {
    "confluent": (read_confluent, 2),
    "kafka-python": (_read_kp(None), 2),
    "kafka-python-v1": (_read_kp(V0_10_1), 1),
    "kafka-python-v0": (_read_kp(V0_9), 0),
    "aiokafka": (read_aiokafka, 2),
    "kcat": (read_kcat, 2),
}


@pytest.mark.parametrize("writer", list(PRODUCERS))
def test_every_client_reads_every_client(broker: BrokerProcess, topic: str, kcat: str, writer: str) -> None:
    before = int(time.time() * 1000)
    magic, own_timestamps = PRODUCERS[writer](broker, topic, kcat)
    after = int(time.time() * 1000)
    assert {b.magic for b in stored_batches(broker.data_dir, topic)} == {2}  # v2 whatever was sent, as in Kafka

    failures: dict[str, Any] = {}
    for reader, (read, reader_magic) in CONSUMERS.items():
        rows = read(broker, topic, kcat)
        visible_magic = min(magic, reader_magic)
        expected_kv = [(i, k, v) for i, (k, v, _ts) in enumerate(RECORDS)]
        if [r[:3] for r in rows] != expected_kv:
            failures[reader] = ("records", rows)
            continue
        stamps = [r[3] for r in rows]
        if visible_magic == 0:
            ok = stamps == [None] * N
        elif own_timestamps:
            ok = stamps == [ts for _k, _v, ts in RECORDS]
        else:  # kcat stamps records with the time it sends them
            ok = all(s is not None and before <= s <= after for s in stamps)
        if not ok:
            failures[reader] = ("timestamps", stamps)
    assert not failures, failures
