"""Share groups (KIP-932) with confluent-kafka's ShareConsumer (librdkafka's share consumer, as
users run it): more consumers than partitions all receive records, each record goes to one
consumer at a time, RELEASE redelivers, REJECT archives, a lock that expires gives the record to
another consumer, a consumer SIGKILLed mid-batch has its records redelivered to the others, and a
broker restart resumes the group; in the end every record was accepted, none twice.  Each scenario
runs with both share consumers users have in Python: confluent-kafka's and Odradek's own."""

from __future__ import annotations

import itertools
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from odradek.client import Admin
from odradek.protocol.messages.share_group_describe import ShareGroupDescribeRequest
from odradek.testing import BrokerProcess, WireClient

#: lock durations short enough for a test (a group may go down to the broker's minimum)
OVERRIDES = {
    "group.share.min.record.lock.duration.ms": 1000,
    "group.share.heartbeat.interval.ms": 1000,
    "group.share.min.heartbeat.interval.ms": 1000,
}
T = 30.0
_names = itertools.count()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("odradek-share-consumers"), overrides=OVERRIDES)
    proc.start()
    try:
        yield proc
    finally:
        code = proc.stop()
        assert code == 0, f"broker exited with {code}:\n{''.join(proc.stderr_lines[-40:])}"


def _setup(bootstrap: str, partitions: int, **configs: str) -> tuple[str, str]:
    """A new topic and a new share group (its configs set before anyone subscribes, as clients do)."""
    n = next(_names)
    topic, group = f"queue-{n}", f"workers-{n}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result(T)
    _set_group(bootstrap, group, **configs)
    deadline = time.monotonic() + T
    while len(admin.list_topics(topic, timeout=5).topics[topic].partitions) < partitions:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    return topic, group


def _set_group(bootstrap: str, group: str, **configs: str) -> None:
    """The group's configs (names with _ for .), share.auto.offset.reset=earliest unless given."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entries = [ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET)
               for k, v in {"share_auto_offset_reset": "earliest", **configs}.items()]
    for fut in admin.incremental_alter_configs([ConfigResource(ResourceType.GROUP, group, incremental_configs=entries)]).values():
        fut.result(T)


def _produce(bootstrap: str, topic: str, values: list[bytes], partitions: int) -> None:
    p = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 2})
    for i, v in enumerate(values):
        p.produce(topic, value=v, partition=i % partitions)
        p.poll(0)
    assert p.flush(T) == 0


def _consumer(bootstrap: str, group: str, topic: str, *, explicit: bool = False, client: str = "confluent") -> Any:
    c = CLIENTS[client]({
        "bootstrap.servers": bootstrap, "group.id": group,
        **({"share.acknowledgement.mode": "explicit"} if explicit else {}),
    })
    c.subscribe([topic])
    return c


def _wait_members(broker: BrokerProcess, group: str, members: int) -> None:
    """Until the group has ``members`` members, each with its assignment (ShareGroupDescribe)."""
    w = WireClient(broker.host, broker.port)
    try:
        deadline = time.monotonic() + T
        while True:
            g = w.request(ShareGroupDescribeRequest(group_ids=[group]), version=1).groups[0]
            if g.error_code == 0 and len(g.members) == members and all(
                m.assignment.topic_partitions for m in g.members
            ) and g.group_epoch == g.assignment_epoch:
                return
            assert time.monotonic() < deadline, f"the group never had {members} assigned members: {g}"
            time.sleep(0.1)
    finally:
        w.close()


class _Record:
    """An Odradek ShareRecord with confluent-kafka's Message accessors."""

    def __init__(self, r: Any) -> None:
        self.r = r

    def error(self) -> None:
        return None

    def value(self) -> Any:
        return self.r.value

    def key(self) -> Any:
        return self.r.key

    def headers(self) -> list[tuple[str, bytes]]:
        return list(self.r.headers)

    def delivery_count(self) -> int:
        return int(self.r.delivery_count)

    def partition(self) -> int:
        return int(self.r.partition)

    def offset(self) -> int:
        return int(self.r.offset)


