"""``odradek produce TOPIC``, run as a process against a real broker; confluent-kafka reads back."""

from __future__ import annotations

import re
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import confluent_kafka as ck
import pytest

from odradek.records import Compression
from odradek.testing import BrokerProcess
from tests.interop.interop_helpers import create_topic, stored_batches

TIMEOUT = 30.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("produce-cli") / "data", overrides={"num.partitions": 1})
    proc.start()
    try:
        yield proc
    finally:
        assert proc.stop() == 0, "".join(proc.stderr_lines[-40:])


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    base = re.sub(r"[^A-Za-z0-9._-]+", "-", request.node.name).strip("-")[:80]
    return f"{base}-{uuid.uuid4().hex[:8]}"


def produce(*args: str, stdin: bytes = b"", timeout: float = 60) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "odradek", "produce", *args], input=stdin, capture_output=True, timeout=timeout
    )


def ok(r: subprocess.CompletedProcess[bytes]) -> None:
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout == b""


def failed(r: subprocess.CompletedProcess[bytes]) -> str:
    """A failure: exit 1, nothing on stdout, exactly one line on stderr."""
    assert r.returncode == 1, (r.returncode, r.stderr)
    assert r.stdout == b""
    err = r.stderr.decode()
    assert err.startswith("odradek produce: ") and err.endswith("\n") and err.count("\n") == 1, err
    return err


def read(bootstrap: str, topic: str, count: int, partitions: int = 1) -> list[ck.Message]:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": "produce-cli", "enable.auto.commit": False})
    try:
        c.assign([ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in range(partitions)])
        got: list[ck.Message] = []
        deadline = time.monotonic() + TIMEOUT
        while len(got) < count:
            assert time.monotonic() < deadline, f"read {len(got)} of {count}"
            for m in c.consume(1000, 0.2):
                assert m.error() is None, m.error()
                got.append(m)
        assert not [m for m in c.consume(10, 0.3) if m.error() is None], "more records than expected"
        return sorted(got, key=lambda m: (m.partition(), m.offset()))
    finally:
        c.close()


def test_lines_become_records(broker: BrokerProcess, topic: str) -> None:
    stdin = b"first\n\nwith spaces  \nwindows\r\n\xff\xfe not utf-8\nno newline at the end"
    r = produce(topic, "--bootstrap-server", broker.bootstrap, stdin=stdin)
    ok(r)
    assert r.stderr == b""  # silent on success
    got = read(broker.bootstrap, topic, 6)
    assert [m.value() for m in got] == [
        b"first",
        b"",
        b"with spaces  ",
        b"windows",
        b"\xff\xfe not utf-8",
        b"no newline at the end",
    ]
    assert all(m.key() is None and m.headers() is None for m in got)
    assert [m.offset() for m in got] == list(range(6))


def test_key_separator_splits_at_the_first(broker: BrokerProcess, topic: str) -> None:
    stdin = b"k1::v1\nk2::v::2\n::empty key\nk3::\n"
    ok(produce(topic, "-b", broker.bootstrap, "--key-separator", "::", stdin=stdin))
    got = read(broker.bootstrap, topic, 4)
    assert [(m.key(), m.value()) for m in got] == [
        (b"k1", b"v1"),
        (b"k2", b"v::2"),
        (b"", b"empty key"),
        (b"k3", b""),
    ]


def test_headers_on_every_record(broker: BrokerProcess, topic: str) -> None:
    stdin = b"a\nb\n"
    ok(
        produce(
            topic,
            "-b",
            broker.bootstrap,
            "--header",
            "trace=t1",
            "--header",
            "eq=x=y",
            "--header",
            "trace=t2",
            stdin=stdin,
        )
    )
    got = read(broker.bootstrap, topic, 2)
    for m in got:
        assert m.headers() == [("trace", b"t1"), ("eq", b"x=y"), ("trace", b"t2")]


def test_partition(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, partitions=3)
    ok(produce(topic, "-b", broker.bootstrap, "--partition", "2", "-K", "=", stdin=b"a=1\nb=2\nc=3\n"))
    got = read(broker.bootstrap, topic, 3, partitions=3)
    assert [(m.partition(), m.offset(), m.value()) for m in got] == [(2, 0, b"1"), (2, 1, b"2"), (2, 2, b"3")]


