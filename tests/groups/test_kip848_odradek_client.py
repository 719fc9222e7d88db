"""Odradek's own ``Consumer`` with ``group.protocol=consumer`` (KIP-848) against ``odradek serve``.

The classic group scenario with Odradek members: three consumers over six partitions, one leaves,
one joins, each committing after every poll and (auto-commit) before a partition is revoked.  Every
record is delivered exactly once (each revocation commits where the member stopped, and the next
owner starts there), the committed offsets end at the end offsets, and ConsumerGroupDescribe
snapshots taken throughout never show a partition owned by two members.  Then the same group with
confluent-kafka members (``group.protocol=consumer``) beside Odradek's; a static member restarting
within its session timeout; a regex subscription the broker evaluates; a member fenced by the
broker joining again at epoch 0 after losing its partitions.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from odradek.client import AsyncConsumer, Consumer, Producer
from odradek.client._consumer_protocol import ConsumerProtocolMembership
from odradek.client.consumer import CommitFailed
from odradek.errors import ErrorCode, KafkaError
from odradek.testing import BrokerProcess, WireClient
from tests.groups.group_helpers import committed_offsets, create_topic, ends, produce, wait_until
from tests.groups.kip848_helpers import KIP848_OVERRIDES, ConsumerMember, Watcher, describe, wait_settled

PARTITIONS = 6
PER_PHASE = 60

#: group -> partition -> the Odradek member whose listener holds it; ownership violations seen
_OWNERS: dict[str, dict[tuple[str, int], str]] = {}
_VIOLATIONS: list[str] = []
_LOCK = threading.Lock()


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("odradek-kip848-client"), overrides=KIP848_OVERRIDES)
    proc.start()
    try:
        yield proc
    finally:
        code = proc.stop()
        assert code == 0, f"broker exited with {code}:\n{''.join(proc.stderr_lines[-40:])}"


@pytest.fixture(autouse=True)
def _no_partition_held_twice() -> Iterator[None]:
    _VIOLATIONS.clear()
    yield
    assert not _VIOLATIONS, _VIOLATIONS


@dataclass
class OdradekMember:
    """An Odradek ``Consumer`` with ``group.protocol=consumer``: commits after every poll that
    returned records, and (auto-commit) before its partitions are revoked and on close."""

    name: str
    consumer: Consumer
    current: set[tuple[str, int]] = field(default_factory=set)
    delivered: list[tuple[int, int, bytes]] = field(default_factory=list)
    events: list[tuple[str, list[tuple[str, int]]]] = field(default_factory=list)
    commit_failures: int = 0
    closed: bool = False
    manual_commits: bool = True

    @classmethod
    def start(cls, bootstrap: str, group: str, topic: str | None, name: str, **conf: Any) -> OdradekMember:
        c = Consumer({
            "bootstrap.servers": bootstrap, "group.id": group, "client.id": name, "group.protocol": "consumer",
            "auto.offset.reset": "earliest", "enable.auto.commit": True, "auto.commit.interval.ms": 200,
            "fetch.max.wait.ms": 50, **conf,
        })
        m = cls(name, c, manual_commits=int(c._async.config["auto.commit.interval.ms"]) < 600_000)

        owners = _OWNERS.setdefault(group, {})

        class Listener:
            """Checks, as each callback runs, that no other member of the group holds a partition
            it is given: a member's revocation callback ends before its heartbeat acknowledges
            it, so the next owner's assignment callback comes after it."""

            def on_partitions_assigned(self, parts: list[tuple[str, int]]) -> None:
                m.events.append(("assigned", parts))
                m.current |= set(parts)
                with _LOCK:
                    for tp in parts:
                        if owners.get(tp, name) != name:
                            _VIOLATIONS.append(f"{tp} given to {name} while {owners[tp]} holds it")
                        owners[tp] = name

            def on_partitions_revoked(self, parts: list[tuple[str, int]]) -> None:
                m.events.append(("revoked", parts))
                m.current -= set(parts)
                with _LOCK:
                    for tp in parts:
                        if owners.get(tp) == name:
                            del owners[tp]

        if topic is not None:
            c.subscribe([topic], listener=Listener())
        return m

    def step(self, timeout: float = 0.02) -> None:
        if self.closed:
            return
        records = self.consumer.poll(timeout)
        for r in records:
            self.delivered.append((r.partition, r.offset, r.value))
        if records and self.manual_commits:
            try:
                self.consumer.commit()
            except (CommitFailed, KafkaError):
                self.commit_failures += 1

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.consumer.close()