class OdradekShare:
    """Odradek's ShareConsumer with confluent-kafka's ShareConsumer surface (what the scenarios use)."""

    def __init__(self, config: dict[str, Any]) -> None:
        from odradek.client import ShareConsumer

        self.c = ShareConsumer(config)

    def subscribe(self, topics: list[str]) -> None:
        self.c.subscribe(topics)

    def poll(self, timeout: float) -> list[_Record]:
        return [_Record(r) for r in self.c.poll(timeout)]

    def acknowledge(self, m: _Record, kind: Any) -> None:
        from odradek.client import AcknowledgeType

        self.c.acknowledge(m.r, AcknowledgeType[kind.name])

    def commit_sync(self, timeout: float) -> None:
        self.c.commit_sync(timeout)

    def close(self) -> None:
        self.c.close()


CLIENTS = {"confluent": ck.ShareConsumer, "odradek": OdradekShare}


@pytest.fixture(params=sorted(CLIENTS))
def client(request: pytest.FixtureRequest) -> str:
    """Which share consumer the scenario runs with."""
    return str(request.param)


def _poll(c: Any, timeout: float = 0.5) -> list[Any]:
    return [m for m in c.poll(timeout) if m.error() is None]


def _drain(c: Any, want: int, *, timeout: float = T) -> list[Any]:
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(got) < want and time.monotonic() < deadline:
        got += _poll(c)
    return got


def test_four_consumers_on_two_partitions_all_receive_and_each_record_is_delivered_once(broker: BrokerProcess, client: str) -> None:
    topic, group = _setup(broker.bootstrap, 2)
    values = [b"job-%d" % i for i in range(1000)]
    received: dict[int, list[bytes]] = {i: [] for i in range(4)}
    stop = threading.Event()
    errors: list[BaseException] = []

    def work(i: int) -> None:
        try:
            c = _consumer(broker.bootstrap, group, topic, client=client)
            try:
                while not stop.is_set():
                    for m in _poll(c, 0.2):
                        received[i].append(m.value())
                        time.sleep(0.002)  # a worker's processing: the others get records meanwhile
            finally:
                c.commit_sync(T)  # librdkafka's close does not accept the last poll's records: commit first
                c.close()
        except BaseException as exc:  # reported below
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(4)]
    for w in workers:
        w.start()
    _wait_members(broker, group, 4)
    time.sleep(2.5)  # two heartbeats: each member has heard its assignment
    producer = ck.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for k in range(0, len(values), 10):  # jobs arrive over time, as a queue's do
        for i, v in enumerate(values[k:k + 10]):
            producer.produce(topic, value=v, partition=i % 2)
        assert producer.flush(T) == 0
        time.sleep(0.01)
    deadline = time.monotonic() + 60
    while sum(len(v) for v in received.values()) < len(values) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)  # anything delivered twice would arrive now
    stop.set()
    for w in workers:
        w.join(T)
    assert not errors, errors
    every = [v for vs in received.values() for v in vs]
    assert sorted(every) == sorted(values), "each record delivered exactly once (no failures, all accepted)"
    assert all(received[i] for i in range(4)), {i: len(v) for i, v in received.items()}
    # nothing is left for a newcomer: all were accepted
    late = _consumer(broker.bootstrap, group, topic)
    try:
        assert _drain(late, 1, timeout=3) == []
    finally:
        late.close()


