"""The controller's pure logic: its view of the cluster, the partition and replica state
machines, leader election rules, replica placement, imbalance and reassignment planning.

No I/O here: ``odradek.broker.controller`` reads and writes ZooKeeper and talks to brokers, and
asks these functions what to do.  The rules follow Kafka's ZooKeeper-era controller (the seeds'
"controller" chapter):

* an offline partition's new leader is the first replica, in assignment order, that is alive and
  in the ISR; only with ``unclean.leader.election.enable`` may it be any live assigned replica;
* controlled shutdown moves leadership to the first live ISR member that is not shutting down;
* the preferred leader is the first assigned replica, elected when it is alive and in sync;
* a reassignment first widens the replica set to the union of old and new, waits until every new
  replica is in the ISR, then moves leadership into the new set and drops the old replicas.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, fields

from odradek.cluster.transitions import IllegalTransition

__all__ = [
    "ControllerContext",
    "Election",
    "IllegalTransition",
    "LeaderIsr",
    "PartitionStateName",
    "ReplicaStateName",
    "TopicAssignment",
    "check_partition_transition",
    "check_replica_transition",
    "controlled_shutdown_election",
    "imbalanced_partitions",
    "offline_election",
    "place_replicas",
    "preferred_election",
    "reassignment_election",
    "reassignment_plan",
]


class PartitionStateName(enum.Enum):
    NEW = "NewPartition"
    ONLINE = "OnlinePartition"
    OFFLINE = "OfflinePartition"
    NON_EXISTENT = "NonExistentPartition"


_PARTITION_FROM = {
    PartitionStateName.NEW: {PartitionStateName.NON_EXISTENT},
    PartitionStateName.ONLINE: {PartitionStateName.NEW, PartitionStateName.ONLINE, PartitionStateName.OFFLINE},
    PartitionStateName.OFFLINE: {PartitionStateName.NEW, PartitionStateName.ONLINE, PartitionStateName.OFFLINE},
    PartitionStateName.NON_EXISTENT: {PartitionStateName.OFFLINE},
}


class ReplicaStateName(enum.Enum):
    NEW = "NewReplica"
    ONLINE = "OnlineReplica"
    OFFLINE = "OfflineReplica"
    DELETION_STARTED = "ReplicaDeletionStarted"
    DELETION_SUCCESSFUL = "ReplicaDeletionSuccessful"
    DELETION_INELIGIBLE = "ReplicaDeletionIneligible"
    NON_EXISTENT = "NonExistentReplica"


_R = ReplicaStateName
_REPLICA_FROM = {
    _R.NEW: {_R.NON_EXISTENT},
    _R.ONLINE: {_R.NEW, _R.ONLINE, _R.OFFLINE, _R.DELETION_INELIGIBLE},
    _R.OFFLINE: {_R.NEW, _R.ONLINE, _R.OFFLINE, _R.DELETION_INELIGIBLE},
    _R.DELETION_STARTED: {_R.OFFLINE},
    _R.DELETION_SUCCESSFUL: {_R.DELETION_STARTED},
    _R.DELETION_INELIGIBLE: {_R.OFFLINE, _R.DELETION_STARTED},
    _R.NON_EXISTENT: {_R.DELETION_SUCCESSFUL},
}


def check_partition_transition(current: PartitionStateName, target: PartitionStateName) -> bool:
    return current in _PARTITION_FROM[target]


def check_replica_transition(current: ReplicaStateName, target: ReplicaStateName) -> bool:
    return current in _REPLICA_FROM[target]


@dataclass(frozen=True, slots=True)
class LeaderIsr:
    """``/brokers/topics/<t>/partitions/<p>/state`` plus the znode version it was read at."""

    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    controller_epoch: int
    zk_version: int = 0

    def to_json(self) -> dict[str, object]:
        return {
            "controller_epoch": self.controller_epoch,
            "leader": self.leader,
            "version": 1,
            "leader_epoch": self.leader_epoch,
            "isr": list(self.isr),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, object], zk_version: int) -> LeaderIsr:
        isr = data.get("isr", [])
        assert isinstance(isr, list)
        return cls(
            _json_int(data["leader"]),
            _json_int(data["leader_epoch"]),
            tuple(_json_int(r) for r in isr),
            _json_int(data.get("controller_epoch", 0)),
            zk_version,
        )


def _json_int(value: object) -> int:
    """A number of a partition state read from the metadata store (JSON: an int; a float or a
    numeric string are taken as ``int()`` takes them)."""
    if not isinstance(value, (int, float, str)):
        raise TypeError(f"{value!r} is not a number")
    return int(value)


@dataclass(slots=True)
class TopicAssignment:
    """``/brokers/topics/<t>``: replicas per partition, the topic id, reassignment in progress."""

    topic_id: str
    replicas: dict[int, tuple[int, ...]]
    adding: dict[int, tuple[int, ...]] = field(default_factory=dict)
    removing: dict[int, tuple[int, ...]] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        return {
            "version": 3,
            "topic_id": self.topic_id,
            "partitions": {str(p): list(r) for p, r in sorted(self.replicas.items())},
            "adding_replicas": {str(p): list(r) for p, r in sorted(self.adding.items()) if r},
            "removing_replicas": {str(p): list(r) for p, r in sorted(self.removing.items()) if r},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, object], default_id: str) -> TopicAssignment:
        def parts(key: str) -> dict[int, tuple[int, ...]]:
            raw = data.get(key) or {}
            assert isinstance(raw, dict)
            return {int(p): tuple(int(b) for b in r) for p, r in raw.items()}

        tid = data.get("topic_id") or default_id
        return cls(str(tid), parts("partitions"), parts("adding_replicas"), parts("removing_replicas"))


@dataclass(frozen=True, slots=True)
class Election:
    leader: int
    isr: tuple[int, ...]
    unclean: bool = False


@dataclass(slots=True)
class ControllerContext:
    """What the active controller knows; rebuilt from ZooKeeper on every failover."""

    epoch: int = 0
    epoch_zk_version: int = -1
    live_brokers: dict[int, int] = field(default_factory=dict)  # broker id -> broker epoch (czxid)
    shutting_down: set[int] = field(default_factory=set)
    topics: dict[str, TopicAssignment] = field(default_factory=dict)
    states: dict[tuple[str, int], LeaderIsr] = field(default_factory=dict)
    # the state machines: written only through the methods below, each step checked against the
    # transition tables (an illegal step raises IllegalTransition)
    _partition_states: dict[tuple[str, int], PartitionStateName] = field(default_factory=dict)
    _replica_states: dict[tuple[str, int, int], ReplicaStateName] = field(default_factory=dict)
    deleting: set[str] = field(default_factory=set)
    reassigning: dict[tuple[str, int], tuple[int, ...]] = field(default_factory=dict)
    #: replicas of live brokers lost with a failed log dir, per partition (until the broker restarts)
    offline_replicas: dict[tuple[str, int], set[int]] = field(default_factory=dict)

    def reset(self, epoch: int = 0, epoch_zk_version: int = -1) -> None:
        """Forget everything, for a resignation or a new term at ``epoch`` (Kafka's
        resetContext): the same object, so those holding it see the new term."""
        fresh = ControllerContext(epoch=epoch, epoch_zk_version=epoch_zk_version)
        for f in fields(self):
            setattr(self, f.name, getattr(fresh, f.name))

    def replicas(self, topic: str, partition: int) -> tuple[int, ...]:
        t = self.topics.get(topic)
        return () if t is None else t.replicas.get(partition, ())

    def partitions(self) -> Iterable[tuple[str, int]]:
        for name, t in self.topics.items():
            for p in t.replicas:
                yield name, p

    def partitions_on(self, broker_id: int) -> list[tuple[str, int]]:
        return [tp for tp in self.partitions() if broker_id in self.replicas(*tp)]

    def is_live(self, broker_id: int) -> bool:
        return broker_id in self.live_brokers

    def replica_usable(self, tp: tuple[str, int], broker_id: int) -> bool:
        """Whether the replica of ``tp`` on ``broker_id`` can lead: its broker is live and its log
        dir did not fail."""
        return broker_id in self.live_brokers and broker_id not in self.offline_replicas.get(tp, ())

    def eligible(self, tp: tuple[str, int]) -> list[int]:
        """The brokers that may lead ``tp`` now: live, not shutting down, its replica not lost."""
        lost = self.offline_replicas.get(tp, ())
        return [b for b in self.live_brokers if b not in self.shutting_down and b not in lost]

    def offline_partitions(self) -> list[tuple[str, int]]:
        out = []
        for tp in self.partitions():
            if tp[0] in self.deleting:
                continue
            st = self.states.get(tp)
            if st is None or st.leader < 0 or not self.replica_usable(tp, st.leader) or st.leader in self.shutting_down:
                out.append(tp)
        return out

    # -- the state machines ------------------------------------------------------------------------

    def partition_state(self, tp: tuple[str, int]) -> PartitionStateName:
        return self._partition_states.get(tp, PartitionStateName.NON_EXISTENT)

    def replica_state(self, tp: tuple[str, int], replica: int) -> ReplicaStateName:
        return self._replica_states.get((tp[0], tp[1], replica), ReplicaStateName.NON_EXISTENT)

    def set_partition_state(self, tp: tuple[str, int], target: PartitionStateName) -> None:
        current = self.partition_state(tp)
        if not check_partition_transition(current, target):
            raise IllegalTransition(f"illegal partition state change {current.value} -> {target.value} for {tp}")
        if target is PartitionStateName.NON_EXISTENT:
            self._partition_states.pop(tp, None)
        else:
            self._partition_states[tp] = target

    def set_replica_state(self, tp: tuple[str, int], replica: int, target: ReplicaStateName) -> None:
        key = (tp[0], tp[1], replica)
        current = self.replica_state(tp, replica)
        if not check_replica_transition(current, target):
            raise IllegalTransition(f"illegal replica state change {current.value} -> {target.value} for {key}")
        if target is ReplicaStateName.NON_EXISTENT:
            self._replica_states.pop(key, None)
        else:
            self._replica_states[key] = target

    def load_states(self, tp: tuple[str, int]) -> None:
        """A new controller's starting states for a partition, from what the store holds (Kafka's
        state machine start-up): New without a leader and ISR, Online with a live leader, else
        Offline; each replica Online on a live broker, else Offline.  Only for a partition this
        context has no state of yet."""
        if tp in self._partition_states or any(k[:2] == tp for k in self._replica_states):
            raise IllegalTransition(f"{tp} already has controller state: it is loaded once, at start-up")
        st = self.states.get(tp)
        self.set_partition_state(tp, PartitionStateName.NEW)
        if st is not None:
            led = st.leader >= 0 and self.is_live(st.leader)
            self.set_partition_state(tp, PartitionStateName.ONLINE if led else PartitionStateName.OFFLINE)
        for r in self.replicas(*tp):
            self.replica_up(tp, r) if self.is_live(r) else self.replica_down(tp, r)

    def new_partition(self, tp: tuple[str, int]) -> None:
        """A partition just created: New, its replicas New (those already known keep their state:
        a partition that could not get a leader yet is created again by the next change)."""
        if self.partition_state(tp) is PartitionStateName.NON_EXISTENT:
            self.set_partition_state(tp, PartitionStateName.NEW)
        for r in self.replicas(*tp):
            if self.replica_state(tp, r) is ReplicaStateName.NON_EXISTENT:
                self.set_replica_state(tp, r, ReplicaStateName.NEW)

    def partition_led(self, tp: tuple[str, int], leader: int) -> None:
        """The partition's leader is now ``leader`` (-1: none): Online or Offline."""
        self.set_partition_state(tp, PartitionStateName.ONLINE if leader >= 0 else PartitionStateName.OFFLINE)

    def replica_up(self, tp: tuple[str, int], replica: int) -> None:
        """The replica's broker is alive (or the replica was just added): Online, New first when
        the controller did not know it."""
        if self.replica_state(tp, replica) is ReplicaStateName.NON_EXISTENT:
            self.set_replica_state(tp, replica, ReplicaStateName.NEW)
        if self.replica_state(tp, replica) in _DELETING:
            return  # being deleted: it stays so until its deletion ends
        self.set_replica_state(tp, replica, ReplicaStateName.ONLINE)  # (from Ineligible too: it is back)

    def replica_down(self, tp: tuple[str, int], replica: int) -> None:
        """The replica's broker is gone: Offline; one that was being deleted cannot finish now
        (ReplicaDeletionIneligible)."""
        state = self.replica_state(tp, replica)
        if state is ReplicaStateName.NON_EXISTENT:
            self.set_replica_state(tp, replica, ReplicaStateName.NEW)
        elif state is ReplicaStateName.DELETION_STARTED:
            self.set_replica_state(tp, replica, ReplicaStateName.DELETION_INELIGIBLE)
            return
        elif state is ReplicaStateName.DELETION_SUCCESSFUL:
            return
        self.set_replica_state(tp, replica, ReplicaStateName.OFFLINE)

    def start_replica_deletion(self, tp: tuple[str, int], replica: int) -> None:
        """Offline, then ReplicaDeletionStarted (StopReplica with delete goes to its broker)."""
        if self.replica_state(tp, replica) is not ReplicaStateName.DELETION_STARTED:
            self.replica_down(tp, replica)
            self.set_replica_state(tp, replica, ReplicaStateName.DELETION_STARTED)

    def replica_deleted(self, tp: tuple[str, int], replica: int) -> None:
        """The replica's deletion is done: ReplicaDeletionSuccessful, then NonExistent."""
        self.start_replica_deletion(tp, replica)
        self.set_replica_state(tp, replica, ReplicaStateName.DELETION_SUCCESSFUL)
        self.set_replica_state(tp, replica, ReplicaStateName.NON_EXISTENT)

    def partition_deleted(self, tp: tuple[str, int], replicas: Iterable[int]) -> None:
        """The partition's topic is gone: every replica deleted, the partition NonExistent."""
        for r in replicas:
            self.replica_deleted(tp, r)
        if self.partition_state(tp) is not PartitionStateName.NON_EXISTENT:
            if self.partition_state(tp) is not PartitionStateName.OFFLINE:
                self.set_partition_state(tp, PartitionStateName.OFFLINE)
            self.set_partition_state(tp, PartitionStateName.NON_EXISTENT)

    def state_counts(self) -> tuple[int, int]:
        """How many partitions and replicas have a state (for tests and logs)."""
        return len(self._partition_states), len(self._replica_states)


