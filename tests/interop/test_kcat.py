"""kcat (the Debian package, its own bundled librdkafka) against a real ``odradek serve``.

kcat is a required test dependency: when it is missing these tests fail, they never skip.
Output is compared exactly through ``-f`` format strings (``-J`` for metadata).
"""

from __future__ import annotations

import json
import queue
import subprocess
import threading
import time
from typing import IO

import confluent_kafka as ck
import pytest

from odradek.testing import BrokerProcess

from .interop_helpers import (
    DEFAULT_TIMEOUT,
    consume,
    create_topic,
    produce_all,
    producer,
    run_kcat,
    stored_batches,
)

pytestmark = pytest.mark.interop

BASE_TS = 1_650_000_000_000
FMT = "%p|%o|%k|%s|%h|%T\n"


def test_metadata_list(kcat: str, broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, partitions=3)
    text = run_kcat(kcat, broker, "-L", "-t", topic).stdout.decode()
    assert text.splitlines()[1:] == [
        " 1 brokers:",
        f"  broker 0 at 127.0.0.1:{broker.port} (controller)",
        " 1 topics:",
        f'  topic "{topic}" with 3 partitions:',
        "    partition 0, leader 0, replicas: 0, isrs: 0",
        "    partition 1, leader 0, replicas: 0, isrs: 0",
        "    partition 2, leader 0, replicas: 0, isrs: 0",
    ]
    md = json.loads(run_kcat(kcat, broker, "-L", "-J").stdout)
    assert md["controllerid"] == 0
    assert md["brokers"] == [{"id": 0, "name": f"127.0.0.1:{broker.port}"}]
    [t] = [t for t in md["topics"] if t["topic"] == topic]
    assert "error" not in t
    assert t["partitions"] == [
        {"partition": i, "leader": 0, "replicas": [{"id": 0}], "isrs": [{"id": 0}]} for i in range(3)
    ]


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "zstd"])
def test_produce_keys_and_headers(kcat: str, broker: BrokerProcess, topic: str, codec: str) -> None:
    create_topic(broker.bootstrap, topic)
    lines = b"k1:v1\nk2:value with spaces\n:no-key\nk4:\nk5:\xc3\xa9t\xc3\xa9\n"
    run_kcat(
        kcat,
        broker,
        "-P",
        "-t",
        topic,
        "-p",
        "0",
        "-K",
        ":",
        "-Z",
        "-z",
        codec,
        # one batch for the five records: librdkafka sends a batch uncompressed when compressing
        # does not make it smaller, as for a tiny record alone (a CI run split them under load)
        "-X",
        "linger.ms=2000",
        "-H",
        "trace=abc",
        "-H",
        "empty=",
        stdin=lines,
    )
    # read back with confluent-kafka: -Z made the empty key and the empty value NULL
    got = consume(broker.bootstrap, topic, 5)
    headers = [("trace", b"abc"), ("empty", b"")]
    assert [(m.offset(), m.key(), m.value(), m.headers()) for m in got] == [
        (0, b"k1", b"v1", headers),
        (1, b"k2", b"value with spaces", headers),
        (2, None, b"no-key", headers),
        (3, b"k4", None, headers),
        (4, b"k5", "été".encode(), headers),
    ]
    if codec != "none":
        assert {b.compression for b in stored_batches(broker.data_dir, topic)} == {
            {"gzip": 1, "snappy": 2, "zstd": 4}[codec]
        }
    # and with kcat itself
    out = run_kcat(
        kcat, broker, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-Z", "-f", "%o|%k|%s|%h\n"
    )
    assert out.stdout.decode() == (
        "0|k1|v1|trace=abc,empty=\n"
        "1|k2|value with spaces|trace=abc,empty=\n"
        "2|NULL|no-key|trace=abc,empty=\n"
        "3|k4|NULL|trace=abc,empty=\n"
        "4|k5|été|trace=abc,empty=\n"
    )
    assert f"Reached end of topic {topic} [0] at offset 5" in out.stderr.decode()


def _confluent_records(n: int) -> list[dict[str, object]]:
    return [
        {
            "key": b"key%d" % i,
            "value": b"val%d" % i,
            "timestamp": BASE_TS + i * 1000,
            "headers": [("n", b"%d" % i)],
        }
        for i in range(n)
    ]


def _expected_lines(records: list[dict[str, object]], first: int, partition: int = 0) -> str:
    out = []
    for i, r in enumerate(records):
        key, value = r["key"], r["value"]
        assert isinstance(key, bytes) and isinstance(value, bytes)
        hdrs = ",".join(f"{k}={v.decode()}" for k, v in r["headers"])  # type: ignore[attr-defined]
        out.append(f"{partition}|{first + i}|{key.decode()}|{value.decode()}|{hdrs}|{r['timestamp']}\n")
    return "".join(out)


def test_consume_beginning_with_timestamps(kcat: str, broker: BrokerProcess, topic: str) -> None:
    records = _confluent_records(12)
    produce_all(
        producer(broker.bootstrap, **{"compression.type": "gzip", "batch.num.messages": 5}), topic, records
    )
    out = run_kcat(kcat, broker, "-C", "-t", topic, "-o", "beginning", "-e", "-f", FMT)
    assert out.stdout.decode() == _expected_lines(records, 0)


