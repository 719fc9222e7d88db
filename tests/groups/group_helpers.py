"""Helpers for the consumer-group tests: bounded waits, topics, producing, and group members
driven by real clients (confluent-kafka in this process or in a child process).

Every wait polls with a deadline; nothing sleeps for a fixed time to synchronise.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import confluent_kafka as ck
from confluent_kafka.admin import AdminClient, NewTopic

DEFAULT_TIMEOUT = 30.0

# Broker settings that make rebalances and session expiry fast enough for CI.
BROKER_OVERRIDES: dict[str, object] = {
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 1000,
    "auto.create.topics.enable": "true",
}

SESSION_TIMEOUT_MS = 4000
HEARTBEAT_INTERVAL_MS = 300

# librdkafka settings that keep client-side waits short on loopback.
CK_COMMON: dict[str, Any] = {
    "socket.timeout.ms": 10000,
    "metadata.max.age.ms": 5000,
    "topic.metadata.refresh.interval.ms": 1000,
    "reconnect.backoff.ms": 10,
    "reconnect.backoff.max.ms": 200,
    "retry.backoff.ms": 20,
    "retry.backoff.max.ms": 200,
}

CK_GROUP: dict[str, Any] = {
    **CK_COMMON,
    "session.timeout.ms": SESSION_TIMEOUT_MS,
    "heartbeat.interval.ms": HEARTBEAT_INTERVAL_MS,
    "auto.offset.reset": "earliest",
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "fetch.wait.max.ms": 50,
    "partition.assignment.strategy": "range",
}

CHILD = Path(__file__).with_name("consumer_child.py")


def wait_until(predicate: Callable[[], Any], timeout: float = DEFAULT_TIMEOUT, what: str = "condition",
               step: Callable[[], None] | None = None) -> Any:
    """Call ``step`` (e.g. polling consumers) and ``predicate`` until the latter is truthy; fail
    after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    delay = 0.005
    while True:
        if step is not None:
            step()
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        if step is None:
            time.sleep(delay)  # poll interval, bounded by the deadline above
            delay = min(delay * 2, 0.1)


def admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap, **CK_COMMON})


def create_topic(bootstrap: str, name: str, partitions: int) -> None:
    a = admin(bootstrap)
    a.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[name].result(DEFAULT_TIMEOUT)
    wait_until(
        lambda: len(getattr(a.list_topics(name, timeout=5).topics.get(name), "partitions", {})) == partitions,
        what=f"topic {name} in metadata",
    )


def produce(bootstrap: str, topic: str, partitions: int, count: int, tag: str) -> dict[tuple[int, int], bytes]:
    """Produce ``count`` records round-robin over the partitions; returns {(partition, offset): value}."""
    p = ck.Producer({"bootstrap.servers": bootstrap, **CK_COMMON, "linger.ms": 2})
    out: dict[tuple[int, int], bytes] = {}
    errors: list[Any] = []

    def report(err: Any, msg: ck.Message) -> None:
        if err is not None:
            errors.append(err)
        else:
            out[(msg.partition() or 0, msg.offset() or 0)] = msg.value() or b""

    for i in range(count):
        p.produce(topic, value=f"{tag}-{i}".encode(), partition=i % partitions, on_delivery=report)
        p.poll(0)
    assert p.flush(DEFAULT_TIMEOUT) == 0
    assert not errors, errors
    assert len(out) == count
    return out


def ends(records: Iterable[tuple[int, int]]) -> dict[int, int]:
    """The end offset (last offset + 1) of each partition in ``records``."""
    out: dict[int, int] = {}
    for p, o in records:
        out[p] = max(out.get(p, 0), o + 1)
    return out


# ------------------------------------------------------------------------------------------------
# group members


def cooperative(config: Mapping[str, Any]) -> bool:
    """Whether a confluent-kafka consumer of this config rebalances incrementally (KIP-848's consumer
    protocol, or a cooperative assignor) rather than eagerly."""
    return str(config.get("group.protocol", "classic")) == "consumer" or "cooperative" in str(
        config.get("partition.assignment.strategy", ""))


def rebalanced(consumer: ck.Consumer, incremental: bool, assigned: bool, parts: list[ck.TopicPartition]) -> None:
    """What a rebalance callback must end with: the (incremental) assign or unassign, done here.

    Left undone, confluent-kafka does it after the callback, first asking librdkafka which protocol is in
    use (``rd_kafka_rebalance_protocol``): one more request to the group's queue, waited for with the GIL
    held -- a whole test run hung in it, in a ``close()``. The protocol is known from the config
    (:func:`cooperative`): that request is never made."""
    if incremental:
        if assigned:
            consumer.incremental_assign(parts)
        else:
            consumer.incremental_unassign(parts)
    elif assigned:
        consumer.assign(parts)
    else:
        consumer.unassign()


