"""A broker on its way out never stays in an ISR: acks=all writes would wait for it.

Found by a CI failure of tests/cluster/test_follower_start.py (one run in ~24): broker 1's
controlled shutdown made it a follower of the partition it had led; it fetched, caught up, and
the new leader took it back into the ISR just before it stopped. The controller had already
handled its departure from its cached state (no broker 1 in that ISR), so the ISR kept a dead
broker and an acks=all write waited ``replica.lag.time.max.ms``. Three rules close it:

* a broker in controlled shutdown follows nothing the controller hands it (Kafka sends it
  StopReplica instead);
* a leader takes into its ISR only brokers registered in its metadata (KIP-841's rule);
* the controller takes out of an ISR, when a leader's ISR change notification names one, a broker
  that is no longer registered.

The first two run on one broker's replication layer with fakes around it; the third on the real
controller over the in-memory ZooKeeper of the controller property test.
"""

from __future__ import annotations

import asyncio
import json
import types
from pathlib import Path
from typing import Any

from odradek.broker.replica import ReplicaManager
from odradek.broker.replication import ClusterReplication
from odradek.cluster.controller import LeaderIsr
from odradek.cluster.metadata import PartitionState
from odradek.config import BrokerConfig
from odradek.records import BatchBuilder
from odradek.settings import settings_from
from odradek.storage import LogConfig, LogManager
from tests.cluster.test_controller_properties import BROKERS, _World


def _replication(tmp_path: Path, broker_id: int, registered: set[int]) -> tuple[ClusterReplication, ReplicaManager]:
    rm = ReplicaManager(broker_id, LogManager([tmp_path]), lambda _t: LogConfig.from_dict({}))

    async def load_config(_name: str) -> None:
        return None

    topics = types.SimpleNamespace(load_config=load_config, log_config=lambda _name: LogConfig.from_dict({}))
    backend = types.SimpleNamespace(image=types.SimpleNamespace(brokers={b: object() for b in registered}))
    replication = ClusterReplication(
        broker_id, settings_from(BrokerConfig({})), topics, rm, backend,  # type: ignore[arg-type]
        types.SimpleNamespace(now_ms=lambda: 10),  # type: ignore[arg-type]
        cluster_id="c", inter_broker_listener=None, fetcher_settings=BrokerConfig({}),
    )
    return replication, rm


def _follower_state(epoch: int) -> Any:
    """Partition t-0 led by broker 2, as a LeaderAndIsr for broker 1 lists it."""
    return types.SimpleNamespace(
        topic_name="t", partition_index=0, replicas=[2, 1, 3], isr=[2, 3], leader=2,
        leader_epoch=epoch, partition_epoch=epoch,
    )


def test_a_broker_in_controlled_shutdown_does_not_follow_what_the_controller_hands_it(tmp_path: Path) -> None:
    async def run() -> list[bool]:
        replication, _rm = _replication(tmp_path, 1, {1, 2, 3})
        leaders = {2: ("127.0.0.1", 9)}
        following = []
        try:
            await replication.apply_leader_and_isr([_follower_state(1)], {}, leaders)
            following.append(replication.fetchers.follows("t", 0))
            replication.shutting_down = True  # what controlled_shutdown sets before it asks
            # the controller's answer: demoted, out of the ISR, at a new leader epoch
            results = await replication.apply_leader_and_isr([_follower_state(2)], {}, leaders)
            assert results == {("t", 0): 0}
            following.append(replication.fetchers.follows("t", 0))
        finally:
            await replication.fetchers.shutdown()
        return following

    assert asyncio.run(run()) == [True, False]


def test_a_leader_takes_only_registered_brokers_into_its_isr(tmp_path: Path) -> None:
    async def run() -> tuple[tuple[int, ...], tuple[int, ...]]:
        # broker 2 leads t-0 with ISR [2]; broker 3 is registered, broker 1 is not (it left)
        replication, rm = _replication(tmp_path, 2, {2, 3})
        changes: list[tuple[int, ...]] = []

        async def change_isr(_p: Any, new_isr: tuple[int, ...]) -> None:
            changes.append(new_isr)

        replication.change_isr = change_isr  # type: ignore[method-assign]
        p = rm.make_leader(PartitionState("t", 0, (2, 1, 3), (2,), 2, 1, 1), None, 0)
        b = BatchBuilder()
        b.append(1_700_000_000_000, None, b"v")
        rm.append(p, bytearray(b.build()), -1)
        end = p.log.log_end_offset
        replication.on_follower_fetch(p, 1, end)  # caught up, but not registered
        await asyncio.sleep(0)
        unregistered = tuple(x for c in changes for x in c if x == 1)
        replication.on_follower_fetch(p, 3, end)  # caught up and registered
        await asyncio.sleep(0)
        return unregistered, changes[-1] if changes else ()

    unregistered, last = asyncio.run(run())
    assert unregistered == (), "a broker that is not registered was taken into the ISR"
    assert last == (2, 3), "a registered, caught-up follower must still join"


def test_the_controller_takes_a_departed_broker_out_of_an_isr_a_leader_put_it_back_in() -> None:
    async def run() -> tuple[LeaderIsr, LeaderIsr, int]:
        world = _World()
        try:
            await world.start_with_topic()
            path = "/brokers/topics/t/partitions/0/state"
            controller = int(world.tree.json("/controller")["brokerid"])
            before = LeaderIsr.from_json(world.tree.json(path), world.tree.stat(path).version)
            gone = next(b for b in BROKERS if b not in (controller, before.leader))
            world.crash(gone)
            await world.settle()
            after_crash = LeaderIsr.from_json(world.tree.json(path), world.tree.stat(path).version)
            assert gone not in after_crash.isr, "the crash itself must take it out"
            # the leader's expansion, decided before it knew of the departure, lands after it
            back = LeaderIsr(after_crash.leader, after_crash.leader_epoch, (*after_crash.isr, gone),
                             after_crash.controller_epoch)
            world.tree.set(path, json.dumps(back.to_json()).encode(), after_crash.zk_version)
            world.tree.create("/isr_change_notification/isr_change_",
                              json.dumps({"version": 1, "partitions": [{"topic": "t", "partition": 0}]}).encode(),
                              sequence=True)
            await world.settle()
            final = LeaderIsr.from_json(world.tree.json(path), world.tree.stat(path).version)
            return after_crash, final, gone
        finally:
            await world.stop()

    after_crash, final, gone = asyncio.run(run())
    assert gone not in final.isr, f"ISR {list(final.isr)} still names broker {gone}, which left the cluster"
    assert final.leader == after_crash.leader
    assert final.leader_epoch > after_crash.leader_epoch  # the leader learns of it by LeaderAndIsr
