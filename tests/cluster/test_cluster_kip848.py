"""A KIP-848 consumer group in a 3-broker cluster survives its coordinator's crash.

Three confluent-kafka consumers with ``group.protocol=consumer`` share a six-partition topic
(replication factor 3), committing after every record.  The broker leading the group's
``__consumer_offsets`` partition is SIGKILLed: another broker, which replicated the group's
records, loads the group from them, and the members carry on with the same member ids and
partitions (no rejoin).  No committed record is read again: every record delivered twice lies
after its partition's last commit before the kill.  Every record is consumed, and the committed
offsets end at the end offsets.

The cluster is the fast in-process one (odradek.testcluster): its coordinator "crashes" with
``kill_broker`` (its ZooKeeper session ends at once, no controlled shutdown), which is all this
test needs of a crash; it ran on ZooKeeper and broker processes (SIGKILL, then the 6 s session
timeout) before: about 28 s then, about 7 s now.
"""

from __future__ import annotations

from pathlib import Path

from confluent_kafka.admin import AdminClient, NewTopic

from odradek.cluster.assignment import partition_for
from odradek.testcluster import FastCluster
from odradek.testing import WireClient, wait_for
from tests.groups.group_helpers import committed_offsets, ends, produce, wait_until
from tests.groups.kip848_helpers import KIP848_OVERRIDES, ConsumerMember, describe

PARTITIONS = 6
OFFSETS_PARTITIONS = 3
OVERRIDES = {
    **KIP848_OVERRIDES,
    "zookeeper.session.timeout.ms": 6000,
    "replica.lag.time.max.ms": 5000,
    "offsets.topic.num.partitions": OFFSETS_PARTITIONS,
    "offsets.topic.replication.factor": 3,
    "default.replication.factor": 3,
    "min.insync.replicas": 2,
}


def test_a_consumer_group_survives_its_coordinators_death(tmp_path: Path) -> None:
    with FastCluster(tmp_path, 3, overrides=OVERRIDES) as cluster:
        _survives(cluster)


def _leader(cluster: FastCluster, topic: str, partition: int) -> int | None:
    leader = cluster.leader(topic, partition)
    return leader if leader >= 0 else None


def _survives(cluster: FastCluster) -> None:
    bootstrap = cluster.bootstrap_servers
    topic = group = "kip848-failover"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for f in admin.create_topics([NewTopic(topic, PARTITIONS, 3)]).values():
        f.result(60)
    members = [ConsumerMember.start(bootstrap, group, topic, f"m{i}") for i in range(3)]

    def step() -> None:
        for m in members:
            m.step()
        owned = [p for m in members for p in m.current]
        assert len(owned) == len(set(owned)), [sorted(m.current) for m in members]

    def settled() -> bool:
        return sorted(p for m in members for p in m.current) == list(range(PARTITIONS)) and all(
            len(m.current) == 2 for m in members)

    def group_members(broker_id: int) -> dict[str, frozenset[int]] | None:
        w = WireClient("127.0.0.1", cluster.ports[broker_id])
        try:
            snap = describe(w, group, topic)
        finally:
            w.close()
        return None if snap is None else {mid: parts for mid, (_e, parts, _t, _i) in snap.members.items()}

    try:
        wait_until(settled, timeout=90, what="three members with two partitions each", step=step)
        # the records come once every member holds its partitions: produced earlier, a member that
        # joined late could find its partitions drained (and committed) by the others and see none
        produced = produce(bootstrap, topic, PARTITIONS, 120, "before")
        wait_until(lambda: all(len(m.delivered) > 10 for m in members), timeout=60, what="records flowing",
                   step=step)
        p = partition_for(group, OFFSETS_PARTITIONS)
        coordinator = wait_for(lambda: _leader(cluster, "__consumer_offsets", p), 30, "the group coordinator")
        before = group_members(coordinator)
        assert before is not None and len(before) == 3
        at_kill = {m.name: dict(m.committed) for m in members}
        delivered_before = {(q, o) for m in members for q, o, _v in m.delivered}
        cluster.kill_broker(coordinator)
        last_commit = {q: max((c.get(q, 0) for c in at_kill.values()), default=0) for q in range(PARTITIONS)}
        produced |= produce(bootstrap, topic, PARTITIONS, 120, "after")
        successor = wait_for(
            lambda: _leader(cluster, "__consumer_offsets", p) not in (None, coordinator) and
            _leader(cluster, "__consumer_offsets", p), 60, "a new group coordinator")

        def loaded_same_group() -> bool:
            found = group_members(successor)
            return found is not None and set(found) == set(before) and sorted(
                q for parts in found.values() for q in parts) == list(range(PARTITIONS))

        wait_until(loaded_same_group, timeout=60, what="the group loaded by the new coordinator", step=step)

        end = ends(produced)

        def consumed() -> bool:
            got = {(q, o) for m in members for q, o, _v in m.delivered}
            return all(k in got for k in produced)

        try:
            wait_until(consumed, timeout=120, what="every record consumed", step=step)
        except AssertionError as exc:  # which records, and where the members stand (it timed out once, loaded)
            got = {(q, o) for m in members for q, o, _v in m.delivered}
            missing: dict[int, list[int]] = {}
            for q, o in sorted(k for k in produced if k not in got):
                missing.setdefault(q, []).append(o)
            where = {m.name: {"current": sorted(m.current), "last": {q: max(o for qq, o, _v in m.delivered if qq == q)
                     for q in {qq for qq, _o, _v in m.delivered}}, "committed": dict(m.committed),
                     "commit_failures": m.commit_failures} for m in members}
            raise AssertionError(f"{exc}: missing {({q: (len(os), os[:3]) for q, os in missing.items()})}, "
                                 f"ends {end}, members {where}, coordinator {successor} (was {coordinator}), "
                                 f"leaders {[_leader(cluster, topic, q) for q in range(PARTITIONS)]}") from None
        wait_until(lambda: committed_offsets(bootstrap, group, topic, PARTITIONS) == end, timeout=60,
                   what="every record committed", step=step)
        after = group_members(successor)
        assert after is not None and set(after) == set(before)  # the same members all along
    finally:
        for m in members:
            m.close()
    seen: dict[tuple[int, int], int] = {}
    for m in members:
        for q, o, _v in m.delivered:
            seen[(q, o)] = seen.get((q, o), 0) + 1
    again = sorted(k for k, n in seen.items() if n > 1)
    for q, o in again:
        assert o >= last_commit[q], f"record {q}/{o} read again though committed before the kill ({last_commit})"
    assert delivered_before <= set(seen)