def _run_scenario(broker: BrokerProcess, name: str, starters: list[Any], manual_commits: bool = True) -> None:
    """The scenario; without ``manual_commits`` the Odradek members commit only as auto-commit
    does before a revocation and on close (the interval is longer than the test)."""
    topic = group = name
    bs = broker.bootstrap
    create_topic(bs, topic, PARTITIONS)
    produced = produce(bs, topic, PARTITIONS, PER_PHASE, "one")
    watcher = Watcher(broker.host, broker.port, group, topic)
    conf: dict[str, Any] = {} if manual_commits else {"auto.commit.interval.ms": 600_000}
    members: list[Any] = [start(bs, group, topic, f"member-{i}", **conf) for i, start in enumerate(starters[:3])]

    def step() -> None:
        for m in members:
            m.step()

    try:
        first = wait_settled(watcher, 3, PARTITIONS, step)
        assert sorted(len(parts) for _e, parts, _t, _i in first.members.values()) == [2, 2, 2]
        produced |= produce(bs, topic, PARTITIONS, PER_PHASE, "two")
        leaving = members[0]
        leaving_id = leaving.consumer._async.group.member_id if isinstance(leaving, OdradekMember) else None
        leaving.close()  # leaves (ConsumerGroupHeartbeat at epoch -1) after committing
        if leaving_id is not None:
            # close() returns once the coordinator answered the leave: gone now, not at its session's end
            wire = WireClient(broker.host, broker.port)
            try:
                now = describe(wire, group, topic)
            finally:
                wire.close()
            assert now is not None and leaving_id not in now.members, now
        second = wait_settled(watcher, 2, PARTITIONS, step)
        assert second.group_epoch > first.group_epoch
        members.append(starters[3](bs, group, topic, "member-3", **conf))
        produced |= produce(bs, topic, PARTITIONS, PER_PHASE, "three")
        third = wait_settled(watcher, 3, PARTITIONS, step)
        assert sorted(len(parts) for _e, parts, _t, _i in third.members.values()) == [2, 2, 2]
        end = ends(produced)

        def consumed() -> bool:
            got = {(p, o) for m in members for p, o, _v in m.delivered}
            return all(k in got for k in produced)

        wait_until(consumed, what="every record consumed", step=step)
        if manual_commits:
            wait_until(lambda: committed_offsets(bs, group, topic, PARTITIONS) == end, what="commits of every record",
                       step=step)
        delivered = [(p, o) for m in members for p, o, _v in m.delivered]
        values = {(p, o): v for m in members for p, o, v in m.delivered}
        assert all(values[k] == v for k, v in produced.items())
        if all(isinstance(m, OdradekMember) for m in members):
            # every revocation committed where its member stopped: nothing came twice
            dupes = {k for k in delivered if delivered.count(k) > 1}
            assert not dupes, sorted(dupes)[:10]
    finally:
        for m in members:
            m.close()
        watcher.stop()
    assert len(watcher.snapshots) > 50  # snapshots all along, none with a partition owned twice
    assert committed_offsets(bs, group, topic, PARTITIONS) == end  # and on close


def test_odradek_members_three_one_leaves_one_joins_every_record_once(broker: BrokerProcess, name: str) -> None:
    _run_scenario(broker, name, [OdradekMember.start] * 4)


def test_odradek_members_commit_before_each_revocation(broker: BrokerProcess, name: str) -> None:
    """Only the commits auto-commit makes before a revocation (and on close): still every record
    exactly once, since each next owner starts where the last one stopped."""
    _run_scenario(broker, name, [OdradekMember.start] * 4, manual_commits=False)


def test_odradek_and_confluent_members_in_one_group(broker: BrokerProcess, name: str) -> None:
    _run_scenario(broker, name, [OdradekMember.start, ConsumerMember.start, OdradekMember.start, ConsumerMember.start])


