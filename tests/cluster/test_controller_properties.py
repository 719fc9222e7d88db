"""Property: random sequences of cluster events never make the controller take an illegal state
transition, and once the cluster is quiet every partition with a live ISR member has a live leader.

Three brokers each run the real :class:`~odradek.broker.controller.Controller` against one
in-memory ZooKeeper tree (``fake_zookeeper``: versioned nodes, watches, sessions, version-checked
transactions).  Brokers answer the controller's requests at once, and a partition's leader adds
its live replicas to the ISR the way a real leader does once they catch up (a version-checked
write of the state znode, then an ISR change notification).  Events: a broker crashes or comes
back, a broker's ZooKeeper session expires (it re-registers: a bounced broker), the controller
moves (its session expires), a topic is created or deleted, a partition is reassigned.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
import types
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.broker.controller import Controller
from odradek.cluster import controller as rules
from odradek.cluster.controller import LeaderIsr, TopicAssignment
from odradek.cluster.metadata import BrokerInfo, Endpoint
from odradek.config import BrokerConfig
from odradek.coordination.zookeeper import broker_json
from odradek.protocol.messages.leader_and_isr import LeaderAndIsrRequest, LeaderAndIsrResponse
from odradek.protocol.messages.stop_replica import StopReplicaRequest, StopReplicaResponse
from odradek.protocol.messages.update_metadata import UpdateMetadataRequest, UpdateMetadataResponse
from odradek.settings import settings_from
from odradek.storage import LogConfig
from tests.cluster.fake_zookeeper import FakeTree, FakeZkStore

BROKERS = (1, 2, 3)
PORT_BASE = 9000


class _Channel:
    """A broker's end of the controller's connection: answers at once while the broker lives."""

    def __init__(self, world: _World, host: str, port: int, *, client_id: str, timeout: float) -> None:
        self.world = world
        self.broker = port - PORT_BASE

    async def request(self, message: Any, version: int, timeout: float | None = None) -> Any:
        await asyncio.sleep(0)
        if self.broker not in self.world.alive:
            raise ConnectionError(f"broker {self.broker} is down")
        if isinstance(message, LeaderAndIsrRequest):
            self.world.lead(self.broker, message)
            return LeaderAndIsrResponse(error_code=0)
        if isinstance(message, StopReplicaRequest):
            await asyncio.sleep(0.02)  # deleting a log takes a while: events land mid-deletion
            if self.broker not in self.world.alive:
                raise ConnectionError(f"broker {self.broker} is down")
            return StopReplicaResponse(error_code=0)
        assert isinstance(message, UpdateMetadataRequest)
        return UpdateMetadataResponse(error_code=0)

    async def close(self) -> None:
        return None


class _World:
    def __init__(self) -> None:
        self.tree = FakeTree()
        self.config = BrokerConfig({"zookeeper.connect": "fake:2181"})
        self.alive: set[int] = set()
        self.stores: dict[int, FakeZkStore] = {}
        self.controllers: dict[int, Controller] = {}
        self.tasks: set[asyncio.Task[None]] = set()
        self.topics = 0
        self.unsettled = False

    # -- brokers ---------------------------------------------------------------------------------
    def _register(self, b: int) -> None:
        info = BrokerInfo(b, (Endpoint("PLAINTEXT", "PLAINTEXT", "127.0.0.1", PORT_BASE + b),), None)
        self.tree.create(f"/brokers/ids/{b}", _json(broker_json(info)), owner=self.stores[b].session_id)

    def start(self, b: int) -> None:
        if b in self.alive:
            return
        self.alive.add(b)
        self.stores[b] = FakeZkStore(self.tree)
        self._register(b)
        ctl = Controller(
            b, settings_from(self.config), types.SimpleNamespace(store=self.stores[b]),  # type: ignore[arg-type]
            lambda _topic: LogConfig.from_dict({}), channel_factory=functools.partial(_Channel, self),
        )
        self.controllers[b] = ctl
        ctl.start()

    def crash(self, b: int) -> None:
        if b not in self.alive or len(self.alive) == 1:
            return
        self.alive.discard(b)
        ctl = self.controllers.pop(b)
        ctl.events.close()  # no more events: the process is gone
        for t in ctl._tasks:
            t.cancel()
        for q in ctl.queues.values():
            q.task.cancel()
        self.tree.expire(self.stores[b].session_id)

    async def expire_session(self, b: int) -> None:
        if b not in self.alive:
            return
        self.stores[b].new_session()
        self._register(b)
        await self.controllers[b].on_new_session()

    async def move_controller(self) -> None:
        data = self.tree.json("/controller")
        if data is not None:
            await self.expire_session(int(data["brokerid"]))

    async def start_with_topic(self, name: str = "t") -> None:
        """Every broker up, then topic ``name`` with one partition on all of them, settled."""
        for b in BROKERS:
            self.start(b)
        await self.settle()
        ta = TopicAssignment("00000000-0000-0000-0000-000000000001", {0: BROKERS})
        self.tree.create(f"/brokers/topics/{name}", _json(ta.to_json()))
        await self.settle()

    # -- admin -------------------------------------------------------------------------------------
    def create_topic(self, rng: random.Random) -> None:
        self.topics += 1
        name = f"t{self.topics}"
        rf = rng.randint(1, 3)
        replicas = {p: tuple(rng.sample(BROKERS, rf)) for p in range(rng.randint(1, 3))}
        ta = TopicAssignment(str(uuid.uuid4()), replicas)
        self.tree.create(f"/brokers/topics/{name}", _json(ta.to_json()))

    def delete_topic(self, rng: random.Random) -> None:
        names = self.tree.children("/brokers/topics") if "/brokers/topics" in self.tree.nodes else []
        if names:
            name = rng.choice(names)
            if f"/admin/delete_topics/{name}" not in self.tree.nodes:
                self.tree.create(f"/admin/delete_topics/{name}", b"")

    def reassign(self, rng: random.Random) -> None:
        names = self.tree.children("/brokers/topics") if "/brokers/topics" in self.tree.nodes else []
        if not names or "/admin/reassign_partitions" in self.tree.nodes:
            return
        name = rng.choice(names)
        parts = self.tree.json(f"/brokers/topics/{name}")["partitions"]
        p = int(rng.choice(sorted(parts)))
        target = rng.sample(BROKERS, rng.randint(1, 3))
        item = {"topic": name, "partition": p, "replicas": target}
        self.tree.create("/admin/reassign_partitions", _json({"version": 1, "partitions": [item]}))

    # -- a leader's part: live replicas join the ISR -------------------------------------------------
    def lead(self, b: int, request: LeaderAndIsrRequest) -> None:
        states = list(request.ungrouped_partition_states)
        for t in request.topic_states:
            for ps in t.partition_states:
                ps.topic_name = t.topic_name
                states.append(ps)
        for ps in states:
            if ps.leader == b:
                task = asyncio.get_running_loop().create_task(
                    self._expand(b, ps.topic_name, ps.partition_index, ps.leader_epoch)
                )
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)

    async def _expand(self, b: int, topic: str, p: int, epoch: int) -> None:
        await asyncio.sleep(0.005)
        path = f"/brokers/topics/{topic}/partitions/{p}/state"
        assignment = self.tree.json(f"/brokers/topics/{topic}")
        data = self.tree.json(path)
        if b not in self.alive or data is None or assignment is None:
            return
        current = LeaderIsr.from_json(data, self.tree.stat(path).version)
        if current.leader != b or current.leader_epoch != epoch:
            return
        replicas = assignment["partitions"].get(str(p), [])
        isr = tuple(current.isr) + tuple(r for r in replicas if r in self.alive and r not in current.isr)
        if isr == current.isr:
            return
        try:
            self.tree.set(path, _json(LeaderIsr(b, epoch, isr, current.controller_epoch).to_json()), current.zk_version)
        except Exception:
            return  # the controller wrote first: its LeaderAndIsr follows
        self.tree.create("/isr_change_notification/isr_change_",
                         _json({"version": 1, "partitions": [{"topic": topic, "partition": p}]}), sequence=True)

    # -- quiet -------------------------------------------------------------------------------------
    async def settle(self, limit: float = 20.0) -> None:
        """Until nothing changes for a while: no queued controller events, no tree writes."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + limit
        quiet, last = 0, -1
        while quiet < 15:
            if loop.time() > deadline:
                self.unsettled = True
                return
            await asyncio.sleep(0.01)
            busy = any(not c.events.empty() for c in self.controllers.values()) or bool(self.tasks)
            if busy or self.tree.zxid != last:
                quiet, last = 0, self.tree.zxid
            else:
                quiet += 1

    async def stop(self) -> None:
        for b in list(self.controllers):
            ctl = self.controllers.pop(b)
            ctl.events.close()
            for t in ctl._tasks:
                t.cancel()
            for q in ctl.queues.values():
                q.task.cancel()
        for t in list(self.tasks):
            t.cancel()
        await asyncio.sleep(0)


