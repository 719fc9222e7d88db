"""A full disk: KAFKA_STORAGE_ERROR, reads go on, nothing acknowledged is lost, writes resume by
themselves once space is freed, and a clean stop on a full disk exits 0 (issue 16, fault 4).

The broker's data dir is on a 24 MiB tmpfs that the test mounts (root is needed; the test is
skipped, saying so, where mounting is not permitted).  A filler file placed on the tmpfs takes
the free space, so ENOSPC comes at once; deleting it frees the space again.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from odradek.errors import ErrorCode
from odradek.protocol.messages.describe_log_dirs import DescribeLogDirsRequest
from odradek.protocol.messages.find_coordinator import FindCoordinatorRequest
from odradek.testing import BrokerProcess, WireClient, wait_for
from tests.groups.wire_group import commit, fetch_offsets

TOPIC = "full"


@pytest.fixture
def small_tmpfs(tmp_path: Path) -> Iterator[Path]:
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    try:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mnt)], capture_output=True, text=True, timeout=30
        )
    except FileNotFoundError:
        pytest.skip("no mount command: cannot put the broker's data dir on a small tmpfs")
    if done.returncode != 0:
        pytest.skip(f"mounting a tmpfs is not permitted here (needs root): {done.stderr.strip()}")
    try:
        yield mnt
    finally:
        if subprocess.run(["umount", str(mnt)], capture_output=True, timeout=30).returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True, timeout=30)


def _fill(path: Path) -> None:
    """Append to ``path`` until the file system is full (ENOSPC)."""
    with open(path, "ab", buffering=0) as f:
        for chunk in (1 << 20, 64 << 10, 4 << 10, 512):
            block = b"\0" * chunk
            for _ in range(1 << 16):  # bounded: 24 MiB in 512-byte writes is 49,152 of them
                try:
                    f.write(block)
                except OSError as exc:
                    assert exc.errno == 28, exc
                    break


def _storage_error_from_a_producer_without_retries(bootstrap: str) -> KafkaError:
    """librdkafka retries KAFKA_STORAGE_ERROR (retriable); with retries=0 it reports it."""
    errors: list[KafkaError] = []
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "retries": 0, "message.timeout.ms": 20000})
    p.produce(TOPIC, value=b"probe" * 100, on_delivery=lambda err, _msg: errors.append(err))
    assert p.flush(30) == 0
    assert errors and errors[0] is not None, "a produce to a full disk was acknowledged"
    return errors[0]


def _find_coordinator(broker: BrokerProcess, group: str) -> int:
    w = WireClient(broker.host, broker.port)
    try:
        return int(w.request(FindCoordinatorRequest(key=group, key_type=0), 3).error_code)
    finally:
        w.close()


def _commit(broker: BrokerProcess, offset: int) -> ErrorCode:
    w = WireClient(broker.host, broker.port)
    try:
        return commit(w, "g", -1, "", TOPIC, {0: offset})[0]
    finally:
        w.close()


def _log_dir_errors(broker: BrokerProcess) -> list[int]:
    w = WireClient(broker.host, broker.port)
    try:
        return [int(r.error_code) for r in w.request(DescribeLogDirsRequest(topics=None), 1).results]
    finally:
        w.close()


def _read_all(bootstrap: str, expect: int) -> list[tuple[int, bytes]]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "reader", "enable.auto.commit": False,
                  "enable.partition.eof": True})
    c.assign([TopicPartition(TOPIC, 0, 0)])
    got: list[tuple[int, bytes]] = []
    deadline = time.monotonic() + 60
    at_eof = False
    while time.monotonic() < deadline and not (at_eof and len(got) >= expect):
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
            at_eof = True
            continue
        at_eof = False
        got.append((m.offset(), m.value()))
    c.close()
    return got


def _error_lines(broker: BrokerProcess) -> list[str]:
    return [line for line in broker.stderr_lines if " ERROR " in line]


def test_full_disk_answers_storage_error_keeps_data_and_recovers_without_restart(small_tmpfs: Path) -> None:
    data = small_tmpfs / "data"
    filler = small_tmpfs / "filler"
    overrides = {"num.partitions": 1, "log.segment.bytes": 1 << 20}
    broker = BrokerProcess(data, overrides=overrides, log_level="INFO").start()
    acked: dict[int, bytes] = {}
    failed: list[KafkaError] = []

    def done(err: KafkaError | None, msg: object) -> None:
        if err is None:
            acked[msg.offset()] = msg.value()  # type: ignore[attr-defined]
        else:
            failed.append(err)

    producer = Producer({
        "bootstrap.servers": broker.bootstrap,
        "acks": "all",
        "enable.idempotence": True,
        "linger.ms": 5,
        "message.timeout.ms": 120000,
    })
    seq = 0

    def produce(n: int) -> None:
        nonlocal seq
        for _ in range(n):
            producer.produce(TOPIC, value=f"{seq:08d}".encode() + b"x" * 1000, on_delivery=done)
            seq += 1
            producer.poll(0)

    try:
        produce(500)
        assert producer.flush(30) == 0
        assert len(acked) == 500 and not failed

        # -- the disk fills up -------------------------------------------------------------------
        _fill(filler)
        produce(500)  # waits in the producer, retried while the disk is full
        # the broker marks the dir full (DescribeLogDirs: KAFKA_STORAGE_ERROR on the dir's result)
        wait_for(lambda: _log_dir_errors(broker) == [ErrorCode.KAFKA_STORAGE_ERROR], 30, "the log dir marked full")
        err = _storage_error_from_a_producer_without_retries(broker.bootstrap)
        assert err.code() == KafkaError.KAFKA_STORAGE_ERROR, err  # before: _TRANSPORT (connection closed)
        # the first FindCoordinator must create __consumer_offsets, which a full disk refuses
        assert _find_coordinator(broker, "g") == ErrorCode.COORDINATOR_NOT_AVAILABLE  # before: UNKNOWN_SERVER_ERROR
        # reads keep working: everything acknowledged so far is served
        before = _read_all(broker.bootstrap, len(acked))
        assert [o for o, _v in before] == sorted(acked)[: len(before)] and len(before) >= 500
        assert all(acked[o] == v for o, v in before)
        assert len(_error_lines(broker)) == 1, _error_lines(broker)

        # -- space is freed: writes resume without a restart ---------------------------------------
        filler.unlink()
        assert producer.flush(60) == 0
        assert not failed, failed[:3]
        assert len(acked) == 1000
        produce(100)
        assert producer.flush(30) == 0
        assert not failed and len(acked) == 1100
        wait_for(lambda: _find_coordinator(broker, "g") == 0, 30, "a coordinator once space is freed")
        assert _commit(broker, 5) == ErrorCode.NONE
        assert _log_dir_errors(broker) == [0]
        wait_for(
            lambda: any("accepts writes again" in ln or "free space again" in ln for ln in broker.stderr_lines),
            15,
            "the log line saying the disk accepts writes again",
        )

        # every acknowledged record is read back exactly once, in the order it was produced
        got = _read_all(broker.bootstrap, len(acked))
        assert [o for o, _v in got] == sorted(acked), "records lost or duplicated"
        assert [v for _o, v in got] == [acked[o] for o in sorted(acked)]
        assert [int(v[:8]) for _o, v in got] == list(range(1100)), "records out of order"

        # -- full again, then a clean stop: exit 0 -------------------------------------------------
        _fill(filler)
        produce(200)
        wait_for(lambda: _log_dir_errors(broker) == [ErrorCode.KAFKA_STORAGE_ERROR], 30, "the log dir marked full")
        assert _storage_error_from_a_producer_without_retries(broker.bootstrap).code() == KafkaError.KAFKA_STORAGE_ERROR
        # the group coordinator on the full dir: found, its offsets readable, a commit refused with
        # Kafka's answer for a storage error on the offsets topic (NOT_COORDINATOR), not a traceback
        assert _find_coordinator(broker, "g") == 0
        assert _commit(broker, 7) == ErrorCode.NOT_COORDINATOR
        w = WireClient(broker.host, broker.port)
        try:
            assert fetch_offsets(w, "g", TOPIC, [0]) == {0: 5}
        finally:
            w.close()
        assert broker.stop() == 0, "".join(broker.stderr_lines[-30:])
        log_text = "".join(broker.stderr_lines)
        assert "Traceback" not in log_text, log_text[-3000:]
        full_lines = [line for line in _error_lines(broker) if "is full" in line]
        assert len(full_lines) == 2 and all(str(data) in line for line in full_lines), _error_lines(broker)
        assert len(_error_lines(broker)) == 2, _error_lines(broker)
    finally:
        producer.purge()
        broker.stop()

    # the acknowledged records survive the stop on a full disk; a restart on the still-full disk
    # starts and serves them, and writes resume once space is freed, without another restart
    with BrokerProcess(data, overrides=overrides) as again:
        got = _read_all(again.bootstrap, len(acked))
        assert [o for o, _v in got] == sorted(acked)
        assert [v for _o, v in got] == [acked[o] for o in sorted(acked)]
        filler.unlink()
        after = Producer({"bootstrap.servers": again.bootstrap, "message.timeout.ms": 60000})
        results: list[KafkaError | None] = []
        after.produce(TOPIC, b"after the restart", partition=0, on_delivery=lambda err, _m: results.append(err))
        assert after.flush(90) == 0 and results == [None], results


def test_topic_creation_on_a_full_disk_is_answered_not_dropped(small_tmpfs: Path) -> None:
    """CreateTopics and Metadata auto-create on a full disk answer KAFKA_STORAGE_ERROR for the
    topic (before: the connection was closed); the topic is created once space is freed."""
    from odradek.protocol.messages.create_topics import CreateTopicsRequest
    from odradek.protocol.messages.metadata import MetadataRequest

    filler = small_tmpfs / "filler"
    with BrokerProcess(small_tmpfs / "data", log_level="INFO") as broker:
        _fill(filler)
        w = WireClient(broker.host, broker.port)
        try:
            T = CreateTopicsRequest.CreatableTopic
            answer = w.request(
                CreateTopicsRequest(topics=[T(name="new", num_partitions=1, replication_factor=1)], timeout_ms=5000), 5
            )
            assert [t.error_code for t in answer.topics] == [ErrorCode.KAFKA_STORAGE_ERROR]
            meta = w.request(
                MetadataRequest(topics=[MetadataRequest.MetadataRequestTopic(name="auto")], allow_auto_topic_creation=True), 9
            )
            assert [t.error_code for t in meta.topics] == [ErrorCode.KAFKA_STORAGE_ERROR]
            filler.unlink()
            answer = w.request(
                CreateTopicsRequest(topics=[T(name="new", num_partitions=1, replication_factor=1)], timeout_ms=5000), 5
            )
            assert [t.error_code for t in answer.topics] == [0]
        finally:
            w.close()
        assert "Traceback" not in "".join(broker.stderr_lines)