def test_an_odradek_member_revokes_before_it_acknowledges(broker: BrokerProcess, name: str) -> None:
    """The listener sees revocations and assignments in order; a member's partitions at every
    moment are what it was assigned minus what it gave up, and the group's record of it agrees."""
    topic = group = name
    bs = broker.bootstrap
    create_topic(bs, topic, PARTITIONS)
    produced = produce(bs, topic, PARTITIONS, PER_PHASE, "one")
    end = ends(produced)
    watcher = Watcher(broker.host, broker.port, group, topic)
    never = {"auto.commit.interval.ms": 600_000}  # auto-commit only before revocations and on close
    a = OdradekMember.start(bs, group, topic, "a", **never)
    members = [a]

    def step() -> None:
        for m in members:
            m.step()

    try:
        wait_settled(watcher, 1, PARTITIONS, step)
        assert a.current == {(topic, p) for p in range(PARTITIONS)}
        wait_until(lambda: len(a.delivered) == len(produced), what="a consumed everything", step=step)
        assert set(committed_offsets(bs, group, topic, PARTITIONS).values()) == {-1001}  # nothing yet
        members.append(OdradekMember.start(bs, group, topic, "b", **never))
        snap = wait_settled(watcher, 2, PARTITIONS, step)
        assert [kind for kind, _p in a.events] == ["assigned", "revoked"]
        revoked = a.events[1][1]
        assert len(revoked) == 3 and a.current.isdisjoint(members[1].current)
        # committed before they were given up: b starts where a stopped, and reads nothing again
        committed = committed_offsets(bs, group, topic, PARTITIONS)
        assert {p: committed.get(p) for _t, p in revoked} == {p: end[p] for _t, p in revoked}
        step()
        assert members[1].delivered == []
        epochs = sorted(e for e, _p, _t, _i in snap.members.values())
        assert all(e > 0 for e in epochs)
        assert members[1].consumer.consumer_group_metadata().generation_id in epochs
    finally:
        for m in members:
            m.close()
        watcher.stop()


def test_an_odradek_static_member_restarts_without_a_reassignment(broker: BrokerProcess, name: str) -> None:
    topic = group = name
    bs = broker.bootstrap
    create_topic(bs, topic, PARTITIONS)
    watcher = Watcher(broker.host, broker.port, group, topic)
    members = [OdradekMember.start(bs, group, topic, f"static-{i}", **{"group.instance.id": f"instance-{i}"})
               for i in range(3)]

    def step() -> None:
        for m in members:
            m.step()

    try:
        before = wait_settled(watcher, 3, PARTITIONS, step)
        by_instance = {i: (parts, mid) for mid, (_e, parts, _t, i) in before.members.items()}
        members[1].close()  # epoch -2: its partitions stay its own for the session timeout
        wait_until(lambda: (s := watcher.latest()) is not None
                   and any(e == -2 for e, _p, _t, _i in s.members.values()), what="the member away", step=step)
        members[1] = OdradekMember.start(bs, group, topic, "static-1b", **{"group.instance.id": "instance-1"})
        after = wait_settled(watcher, 3, PARTITIONS, step)
        again = {i: (parts, mid) for mid, (_e, parts, _t, i) in after.members.items()}
        assert {i: p for i, (p, _m) in again.items()} == {i: p for i, (p, _m) in by_instance.items()}
        assert after.group_epoch == before.group_epoch  # no rebalance
        assert members[1].current == {(topic, p) for p in by_instance["instance-1"][0]}
    finally:
        for m in members:
            m.close()
        watcher.stop()


def test_an_odradek_member_subscribes_to_a_regex_the_broker_evaluates(broker: BrokerProcess, name: str) -> None:
    first, later, other = f"{name}-a", f"{name}-b", f"x{name}"
    bs = broker.bootstrap
    for t in (first, other):
        create_topic(bs, t, 2)
    m = OdradekMember.start(bs, name, None, "regex")
    m.consumer.subscribe(pattern=f"{name}-.*")
    try:
        wait_until(lambda: set(m.consumer.assignment()) == {(first, 0), (first, 1)}, what="the matching topic",
                   step=m.step)
        create_topic(bs, later, 2)
        wait_until(lambda: set(m.consumer.assignment()) == {(t, p) for t in (first, later) for p in (0, 1)},
                   what="the topic created later assigned too", step=m.step)
    finally:
        m.close()


