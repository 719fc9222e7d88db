"""Odradek's group Consumer against a real ``odradek serve``.

* Interop: Odradek and confluent-kafka (librdkafka) consumers in one group, with the ``range``
  assignor and, separately, ``cooperative-sticky``: members join and leave while they consume
  and commit synchronously after every batch; every partition has one owner at a time (checked
  on the members' own rebalance callbacks, which run before a member rejoins and after it got its
  assignment), and at the end every record confluent-kafka produced was consumed exactly once
  and the committed offsets add up to the number produced.
* Resume after a broker restart (SIGTERM, start on the same port): the group carries on exactly
  from the committed offsets.
* The consumer API: auto.offset.reset, auto-commit, commit_async, seek/position/committed,
  offsets_for_times, pause/resume, rebalance listeners, max.poll.records, assign() without a
  group, static membership, iteration, AsyncConsumer.

Timings are lowered (session 3 s, heartbeats 200 ms, fetch waits 100 ms); every wait polls with a
deadline.
"""

from __future__ import annotations

import asyncio
import itertools
import re
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.client import AsyncConsumer, ClientConfigError, CommitFailed, Consumer, ConsumerRecord
from odradek.errors import ErrorCode, KafkaError
from odradek.testing import BrokerProcess
from tests.groups.group_helpers import cooperative, rebalanced

BROKER_OVERRIDES: dict[str, object] = {
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 1000,
    "auto.create.topics.enable": "false",
}
TIMEOUT = 30.0

ODR_GROUP: dict[str, Any] = {
    "session.timeout.ms": 3000,
    "heartbeat.interval.ms": 200,
    "max.poll.interval.ms": 10000,
    "fetch.max.wait.ms": 100,
    "auto.offset.reset": "earliest",
    "enable.auto.commit": False,
    "retry.backoff.ms": 20,
    "default.api.timeout.ms": 15000,
    "request.timeout.ms": 10000,
}

CK_GROUP: dict[str, Any] = {
    "session.timeout.ms": 3000,
    "heartbeat.interval.ms": 200,
    "max.poll.interval.ms": 10000,
    "fetch.wait.max.ms": 100,
    "auto.offset.reset": "earliest",
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "socket.timeout.ms": 10000,
    "topic.metadata.refresh.interval.ms": 1000,
    "reconnect.backoff.ms": 10,
    "reconnect.backoff.max.ms": 200,
    "retry.backoff.ms": 20,
}

TopicPartition = tuple[str, int]


# -- fixtures and helpers -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("odradek-consumer-group") / "data", overrides=BROKER_OVERRIDES)
    proc.start()
    try:
        yield proc
    finally:
        code = proc.stop()
        assert code == 0, f"broker exited with {code}:\n{''.join(proc.stderr_lines[-40:])}"


@pytest.fixture
def name(request: pytest.FixtureRequest) -> str:
    """A topic / group name unique to this test."""
    base = re.sub(r"[^A-Za-z0-9._-]+", "-", request.node.name).strip("-")[:80]
    return f"{base}-{uuid.uuid4().hex[:8]}"


def wait_until(predicate: Callable[[], Any], what: str, timeout: float = TIMEOUT, step: Callable[[], None] | None = None) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        if step is not None:
            step()
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        if step is None:
            time.sleep(0.02)