def test_consume_last_n(kcat: str, broker: BrokerProcess, topic: str) -> None:
    records = _confluent_records(10)
    produce_all(producer(broker.bootstrap, **{"batch.num.messages": 4, "linger.ms": 5}), topic, records)
    out = run_kcat(kcat, broker, "-C", "-t", topic, "-p", "0", "-o", "-3", "-e", "-f", FMT)
    assert out.stdout.decode() == _expected_lines(records[-3:], 7)
    # an absolute offset works too
    out = run_kcat(kcat, broker, "-C", "-t", topic, "-p", "0", "-o", "4", "-c", "2", "-f", FMT)
    assert out.stdout.decode() == _expected_lines(records[4:6], 4)


def _lines(stream: IO[bytes], into: queue.Queue[bytes]) -> None:
    for line in stream:
        into.put(line)


def test_consume_from_end_sees_only_new_records(kcat: str, broker: BrokerProcess, topic: str) -> None:
    old = _confluent_records(5)
    produce_all(producer(broker.bootstrap), topic, old)
    cmd = [kcat, "-b", broker.bootstrap, "-C", "-t", topic, "-p", "0", "-o", "end", "-c", "3", "-f", FMT]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stderr is not None
        errs: queue.Queue[bytes] = queue.Queue()
        threading.Thread(target=_lines, args=(proc.stderr, errs), daemon=True).start()
        # kcat says when it has reached the end of the partition: only then produce the new records
        marker = f"Reached end of topic {topic} [0] at offset 5".encode()
        deadline = time.monotonic() + DEFAULT_TIMEOUT
        seen: list[bytes] = []
        while not any(marker in line for line in seen):
            left = deadline - time.monotonic()
            assert left > 0, f"kcat did not reach the end of the partition: {seen}"
            try:
                seen.append(errs.get(timeout=left))
            except queue.Empty:
                continue
        new = [
            {
                "key": b"new%d" % i,
                "value": b"fresh%d" % i,
                "timestamp": BASE_TS + 10_000 + i,
                "headers": [("n", b"x")],
            }
            for i in range(3)
        ]
        produce_all(producer(broker.bootstrap), topic, new)
        out, _ = proc.communicate(timeout=DEFAULT_TIMEOUT)
        assert proc.returncode == 0
        assert out.decode() == _expected_lines(new, 5)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_consume_from_end_with_exit_is_empty(kcat: str, broker: BrokerProcess, topic: str) -> None:
    produce_all(producer(broker.bootstrap), topic, _confluent_records(4))
    out = run_kcat(kcat, broker, "-C", "-t", topic, "-p", "0", "-o", "end", "-e", "-f", FMT)
    assert out.stdout == b""
    assert f"Reached end of topic {topic} [0] at offset 4: exiting" in out.stderr.decode()


def test_kcat_records_read_by_confluent_with_offsets(kcat: str, broker: BrokerProcess, topic: str) -> None:
    """kcat -P without -p uses the partitioner; every record lands once, keys keep their partition."""
    create_topic(broker.bootstrap, topic, partitions=2)
    lines = b"".join(b"key%d:value%d\n" % (i % 4, i) for i in range(20))
    run_kcat(kcat, broker, "-P", "-t", topic, "-K", ":", stdin=lines)
    c = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "x", "enable.auto.commit": False})
    try:
        lo_hi = [
            c.get_watermark_offsets(ck.TopicPartition(topic, p), timeout=DEFAULT_TIMEOUT) for p in (0, 1)
        ]
    finally:
        c.close()
    assert sum(hi for _lo, hi in lo_hi) == 20
    seen: dict[bytes, set[int]] = {}
    values = []
    for p, (_lo, hi) in enumerate(lo_hi):
        if hi == 0:
            continue
        for m in consume(broker.bootstrap, topic, hi, partition=p):
            key, value = m.key(), m.value()
            assert key is not None and value is not None
            seen.setdefault(key, set()).add(p)
            values.append(value)
    assert all(len(parts) == 1 for parts in seen.values())
    assert sorted(values) == sorted(b"value%d" % i for i in range(20))


@pytest.mark.parametrize("fallback", ["0.9.0", "0.8.2"])
def test_legacy_librdkafka_without_api_versions(
    kcat: str, broker: BrokerProcess, topic: str, fallback: str
) -> None:
    """librdkafka told not to ask ApiVersions speaks the 0.8/0.9 protocol: Produce/Fetch v0-1 and
    ListOffsets v0, message format v0 (written as v2, as Kafka writes it); v2 batches are
    down-converted for it."""
    legacy = ["-X", "api.version.request=false", "-X", f"broker.version.fallback={fallback}"]
    run_kcat(kcat, broker, *legacy, "-P", "-t", topic, "-p", "0", "-K", ":", stdin=b"a:1\nb:2\n:3\n")
    assert {b.magic for b in stored_batches(broker.data_dir, topic)} == {2}
    records = _confluent_records(6)
    produce_all(
        producer(broker.bootstrap, **{"compression.type": "zstd", "batch.num.messages": 4}), topic, records
    )
    out = run_kcat(
        kcat, broker, *legacy, "-C", "-t", topic, "-p", "0", "-o", "beginning", "-e", "-f", "%o|%k|%s\n"
    )
    assert out.stdout.decode() == "0|a|1\n1|b|2\n2||3\n" + "".join(
        f"{3 + i}|key{i}|val{i}\n" for i in range(6)
    )
    out = run_kcat(kcat, broker, *legacy, "-C", "-t", topic, "-p", "0", "-o", "-2", "-e", "-f", "%o|%k|%s\n")
    assert out.stdout.decode() == "7|key4|val4\n8|key5|val5\n"