_DELETING = frozenset({ReplicaStateName.DELETION_STARTED, ReplicaStateName.DELETION_SUCCESSFUL})


# -- leader election -------------------------------------------------------------------------------


def offline_election(
    assignment: Sequence[int], isr: Sequence[int], live: Iterable[int], *, unclean: bool
) -> Election | None:
    """A new leader for a partition whose leader is gone; ``None`` keeps it offline."""
    alive = set(live)
    live_isr = [r for r in isr if r in alive]
    for r in assignment:
        if r in alive and r in isr:
            return Election(r, tuple(live_isr))
    if unclean:
        for r in assignment:
            if r in alive:
                return Election(r, (r,), unclean=True)
    return None


def controlled_shutdown_election(
    assignment: Sequence[int], isr: Sequence[int], live: Iterable[int], shutting_down: Iterable[int]
) -> Election | None:
    alive = set(live) - set(shutting_down)
    new_isr = tuple(r for r in isr if r in alive)
    for r in assignment:
        if r in new_isr:
            return Election(r, new_isr)
    return None


def preferred_election(assignment: Sequence[int], isr: Sequence[int], live: Iterable[int]) -> Election | None:
    if not assignment:
        return None
    preferred = assignment[0]
    if preferred in set(live) and preferred in isr:
        return Election(preferred, tuple(isr))
    return None