def test_keys_use_the_default_partitioner(broker: BrokerProcess, topic: str) -> None:
    from odradek.client import murmur2_partition

    create_topic(broker.bootstrap, topic, partitions=5)
    keys = [b"user-%d" % i for i in range(20)]
    ok(produce(topic, "-b", broker.bootstrap, "-K", "\t", stdin=b"".join(k + b"\tv\n" for k in keys)))
    got = read(broker.bootstrap, topic, 20, partitions=5)
    assert {m.key(): m.partition() for m in got} == {k: murmur2_partition(k, 5) for k in keys}


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_compression(broker: BrokerProcess, topic: str, codec: str) -> None:
    lines = [b"line %d " % i + b"x" * (i % 50) for i in range(300)]
    ok(produce(topic, "-b", broker.bootstrap, "--compression", codec, stdin=b"\n".join(lines) + b"\n"))
    assert [m.value() for m in read(broker.bootstrap, topic, 300)] == lines
    assert {b.compression for b in stored_batches(broker.data_dir, topic)} == {Compression[codec.upper()]}


@pytest.mark.parametrize("acks", ["0", "1", "all", "-1"])
def test_acks(broker: BrokerProcess, topic: str, acks: str) -> None:
    ok(
        produce(
            topic, "-b", broker.bootstrap, "--acks", acks, stdin=b"".join(b"r%d\n" % i for i in range(100))
        )
    )
    assert [m.value() for m in read(broker.bootstrap, topic, 100)] == [b"r%d" % i for i in range(100)]


def test_verbose_summary(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, partitions=2)
    r = produce(topic, "-b", broker.bootstrap, "-p", "1", "--verbose", stdin=b"a\nb\nc\n")
    ok(r)
    assert re.fullmatch(rb"produced 3 record\(s\) to \S+ in \d+\.\d+ s \(partition 1: 3\)\n", r.stderr), (
        r.stderr
    )


def test_many_lines(broker: BrokerProcess, topic: str) -> None:
    n = 50_000
    ok(produce(topic, "-b", broker.bootstrap, stdin=b"".join(b"%06d\n" % i for i in range(n))))
    got = read(broker.bootstrap, topic, n)
    assert [m.value() for m in got] == [b"%06d" % i for i in range(n)]


def test_producer_property(broker: BrokerProcess, topic: str) -> None:
    ok(
        produce(
            topic,
            "-b",
            broker.bootstrap,
            "-X",
            "batch.size=10",
            "-X",
            "enable.idempotence=false",
            "--acks",
            "1",
            stdin=b"a\nb\nc\n",
        )
    )
    assert len(stored_batches(broker.data_dir, topic)) == 3  # one record per batch
    err = failed(produce(topic, "-b", broker.bootstrap, "-X", "linger.mss=1", stdin=b"a\n"))
    assert "unknown client configuration 'linger.mss' (did you mean 'linger.ms'?)" in err


# ------------------------------------------------------------------------------------------------
# failures: exit 1 and one line on stderr


def test_unreachable_broker(tmp_path: object) -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    err = failed(produce("t", "-b", f"127.0.0.1:{port}", "--timeout", "1", stdin=b"x\n"))
    assert time.monotonic() - t0 < 15
    assert f"cannot reach a broker at 127.0.0.1:{port} within 1 s" in err


def test_missing_key_separator(broker: BrokerProcess, topic: str) -> None:
    err = failed(produce(topic, "-b", broker.bootstrap, "-K", ":", stdin=b"k:v\nno separator\nk2:v2\n"))
    assert "line 2 has no key separator" in err
    # what came before the bad line was sent
    assert [(m.key(), m.value()) for m in read(broker.bootstrap, topic, 1)] == [(b"k", b"v")]


def test_bad_partition_header_and_rejected_record(broker: BrokerProcess, topic: str) -> None:
    create_topic(broker.bootstrap, topic, partitions=2, config={"max.message.bytes": "1000"})
    assert "has no partition 7" in failed(produce(topic, "-b", broker.bootstrap, "-p", "7", stdin=b"x\n"))
    assert "is not NAME=VALUE" in failed(
        produce(topic, "-b", broker.bootstrap, "-H", "novalue", stdin=b"x\n")
    )
    err = failed(produce(topic, "-b", broker.bootstrap, stdin=b"small\n" + b"x" * 5000 + b"\n"))
    assert "MESSAGE_TOO_LARGE" in err or "RECORD_LIST_TOO_LARGE" in err
    assert "record" in err


def test_usage_errors_exit_2() -> None:
    r = produce("t", "--compression", "brotli")
    assert r.returncode == 2 and b"invalid choice" in r.stderr
    r = produce()
    assert r.returncode == 2
    r = produce("--help")
    assert r.returncode == 0 and b"--key-separator" in r.stdout