@dataclass
class Member:
    """A confluent-kafka group consumer in this process that commits synchronously after every
    record it is given.  ``step`` polls it once; the tests drive several members round-robin."""

    name: str
    consumer: ck.Consumer
    topic: str
    assignments: list[list[int]] = field(default_factory=list)  # every on_assign, in order
    current: list[int] = field(default_factory=list)
    delivered: list[tuple[int, int, bytes]] = field(default_factory=list)
    committed: dict[int, int] = field(default_factory=dict)  # successful commits
    commit_failures: int = 0
    closed: bool = False

    @classmethod
    def start(cls, bootstrap: str, group: str, topic: str, name: str, **conf: Any) -> Member:
        config = {"bootstrap.servers": bootstrap, "group.id": group, "client.id": name, **CK_GROUP, **conf}
        c = ck.Consumer(config)
        m = cls(name, c, topic)
        incremental = cooperative(config)

        def on_assign(c: ck.Consumer, parts: list[ck.TopicPartition]) -> None:
            m.current = sorted(tp.partition for tp in parts)
            m.assignments.append(m.current)
            rebalanced(c, incremental, True, parts)

        def on_revoke(c: ck.Consumer, parts: list[ck.TopicPartition]) -> None:
            m.current = []
            rebalanced(c, incremental, False, parts)

        c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
        return m

    def step(self, timeout: float = 0.02) -> None:
        if self.closed:
            return
        msg = self.consumer.poll(timeout)
        if msg is None:
            return
        err = msg.error()
        if err is not None:
            assert not err.fatal(), err
            return
        self.delivered.append((msg.partition() or 0, msg.offset() or 0, msg.value() or b""))
        try:
            result = self.consumer.commit(message=msg, asynchronous=False)
        except ck.KafkaException:
            # e.g. REBALANCE_IN_PROGRESS: the record was delivered but not committed; its next
            # owner gets it again from the last committed offset
            self.commit_failures += 1
            return
        for tp in result or []:
            if tp.error is None:
                self.committed[tp.partition] = max(self.committed.get(tp.partition, 0), tp.offset)
            else:
                self.commit_failures += 1

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.current = []
            self.consumer.close()


class ChildMember:
    """A confluent-kafka group consumer in its own process (``consumer_child.py``) that commits
    nothing; it reports assignments and delivered records as JSON lines."""

    def __init__(self, bootstrap: str, group: str, topic: str, name: str) -> None:
        self.name = name
        self.proc = subprocess.Popen(
            [sys.executable, str(CHILD), bootstrap, group, topic, name, json.dumps(CK_GROUP)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        self.assignments: list[list[int]] = []
        self.current: list[int] = []
        self.delivered: list[tuple[int, int, bytes]] = []
        self.member_id = ""
        self.stderr: list[str] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()
        threading.Thread(target=self._drain, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            ev = json.loads(line)
            with self._lock:
                if "assigned" in ev:
                    self.current = sorted(ev["assigned"])
                    self.assignments.append(self.current)
                    self.member_id = ev.get("member_id", self.member_id)
                elif "revoked" in ev:
                    self.current = []
                elif "record" in ev:
                    p, o, v = ev["record"]
                    self.delivered.append((p, o, v.encode()))

    def _drain(self) -> None:
        assert self.proc.stderr is not None
        for line in self.proc.stderr:
            self.stderr.append(line)

    def snapshot(self) -> tuple[list[int], int, int]:
        with self._lock:
            return list(self.current), len(self.assignments), len(self.delivered)

    def kill(self) -> None:
        """SIGKILL: no LeaveGroup, no commit; the coordinator notices after the session timeout."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait(10)

    def step(self) -> None:  # runs on its own
        assert self.proc.poll() is None, f"child consumer exited: {''.join(self.stderr[-20:])}"


def disjoint_cover(assignments: Iterable[list[int]], partitions: int) -> bool:
    """Whether the members' partitions are pairwise disjoint and together are every partition."""
    flat = [p for a in assignments for p in a]
    return len(flat) == len(set(flat)) == partitions and set(flat) == set(range(partitions))


def describe_group(bootstrap: str, group: str) -> Any:
    a = admin(bootstrap)  # keep the client alive until its future is done
    return a.describe_consumer_groups([group])[group].result(DEFAULT_TIMEOUT)


def list_groups(bootstrap: str) -> dict[str, Any]:
    """ListGroups through AdminClient: {group id: ConsumerGroupState}."""
    a = admin(bootstrap)
    listed = a.list_consumer_groups().result(DEFAULT_TIMEOUT)
    assert not listed.errors, listed.errors
    return {g.group_id: g.state for g in listed.valid}


def committed_offsets(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    """OffsetFetch through AdminClient.list_consumer_group_offsets: {partition: offset} (-1001
    stands for no committed offset)."""
    req = ck.ConsumerGroupTopicPartitions(group, [ck.TopicPartition(topic, p) for p in range(partitions)])
    a = admin(bootstrap)
    res = a.list_consumer_group_offsets([req])[group].result(DEFAULT_TIMEOUT)
    out = {}
    for tp in res.topic_partitions:
        assert tp.error is None, tp.error
        out[tp.partition] = tp.offset
    return out
