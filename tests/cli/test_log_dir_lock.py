"""Issue 16 fault 7: a second broker on a live broker's data dir refuses to start, naming the
holder's PID, and the first broker's acknowledged records stay intact."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

from odradek.storage.errors import LogDirLockedError
from odradek.storage.manager import LOCK_FILE, LogManager
from odradek.testing import BrokerProcess


def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 10000})
    failed: list[object] = []
    for v in values:
        p.produce(topic, value=v, partition=0, on_delivery=lambda err, _m: err is not None and failed.append(err))
    assert p.flush(15) == 0
    assert failed == []


def _consume(bootstrap: str, topic: str, expect: int) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "lock-check", "enable.partition.eof": True})
    c.assign([TopicPartition(topic, 0, 0)])
    got: list[bytes] = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        if m.error():
            assert m.error().code() == KafkaError._PARTITION_EOF, m.error()
            if len(got) >= expect:
                break
            continue
        got.append(m.value())
    c.close()
    return got


def test_a_second_broker_on_a_locked_data_dir_refuses_to_start(tmp_path: Path) -> None:
    data = tmp_path / "data"
    with BrokerProcess(data) as first:
        before = [f"before-{i}".encode() for i in range(200)]
        _produce(first.bootstrap, "locked", before)
        assert (data / LOCK_FILE).read_text().strip() == str(first.pid)
        second = subprocess.run(
            [sys.executable, "-m", "odradek", "serve", "--port", "0", "--data-dir", str(data)],
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
        )
        assert second.returncode != 0
        assert "ready" not in second.stdout
        assert str(first.pid) in second.stderr and "another broker is using it" in second.stderr
        assert "Traceback" not in second.stderr
        assert len(second.stderr.strip().splitlines()) == 1, second.stderr
        after = [f"after-{i}".encode() for i in range(200)]
        _produce(first.bootstrap, "locked", after)
        assert _consume(first.bootstrap, "locked", 400) == before + after
        assert first.running()
    # released by the clean stop: a new broker starts on the dir and has everything
    with BrokerProcess(data) as again:
        assert _consume(again.bootstrap, "locked", 400) == before + after


def test_log_manager_lock_is_released_on_shutdown_and_close(tmp_path: Path) -> None:
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from odradek.storage.manager import LogManager; "
         "m = LogManager([sys.argv[1]]); print('locked', flush=True); sys.stdin.readline(); m.shutdown()",
         str(tmp_path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        with pytest.raises(LogDirLockedError, match=f"process {holder.pid}"):
            LogManager([tmp_path])
        assert holder.stdin is not None
        holder.stdin.write("\n")
        holder.stdin.flush()
        assert holder.wait(30) == 0
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait(10)
    manager = LogManager([tmp_path])
    manager.close()
    LogManager([tmp_path]).shutdown()