def reassignment_election(target: Sequence[int], isr: Sequence[int], live: Iterable[int]) -> Election | None:
    alive = set(live)
    for r in target:
        if r in alive and r in isr:
            return Election(r, tuple(isr))
    return None


# -- placement and balance ---------------------------------------------------------------------------


def _rack_alternated(brokers: Mapping[int, str | None]) -> list[int]:
    """Brokers ordered so that consecutive entries sit on different racks where possible
    (rack a's first broker, rack b's first, ..., rack a's second, ...)."""
    by_rack: dict[str, list[int]] = {}
    for b in sorted(brokers):
        by_rack.setdefault(brokers[b] or "", []).append(b)
    racks = sorted(by_rack)
    out: list[int] = []
    i = 0
    while len(out) < len(brokers):
        for rack in racks:
            members = by_rack[rack]
            if i < len(members):
                out.append(members[i])
        i += 1
    return out


def place_replicas(
    brokers: Mapping[int, str | None],
    partitions: int,
    replication_factor: int,
    *,
    start_partition: int = 0,
    start_index: int = 0,
) -> dict[int, tuple[int, ...]]:
    """Round-robin placement over live brokers (rack-aware when any broker has a rack).

    Partition p's leader is broker ``(start_index + p) mod n``; its followers follow with a shift
    that grows each full round, so that followers spread too.  With racks the broker list is first
    interleaved by rack, the shift grows by the number of racks each round, and a follower is
    skipped past brokers on a rack the partition already uses while an unused rack remains.
    """
    n = len(brokers)
    if replication_factor <= 0:
        raise ValueError(f"replication factor must be larger than 0, not {replication_factor}")
    if replication_factor > n:
        raise ValueError(f"replication factor {replication_factor} is larger than the {n} available brokers")
    rack_aware = any(r for r in brokers.values())
    order = _rack_alternated(brokers) if rack_aware else sorted(brokers)
    racks = {brokers[b] for b in brokers}
    # rack-aware, the shift moves a whole rack round at a time (Kafka's nextReplicaShift * numRacks),
    # so that followers keep the rack alternation of the broker list
    stride = len(racks) if rack_aware else 1
    result: dict[int, tuple[int, ...]] = {}
    for i in range(partitions):
        p = start_partition + i
        first = (start_index + p) % n
        shift = 1 + (p // n * stride) % max(n - 1, 1)
        replicas = [order[first]]
        used_racks = {brokers[order[first]]}
        k = 0
        while len(replicas) < replication_factor:
            candidate = order[(first + shift + k) % n]
            k += 1
            if candidate in replicas:
                continue
            if rack_aware and brokers[candidate] in used_racks and len(used_racks) < len(racks) and k < 2 * n:
                continue
            replicas.append(candidate)
            used_racks.add(brokers[candidate])
        result[p] = tuple(replicas)
    return result


def imbalanced_partitions(
    ctx: ControllerContext, percentage: int
) -> list[tuple[str, int]]:
    """Partitions to move back to their preferred leader: those whose preferred broker's
    imbalance ratio (partitions it should lead but does not / partitions it should lead) is
    above ``leader.imbalance.per.broker.percentage``, and whose preferred replica can lead."""
    preferred: dict[int, list[tuple[str, int]]] = {}
    for tp in ctx.partitions():
        if tp[0] in ctx.deleting or tp in ctx.reassigning:
            continue
        replicas = ctx.replicas(*tp)
        if replicas:
            preferred.setdefault(replicas[0], []).append(tp)
    out = []
    for broker, tps in sorted(preferred.items()):
        if not ctx.is_live(broker) or broker in ctx.shutting_down:
            continue
        not_led = [tp for tp in tps if (st := ctx.states.get(tp)) is not None and st.leader != broker]
        if not not_led or len(not_led) * 100 <= percentage * len(tps):
            continue
        for tp in not_led:
            st = ctx.states[tp]
            if broker in st.isr:
                out.append(tp)
    return out


@dataclass(frozen=True, slots=True)
class ReassignmentPlan:
    """What to do next for one partition being reassigned from ``original`` to ``target``."""

    union: tuple[int, ...]
    adding: tuple[int, ...]
    removing: tuple[int, ...]
    caught_up: bool


def reassignment_plan(current: Sequence[int], target: Sequence[int], isr: Sequence[int]) -> ReassignmentPlan:
    """The union keeps the target's order first, then the replicas being removed (Kafka's
    ``[2,3,1]`` for 1,2,3 -> 2,3); the reassignment may finish once every target is in sync."""
    union = tuple(target) + tuple(r for r in current if r not in target)
    adding = tuple(r for r in target if r not in current)
    removing = tuple(r for r in current if r not in target)
    caught_up = all(r in isr for r in target)
    return ReassignmentPlan(union, adding, removing, caught_up)