def create_topic(bs: str, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": bs})
    for f in admin.create_topics([NewTopic(topic, partitions, 1)]).values():
        f.result(TIMEOUT)


def produce(bs: str, topic: str, partitions: int, per_partition: int, tag: str = "r", timestamp: int | None = None) -> dict[tuple[int, int], bytes]:
    """Produce with confluent-kafka; returns ``{(partition, offset): value}``."""
    p = ck.Producer({"bootstrap.servers": bs, "linger.ms": 5, "enable.idempotence": True})
    acked: dict[tuple[int, int], bytes] = {}

    def report(err: Any, msg: ck.Message) -> None:
        assert err is None, err
        acked[(msg.partition() or 0, msg.offset() or 0)] = msg.value() or b""

    for i in range(per_partition):
        for part in range(partitions):
            kwargs: dict[str, Any] = {} if timestamp is None else {"timestamp": timestamp + i}
            p.produce(topic, f"{tag}-{part}-{i}".encode(), partition=part, on_delivery=report, **kwargs)
        p.poll(0)
    assert p.flush(TIMEOUT) == 0
    assert len(acked) == partitions * per_partition
    return acked


def odr(bs: str, group: str | None, **conf: Any) -> Consumer:
    config = {"bootstrap.servers": bs, "group.id": group, **ODR_GROUP}
    config.update({k.replace("_", "."): v for k, v in conf.items()})
    return Consumer(config)


def poll_until(c: Consumer, count: int, what: str = "records", timeout: float = TIMEOUT) -> list[ConsumerRecord]:
    out: list[ConsumerRecord] = []
    wait_until(lambda: len(out) >= count, what=f"{count} {what} (have {len(out)})", timeout=timeout,
               step=lambda: out.extend(c.poll(0.2)))
    return out


def poll_all(*consumers: Consumer, into: list[ConsumerRecord] | None = None) -> None:
    """One short poll of each consumer (the first one's records go to ``into``)."""
    for i, c in enumerate(consumers):
        got = c.poll(0.05)
        if i == 0 and into is not None:
            into.extend(got)


def committed_ck(bs: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    c = ck.Consumer({"bootstrap.servers": bs, "group.id": group})
    try:
        got = c.committed([ck.TopicPartition(topic, p) for p in range(partitions)], timeout=TIMEOUT)
        return {tp.partition: tp.offset for tp in got}
    finally:
        c.close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# -- ownership bookkeeping from the members' own rebalance callbacks -----------------------------------


class Ownership:
    """Ownership intervals per partition, from rebalance callbacks (thread-safe)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.current: dict[str, set[int]] = {}
        self.intervals: dict[int, list[list[Any]]] = {}  # partition -> [[member, start, end|None]]
        self.events: list[tuple[str, str, list[int]]] = []

    def assigned(self, member: str, parts: Iterable[int]) -> None:
        now = time.monotonic()
        parts = sorted(parts)
        with self.lock:
            self.events.append((member, "assigned", parts))
            mine = self.current.setdefault(member, set())
            for p in parts:
                if p not in mine:
                    mine.add(p)
                    self.intervals.setdefault(p, []).append([member, now, None])

    def revoked(self, member: str, parts: Iterable[int]) -> None:
        now = time.monotonic()
        parts = sorted(parts)
        with self.lock:
            self.events.append((member, "revoked", parts))
            mine = self.current.setdefault(member, set())
            for p in parts:
                if p in mine:
                    mine.discard(p)
                    for iv in self.intervals[p]:
                        if iv[0] == member and iv[2] is None:
                            iv[2] = now

    def snapshot(self) -> dict[str, list[int]]:
        with self.lock:
            return {m: sorted(ps) for m, ps in self.current.items() if ps}

    def check_one_owner_at_a_time(self) -> None:
        with self.lock:
            for p, ivs in self.intervals.items():
                ordered = sorted(ivs, key=lambda iv: iv[1])
                for a, b in itertools.pairwise(ordered):
                    assert a[2] is not None and a[2] <= b[1], f"partition {p} had two owners: {a} and {b}"


def covers(snapshot: dict[str, list[int]], partitions: int, members: int) -> bool:
    flat = [p for ps in snapshot.values() for p in ps]
    if len(flat) != len(set(flat)) or set(flat) != set(range(partitions)) or len(snapshot) != members:
        return False
    sizes = [len(ps) for ps in snapshot.values()]
    return max(sizes) - min(sizes) <= 1


class Member:
    """A group member in its own thread (as separate applications would be) that records what it
    consumes and commits synchronously after each batch.

    A commit the group refuses because of a rebalance under way (REBALANCE_IN_PROGRESS; or, from
    librdkafka, ILLEGAL_GENERATION when its commit queued behind its own rejoin) is kept and
    retried after the next poll, as Kafka's documentation says to do; any other failure is
    recorded and fails the test."""

    def __init__(self, name: str, topic: str, owners: Ownership) -> None:
        self.name, self.topic, self.owners = name, topic, owners
        self.consumed: list[tuple[int, int, bytes]] = []
        self.commit_failures: list[str] = []
        self.retried = 0
        self.pending: dict[int, int] = {}
        self.closed = False
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> Member:
        self.thread.start()
        return self

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                self.step()
        except BaseException as exc:
            self.error = exc
        finally:
            try:
                self.stop_consuming()
            finally:
                self.closed = True

    def close(self) -> None:
        """Commit what was consumed, leave the group (cleanly), wait for the thread."""
        self._stop.set()
        self.thread.join(TIMEOUT)
        assert not self.thread.is_alive(), f"{self.name} did not stop"
        if self.error is not None:
            raise self.error

    def step(self) -> None:
        raise NotImplementedError

    def stop_consuming(self) -> None:
        raise NotImplementedError


class OdradekMember(Member):
    def __init__(self, bs: str, group: str, topic: str, name: str, owners: Ownership, strategy: str, auto_commit: bool = False) -> None:
        super().__init__(name, topic, owners)
        # auto-commit: only at revocations and on close (the interval is never reached)
        conf = {"enable_auto_commit": True, "auto_commit_interval_ms": 600000} if auto_commit else {}
        self.auto_commit = auto_commit
        self.c = odr(bs, group, client_id=name, partition_assignment_strategy=strategy, **conf)
        member = self

        class Listener:
            def on_partitions_revoked(self, parts: list[TopicPartition]) -> None:
                owners.revoked(member.name, [p for _t, p in parts])

            def on_partitions_assigned(self, parts: list[TopicPartition]) -> None:
                owners.assigned(member.name, [p for _t, p in parts])

        self.c.subscribe([topic], listener=Listener())

    def step(self) -> None:
        for r in self.c.poll(0.02, max_records=10):
            self.consumed.append((r.partition, r.offset, r.value))
            self.pending[r.partition] = r.offset + 1
        self.commit()

    def commit(self) -> None:
        if not self.pending or self.auto_commit:
            self.pending.clear()
            return
        try:
            self.c.commit({(self.topic, p): o for p, o in self.pending.items()})
            self.pending.clear()
        except CommitFailed as exc:
            if exc.code != ErrorCode.REBALANCE_IN_PROGRESS:
                self.commit_failures.append(str(exc))
            self.retried += 1
        except KafkaError as exc:
            self.commit_failures.append(str(exc))

    def stop_consuming(self) -> None:
        self.commit()
        self.owners.revoked(self.name, range(64))  # it stops consuming now
        self.c.close()


class ConfluentMember(Member):
    RETRY = frozenset({ck.KafkaError.REBALANCE_IN_PROGRESS, ck.KafkaError.ILLEGAL_GENERATION})

    def __init__(self, bs: str, group: str, topic: str, name: str, owners: Ownership, strategy: str) -> None:
        super().__init__(name, topic, owners)
        config = {"bootstrap.servers": bs, "group.id": group, "client.id": name, "partition.assignment.strategy": strategy,
                  **CK_GROUP}
        self.c = ck.Consumer(config)
        incremental = cooperative(config)  # the callbacks (un)assign themselves: see rebalanced

        def on_assign(c: ck.Consumer, parts: list[ck.TopicPartition]) -> None:
            owners.assigned(name, [tp.partition for tp in parts])
            rebalanced(c, incremental, True, parts)

        def on_revoke(c: ck.Consumer, parts: list[ck.TopicPartition]) -> None:
            # librdkafka runs this inside poll, before it gives the partitions up: commit them
            revoked = {tp.partition for tp in parts}
            self.commit(revoked)
            lost = {p: o for p, o in self.pending.items() if p in revoked}
            if lost:
                self.commit_failures.append(f"uncommitted at revocation: {lost}")
            owners.revoked(name, revoked)
            rebalanced(c, incremental, False, parts)

        def on_lost(c: ck.Consumer, parts: list[ck.TopicPartition]) -> None:
            owners.revoked(name, [tp.partition for tp in parts])
            self.commit_failures.append(f"partitions lost: {parts}")
            rebalanced(c, incremental, False, parts)

        self.c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)

    def commit(self, partitions: set[int] | None = None) -> None:
        todo = {p: o for p, o in self.pending.items() if partitions is None or p in partitions}
        if not todo:
            return
        try:
            result = self.c.commit(offsets=[ck.TopicPartition(self.topic, p, o) for p, o in todo.items()], asynchronous=False)
            self.commit_failures.extend(str(tp.error) for tp in result or [] if tp.error is not None)
            for p in todo:
                del self.pending[p]
        except ck.KafkaException as exc:
            if exc.args[0].code() not in self.RETRY:
                self.commit_failures.append(str(exc))
            self.retried += 1

    def step(self) -> None:
        for m in self.c.consume(num_messages=10, timeout=0.02):
            err = m.error()
            if err is not None:
                assert not err.fatal(), err
                continue
            self.consumed.append((m.partition() or 0, m.offset() or 0, m.value() or b""))
            self.pending[m.partition() or 0] = (m.offset() or 0) + 1
        self.commit()

    def stop_consuming(self) -> None:
        self.commit()
        self.owners.revoked(self.name, range(64))
        self.c.close()


# -- interop -------------------------------------------------------------------------------------------

PARTITIONS = 6
WAVE = 40  # records per partition per wave


@pytest.mark.interop
@pytest.mark.parametrize(
    ("odr_strategy", "ck_strategy"),
    [("range", "range"), ("cooperative-sticky", "cooperative-sticky")],
    ids=["range", "cooperative-sticky"],
)
def test_mixed_group_with_confluent_exactly_once(broker: BrokerProcess, name: str, odr_strategy: str, ck_strategy: str) -> None:
    bs, topic, group = broker.bootstrap, name, name
    create_topic(bs, topic, PARTITIONS)
    owners = Ownership()
    produced: dict[tuple[int, int], bytes] = {}
    members: list[Member] = []

    def add(kind: str, label: str) -> None:
        cls = OdradekMember if kind == "odr" else ConfluentMember
        members.append(cls(bs, group, topic, label, owners, odr_strategy if kind == "odr" else ck_strategy).start())

    def stable(n: int) -> Callable[[], bool]:
        def check() -> bool:
            for m in members:
                if m.error is not None:
                    raise m.error
            return covers(owners.snapshot(), PARTITIONS, n)

        return check

    stable_assignments = []
    try:
        # records are produced in waves, one before each change of membership; members take at
        # most 10 records per poll, so they are in the middle of consuming when members come and go
        produced |= produce(bs, topic, PARTITIONS, WAVE, "w1")
        add("odr", "odr-1")
        add("ck", "ck-1")
        wait_until(stable(2), "odr-1 and ck-1 to share the partitions")
        stable_assignments.append(owners.snapshot())

        produced |= produce(bs, topic, PARTITIONS, WAVE, "w2")
        add("odr", "odr-2")
        wait_until(stable(3), "three members")
        stable_assignments.append(owners.snapshot())

        produced |= produce(bs, topic, PARTITIONS, WAVE, "w3")
        add("ck", "ck-2")
        wait_until(stable(4), "four members")
        stable_assignments.append(owners.snapshot())

        produced |= produce(bs, topic, PARTITIONS, WAVE, "w4")
        members[0].close()  # odr-1 leaves
        wait_until(stable(3), "odr-1's partitions to move")
        stable_assignments.append(owners.snapshot())

        produced |= produce(bs, topic, PARTITIONS, WAVE, "w5")
        members[1].close()  # ck-1 leaves
        wait_until(stable(2), "ck-1's partitions to move")
        stable_assignments.append(owners.snapshot())

        produced |= produce(bs, topic, PARTITIONS, WAVE, "w6")
        total = len(produced)
        wait_until(lambda: sum(len(m.consumed) for m in members) >= total and not any(m.pending for m in members),
                   f"all {total} records consumed and committed")
        time.sleep(0.3)  # not a synchronisation: a window in which a duplicate would show up
    finally:
        for m in members:
            m.close()

    # each member got the partitions the range / sticky arithmetic gives
    assert [sorted(s) for s in stable_assignments] == [
        ["ck-1", "odr-1"],
        ["ck-1", "odr-1", "odr-2"],
        ["ck-1", "ck-2", "odr-1", "odr-2"],
        ["ck-1", "ck-2", "odr-2"],
        ["ck-2", "odr-2"],
    ]
    if odr_strategy == "range":
        # Kafka's RangeAssignor over member ids (client.id + "-" + uuid: ck-* sort before odr-*),
        # whichever client led the group
        assert stable_assignments == [
            {"ck-1": [0, 1, 2], "odr-1": [3, 4, 5]},
            {"ck-1": [0, 1], "odr-1": [2, 3], "odr-2": [4, 5]},
            {"ck-1": [0, 1], "ck-2": [2, 3], "odr-1": [4], "odr-2": [5]},
            {"ck-1": [0, 1], "ck-2": [2, 3], "odr-2": [4, 5]},
            {"ck-2": [0, 1, 2], "odr-2": [3, 4, 5]},
        ]
    else:
        # sticky: a member keeps what it had across every change
        for before, after in itertools.pairwise(stable_assignments):
            for m, parts in after.items():
                if m in before:
                    kept = set(before[m]) & set(parts)
                    assert kept == set(parts) or kept == set(before[m]), (m, before[m], parts)
    owners.check_one_owner_at_a_time()
    assert all(not m.commit_failures for m in members), {m.name: m.commit_failures for m in members}
    assert all(not m.pending for m in members), {m.name: m.pending for m in members}
    consumed = [(p, o) for m in members for p, o, _v in m.consumed]
    dup = {k for k, n in Counter(consumed).items() if n > 1}
    who = {m.name: sorted(k for k in ((p, o) for p, o, _v in m.consumed) if k in dup) for m in members}
    assert not dup, f"consumed twice: {who}; ownership events: {owners.events}"
    assert len(consumed) == len(set(consumed)), "a record was consumed twice"
    assert set(consumed) == set(produced)
    assert {(p, o): v for m in members for p, o, v in m.consumed} == produced
    assert all(any(isinstance(m, cls) and m.consumed for m in members) for cls in (OdradekMember, ConfluentMember))
    committed = committed_ck(bs, group, topic, PARTITIONS)
    assert sum(committed.values()) == len(produced)
    assert committed == {p: 6 * WAVE for p in range(PARTITIONS)}


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_auto_commit_handover_exactly_once(broker: BrokerProcess, name: str, strategy: str) -> None:
    """Odradek members with enable.auto.commit (interval never reached): partitions change hands
    through commits at revocation (eager: before rejoining; cooperative: on the next poll after the
    round that took them away) and on close; nothing is consumed twice."""
    bs, topic, group = broker.bootstrap, name, name
    create_topic(bs, topic, PARTITIONS)
    owners = Ownership()
    produced: dict[tuple[int, int], bytes] = {}
    members: list[Member] = []

    def add(label: str) -> None:
        members.append(OdradekMember(bs, group, topic, label, owners, strategy, auto_commit=True).start())

    def stable(n: int) -> Callable[[], bool]:
        def check() -> bool:
            for m in members:
                if m.error is not None:
                    raise m.error
            return covers(owners.snapshot(), PARTITIONS, n)

        return check

    try:
        produced |= produce(bs, topic, PARTITIONS, WAVE, "w1")
        add("a")
        wait_until(stable(1), "a alone")
        produced |= produce(bs, topic, PARTITIONS, WAVE, "w2")
        add("b")
        wait_until(stable(2), "a and b")
        produced |= produce(bs, topic, PARTITIONS, WAVE, "w3")
        add("c")
        wait_until(stable(3), "three members")
        produced |= produce(bs, topic, PARTITIONS, WAVE, "w4")
        members[0].close()
        wait_until(stable(2), "a's partitions to move")
        produced |= produce(bs, topic, PARTITIONS, WAVE, "w5")
        total = len(produced)
        wait_until(lambda: sum(len(m.consumed) for m in members) >= total, f"all {total} records")
        time.sleep(0.3)  # not a synchronisation: a window in which a duplicate would show up
    finally:
        for m in members:
            m.close()
    owners.check_one_owner_at_a_time()
    consumed = [(p, o) for m in members for p, o, _v in m.consumed]
    assert len(consumed) == len(set(consumed)), "a record was consumed twice"
    assert set(consumed) == set(produced)
    assert committed_ck(bs, group, topic, PARTITIONS) == {p: 5 * WAVE for p in range(PARTITIONS)}


# -- resume after a broker restart --------------------------------------------------------------------


def test_resume_from_committed_offsets_after_broker_restart(tmp_path: Any) -> None:
    broker = BrokerProcess(tmp_path / "data", port=free_port(), overrides=BROKER_OVERRIDES)
    broker.start()
    try:
        bs, topic, group = broker.bootstrap, "restart", "restart-group"
        create_topic(bs, topic, 3)
        produced = produce(bs, topic, 3, 50)
        c = odr(bs, group)
        c.subscribe([topic])
        got = poll_until(c, 60)
        # commit an uneven position per partition: what was consumed of the first 60
        upto: dict[int, int] = {}
        for r in got[:60]:
            upto[r.partition] = max(upto.get(r.partition, 0), r.offset + 1)
        c.commit({(topic, p): o for p, o in upto.items()})
        assert c.committed([(topic, p) for p in range(3)]) == {(topic, p): upto.get(p) for p in range(3)}
        c.close()

        assert broker.stop() == 0
        broker.start()
        assert broker.bootstrap == bs

        c2 = odr(bs, group)
        c2.subscribe([topic])
        rest = poll_until(c2, 150 - sum(upto.values()))
        firsts: dict[int, int] = {}
        for r in rest:
            firsts.setdefault(r.partition, r.offset)
        assert firsts == {p: upto.get(p, 0) for p in range(3) if upto.get(p, 0) < 50}
        assert sorted((r.partition, r.offset) for r in rest) == sorted(k for k in produced if k[1] >= upto.get(k[0], 0))
        c2.commit()
        assert c2.committed([(topic, p) for p in range(3)]) == {(topic, p): 50 for p in range(3)}
        c2.close()
    finally:
        broker.stop()


def test_consumer_survives_a_broker_restart(tmp_path: Any) -> None:
    """The same consumer object carries on after the broker came back (reconnect, rejoin)."""
    broker = BrokerProcess(tmp_path / "data", port=free_port(), overrides=BROKER_OVERRIDES)
    broker.start()
    try:
        bs, topic, group = broker.bootstrap, "survive", "survive-group"
        create_topic(bs, topic, 2)
        produce(bs, topic, 2, 20, "a")
        c = odr(bs, group, request_timeout_ms=3000)
        c.subscribe([topic])
        first = poll_until(c, 40)
        c.commit()
        assert broker.stop() == 0
        assert c.poll(0.3) == []
        broker.start()
        produce(bs, topic, 2, 20, "b")
        second = poll_until(c, 40)
        keys = [(r.partition, r.offset) for r in first + second]
        assert len(keys) == len(set(keys)) == 80
        assert {r.value[:1] for r in second} == {b"b"}
        c.commit()
        assert c.committed([(topic, 0), (topic, 1)]) == {(topic, 0): 40, (topic, 1): 40}
        c.close()
    finally:
        broker.stop()


# -- offsets and positions ----------------------------------------------------------------------------


def test_auto_offset_reset_earliest_latest_none(broker: BrokerProcess, name: str) -> None:
    bs, topic = broker.bootstrap, name
    create_topic(bs, topic, 2)
    produce(bs, topic, 2, 5, "old")

    with odr(bs, f"{name}-earliest", auto_offset_reset="earliest") as c:
        c.subscribe([topic])
        got = poll_until(c, 10)
        assert sorted((r.partition, r.offset) for r in got) == [(p, o) for p in range(2) for o in range(5)]

    with odr(bs, f"{name}-latest", auto_offset_reset="latest") as c:
        c.subscribe([topic])
        wait_until(lambda: len(c.assignment()) == 2, "the assignment", step=lambda: c.poll(0.1))
        assert {c.position((topic, p)) for p in range(2)} == {5}
        produce(bs, topic, 2, 3, "new")
        got = poll_until(c, 6)
        assert {r.value[:3] for r in got} == {b"new"}
        assert sorted(r.offset for r in got) == [5, 5, 6, 6, 7, 7]

    with odr(bs, f"{name}-none", auto_offset_reset="none") as c:
        c.subscribe([topic])
        with pytest.raises(KafkaError) as info:
            wait_until(lambda: c.poll(0.2) and False, "an error")
        assert info.value.code == ErrorCode.OFFSET_OUT_OF_RANGE
        assert "auto.offset.reset" in str(info.value)

    # with a committed offset, "none" is no obstacle
    with odr(bs, f"{name}-none2", auto_offset_reset="none") as c:
        c.assign([(topic, 0), (topic, 1)])
        c.commit({(topic, 0): 2, (topic, 1): 4})
    with odr(bs, f"{name}-none2", auto_offset_reset="none") as c:
        c.subscribe([topic])
        got = poll_until(c, 10)  # p0: 2..7 (6), p1: 4..7 (4)
        assert sorted((r.partition, r.offset) for r in got) == [(0, o) for o in range(2, 8)] + [(1, o) for o in range(4, 8)]

    with pytest.raises(ClientConfigError):
        odr(bs, name, auto_offset_reset="smallest")


def test_auto_commit_interval_and_on_close(broker: BrokerProcess, name: str) -> None:
    bs, topic = broker.bootstrap, name
    create_topic(bs, topic, 1)
    produce(bs, topic, 1, 30)
    tp = (topic, 0)
    c = odr(bs, name, enable_auto_commit=True, auto_commit_interval_ms=200, max_poll_records=10)
    c.subscribe([topic])
    got = poll_until(c, 10)
    assert [r.offset for r in got] == list(range(10))
    c.pause([tp])  # poll() goes on (auto-commits happen inside it) without taking more records
    # the position is committed by poll() once the interval has passed
    wait_until(lambda: c.committed([tp])[tp] == 10, "the auto-commit of offset 10", step=lambda: c.poll(0.05) and None)
    c.resume([tp])
    got = poll_until(c, 10)
    assert [r.offset for r in got] == list(range(10, 20))
    c.pause([tp])
    wait_until(lambda: c.committed([tp])[tp] == 20, "the auto-commit of offset 20", step=lambda: c.poll(0.05) and None)
    c.close()


def test_auto_commit_commits_position_on_close(broker: BrokerProcess, name: str) -> None:
    bs, topic = broker.bootstrap, name
    create_topic(bs, topic, 1)
    produce(bs, topic, 1, 20)
    tp = (topic, 0)
    c = odr(bs, name, enable_auto_commit=True, auto_commit_interval_ms=600000, max_poll_records=7)
    c.subscribe([topic])
    got = poll_until(c, 7)
    assert [r.offset for r in got] == list(range(7))
    assert c.committed([tp])[tp] is None  # the interval has not passed
    c.close()
    with odr(bs, name) as check:
        assert check.committed([tp]) == {tp: 7}
    # autocommit=False on close commits nothing
    c = odr(bs, name, enable_auto_commit=True, auto_commit_interval_ms=600000, max_poll_records=5)
    c.subscribe([topic])
    got = poll_until(c, 5)
    assert [r.offset for r in got] == list(range(7, 12))
    c.close(autocommit=False)
    with odr(bs, name) as check:
        assert check.committed([tp]) == {tp: 7}


def test_commit_async_with_callback(broker: BrokerProcess, name: str) -> None:
    bs, topic = broker.bootstrap, name
    create_topic(bs, topic, 2)
    produce(bs, topic, 2, 4)
    with odr(bs, name) as c:
        c.subscribe([topic])
        poll_until(c, 8)
        results: list[tuple[BaseException | None, dict[TopicPartition, int]]] = []
        c.commit_async(callback=lambda err, offsets: results.append((err, dict(offsets))))
        wait_until(lambda: results, "the commit callback")
        assert results == [(None, {(topic, 0): 4, (topic, 1): 4})]
        c.commit_async({(topic, 0): 1}, callback=lambda err, offsets: results.append((err, dict(offsets))))
        wait_until(lambda: len(results) == 2, "the second callback")
        assert results[1] == (None, {(topic, 0): 1})
        assert c.committed([(topic, 0), (topic, 1)]) == {(topic, 0): 1, (topic, 1): 4}
        c.commit_async({(topic, 1): 2})  # no callback
        wait_until(lambda: c.committed([(topic, 1)]) == {(topic, 1): 2}, "the commit without callback")
    # a commit the group refuses reaches the callback as an error
    with odr(bs, name) as c:
        c.subscribe([topic])
        poll_until(c, 5)  # resumes at 1 and 2
        errors: list[BaseException | None] = []
        c._async.group.generation = 9999  # type: ignore[union-attr]  # as if a rebalance had passed it by
        c.commit_async(callback=lambda err, _o: errors.append(err))
        wait_until(lambda: errors, "the failing commit's callback")
        assert isinstance(errors[0], KafkaError) and errors[0].code == ErrorCode.ILLEGAL_GENERATION


def test_seek_position_committed(broker: BrokerProcess, name: str) -> None:
    bs, topic = broker.bootstrap, name
    create_topic(bs, topic, 1)
    produce(bs, topic, 1, 20)
    tp = (topic, 0)
    with odr(bs, name, max_poll_records=5) as c:
        c.subscribe([topic])
        assert [r.offset for r in poll_until(c, 5)] == list(range(5))
        assert c.position(tp) == 5
        assert c.committed([tp]) == {tp: None}
        c.commit()
        assert c.committed([tp]) == {tp: 5}
        c.seek(tp, 12)
        assert c.position(tp) == 12
        assert [r.offset for r in poll_until(c, 5)] == list(range(12, 17))
        c.seek_to_beginning()
        assert c.position(tp) == 0
        assert [r.offset for r in poll_until(c, 5)] == list(range(5))
        c.seek_to_end([tp])
        assert c.position(tp) == 20
        assert c.poll(0.2) == []
        c.seek(tp, 19)
        assert [r.offset for r in poll_until(c, 1)] == [19]
        assert c.position(tp) == 20
        assert c.committed([tp]) == {tp: 5}  # seeking commits nothing
        with pytest.raises(ValueError):
            c.seek(tp, -1)
        with pytest.raises(KafkaError):
            c.position((topic, 7))


def test_offsets_for_times(broker: BrokerProcess, name: str) -> None:
    bs, topic = broker.bootstrap, name
    create_topic(bs, topic, 1)
    t0 = 1_700_000_000_000
    produce(bs, topic, 1, 10, timestamp=t0)  # timestamps t0 .. t0+9
    with odr(bs, None) as c:
        tp = (topic, 0)
        c.assign([tp])
        assert c.offsets_for_times({tp: t0 + 4}) == {tp: 4}
        assert c.offsets_for_times({tp: 0}) == {tp: 0}
        assert c.offsets_for_times({tp: t0 + 100}) == {tp: None}
        c.seek(tp, c.offsets_for_times({tp: t0 + 7})[tp] or 0)
        got = poll_until(c, 3)
        assert [(r.offset, r.timestamp) for r in got] == [(o, t0 + o) for o in range(7, 10)]


def test_pause_and_resume(broker: BrokerProcess, name: str) -> None:
    bs, topic = broker.bootstrap, name
    create_topic(bs, topic, 2)
    produce(bs, topic, 2, 10)
    with odr(bs, name) as c:
        c.subscribe([topic])
        before: list[ConsumerRecord] = []
        wait_until(lambda: len(c.assignment()) == 2, "the assignment", step=lambda: before.extend(c.poll(0.05, max_records=1)))
        c.pause([(topic, 0)])
        seen0 = [r.offset for r in before if r.partition == 0]
        got = poll_until(c, 10 - sum(1 for r in before if r.partition == 1))
        deadline = time.monotonic() + 0.5
        while time.monotonic() < deadline:
            got += c.poll(0.1)
        assert {r.partition for r in got} == {1}
        assert sorted(r.offset for r in before + got if r.partition == 1) == list(range(10))
        c.resume([(topic, 0)])
        got = poll_until(c, 10 - len(seen0))
        assert sorted(seen0 + [r.offset for r in got if r.partition == 0]) == list(range(10))
        assert {r.partition for r in got} == {0}


def test_max_poll_records(broker: BrokerProcess, name: str) -> None:
    bs, topic = broker.bootstrap, name
    create_topic(bs, topic, 3)
    produce(bs, topic, 3, 30)
    with odr(bs, name, max_poll_records=7) as c:
        c.subscribe([topic])
        sizes: list[int] = []
        records: list[ConsumerRecord] = []

        def step() -> None:
            got = c.poll(0.2)
            if got:
                sizes.append(len(got))
                records.extend(got)

        wait_until(lambda: len(records) >= 60, "60 records", step=step)
        assert max(sizes) == 7 and all(s <= 7 for s in sizes)
        got = c.poll(1.0, max_records=3)
        assert len(got) == 3
        records += got
        records += poll_until(c, 90 - len(records))
        keys = [(r.partition, r.offset) for r in records]
        assert len(keys) == len(set(keys)) == 90
        for p in range(3):  # in offset order within a partition
            offs = [r.offset for r in records if r.partition == p]
            assert offs == sorted(offs)


def test_manual_assign_without_group(broker: BrokerProcess, name: str) -> None:
    bs, topic = broker.bootstrap, name
    create_topic(bs, topic, 3)
    produce(bs, topic, 3, 6)
    c = odr(bs, None)
    try:
        c.assign([(topic, 0), (topic, 2)])
        assert sorted(c.assignment()) == [(topic, 0), (topic, 2)]
        got = poll_until(c, 12)
        assert sorted((r.partition, r.offset) for r in got) == [(p, o) for p in (0, 2) for o in range(6)]
        c.assign([(topic, 1)])
        c.seek((topic, 1), 3)
        got = poll_until(c, 3)
        assert [(r.partition, r.offset) for r in got] == [(1, 3), (1, 4), (1, 5)]
        with pytest.raises(ClientConfigError):
            c.commit()
        with pytest.raises(ClientConfigError):
            c.subscribe([topic])
    finally:
        c.close()


def test_rebalance_listener_order_and_partitions(broker: BrokerProcess, name: str) -> None:
    bs, topic = broker.bootstrap, name
    create_topic(bs, topic, 4)
    events: list[tuple[str, str, list[int]]] = []

    def listener(member: str) -> Any:
        class L:
            def on_partitions_revoked(self, parts: list[TopicPartition]) -> None:
                events.append((member, "revoked", sorted(p for _t, p in parts)))

            def on_partitions_assigned(self, parts: list[TopicPartition]) -> None:
                events.append((member, "assigned", sorted(p for _t, p in parts)))

        return L()

    a = odr(bs, name, partition_assignment_strategy="range", client_id="a")
    b = odr(bs, name, partition_assignment_strategy="range", client_id="b")
    try:
        a.subscribe([topic], listener=listener("a"))
        wait_until(lambda: ("a", "assigned", [0, 1, 2, 3]) in events, "a to get all partitions", step=lambda: a.poll(0.05))
        assert events == [("a", "assigned", [0, 1, 2, 3])]
        b.subscribe([topic], listener=listener("b"))

        def both() -> None:
            a.poll(0.05)
            b.poll(0.05)

        wait_until(lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2, "two members", step=both)
        a_events = [e for e in events if e[0] == "a"]
        assert a_events == [("a", "assigned", [0, 1, 2, 3]), ("a", "revoked", [0, 1, 2, 3]), ("a", "assigned", sorted(p for _t, p in a.assignment()))]
        assert [e for e in events if e[0] == "b"] == [("b", "assigned", sorted(p for _t, p in b.assignment()))]
        assert sorted(a.assignment() + b.assignment()) == [(topic, p) for p in range(4)]
        # the revocation came before anyone got the new assignment
        assert events.index(("a", "revoked", [0, 1, 2, 3])) < events.index(events[-1])
        a_parts = sorted(p for _t, p in a.assignment())
        b.close()
        wait_until(lambda: len(a.assignment()) == 4, "a to get everything back", step=lambda: a.poll(0.05))
        assert [e for e in events if e[0] == "a"][-2:] == [("a", "revoked", a_parts), ("a", "assigned", [0, 1, 2, 3])]
    finally:
        a.close()
        b.close()


def test_cooperative_listener_gets_only_changes(broker: BrokerProcess, name: str) -> None:
    bs, topic = broker.bootstrap, name
    create_topic(bs, topic, 4)
    events: list[tuple[str, str, list[int]]] = []

    def listener(member: str) -> Any:
        class L:
            def on_partitions_revoked(self, parts: list[TopicPartition]) -> None:
                events.append((member, "revoked", sorted(p for _t, p in parts)))

            def on_partitions_assigned(self, parts: list[TopicPartition]) -> None:
                events.append((member, "assigned", sorted(p for _t, p in parts)))

        return L()

    a = odr(bs, name, partition_assignment_strategy="cooperative-sticky")
    b = odr(bs, name, partition_assignment_strategy="cooperative-sticky")
    try:
        a.subscribe([topic], listener=listener("a"))
        wait_until(lambda: len(a.assignment()) == 4, "a to get all partitions", step=lambda: a.poll(0.05))
        b.subscribe([topic], listener=listener("b"))
        wait_until(lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2, "two members",
                   step=lambda: poll_all(a, b))
        assert [e for e in events if e[0] == "a"] == [("a", "assigned", [0, 1, 2, 3]), ("a", "revoked", [2, 3])]
        assert [e for e in events if e[0] == "b"] == [("b", "assigned", [2, 3])]
        assert events.index(("a", "revoked", [2, 3])) < events.index(("b", "assigned", [2, 3]))
    finally:
        a.close()
        b.close()


def static_restart(bs: str, name: str) -> tuple[list[tuple[str, str, list[int]]], list[TopicPartition], float]:
    """Two static members share 4 partitions; ``static-a`` closes (a static member sends no
    LeaveGroup) and comes back at once.  Returns the listener events, the restarted member's
    assignment, and how long it took to get it."""
    topic = name
    create_topic(bs, topic, 4)
    produce(bs, topic, 4, 5)
    events: list[tuple[str, str, list[int]]] = []

    def listener(member: str) -> Any:
        class L:
            def on_partitions_revoked(self, parts: list[TopicPartition]) -> None:
                events.append((member, "revoked", sorted(p for _t, p in parts)))

            def on_partitions_assigned(self, parts: list[TopicPartition]) -> None:
                events.append((member, "assigned", sorted(p for _t, p in parts)))

        return L()

    conf = {"partition_assignment_strategy": "range", "session_timeout_ms": 6000}
    a = odr(bs, name, group_instance_id="static-a", **conf)
    b = odr(bs, name, group_instance_id="static-b", **conf)
    try:
        # a first, alone; then b: a's last JoinGroup carries generation 1 (as a long-running
        # member's would carry some generation), its replacement's carries none
        a.subscribe([topic], listener=listener("a"))
        wait_until(lambda: len(a.assignment()) == 4, "static-a alone", step=lambda: a.poll(0.05, max_records=1) and None)
        b.subscribe([topic], listener=listener("b"))
        wait_until(lambda: len(a.assignment()) == 2 and len(b.assignment()) == 2, "two static members",
                   step=lambda: poll_all(a, b))
        # range orders static members by instance id: static-a gets the first half
        assert sorted(a.assignment()) == [(topic, 0), (topic, 1)]
        events.append(("-", "restart", []))
        a.close()
        restarted = time.monotonic()
        a2 = odr(bs, name, group_instance_id="static-a", **conf)
        a2.subscribe([topic], listener=listener("a2"))
        try:
            got: list[ConsumerRecord] = []
            wait_until(lambda: len(a2.assignment()) == 2 and len(b.assignment()) == 2, "the restarted member's assignment",
                       step=lambda: poll_all(a2, b, into=got))
            took = time.monotonic() - restarted
            wait_until(lambda: len(got) >= 10, "a2's records", step=lambda: poll_all(a2, b, into=got))
            assert sorted((r.partition, r.offset) for r in got) == [(p, o) for p in (0, 1) for o in range(5)]
            deadline = time.monotonic() + 1.0  # a window for a late rebalance to show
            while time.monotonic() < deadline:
                b.poll(0.05)
                a2.poll(0.05)
            # (a copy: closing gives the partitions up through the listeners too)
            return list(events), sorted(a2.assignment()), took
        finally:
            a2.close()
    finally:
        a.close()
        b.close()


def test_static_member_restart_gets_its_partitions(broker: BrokerProcess, name: str) -> None:
    events, assignment, took = static_restart(broker.bootstrap, name)
    assert assignment == [(name, 0), (name, 1)]
    assert took < 3  # well before the session timeout (6 s) of the member it replaces
    assert ("a2", "assigned", [0, 1]) in events


def test_static_member_restart_without_rebalance(broker: BrokerProcess, name: str) -> None:
    events, _assignment, _took = static_restart(broker.bootstrap, name)
    after = events[events.index(("-", "restart", [])) + 1 :]
    assert [e for e in after if e[0] == "b"] == []  # b saw no revocation, no new assignment
    # the old member gave its partitions up when it closed; its replacement got them back once
    assert after == [("a", "revoked", [0, 1]), ("a2", "assigned", [0, 1])]


def test_iteration(broker: BrokerProcess, name: str) -> None:
    bs, topic = broker.bootstrap, name
    create_topic(bs, topic, 2)
    produced = produce(bs, topic, 2, 15)
    with odr(bs, name, max_poll_records=4) as c:
        c.subscribe([topic])
        seen = []
        for record in c:
            assert isinstance(record, ConsumerRecord)
            seen.append((record.partition, record.offset))
            if len(seen) == 30:
                break
        assert sorted(seen) == sorted(produced)


def test_iteration_counts_only_what_it_yielded(broker: BrokerProcess, name: str) -> None:
    """The iterator takes a batch (max.poll.records) at a time; position(), commit() and seek()
    see only the records it handed out, and the rest come next."""
    bs, topic = broker.bootstrap, name
    tp = (topic, 0)
    create_topic(bs, topic, 1)
    produce(bs, topic, 1, 30)
    with odr(bs, name, max_poll_records=10) as c:
        c.subscribe([topic])
        it = iter(c)
        first = [next(it).offset for _ in range(3)]
        assert first == [0, 1, 2]
        assert c.position(tp) == 3
        c.commit()
        assert c.committed([tp]) == {tp: 3}
        assert [next(it).offset for _ in range(4)] == [3, 4, 5, 6]
        c.seek(tp, 20)
        assert [next(it).offset for _ in range(2)] == [20, 21]
        c.seek(tp, 8)
        assert next(it).offset == 8
        got = c.poll(1.0, max_records=2)  # poll() and the iterator share the position
        assert [r.offset for r in got] == [9, 10]
        assert next(it).offset == 11
    with odr(bs, name, max_poll_records=10, enable_auto_commit=True, auto_commit_interval_ms=600000) as c:
        c.subscribe([topic])
        for record in c:
            if record.offset == 14:
                break
        # close() commits what the iteration yielded, not its whole batch
    with odr(bs, name) as c:
        assert c.committed([tp]) == {tp: 15}


def test_listener_cannot_call_the_consumer(broker: BrokerProcess, name: str) -> None:
    """Rebalance listeners run on the consumer's event loop: calling the (blocking) Consumer from
    one is an error, not a deadlock."""
    bs, topic = broker.bootstrap, name
    create_topic(bs, topic, 1)
    c = odr(bs, name)
    try:
        class L:
            def on_partitions_revoked(self, parts: list[TopicPartition]) -> None:
                pass

            def on_partitions_assigned(self, parts: list[TopicPartition]) -> None:
                c.position(parts[0])

        c.subscribe([topic], listener=L())
        with pytest.raises(RuntimeError, match="rebalance listener"):
            wait_until(lambda: False, "the listener's error", step=lambda: c.poll(0.1) and None)
    finally:
        c.close()


def test_subscribe_by_pattern_with_exclude(broker: BrokerProcess, name: str) -> None:
    bs = broker.bootstrap
    for suffix in ("a", "b", "skip"):
        create_topic(bs, f"{name}.{suffix}", 1)
        produce(bs, f"{name}.{suffix}", 1, 3, suffix)
    with odr(bs, name, metadata_max_age_ms=300) as c:
        c.subscribe(pattern=re.escape(name) + r"\..*", exclude=r".*\.skip")
        got = poll_until(c, 6)
        assert sorted({r.topic for r in got}) == [f"{name}.a", f"{name}.b"]
        c.commit()  # a new topic means a rebalance: positions start again from the commits
        create_topic(bs, f"{name}.c", 2)
        produce(bs, f"{name}.c", 2, 2, "c")
        later = poll_until(c, 4, "records of the new topic")
        assert {r.topic for r in later} == {f"{name}.c"}
        assert c.subscription() == {f"{name}.a", f"{name}.b", f"{name}.c"}
    with pytest.raises(ValueError):
        odr(bs, name).subscribe(["x"], pattern="y")


def test_async_consumer_basic_flow(broker: BrokerProcess, name: str) -> None:
    bs, topic = broker.bootstrap, name
    create_topic(bs, topic, 2)
    produced = produce(bs, topic, 2, 10)

    async def main() -> None:
        async with AsyncConsumer({"bootstrap.servers": bs, "group.id": name, **ODR_GROUP}) as c:
            c.subscribe([topic])
            got: list[ConsumerRecord] = []
            deadline = time.monotonic() + TIMEOUT
            while len(got) < 12 and time.monotonic() < deadline:
                got += await c.poll(0.2, max_records=12 - len(got))
            assert len(got) == 12
            await c.commit()
            committed = await c.committed([(topic, 0), (topic, 1)])
            assert sum(v or 0 for v in committed.values()) == 12
            rest = []
            async for record in c:
                rest.append(record)
                if len(got) + len(rest) == 20:
                    break
            assert sorted((r.partition, r.offset) for r in got + rest) == sorted(produced)
            await c.seek_to_beginning([(topic, 0)])
            assert await c.position((topic, 0)) == 0
            again = await c.poll(5.0)
            assert again and {r.partition for r in again} == {0}
            await c.commit({(topic, 0): 10, (topic, 1): 10})
        async with AsyncConsumer(bootstrap_servers=bs, group_id=name, **{k.replace(".", "_"): v for k, v in ODR_GROUP.items()}) as c:
            assert await c.committed([(topic, 0), (topic, 1)]) == {(topic, 0): 10, (topic, 1): 10}
        assert c.closed
        with pytest.raises(KafkaError):
            await c.poll(0.1)

    asyncio.run(main())


def test_unknown_config_and_strategy(broker: BrokerProcess) -> None:
    with pytest.raises(ClientConfigError):
        Consumer({"bootstrap.servers": broker.bootstrap, "group.idd": "x"})
    with pytest.raises(ValueError, match=r"partition\.assignment\.strategy"):
        odr(broker.bootstrap, "g", partition_assignment_strategy="sticky-wrong")
