"""Helpers of the KIP-848 consumer group tests: broker settings that make consumer-protocol
sessions short, confluent-kafka members using ``group.protocol=consumer``, and a watcher that
takes ConsumerGroupDescribe snapshots all along and checks that no partition is ever owned by two
members at once.

Every wait polls with a deadline; nothing sleeps for a fixed time to synchronise.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

import confluent_kafka as ck

from odradek.errors import ErrorCode
from odradek.protocol.messages.consumer_group_describe import ConsumerGroupDescribeRequest
from odradek.testing import WireClient
from tests.groups.group_helpers import BROKER_OVERRIDES, CK_COMMON, cooperative, rebalanced

#: the consumer protocol's session and heartbeat, lowered for CI (the bounds too)
KIP848_OVERRIDES: dict[str, object] = {
    **BROKER_OVERRIDES,
    "group.consumer.min.session.timeout.ms": 1000,
    "group.consumer.session.timeout.ms": 6000,
    "group.consumer.min.heartbeat.interval.ms": 100,
    "group.consumer.heartbeat.interval.ms": 300,
}

CK_KIP848: dict[str, Any] = {
    **CK_COMMON,
    "group.protocol": "consumer",
    "auto.offset.reset": "earliest",
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "fetch.wait.max.ms": 50,
}


@dataclass
class ConsumerMember:
    """A confluent-kafka consumer with ``group.protocol=consumer`` in this process that commits
    synchronously after every record.  The consumer protocol's callbacks are incremental: the
    partitions a callback names are added or taken away."""

    name: str
    consumer: ck.Consumer
    current: set[int] = field(default_factory=set)
    delivered: list[tuple[int, int, bytes]] = field(default_factory=list)
    committed: dict[int, int] = field(default_factory=dict)
    commit_failures: int = 0
    closed: bool = False

    @classmethod
    def start(cls, bootstrap: str, group: str, topic: str, name: str, **conf: Any) -> ConsumerMember:
        config = {"bootstrap.servers": bootstrap, "group.id": group, "client.id": name, **CK_KIP848, **conf}
        c = ck.Consumer(config)
        m = cls(name, c)
        incremental = cooperative(config)

        def on_assign(c: ck.Consumer, parts: list[ck.TopicPartition]) -> None:
            m.current |= {tp.partition for tp in parts}
            rebalanced(c, incremental, True, parts)

        def on_revoke(c: ck.Consumer, parts: list[ck.TopicPartition]) -> None:
            m.current -= {tp.partition for tp in parts}
            rebalanced(c, incremental, False, parts)

        c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
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
            self.commit_failures += 1  # the record's next owner gets it again
            return
        for tp in result or []:
            if tp.error is None:
                self.committed[tp.partition] = max(self.committed.get(tp.partition, 0), tp.offset)
            else:
                self.commit_failures += 1

    def close(self, timeout: float = 60.0) -> None:
        """Close the consumer (it leaves the group), bounded: librdkafka's close() has been seen
        to hang under load, and a hang must fail this test rather than stall the whole run."""
        if not self.closed:
            self.closed = True
            self.current = set()
            done = threading.Event()

            def close() -> None:
                try:
                    self.consumer.close()
                finally:
                    done.set()

            threading.Thread(target=close, daemon=True, name="ck-close").start()
            assert done.wait(timeout), f"confluent-kafka's close() did not return in {timeout:.0f} s"


@dataclass(frozen=True)
class Snapshot:
    state: str
    group_epoch: int
    assignment_epoch: int
    #: member id -> (member epoch, its partitions, its target partitions, instance id)
    members: dict[str, tuple[int, frozenset[int], frozenset[int], str | None]]

    def owners(self) -> dict[int, str]:
        """Partition -> its owner; fails when two members own one."""
        seen: dict[int, str] = {}
        for mid, (_e, parts, _t, _i) in self.members.items():
            for p in parts:
                assert p not in seen, f"partition {p} owned by {seen[p]} and {mid} at once: {self}"
                seen[p] = mid
        return seen

    def settled(self, members: int, partitions: int) -> bool:
        """Stable, with ``members`` members owning their targets, every partition owned."""
        return (self.state == "Stable" and len(self.members) == members
                and all(parts == target for _e, parts, target, _i in self.members.values())
                and len(self.owners()) == partitions)


def describe(w: WireClient, group: str, topic: str) -> Snapshot | None:
    resp = w.request(ConsumerGroupDescribeRequest(group_ids=[group]), 0)
    (g,) = resp.groups
    if g.error_code in (ErrorCode.GROUP_ID_NOT_FOUND, ErrorCode.COORDINATOR_NOT_AVAILABLE,
                        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.NOT_COORDINATOR):
        return None  # not yet (or not here: the coordinator moved)
    assert g.error_code == 0, (g.error_code, g.error_message)

    def parts(a: Any) -> frozenset[int]:
        return frozenset(p for tp in a.topic_partitions if tp.topic_name == topic for p in tp.partitions)

    return Snapshot(g.group_state, g.group_epoch, g.assignment_epoch, {
        m.member_id: (m.member_epoch, parts(m.assignment), parts(m.target_assignment), m.instance_id)
        for m in g.members
    })


class Watcher:
    """ConsumerGroupDescribe snapshots, one every few milliseconds on a thread of its own, each
    checked for a partition owned twice (``failure`` keeps the first such finding)."""

    def __init__(self, host: str, port: int, group: str, topic: str) -> None:
        self.wire = WireClient(host, port)
        self.group, self.topic = group, topic
        self.snapshots: list[Snapshot] = []
        self.failure: str | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                snap = describe(self.wire, self.group, self.topic)
                if snap is not None:
                    snap.owners()
                    with self._lock:
                        self.snapshots.append(snap)
            except AssertionError as exc:
                self.failure = self.failure or str(exc)
            except OSError:
                pass  # the broker is restarting: the next snapshot will tell
            self._stop.wait(0.005)

    def latest(self) -> Snapshot | None:
        with self._lock:
            return self.snapshots[-1] if self.snapshots else None

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self.wire.close()
        assert self.failure is None, self.failure


def wait_settled(watcher: Watcher, members: int, partitions: int, step: Any, timeout: float = 60.0) -> Snapshot:
    deadline = time.monotonic() + timeout
    while True:
        step()
        snap = watcher.latest()
        if snap is not None and snap.settled(members, partitions):
            return snap
        assert watcher.failure is None, watcher.failure
        if time.monotonic() > deadline:
            raise AssertionError(f"the group never settled with {members} members: {snap}")