def test_release_redelivers_reject_archives_and_an_expired_lock_goes_to_another(broker: BrokerProcess, client: str) -> None:
    topic, group = _setup(broker.bootstrap, 1, share_record_lock_duration_ms="2000")
    _produce(broker.bootstrap, topic, [b"a", b"b", b"c", b"d"], 1)
    one = _consumer(broker.bootstrap, group, topic, explicit=True, client=client)
    two = _consumer(broker.bootstrap, group, topic, explicit=True, client=client)
    try:
        got = _drain(one, 4)
        assert [m.value() for m in got] == [b"a", b"b", b"c", b"d"]
        assert {m.delivery_count() for m in got} == {1}
        by_value = {m.value(): m for m in got}
        one.acknowledge(by_value[b"a"], ck.AcknowledgeType.ACCEPT)
        one.acknowledge(by_value[b"b"], ck.AcknowledgeType.RELEASE)
        one.acknowledge(by_value[b"c"], ck.AcknowledgeType.REJECT)
        one.commit_sync(T)  # d stays held by `one`, unacknowledged
        # b comes back at once (to either consumer), a second delivery
        again = _drain(two, 1, timeout=5)  # `one` may not poll: d is still its to acknowledge
        assert [(m.value(), m.delivery_count()) for m in again] == [(b"b", 2)]
        two.acknowledge(again[0], ck.AcknowledgeType.ACCEPT)
        two.commit_sync(T)
        # d: its lock (2 s) expires and it goes to `two`; a and c never come back
        late = _drain(two, 1, timeout=10)
        assert [(m.value(), m.delivery_count()) for m in late] == [(b"d", 2)]
        two.acknowledge(late[0], ck.AcknowledgeType.ACCEPT)
        two.commit_sync(T)
        assert _drain(two, 1, timeout=3) == []
    finally:
        one.close()
        two.close()


_HOLDER = """
import sys, time
config = {"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2], "share.acknowledgement.mode": "explicit"}
if sys.argv[5] == "odradek":
    from odradek.client import ShareConsumer
    c = ShareConsumer(config)
    count = lambda records: len(records)
else:
    import confluent_kafka as ck
    c = ck.ShareConsumer(config)
    count = lambda records: sum(1 for m in records if m.error() is None)
c.subscribe([sys.argv[3]])
held = 0
deadline = time.monotonic() + 60
while held < int(sys.argv[4]) and time.monotonic() < deadline:
    held += count(c.poll(0.5))
print(held, flush=True)
time.sleep(120)  # holding them, unacknowledged, until killed
"""


def test_a_consumer_killed_mid_batch_has_its_records_redelivered_to_the_others(broker: BrokerProcess, tmp_path: Path, client: str) -> None:
    topic, group = _setup(broker.bootstrap, 1)  # the default lock (30 s): the records come back with the connection
    values = [b"r%d" % i for i in range(20)]
    _produce(broker.bootstrap, topic, values, 1)
    script = tmp_path / "holder.py"
    script.write_text(_HOLDER)
    holder = subprocess.Popen([sys.executable, str(script), broker.bootstrap, group, topic, str(len(values)), client],
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        assert holder.stdout is not None
        line = holder.stdout.readline()
        assert line.strip() == str(len(values)), line
        other = _consumer(broker.bootstrap, group, topic, client=client)
        try:
            assert _drain(other, 1, timeout=2) == []  # all held by the other process
            os.kill(holder.pid, signal.SIGKILL)
            holder.wait(T)
            started = time.monotonic()
            got = _drain(other, len(values), timeout=20)
            assert sorted(m.value() for m in got) == sorted(values)
            assert {m.delivery_count() for m in got} == {2}
            assert time.monotonic() - started < 25  # not waiting for the 30 s locks: the connection's end released them
        finally:
            other.close()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def test_a_broker_restart_resumes_the_group_and_every_record_is_accepted_once(tmp_path: Path, client: str) -> None:
    proc = BrokerProcess(tmp_path / "data", overrides=OVERRIDES)
    proc.start()
    try:
        topic, group = _setup(proc.bootstrap, 2)
        first, second = [b"x%d" % i for i in range(300)], [b"y%d" % i for i in range(300)]
        _produce(proc.bootstrap, topic, first, 2)
        seen: Counter[bytes] = Counter()
        counts: list[int] = []
        c = _consumer(proc.bootstrap, group, topic, client=client)
        for m in _drain(c, 150):
            seen[m.value()] += 1
            counts.append(m.delivery_count())
        c.commit_sync(T)  # accepts what the last poll gave (implicit mode; librdkafka's close does not)
        c.close()
        assert proc.stop() == 0
        proc.start()
        _produce(proc.bootstrap, topic, second, 2)
        c = _consumer(proc.bootstrap, group, topic, client=client)
        try:
            deadline = time.monotonic() + 60
            while set(seen) < set(first + second) and time.monotonic() < deadline:
                for m in _poll(c):
                    seen[m.value()] += 1
                    counts.append(m.delivery_count())
            c.commit_sync(T)
        finally:
            c.close()
        assert set(seen) == set(first + second)
        # at-least-once: nothing accepted before the restart came back
        assert max(seen.values()) == 1, [v for v, n in seen.items() if n > 1][:10]
        late = _consumer(proc.bootstrap, group, topic)
        try:
            assert _drain(late, 1, timeout=3) == []
        finally:
            late.close()
    finally:
        proc.stop()


def _read_all(bootstrap: str, topic: str, want: int, timeout: float = T) -> list[Any]:
    c = ck.Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{next(_names)}",
                     "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    try:
        while len(got) < want and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m)
    finally:
        c.close()
    return got