def test_a_fenced_odradek_member_loses_its_partitions_and_joins_again(broker: BrokerProcess, name: str) -> None:
    """Its heartbeats stop (as if the process stalled) until the broker's session timeout removes
    it: the next heartbeat gets UNKNOWN_MEMBER_ID or FENCED_MEMBER_EPOCH, the member gives its
    partitions up without committing and joins again at epoch 0, and gets partitions back."""
    topic = group = name
    bs = broker.bootstrap
    create_topic(bs, topic, 2)
    watcher = Watcher(broker.host, broker.port, group, topic)
    m = OdradekMember.start(bs, group, topic, "fenced", **{"enable.auto.commit": False})
    try:
        first = wait_settled(watcher, 1, 2, m.step)
        (old_epoch,) = [e for e, _p, _t, _i in first.members.values()]
        membership = m.consumer._async.group
        assert membership is not None
        task = membership._hb_task  # type: ignore[union-attr]
        assert task is not None
        m.consumer._runner.call(_cancel(task), 10)
        wait_until(lambda: (s := watcher.latest()) is not None and not s.members, what="the member expired",
                   timeout=30)
        membership.needs_rejoin = True  # what the consumer does on its next poll: heartbeats again
        wait_until(lambda: ("revoked", [(topic, 0), (topic, 1)]) in m.events, what="the partitions lost",
                   step=m.step)
        second = wait_settled(watcher, 1, 2, m.step)
        assert m.current == {(topic, 0), (topic, 1)}
        assert second.group_epoch > first.group_epoch and old_epoch > 0
    finally:
        m.close()
        watcher.stop()


def test_partitions_assigned_while_a_member_closes_are_not_taken(broker: BrokerProcess, name: str) -> None:
    """A member whose closing commit is under way when a new target arrives (another member left)
    takes none of it: every partition its listener was given is given up through the listener
    before it leaves.  (It once took them in the background after close had listed what to
    revoke, and left with the listener still holding them: the next owner got them "twice".)"""
    topic = group = name
    bs = broker.bootstrap
    create_topic(bs, topic, 4)
    produced = produce(bs, topic, 4, 32, "one")
    watcher = Watcher(broker.host, broker.port, group, topic)
    a = OdradekMember.start(bs, group, topic, "a")
    b = OdradekMember.start(bs, group, topic, "b")
    inner = a.consumer._async
    membership = inner.group
    assert isinstance(membership, ConsumerProtocolMembership)
    commit_started = threading.Event()
    plain_commit = inner.commit

    async def commit_after_a_new_target(*args: Any, **kwargs: Any) -> None:
        # the closing commit waits (bounded) until a heartbeat brought the target without b
        epoch = membership.member_epoch
        commit_started.set()
        for _ in range(200):
            if membership.member_epoch != epoch:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)  # time for a reconciliation to run, had it been let
        await plain_commit(*args, **kwargs)

    closing: threading.Thread | None = None
    try:
        wait_settled(watcher, 2, 4, lambda: (a.step(), b.step()))
        wait_until(lambda: len(a.delivered) + len(b.delivered) == len(produced), what="everything consumed",
                   step=lambda: (a.step(), b.step()))
        held = set(a.current)
        assert len(held) == 2
        before = len(a.events)
        inner.commit = commit_after_a_new_target  # type: ignore[method-assign]
        closing = threading.Thread(target=a.close)
        closing.start()
        assert commit_started.wait(30), "a's closing commit did not start"
        b.close()  # b leaves: the group's new target gives a all four partitions
        closing.join(30)
        assert not closing.is_alive()
    finally:
        if closing is None:
            a.close()
        b.close()
        watcher.stop()
    closing_events = a.events[before:]
    assert [kind for kind, _parts in closing_events] == ["revoked"], closing_events  # nothing taken
    assert set(closing_events[0][1]) == held and not a.current, a.events


