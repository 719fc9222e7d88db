"""The seeds' high-level consumer API: ``create_message_streams({topic: n})`` and
``create_message_streams_by_filter(Whitelist(r) | Blacklist(r), n)``.

Each stream is an iterator over one group member's share of the partitions; every iterator runs
in its own thread, and together they deliver every record of the matching topics exactly once.
A topic created later that matches the filter is picked up (``metadata.max.age.ms`` 500 ms).
``shutdown()`` ends the iterations (the threads finish without an error), and commit_offsets()
lets a new set of streams in the same group carry on where the old one stopped.
"""

from __future__ import annotations

import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.client import (
    Blacklist,
    ClientConfigError,
    ConsumerRecord,
    HighLevelConsumer,
    Whitelist,
    create_message_streams,
    create_message_streams_by_filter,
)
from odradek.testing import BrokerProcess

BROKER_OVERRIDES: dict[str, object] = {
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 1000,
    "auto.create.topics.enable": "false",
}
TIMEOUT = 30.0

GROUP_CONF: dict[str, Any] = {
    "session.timeout.ms": 3000,
    "heartbeat.interval.ms": 200,
    "max.poll.interval.ms": 10000,
    "fetch.max.wait.ms": 100,
    "auto.offset.reset": "earliest",
    "enable.auto.commit": False,
    "metadata.max.age.ms": 500,
    "retry.backoff.ms": 20,
    "default.api.timeout.ms": 15000,
}

# the seeds' default (autocommit.enable): positions are committed when a rebalance takes
# partitions away (here only then and on shutdown: the interval is never reached)
AUTO_COMMIT: dict[str, Any] = {"enable.auto.commit": True, "auto.commit.interval.ms": 600000}

Key = tuple[str, int, int]  # topic, partition, offset


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("odradek-streams") / "data", overrides=BROKER_OVERRIDES)
    proc.start()
    try:
        yield proc
    finally:
        code = proc.stop()
        assert code == 0, f"broker exited with {code}:\n{''.join(proc.stderr_lines[-40:])}"


@pytest.fixture
def name(request: pytest.FixtureRequest) -> str:
    base = re.sub(r"[^A-Za-z0-9_-]+", "-", request.node.name).strip("-")[:60]
    return f"{base}-{uuid.uuid4().hex[:8]}"


def wait_until(predicate: Callable[[], Any], what: str, timeout: float = TIMEOUT) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.02)


def create_topic(bs: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bs})
    for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        f.result(TIMEOUT)


def produce(bs: str, topic: str, partitions: int, per_partition: int) -> set[Key]:
    p = ck.Producer({"bootstrap.servers": bs, "linger.ms": 5})
    acked: set[Key] = set()

    def report(err: Any, msg: ck.Message) -> None:
        assert err is None, err
        acked.add((msg.topic() or "", msg.partition() or 0, msg.offset() or 0))

    for i in range(per_partition):
        for part in range(partitions):
            p.produce(topic, f"{topic}/{part}/{i}".encode(), partition=part, on_delivery=report)
        p.poll(0)
    assert p.flush(TIMEOUT) == 0
    assert len(acked) == partitions * per_partition
    return acked


class Collector:
    """Runs each stream in its own thread and collects what it yields."""

    def __init__(self, streams: Iterable[Iterable[ConsumerRecord]]) -> None:
        self.lock = threading.Lock()
        self.by_stream: list[list[Key]] = []
        self.errors: list[BaseException] = []
        self.threads = []
        for i, stream in enumerate(streams):
            self.by_stream.append([])
            t = threading.Thread(target=self._run, args=(i, stream), name=f"stream-{i}", daemon=True)
            self.threads.append(t)
            t.start()

    def _run(self, i: int, stream: Iterable[ConsumerRecord]) -> None:
        try:
            for record in stream:
                assert isinstance(record, ConsumerRecord)
                assert record.value == f"{record.topic}/{record.partition}/".encode() + record.value.rsplit(b"/", 1)[1]
                with self.lock:
                    self.by_stream[i].append((record.topic, record.partition, record.offset))
        except BaseException as exc:
            self.errors.append(exc)

    def all(self) -> list[Key]:
        with self.lock:
            return [k for keys in self.by_stream for k in keys]

    def wait_for(self, expected: set[Key], what: str) -> None:
        def done() -> bool:
            if self.errors:
                raise self.errors[0]
            return set(self.all()) >= expected

        wait_until(done, what)

    def join(self) -> None:
        for t in self.threads:
            t.join(TIMEOUT)
        assert not any(t.is_alive() for t in self.threads), "a stream did not end after shutdown()"
        assert not self.errors, self.errors

    def check_exactly_once(self, expected: set[Key]) -> None:
        got = self.all()
        assert len(got) == len(set(got)), "a record was delivered twice"
        assert set(got) == expected


def settle(collector: Collector, expected: set[Key]) -> None:
    collector.wait_for(expected, f"{len(expected)} records")
    time.sleep(0.3)  # not a synchronisation: a window for a duplicate to show


