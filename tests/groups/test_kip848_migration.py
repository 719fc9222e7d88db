"""A live group moves between the classic and the consumer protocol (KIP-848's online migration,
``group.consumer.migration.policy=bidirectional``), by a rolling restart of its confluent-kafka
consumers, and back.

Three consumers of a six-partition topic commit after every record.  One by one each is restarted
with ``group.protocol=consumer``: the first converts the classic group into a consumer group,
whose classic members are then served through JoinGroup/SyncGroup/Heartbeat with assignments the
broker computes.  Then one by one each is restarted with the classic protocol again: when the last
consumer-protocol member leaves, the group becomes a classic group once more.  Throughout:

* no partition is owned by two consumers at once (the consumers' own rebalance callbacks, all run
  on this thread, and ConsumerGroupDescribe snapshots while the group is a consumer group);
* the committed offsets never go back, and at the end they are the end offsets;
* every record produced is consumed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from odradek.testing import BrokerProcess, WireClient
from tests.groups.group_helpers import CK_GROUP, committed_offsets, create_topic, ends, produce, wait_until
from tests.groups.kip848_helpers import KIP848_OVERRIDES, ConsumerMember, Watcher, describe

PARTITIONS = 6
PER_PHASE = 30

CLASSIC = {k: v for k, v in CK_GROUP.items() if k not in ("auto.offset.reset", "enable.auto.commit",
                                                          "enable.auto.offset.store", "fetch.wait.max.ms")}
CLASSIC["group.protocol"] = "classic"
CLASSIC["partition.assignment.strategy"] = "cooperative-sticky"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("odradek-kip848-migration"), overrides=KIP848_OVERRIDES)
    proc.start()
    try:
        yield proc
    finally:
        code = proc.stop()
        assert code == 0, f"broker exited with {code}:\n{''.join(proc.stderr_lines[-40:])}"


def _start(bs: str, group: str, topic: str, name: str, protocol: str) -> ConsumerMember:
    conf = dict(CLASSIC) if protocol == "classic" else {"group.protocol": "consumer"}
    return ConsumerMember.start(bs, group, topic, name, **conf)


def test_a_live_group_moves_to_the_consumer_protocol_and_back_by_rolling_restarts(
    broker: BrokerProcess, name: str
) -> None:
    topic = group = name
    bs = broker.bootstrap
    create_topic(bs, topic, PARTITIONS)
    produced = produce(bs, topic, PARTITIONS, PER_PHASE, "start")
    watcher = Watcher(broker.host, broker.port, group, topic)
    members = [_start(bs, group, topic, f"m{i}-classic", "classic") for i in range(3)]
    everyone = list(members)
    committed_seen: dict[int, int] = {}

    def step() -> None:
        for m in members:
            m.step()
        owned: dict[int, str] = {}
        for m in members:
            for p in m.current:
                assert p not in owned, f"partition {p} owned by {owned[p]} and {m.name} at once"
                owned[p] = m.name

    def settled() -> bool:
        return sorted(p for m in members for p in m.current) == list(range(PARTITIONS)) and all(
            len(m.current) == 2 for m in members
        )

    def offsets_never_go_back() -> None:
        now = committed_offsets(bs, group, topic, PARTITIONS)
        for p, o in now.items():
            assert o >= committed_seen.get(p, -1001), f"partition {p}'s committed offset went back: {o}"
            committed_seen[p] = max(o, committed_seen.get(p, -1001))

    def roll(protocol: str, kind: Callable[[], str]) -> None:
        nonlocal produced
        for i in range(3):
            members[i].close()
            members[i] = _start(bs, group, topic, f"m{i}-{protocol}", protocol)
            everyone.append(members[i])
            produced |= produce(bs, topic, PARTITIONS, PER_PHASE, f"{protocol}-{i}")
            wait_until(settled, what=f"the group settled after restarting member {i} ({protocol})", step=step)
            offsets_never_go_back()
            assert kind() == ("consumer" if protocol == "consumer" or i < 2 else "classic"), (protocol, i)

    wire = WireClient(broker.host, broker.port)

    def group_kind() -> str:
        """A consumer group is described by ConsumerGroupDescribe; a classic one is not."""
        return "consumer" if describe(wire, group, topic) is not None else "classic"

    try:
        wait_until(settled, what="three classic members", step=step)
        assert group_kind() == "classic"
        roll("consumer", group_kind)
        roll("classic", group_kind)
        end = ends(produced)

        def consumed() -> bool:
            got = {(p, o) for m in everyone for p, o, _v in m.delivered}
            return all((p, o) in got for p, o in produced)

        wait_until(consumed, what="every record consumed", step=step)
        wait_until(lambda: committed_offsets(bs, group, topic, PARTITIONS) == end, what="every record committed",
                   step=step)
        offsets_never_go_back()
    finally:
        for m in members:
            m.close()
        wire.close()
        watcher.stop()
    assert watcher.snapshots, "ConsumerGroupDescribe saw the consumer group"