def _json(value: Any) -> bytes:
    import json

    return json.dumps(value).encode()


EVENTS = ("crash", "start", "expire", "move", "create", "create", "delete", "reassign", "settle")


def _check(world: _World) -> list[str]:
    problems = ["the cluster did not settle"] if world.unsettled else []
    active = [c for c in world.controllers.values() if c.active]
    if len(active) != 1:
        problems.append(f"{len(active)} active controllers")
    names = world.tree.children("/brokers/topics") if "/brokers/topics" in world.tree.nodes else []
    for name in names:
        for p in world.tree.json(f"/brokers/topics/{name}")["partitions"]:
            data = world.tree.json(f"/brokers/topics/{name}/partitions/{p}/state")
            if data is None:
                if any(r in world.alive for r in world.tree.json(f"/brokers/topics/{name}")["partitions"][p]):
                    problems.append(f"{name}-{p} has live replicas and no state")
                continue
            li = LeaderIsr.from_json(data, 0)
            if any(r in world.alive for r in li.isr) and li.leader not in world.alive:
                problems.append(f"{name}-{p}: ISR {list(li.isr)} has a live member but the leader is {li.leader}")
    return problems


async def _run(events: list[tuple[str, int]], seed: int) -> tuple[list[str], list[str]]:
    rng = random.Random(seed)
    world = _World()
    try:
        for b in BROKERS:
            world.start(b)
        await world.settle()
        for kind, b in events:
            if kind == "crash":
                world.crash(b)
            elif kind == "start":
                world.start(b)
            elif kind == "expire":
                await world.expire_session(b)
            elif kind == "move":
                await world.move_controller()
            elif kind == "create":
                world.create_topic(rng)
            elif kind == "delete":
                world.delete_topic(rng)
            elif kind == "reassign":
                world.reassign(rng)
            else:
                await world.settle()
            await asyncio.sleep(rng.choice((0, 0, 0.001, 0.01)))
        for b in BROKERS:  # every broker back: the end state is checked with all of them alive
            world.start(b)
        await world.settle()
        return _check(world), [str(c.ctx.state_counts()) for c in world.controllers.values() if c.active]
    finally:
        await world.stop()


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    events=st.lists(st.tuples(st.sampled_from(EVENTS), st.sampled_from(BROKERS)), min_size=1, max_size=25),
    seed=st.integers(0, 2**16),
)
def test_random_cluster_events_keep_the_controller_legal_and_every_partition_led(
    events: list[tuple[str, int]], seed: int, caplog: pytest.LogCaptureFixture
) -> None:
    illegal: list[str] = []
    real = rules.IllegalTransition.__init__

    def record(self: BaseException, *args: Any) -> None:
        illegal.append(str(args[0]) if args else "?")
        real(self, *args)

    caplog.clear()
    with pytest.MonkeyPatch.context() as mp, caplog.at_level(logging.ERROR, logger="odradek.broker.controller"):
        mp.setattr(rules.IllegalTransition, "__init__", record)
        problems, counts = asyncio.run(_run(events, seed))
    failed = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR and "failed" in r.getMessage()]
    assert not illegal, f"illegal transitions: {sorted(set(illegal))[:5]} after {events}"
    assert not failed, f"controller events failed: {failed} after {events}"
    assert not problems, f"{problems} after {events}"
    assert counts, "no active controller"