async def _cancel(task: Any) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def test_groups_describe_shows_a_reconciliation_under_way(broker: BrokerProcess, name: str) -> None:
    """``odradek groups describe`` on a group of Odradek members while one of them has not yet
    given partitions up (its revocation waits for its next poll, as in Kafka's consumer): the
    protocol, each member's epoch, and its current assignment beside its target."""
    topic = group = name
    bs = broker.bootstrap
    create_topic(bs, topic, 4)
    watcher = Watcher(broker.host, broker.port, group, topic)
    a = OdradekMember.start(bs, group, topic, "a")
    b: OdradekMember | None = None
    try:
        wait_settled(watcher, 1, 4, a.step)
        b = OdradekMember.start(bs, group, topic, "b")
        member_b = b

        def b_waits() -> bool:
            member_b.step()  # a does not poll: it keeps what b is to get
            s = watcher.latest()
            return s is not None and sorted((len(parts), len(target)) for _e, parts, target, _i in s.members.values()) == [
                (0, 2), (2, 2)]

        # the broker has a's two other partitions pending revocation (owned by nobody in its
        # describe, not given to b yet), and a, until it polls, still holds them
        wait_until(b_waits, what="b waiting for the partitions a has to give up")
        assert len(a.consumer.assignment()) == 4
        table = _cli(bs, "describe", group)
        snap = watcher.latest()
        assert snap is not None
        assert table.returncode == 0, table.stderr
        assert f"Consumer group '{group}' (consumer protocol, KIP-848)" in table.stdout
        rows = {line.split()[0]: line.split() for line in table.stdout.splitlines() if line.split()
                and line.split()[0] in snap.members}
        for mid, (epoch, parts, target, _i) in snap.members.items():
            row = rows[mid]
            assert row[1] == str(epoch)
            shown = (f"{topic}:{','.join(map(str, sorted(parts)))}" if parts else "-",
                     f"{topic}:{','.join(map(str, sorted(target)))}")
            assert (row[-2], row[-1]) == shown, table.stdout
        assert len(a.consumer.assignment()) == 4
        wait_settled(watcher, 2, 4, lambda: (a.step(), member_b.step()))  # a polls: it gives them up
    finally:
        for m in (a, b):
            if m is not None:
                m.close()
        watcher.stop()


def _cli(bootstrap: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "odradek", "groups", "--bootstrap-server", bootstrap, *args],
                          capture_output=True, text=True, timeout=60)


def test_heartbeats_are_full_when_joining_and_after_errors_and_deltas_otherwise() -> None:
    """The requests the membership builds (no broker): everything at epoch 0 and after an error;
    then only what changed since the last answered heartbeat (Kafka's consumer does the same)."""
    tid = uuid.uuid4()

    class Info:
        topic_id = tid

    class FakeCluster:
        topics = {"t": Info()}

    async def on_assign(_added: list[tuple[str, int]], _revoked: list[tuple[str, int]]) -> None:
        return None

    m = ConsumerProtocolMembership(
        FakeCluster(), group_id="g", group_instance_id="i-1", rebalance_timeout_ms=300000,  # type: ignore[arg-type]
        remote_assignor="range", rack_id="r1", retry_backoff_ms=100, on_assign=on_assign,
    )
    m.subscription = {"t"}
    first = m._request(1)
    assert (first.member_epoch, first.instance_id, first.rack_id, first.rebalance_timeout_ms, first.subscribed_topic_names,
            first.server_assignor, first.topic_partitions) == (0, "i-1", "r1", 300000, ["t"], "range", [])
    assert first.member_id == m.member_id and len(m.member_id) == 36  # the client's own (a UUID)
    # answered: epoch 3, nothing owned yet; the next one says only what changed (nothing)
    m._full, m.member_epoch = False, 3
    m._sent_names, m._sent_regex, m._sent_owned = ["t"], None, []
    quiet = m._request(1)
    assert (quiet.member_epoch, quiet.instance_id, quiet.rack_id, quiet.rebalance_timeout_ms, quiet.subscribed_topic_names,
            quiet.server_assignor, quiet.topic_partitions) == (3, None, None, -1, None, None, None)
    m.assigned = [("t", 0), ("t", 2)]
    acked = m._request(1)
    assert acked.subscribed_topic_names is None
    assert [(tp.topic_id, tp.partitions) for tp in acked.topic_partitions or []] == [(tid, [0, 2])]
    m.subscription = {"t", "u"}
    assert m._request(1).subscribed_topic_names == ["t", "u"]
    m._full = True  # after an error
    again = m._request(1)
    assert (again.instance_id, again.rebalance_timeout_ms, again.server_assignor) == ("i-1", 300000, "range")
    assert again.topic_partitions is not None and again.subscribed_topic_names == ["t", "u"]
    m.regex, m._full = "t.*", False
    regex = m._request(1)
    assert (regex.subscribed_topic_regex, regex.subscribed_topic_names) == ("t.*", None)