def test_create_message_streams_exactly_once(broker: BrokerProcess, name: str) -> None:
    bs = broker.bootstrap
    t1, t2 = f"{name}-a", f"{name}-b"
    create_topic(bs, t1, 4)
    create_topic(bs, t2, 2)
    expected = produce(bs, t1, 4, 25) | produce(bs, t2, 2, 20)
    hl, streams = create_message_streams({"bootstrap.servers": bs, "group.id": name, **GROUP_CONF}, {t1: 3, t2: 2})
    assert isinstance(hl, HighLevelConsumer)
    assert sorted(streams) == [t1, t2] and len(streams[t1]) == 3 and len(streams[t2]) == 2
    collector = Collector(streams[t1] + streams[t2])
    try:
        settle(collector, expected)
        # more records while the streams run
        more = produce(bs, t1, 4, 5) | produce(bs, t2, 2, 5)
        expected |= more
        settle(collector, expected)
        # each stream of a topic owns a share of its partitions; together, every record once
        for i, keys in enumerate(collector.by_stream):
            assert {k[0] for k in keys} <= {t1 if i < 3 else t2}
        t1_owners = [{p for _t, p, _o in keys} for keys in collector.by_stream[:3]]
        assert sum(len(s) for s in t1_owners) == 4 and set().union(*t1_owners) == {0, 1, 2, 3}
        assert all(1 <= len(s) <= 2 for s in t1_owners)
        hl.commit_offsets()
    finally:
        hl.shutdown()
    collector.join()
    collector.check_exactly_once(expected)

    # the same group carries on from the committed offsets: nothing old is delivered again.  The
    # new records come once both new streams hold their partitions: a stream that joined alone and
    # read records before the second one arrived would hand them on uncommitted (auto commit is
    # off), and the second would read them again — at least once, as the seeds' consumer does
    hl2, streams2 = create_message_streams({"bootstrap.servers": bs, "group.id": name, **GROUP_CONF}, {t1: 2})
    collector2 = Collector(streams2[t1])
    try:
        deadline = time.monotonic() + 30
        while sorted(len(s.consumer.assignment()) for s in streams2[t1]) != [2, 2]:
            assert time.monotonic() < deadline, [s.consumer.assignment() for s in streams2[t1]]
            time.sleep(0.05)
        newer = produce(bs, t1, 4, 3)
        settle(collector2, newer)
    finally:
        hl2.shutdown()
    collector2.join()
    collector2.check_exactly_once(newer)


def test_streams_by_whitelist_pick_up_new_topics(broker: BrokerProcess, name: str) -> None:
    bs = broker.bootstrap
    create_topic(bs, f"{name}.one", 3)
    create_topic(bs, f"{name}.two", 1)
    create_topic(bs, f"{name}-other", 2)
    expected = produce(bs, f"{name}.one", 3, 20) | produce(bs, f"{name}.two", 1, 15)
    produce(bs, f"{name}-other", 2, 5)  # does not match
    hl, streams = create_message_streams_by_filter(
        {"bootstrap.servers": bs, "group.id": name, **GROUP_CONF, **AUTO_COMMIT}, Whitelist(re.escape(name) + r"\..*"), 3
    )
    assert len(streams) == 3
    collector = Collector(streams)
    try:
        settle(collector, expected)
        hl.commit_offsets()  # a new topic means a rebalance; positions resume from the commits
        # a topic created now that matches is picked up (metadata.max.age.ms 500)
        create_topic(bs, f"{name}.three", 2)
        expected |= produce(bs, f"{name}.three", 2, 10)
        settle(collector, expected)
        expected |= produce(bs, f"{name}.one", 3, 2) | produce(bs, f"{name}.three", 2, 2)
        settle(collector, expected)
    finally:
        hl.shutdown()
    collector.join()
    collector.check_exactly_once(expected)
    assert sum(1 for keys in collector.by_stream if keys) >= 2  # the work was shared


def test_streams_by_blacklist(tmp_path: Path) -> None:
    # a broker of its own: a blacklist matches every topic on the broker
    with BrokerProcess(tmp_path / "data", overrides=BROKER_OVERRIDES) as broker:
        bs = broker.bootstrap
        for t, n in (("logs", 2), ("metrics", 2), ("secret.keys", 1), ("secret.tokens", 1)):
            create_topic(bs, t, n)
        expected = produce(bs, "logs", 2, 10) | produce(bs, "metrics", 2, 10)
        produce(bs, "secret.keys", 1, 5)
        produce(bs, "secret.tokens", 1, 5)
        hl, streams = create_message_streams_by_filter(
            {"bootstrap.servers": bs, "group.id": "bl", **GROUP_CONF, **AUTO_COMMIT}, Blacklist(r"secret\..*"), 2
        )
        collector = Collector(streams)
        try:
            settle(collector, expected)
            hl.commit_offsets()  # new topics mean a rebalance; positions resume from the commits
            create_topic(bs, "audit", 1)
            create_topic(bs, "secret.more", 1)
            expected |= produce(bs, "audit", 1, 7)
            produce(bs, "secret.more", 1, 3)
            settle(collector, expected)
        finally:
            hl.shutdown()
        collector.join()
        collector.check_exactly_once(expected)  # nothing of secret.* nor __consumer_offsets


def test_shutdown_ends_idle_iterators(broker: BrokerProcess, name: str) -> None:
    bs = broker.bootstrap
    create_topic(bs, name, 2)
    hl = HighLevelConsumer({"bootstrap.servers": bs, "group.id": name, **GROUP_CONF})
    streams = hl.create_message_streams({name: 2})[name]
    collector = Collector(streams)
    time.sleep(0.5)  # not a synchronisation: let the iterators block in poll with nothing to read
    started = time.monotonic()
    hl.shutdown()
    collector.join()
    assert time.monotonic() - started < 10
    assert collector.all() == []


def test_high_level_consumer_needs_group() -> None:
    with pytest.raises(ClientConfigError):
        HighLevelConsumer({"bootstrap.servers": "127.0.0.1:1"})