def test_poison_and_rejected_records_land_in_the_dead_letter_topic_with_their_origin(broker: BrokerProcess, client: str) -> None:
    n = next(_names)
    dlq = f"dlq.poison-{n}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(dlq, 1, 1, config={"errors.deadletterqueue.group.enable": "true"})])[dlq].result(T)
    topic, group = _setup(broker.bootstrap, 1, share_delivery_count_limit="2", errors_deadletterqueue_topic_name=dlq,
                          errors_deadletterqueue_copy_record_enable="true")
    p = ck.Producer({"bootstrap.servers": broker.bootstrap})
    for key, value in ((b"k1", b"good"), (b"k2", b"poison"), (b"k3", b"bad")):
        p.produce(topic, key=key, value=value, headers=[("trace", b"t-" + key)], partition=0)
    assert p.flush(T) == 0
    c = _consumer(broker.bootstrap, group, topic, explicit=True, client=client)
    try:
        deliveries: Counter[bytes] = Counter()
        deadline = time.monotonic() + T
        while deliveries[b"poison"] < 2 and time.monotonic() < deadline:
            for m in _poll(c):
                deliveries[m.value()] += 1
                kind = {b"good": ck.AcknowledgeType.ACCEPT, b"poison": ck.AcknowledgeType.RELEASE,
                        b"bad": ck.AcknowledgeType.REJECT}[m.value()]
                c.acknowledge(m, kind)
            c.commit_sync(T)
        assert deliveries == {b"good": 1, b"poison": 2, b"bad": 1}
        # the poison record is not delivered a third time: the delivery-count limit archived it
        assert _drain(c, 1, timeout=3) == []
    finally:
        c.close()
    letters = _read_all(broker.bootstrap, dlq, 2)
    assert len(letters) == 2
    by_value = {m.value(): m for m in letters}
    assert set(by_value) == {b"poison", b"bad"}
    for value, offset, count, reason in ((b"poison", 1, 2, b"delivery_limit"), (b"bad", 2, 1, b"rejected")):
        m = by_value[value]
        headers = dict(m.headers())
        assert m.key() == {b"poison": b"k2", b"bad": b"k3"}[value]
        assert headers["trace"] == {b"poison": b"t-k2", b"bad": b"t-k3"}[value]
        assert headers["__dlq.errors.topic"] == topic.encode()
        assert headers["__dlq.errors.partition"] == b"0"
        assert headers["__dlq.errors.offset"] == str(offset).encode()
        assert headers["__dlq.errors.group.id"] == group.encode()
        assert headers["__dlq.errors.delivery.count"] == str(count).encode()
        assert headers["__dlq.errors.reason"] == reason


