"""``odradek consume`` against a real broker: start offsets, partitions, count, exit, formats,
follow mode and one-line errors."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.cli.consume import compile_format
from odradek.client import ConsumerRecord
from odradek.records import TimestampType
from odradek.testing import BrokerProcess

T0 = 1_700_000_000_000
TOPIC = "orders"
# partition 0: 6 records, partition 1: 4 records
P0 = [(b"k%d" % i if i != 2 else None, b"p0-v%d" % i if i != 4 else None, T0 + 1000 * i) for i in range(6)]
P1 = [(b"j%d" % i, b"p1-v%d" % i, T0 + 500 + 1000 * i) for i in range(4)]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    data_dir = tmp_path_factory.mktemp("odradek-consume-cli") / "data"
    with BrokerProcess(data_dir, overrides={"num.partitions": 1}) as proc:
        admin = AdminClient({"bootstrap.servers": proc.bootstrap})
        for f in admin.create_topics([NewTopic(TOPIC, 2, 1), NewTopic("empty", 1, 1)]).values():
            f.result(15)
        p = Producer({"bootstrap.servers": proc.bootstrap, "linger.ms": 5})
        for part, rows in ((0, P0), (1, P1)):
            for i, (k, v, ts) in enumerate(rows):
                headers: list[tuple[str, str | bytes | None]] | None = [("n", b"%d" % i), ("z", None)] if i % 2 == 0 else None
                p.produce(TOPIC, key=k, value=v, partition=part, timestamp=ts, headers=headers)
        assert p.flush(30) == 0
        yield proc


def consume(broker: BrokerProcess, *args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "odradek", "consume", "--bootstrap-server", broker.bootstrap, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def ok(result: subprocess.CompletedProcess[str]) -> list[str]:
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
    return result.stdout.splitlines()


def test_offsets_and_partitions(broker: BrokerProcess) -> None:
    p0 = ["" if v is None else v.decode() for _k, v, _t in P0]
    p1 = [v.decode() for _k, v, _t in P1]
    assert ok(consume(broker, TOPIC, "-p", "0", "-o", "beginning", "-e")) == p0
    assert ok(consume(broker, TOPIC, "--partition", "1", "--offset", "beginning", "--exit")) == p1
    assert ok(consume(broker, TOPIC, "-p", "0", "-o", "2", "-e")) == p0[2:]
    assert ok(consume(broker, TOPIC, "-p", "0", "-o", "-2", "-e")) == p0[-2:]
    assert ok(consume(broker, TOPIC, "-p", "1", "-o", "-10", "-e")) == p1  # clamped to the start
    assert ok(consume(broker, TOPIC, "-p", "0", "-o", "end", "-e")) == []
    assert ok(consume(broker, TOPIC, "-o", "end", "-e")) == []
    # every partition: partition 0's records then partition 1's (one fetch, partition order)
    assert sorted(ok(consume(broker, TOPIC, "-o", "beginning", "-e"))) == sorted(p0 + p1)
    assert ok(consume(broker, TOPIC, "-o", "beginning", "-e", "-p", "0", "-p", "1")) == p0 + p1
    # from a time: the first record at or after it in each partition
    iso = "2023-11-14T22:13:23+00:00"  # T0 + 3000
    assert ok(consume(broker, TOPIC, "-p", "0", "--from-time", iso, "-e")) == p0[3:]
    assert ok(consume(broker, TOPIC, "-p", "1", "--from-time", "2023-11-14T22:13:23", "-e")) == p1[3:]
    assert ok(consume(broker, TOPIC, "-p", "1", "--from-time", "2030-01-01T00:00:00Z", "-e")) == []
    assert ok(consume(broker, "empty", "-o", "beginning", "-e")) == []


def test_count(broker: BrokerProcess) -> None:
    assert ok(consume(broker, TOPIC, "-p", "0", "-o", "beginning", "-c", "3")) == ["p0-v0", "p0-v1", "p0-v2"]
    assert ok(consume(broker, TOPIC, "-p", "1", "-o", "1", "--count", "2")) == ["p1-v1", "p1-v2"]
    assert len(ok(consume(broker, TOPIC, "-o", "beginning", "-c", "8"))) == 8
    assert ok(consume(broker, TOPIC, "-p", "1", "-o", "beginning", "-c", "10", "-e")) == ["p1-v0", "p1-v1", "p1-v2", "p1-v3"]
    assert ok(consume(broker, TOPIC, "-o", "beginning", "-c", "0")) == []


def test_formats(broker: BrokerProcess) -> None:
    fmt = r"%t|%p|%o|%T|%k|%s|%h|%K|%S|%%\t!"
    lines = consume(broker, TOPIC, "-p", "0", "-o", "beginning", "-e", "-f", fmt + r"\n").stdout.splitlines()
    want = []
    for i, (k, v, ts) in enumerate(P0):
        headers = f"n={i},z=" if i % 2 == 0 else ""
        key = "" if k is None else k.decode()
        val = "" if v is None else v.decode()
        want.append(
            f"{TOPIC}|0|{i}|{ts}|{key}|{val}|{headers}|{-1 if k is None else len(k)}|{-1 if v is None else len(v)}|%\t!"
        )
    assert lines == want
    null = ok(consume(broker, TOPIC, "-p", "0", "-o", "2", "-c", "3", "-Z", "-f", r"%o %k %v %h\n"))
    assert null == ["2 NULL p0-v2 n=2,z=NULL", "3 k3 p0-v3 ", "4 k4 NULL n=4,z=NULL"]
    keyed = ok(consume(broker, TOPIC, "-p", "1", "-o", "beginning", "-e", "-K", " => "))
    assert keyed == [f"j{i} => p1-v{i}" for i in range(4)]
    # no newline unless the format asks for one
    joined = consume(broker, TOPIC, "-p", "1", "-o", "beginning", "-e", "-f", "%o,")
    assert joined.returncode == 0 and joined.stdout == "0,1,2,3,"


def test_follow_mode_waits_for_new_records(broker: BrokerProcess) -> None:
    topic = "follow"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        f.result(15)
    p = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    p.produce(topic, b"old", partition=0)
    assert p.flush(10) == 0
    proc = subprocess.Popen(
        [sys.executable, "-m", "odradek", "consume", "-b", broker.bootstrap, topic, "-o", "1", "-c", "2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(0.5)  # let it start waiting; the offsets are absolute, so there is no race
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else ""
        for v in (b"new-1", b"new-2", b"new-3"):
            p.produce(topic, v, partition=0)
        assert p.flush(10) == 0
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err
    assert out.splitlines() == ["new-1", "new-2"]


def test_errors_are_one_line(broker: BrokerProcess) -> None:
    cases = [
        ((TOPIC + "-missing", "-e"), "topic 'orders-missing' does not exist"),
        ((TOPIC, "-p", "7", "-e"), "has no partition 7"),
        ((TOPIC, "-p", "0", "-o", "99", "-e"), "offset 99 is out of range for orders-0: valid offsets are 0..6"),
        ((TOPIC, "-o", "sideways", "-e"), "--offset must be beginning, end, N or -N"),
        ((TOPIC, "--from-time", "yesterday", "-e"), "is not an ISO 8601 time"),
        ((TOPIC, "-o", "beginning", "-e", "-f", "%q"), "unknown format sequence %q"),
    ]
    for args, message in cases:
        t0 = time.monotonic()
        r = consume(broker, *args)
        assert r.returncode == 1, (args, r.stdout, r.stderr)
        assert r.stdout == ""
        assert r.stderr.count("\n") == 1 and r.stderr.startswith("odradek consume: "), r.stderr
        assert message in r.stderr, r.stderr
        assert time.monotonic() - t0 < 15


def test_unreachable_broker() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    r = subprocess.run(
        [sys.executable, "-m", "odradek", "consume", "-b", f"127.0.0.1:{port}", "t", "--timeout", "1", "-e"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 1
    assert r.stderr.count("\n") == 1 and f"127.0.0.1:{port}" in r.stderr, r.stderr
    assert time.monotonic() - t0 < 10


def test_compile_format() -> None:
    rec = ConsumerRecord("t", 3, 42, 1234, TimestampType.CREATE_TIME, b"key", None, [("a", b"1"), ("b", None)])
    assert compile_format(r"%t/%p/%o/%T/%k/%s/%S/%K/%h\n")(rec) == b"t/3/42/1234/key//-1/3/a=1,b=\n"
    assert compile_format("%v|%h", print_null=True)(rec) == b"NULL|a=1,b=NULL"
    assert compile_format(r"literal\\%%")(rec) == b"literal\\%"
    for bad in ("%", "%x", r"\q"):
        with pytest.raises(ValueError):
            compile_format(bad)