def test_offsets_of_a_consumer_protocol_member_in_a_transaction(broker: BrokerProcess, name: str) -> None:
    """consume-transform-produce with a consumer-protocol member: TxnOffsetCommit carries its
    member id and epoch (the broker checks them), and the offsets are committed with the
    transaction."""
    src, dst = f"{name}-in", f"{name}-out"
    bs = broker.bootstrap
    create_topic(bs, src, 1)
    create_topic(bs, dst, 1)
    produce(bs, src, 1, 5, "x")
    m = OdradekMember.start(bs, name, src, "ctp", **{"enable.auto.commit": False})
    try:
        wait_until(lambda: len(m.delivered) == 5, what="the records consumed", step=m.step)
        meta = m.consumer.consumer_group_metadata()
        assert meta.generation_id > 0 and meta.member_id
        with Producer(bootstrap_servers=bs, transactional_id=f"t-{name}") as p:
            p.init_transactions(30)
            p.begin_transaction()
            for _p, _o, v in m.delivered:
                p.send(dst, v)
            p.send_offsets_to_transaction({(src, 0): 5}, meta)
            p.commit_transaction(30)
        assert m.consumer.committed([(src, 0)]) == {(src, 0): 5}
        stale = meta._replace(generation_id=meta.generation_id + 7)
        with Producer(bootstrap_servers=bs, transactional_id=f"t2-{name}") as p:
            p.init_transactions(30)
            p.begin_transaction()
            with pytest.raises(KafkaError) as info:
                p.send_offsets_to_transaction({(src, 0): 1}, stale)
            assert info.value.code in (ErrorCode.STALE_MEMBER_EPOCH, ErrorCode.ILLEGAL_GENERATION), info.value
            p.abort_transaction(30)
        assert m.consumer.committed([(src, 0)]) == {(src, 0): 5}
    finally:
        m.close()


def test_a_second_live_instance_of_a_static_member_gets_the_fatal_error(broker: BrokerProcess, name: str) -> None:
    """Two consumers with one ``group.instance.id``: the second's join is refused
    (UNRELEASED_INSTANCE_ID, fatal as in Kafka's consumer) and its poll() raises it; the first keeps
    its partitions."""
    topic = group = name
    bs = broker.bootstrap
    create_topic(bs, topic, 2)
    first = OdradekMember.start(bs, group, topic, "first", **{"group.instance.id": "only"})
    second = OdradekMember.start(bs, group, topic, "second", **{"group.instance.id": "only"})
    try:
        wait_until(lambda: len(first.consumer.assignment()) == 2, what="the first member's partitions", step=first.step)
        raised: list[KafkaError] = []

        def second_fails() -> bool:
            first.step()
            try:
                second.step()
            except KafkaError as exc:
                raised.append(exc)
            return bool(raised)

        wait_until(second_fails, what="the second instance refused")
        assert raised[0].code is ErrorCode.UNRELEASED_INSTANCE_ID, raised[0]
        assert second.consumer.assignment() == [] and len(first.consumer.assignment()) == 2
    finally:
        second.close()
        first.close()


def test_the_async_consumer_with_the_consumer_protocol(broker: BrokerProcess, name: str) -> None:
    """``AsyncConsumer`` takes the same option: two members on one event loop share the partitions,
    consume every record once, commit, and leave."""
    topic = group = name
    bs = broker.bootstrap
    create_topic(bs, topic, 4)
    produced = produce(bs, topic, 4, 40, "a")

    async def main() -> tuple[list[tuple[int, int]], list[list[tuple[str, int]]], dict[tuple[str, int], int | None]]:
        conf = {"bootstrap.servers": bs, "group.id": group, "group.protocol": "consumer",
                "auto.offset.reset": "earliest", "enable.auto.commit": False}
        members = [AsyncConsumer(conf), AsyncConsumer(conf)]
        got: list[tuple[int, int]] = []
        try:
            for c in members:
                c.subscribe([topic])
            deadline = asyncio.get_running_loop().time() + 60
            while len(got) < len(produced) or any(len(c.assignment()) != 2 for c in members):
                assert asyncio.get_running_loop().time() < deadline, (len(got), [c.assignment() for c in members])
                for c in members:
                    records = await c.poll(0.05)
                    got += [(r.partition, r.offset) for r in records]
                    if records:
                        await c.commit()
            assignments = [sorted(c.assignment()) for c in members]
            committed = await members[0].committed([(topic, p) for p in range(4)])
        finally:
            for c in members:
                await c.close()
        return got, assignments, committed

    got, assignments, committed = asyncio.run(main())
    assert sorted(got) == sorted(produced)  # each record once
    assert sorted(tp for a in assignments for tp in a) == [(topic, p) for p in range(4)]
    assert committed == {(topic, p): e for p, e in ends(produced).items()}


