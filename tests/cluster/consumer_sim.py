"""A simulation of KIP-848 consumer group members against the pure state machine
(:class:`odradek.cluster.consumer_group.ConsumerGroups`), for the property tests.

Each simulated client behaves as the real ones do: it joins with epoch 0, heartbeats with its
epoch and the partitions it owns, takes the assignment of a response at once (revoking what is
no longer in it, owning what is new), drops everything and joins again when fenced, and sends a
full heartbeat (subscription, owned partitions, rebalance timeout) after a response it lost.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from odradek.cluster.consumer_group import (
    ConsumerGroupConfig,
    ConsumerGroups,
    HeartbeatRequest,
    HeartbeatResponse,
    Record,
)
from odradek.cluster.group import GroupCoordinatorState
from odradek.cluster.metadata import MetadataImage, PartitionState, TopicInfo
from odradek.errors import ErrorCode, KafkaError

GROUP = "g"
SESSION_MS = 45000


def topic_id(name: str) -> uuid.UUID:
    return uuid.uuid5(uuid.NAMESPACE_URL, name)


def image(topics: dict[str, int]) -> MetadataImage:
    return MetadataImage("c", 0, {}, {
        name: TopicInfo(name, topic_id(name), {p: PartitionState(name, p, (0,), (0,), 0) for p in range(n)})
        for name, n in topics.items()
    })


@dataclass
class Client:
    member_id: str
    topics: tuple[str, ...]
    instance_id: str | None = None
    epoch: int = 0
    owned: dict[uuid.UUID, frozenset[int]] = field(default_factory=dict)
    #: the next heartbeat carries everything (after a lost response, or on joining)
    full: bool = True


class Sim:
    def __init__(self, topics: dict[str, int], assignor: str = "uniform") -> None:
        self.topics = dict(topics)
        self.image = image(self.topics)
        self.classic = GroupCoordinatorState()
        self.config = ConsumerGroupConfig(assignors=(assignor, "range" if assignor == "uniform" else "uniform"))
        self.cg = ConsumerGroups(self.classic, self.config)
        self.now = 1000
        self.clients: dict[str, Client] = {}
        self.records: list[Record] = []
        self._next = 0

    # -- clients ------------------------------------------------------------------------------
    def join(self, topics: tuple[str, ...], instance_id: str | None = None) -> str:
        self._next += 1
        mid = f"m{self._next}"
        self.clients[mid] = Client(mid, topics, instance_id)
        self.heartbeat(mid)
        return mid

    def heartbeat(self, mid: str, *, lose: bool = False) -> HeartbeatResponse | ErrorCode:
        c = self.clients[mid]
        full = c.full or c.epoch == 0
        req = HeartbeatRequest(
            GROUP, mid, c.epoch, instance_id=c.instance_id,
            rebalance_timeout_ms=30000 if full else -1,
            subscribed_topic_names=c.topics if full else None,
            owned={} if c.epoch == 0 else dict(c.owned),
            client_host="/127.0.0.1",
        )
        try:
            out = self.cg.heartbeat(self.now, req, self.image)
        except KafkaError as exc:
            if exc.code in (ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID):
                c.owned, c.epoch, c.full = {}, 0, True  # abandon everything, join again
            return exc.code
        self.records.extend(out.records)
        resp = out.response
        assert isinstance(resp, HeartbeatResponse)
        if lose:
            c.full = True
            return resp
        c.epoch = resp.member_epoch
        c.full = False
        if resp.assignment is not None:
            c.owned = {t: ps for t, ps in resp.assignment.items() if ps}
        return resp

    def leave(self, mid: str) -> None:
        c = self.clients.pop(mid)
        out = self.cg.heartbeat(self.now, HeartbeatRequest(GROUP, mid, -1, instance_id=c.instance_id), self.image)
        self.records.extend(out.records)

    def static_leave(self, mid: str) -> Client:
        """A static member's process stops (it leaves with epoch -2); returns what comes back."""
        c = self.clients.pop(mid)
        out = self.cg.heartbeat(self.now, HeartbeatRequest(GROUP, mid, -2, instance_id=c.instance_id), self.image)
        self.records.extend(out.records)
        return c

    def crash(self, mid: str) -> None:
        """The client's process dies: it owns nothing any more; its session expires."""
        del self.clients[mid]
        g = self.cg.groups.get(GROUP)
        if g is not None and mid in g.session_deadline:
            g.session_deadline[mid] = self.now
        for outcome in self.cg.tick(self.now, self.image):
            self.records.extend(outcome.records)

    def subscribe(self, mid: str, topics: tuple[str, ...]) -> None:
        c = self.clients[mid]
        c.topics = topics
        c.full = True
        self.heartbeat(mid)

    def grow(self, topic: str, partitions: int) -> None:
        self.topics[topic] = max(self.topics.get(topic, 0), partitions)
        self.image = image(self.topics)

    # -- checks -------------------------------------------------------------------------------
    def owned_by_clients(self) -> dict[tuple[uuid.UUID, int], str]:
        """Every partition a live client owns -> that client; fails when two own one."""
        seen: dict[tuple[uuid.UUID, int], str] = {}
        for c in self.clients.values():
            for t, ps in c.owned.items():
                for p in ps:
                    assert (t, p) not in seen, f"partition {t}/{p} owned by {seen[(t, p)]} and {c.member_id}"
                    seen[(t, p)] = c.member_id
        return seen

    def check_coordinator(self) -> None:
        g = self.cg.groups.get(GROUP)
        if g is None:
            return
        seen: dict[tuple[uuid.UUID, int], str] = {}
        for m in g.members.values():
            for part in (m.assigned, m.pending_revocation):
                for t, ps in part.items():
                    for p in ps:
                        assert (t, p) not in seen, f"{t}/{p} is {seen[(t, p)]}'s and {m.member_id}'s"
                        seen[(t, p)] = m.member_id
        assert {tp: o[0] for tp, o in g.owners.items()} == seen

    def replayed(self) -> ConsumerGroups:
        fresh = ConsumerGroups(GroupCoordinatorState(), self.config)
        for r in self.records:
            fresh.replay(r)
        fresh.loaded(self.now)
        return fresh

    def stabilize(self, rounds: int = 30) -> int:
        """Heartbeat every client until the group is stable and nobody's assignment changes;
        returns the rounds it took (fails after ``rounds``)."""
        for i in range(rounds):
            before = {mid: (c.epoch, dict(c.owned)) for mid, c in self.clients.items()}
            for mid in list(self.clients):
                self.heartbeat(mid)
                self.owned_by_clients()
            after = {mid: (c.epoch, dict(c.owned)) for mid, c in self.clients.items()}
            g = self.cg.groups.get(GROUP)
            if before == after and (g is None or g.state.value in ("Stable", "Empty")):
                return i
        raise AssertionError("the group never became stable")