def test_a_dead_letter_topic_that_did_not_allow_it_gets_nothing(broker: BrokerProcess) -> None:
    n = next(_names)
    dlq = f"dlq.closed-{n}"
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(dlq, 1, 1)])[dlq].result(T)  # errors.deadletterqueue.group.enable: false
    topic, group = _setup(broker.bootstrap, 1, errors_deadletterqueue_topic_name=dlq)
    _produce(broker.bootstrap, topic, [b"bad"], 1)
    c = _consumer(broker.bootstrap, group, topic, explicit=True)
    try:
        got = _drain(c, 1)
        c.acknowledge(got[0], ck.AcknowledgeType.REJECT)
        c.commit_sync(T)
    finally:
        c.close()
    time.sleep(1.0)  # a dead letter would be written by now (the write follows the acknowledgement)
    assert _read_all(broker.bootstrap, dlq, 1, timeout=3) == []
    assert any("does not allow dead letters" in line for line in broker.stderr_lines[-200:])


def test_a_read_committed_share_group_never_delivers_an_aborted_record(broker: BrokerProcess, client: str) -> None:
    topic, group = _setup(broker.bootstrap, 1, share_isolation_level="read_committed")
    uncommitted = f"uncommitted-{next(_names)}"  # a read_uncommitted group of the same topic, for contrast
    _set_group(broker.bootstrap, uncommitted)
    p = ck.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": f"tx-{next(_names)}"})
    p.init_transactions(T)
    for values, commit in (([b"c1", b"c2"], True), ([b"a1", b"a2"], False), ([b"c3"], True), ([b"a3"], False)):
        p.begin_transaction()
        for v in values:
            p.produce(topic, value=v, partition=0)
        p.flush(T)
        (p.commit_transaction if commit else p.abort_transaction)(T)
    _produce(broker.bootstrap, topic, [b"plain"], 1)  # outside any transaction
    c = _consumer(broker.bootstrap, group, topic, client=client)
    try:
        got = _drain(c, 4, timeout=10)
        assert [m.value() for m in got] == [b"c1", b"c2", b"c3", b"plain"]
        assert _drain(c, 1, timeout=2) == []
    finally:
        c.commit_sync(T)
        c.close()
    c = _consumer(broker.bootstrap, uncommitted, topic, client=client)
    try:
        got = _drain(c, 7, timeout=10)
        assert sorted(m.value() for m in got) == sorted([b"c1", b"c2", b"a1", b"a2", b"c3", b"a3", b"plain"])
    finally:
        c.close()


def test_deleting_the_group_deletes_its_share_state_and_a_new_group_of_that_id_starts_afresh(
    broker: BrokerProcess,
) -> None:
    """DeleteGroups of an empty share group deletes the state of its share partitions first (as
    Kafka's group coordinator asks the persister): a group created again under the id starts from
    share.auto.offset.reset, not from the old group's start offsets."""
    topic, group = _setup(broker.bootstrap, 1)
    _produce(broker.bootstrap, topic, [b"old-%d" % i for i in range(10)], 1)
    c = _consumer(broker.bootstrap, group, topic)
    try:
        assert sorted(m.value() for m in _drain(c, 10)) == sorted(b"old-%d" % i for i in range(10))
        with Admin(bootstrap_servers=broker.bootstrap) as odr:  # every record accepted: the state says 10
            deadline = time.monotonic() + T
            while (o := odr.describe_share_group_offsets(group).get((topic, 0))) is None or o.start_offset != 10:
                assert time.monotonic() < deadline, o
                _poll(c, 0.1)  # implicit acknowledgement rides on the next poll
    finally:
        c.close()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    deadline = time.monotonic() + T
    while True:  # the member's leave reaches the coordinator; then the group is empty and deletable
        try:
            admin.delete_consumer_groups([group])[group].result(T)
            break
        except ck.KafkaException as exc:
            assert exc.args[0].code() == ck.KafkaError.NON_EMPTY_GROUP and time.monotonic() < deadline, exc
            time.sleep(0.2)
    _produce(broker.bootstrap, topic, [b"new-%d" % i for i in range(5)], 1)
    _set_group(broker.bootstrap, group)  # earliest again: the new group reads the topic from its start
    c = _consumer(broker.bootstrap, group, topic)
    try:
        got = sorted(m.value() for m in _drain(c, 15))
    finally:
        c.close()
    assert got == sorted([b"old-%d" % i for i in range(10)] + [b"new-%d" % i for i in range(5)])