def test_a_member_that_stops_polling_leaves_and_joins_again_on_its_next_poll(broker: BrokerProcess, name: str) -> None:
    """As Kafka's consumer: no poll() within ``max.poll.interval.ms``, the member leaves the group
    (its heartbeats go on meanwhile; only the poll timer makes it leave) and its partitions are lost
    (no commit); its next poll() tells the listener and joins again, at a new epoch."""
    topic = group = name
    bs = broker.bootstrap
    create_topic(bs, topic, 2)
    watcher = Watcher(broker.host, broker.port, group, topic)
    m = OdradekMember.start(bs, group, topic, "slow", **{"max.poll.interval.ms": 1500, "enable.auto.commit": False})
    try:
        first = wait_settled(watcher, 1, 2, m.step)
        (old_epoch,) = [e for e, _p, _t, _i in first.members.values()]
        wait_until(lambda: (s := watcher.latest()) is not None and not s.members, what="the member gone", timeout=30)
        assert m.events == [("assigned", [(topic, 0), (topic, 1)])]  # told on its next poll, not before
        second = wait_settled(watcher, 1, 2, m.step)
        assert m.events[1] == ("revoked", [(topic, 0), (topic, 1)]) and m.events[2][0] == "assigned"
        (new_epoch,) = [e for e, _p, _t, _i in second.members.values()]
        assert new_epoch > old_epoch
    finally:
        m.close()
        watcher.stop()


def test_a_rolling_restart_converts_a_classic_group_of_odradek_members(broker: BrokerProcess, name: str) -> None:
    """Two Odradek members of a classic group are replaced one by one with consumer-protocol
    members (the broker converts the group when the first joins): every record consumed once,
    the commits at the end offsets, no partition held by two members' listeners at once."""
    topic = group = name
    bs = broker.bootstrap
    create_topic(bs, topic, 4)
    produced = produce(bs, topic, 4, 40, "one")
    classic = {"group.protocol": "classic", "partition.assignment.strategy": "cooperative-sticky",
               "heartbeat.interval.ms": 300, "session.timeout.ms": 6000}
    members = [OdradekMember.start(bs, group, topic, f"classic-{i}", **classic) for i in range(2)]
    everyone = list(members)

    def step() -> None:
        for m in members:
            m.step()

    try:
        wait_until(lambda: sorted(len(m.consumer.assignment()) for m in members) == [2, 2], what="the classic group",
                   step=step)
        for i in range(2):
            produced |= produce(bs, topic, 4, 20, f"phase-{i}")
            members[i].close()
            members[i] = OdradekMember.start(bs, group, topic, f"consumer-{i}")
            everyone.append(members[i])
            wait_until(lambda: sorted(len(m.consumer.assignment()) for m in members) == [2, 2],
                       what=f"the group after restart {i}", step=step)
        wait_until(lambda: all(k in {(p, o) for m in everyone for p, o, _v in m.delivered} for k in produced),
                   what="every record", step=step)
        wire = WireClient(broker.host, broker.port)
        try:
            converted = describe(wire, group, topic)  # a consumer group now (ConsumerGroupDescribe)
        finally:
            wire.close()
        assert converted is not None and len(converted.members) == 2 and len(converted.owners()) == 4
    finally:
        for m in members:
            m.close()
    delivered = [(p, o) for m in everyone for p, o, _v in m.delivered]
    assert sorted(delivered) == sorted(produced)  # each once
    assert committed_offsets(bs, group, topic, 4) == ends(produced)
