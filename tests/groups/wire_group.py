"""A raw-protocol group member over ``odradek.testing.WireClient``: the classic rebalance loop
(JoinGroup with the KIP-394 member-id round trip, SyncGroup, heartbeats, rejoin on
REBALANCE_IN_PROGRESS / ILLEGAL_GENERATION), used by ``test_wire_groups.py`` and by
``measure_groups.py``.  Each member is driven by its own thread."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Any

from odradek.cluster.assignment import decode_assignment, encode_assignment, encode_subscription
from odradek.errors import ErrorCode
from odradek.protocol.messages.data import ConsumerProtocolAssignment, ConsumerProtocolSubscription
from odradek.protocol.messages.find_coordinator import FindCoordinatorRequest
from odradek.protocol.messages.heartbeat import HeartbeatRequest
from odradek.protocol.messages.join_group import JoinGroupRequest
from odradek.protocol.messages.leave_group import LeaveGroupRequest
from odradek.protocol.messages.offset_commit import OffsetCommitRequest
from odradek.protocol.messages.offset_fetch import OffsetFetchRequest
from odradek.protocol.messages.sync_group import SyncGroupRequest
from odradek.testing import WireClient

JOIN_V, SYNC_V, HEARTBEAT_V, LEAVE_V, COMMIT_V, FETCH_V = 5, 3, 3, 3, 8, 7


def find_coordinator(w: WireClient, group: str, version: int = 4) -> Any:
    if version >= 4:
        return w.request(FindCoordinatorRequest(key_type=0, coordinator_keys=[group]), version)
    if version >= 1:
        return w.request(FindCoordinatorRequest(key=group, key_type=0), version)
    return w.request(FindCoordinatorRequest(key=group), version)


def coordinator_loaded(w: WireClient, group: str) -> bool:
    """True once the group's coordinator has loaded its __consumer_offsets partition: an
    OffsetFetch no longer answers the retriable COORDINATOR_LOAD_IN_PROGRESS."""
    resp = w.request(OffsetFetchRequest(group_id=group, topics=None), FETCH_V)
    if resp.error_code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
        return False
    assert resp.error_code == 0, resp.error_code
    return True


def commit(w: WireClient, group: str, generation: int, member_id: str, topic: str,
           offsets: dict[int, int], version: int = COMMIT_V) -> dict[int, ErrorCode]:
    R = OffsetCommitRequest
    resp = w.request(
        R(
            group_id=group,
            generation_id_or_member_epoch=generation,
            member_id=member_id,
            topics=[
                R.OffsetCommitRequestTopic(
                    name=topic,
                    partitions=[
                        R.OffsetCommitRequestPartition(partition_index=p, committed_offset=o, committed_metadata="")
                        for p, o in offsets.items()
                    ],
                )
            ],
        ),
        version,
    )
    return {p.partition_index: ErrorCode(p.error_code) for t in resp.topics for p in t.partitions}


def fetch_offsets(w: WireClient, group: str, topic: str, partitions: list[int], version: int = FETCH_V) -> dict[int, int]:
    R = OffsetFetchRequest
    resp = w.request(R(group_id=group, topics=[R.OffsetFetchRequestTopic(name=topic, partition_indexes=partitions)]),
                     version)
    assert resp.error_code == 0, resp.error_code
    return {p.partition_index: p.committed_offset for t in resp.topics for p in t.partitions}


@dataclass
class WireMember:
    """One member; ``run`` joins and keeps the member in the group until ``stop`` is set."""

    host: str
    port: int
    group: str
    topic: str
    partitions: int
    name: str
    session_timeout_ms: int = 6000
    heartbeat_interval: float = 0.1
    member_id: str = ""
    generation: int = -1
    leader: bool = False
    assignment: list[int] | None = None
    synced: dict[int, list[int]] = field(default_factory=dict)  # generation -> assignment
    leader_assigned: dict[str, list[int]] = field(default_factory=dict)  # as leader, latest
    first_join_sent: float = 0.0
    last_join_sent: float = 0.0
    last_sync_done: float = 0.0
    joins: int = 0
    errors: list[BaseException] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.wire = WireClient(self.host, self.port, client_id=self.name)
        self.stop = threading.Event()
        self.lock = threading.Lock()
        sub = ConsumerProtocolSubscription(topics=[self.topic])
        self.metadata = encode_subscription(sub, 1)

    # -- protocol steps --------------------------------------------------------------------------
    def join(self) -> Any:
        now = time.monotonic()
        if not self.first_join_sent:
            self.first_join_sent = now
        self.last_join_sent = now
        self.joins += 1
        return self.wire.request(
            JoinGroupRequest(
                group_id=self.group,
                session_timeout_ms=self.session_timeout_ms,
                rebalance_timeout_ms=10000,
                member_id=self.member_id,
                protocol_type="consumer",
                protocols=[JoinGroupRequest.JoinGroupRequestProtocol(name="range", metadata=self.metadata)],
            ),
            JOIN_V,
        )

    def assign(self, members: list[str]) -> dict[str, list[int]]:
        """Range assignment of the topic's partitions over the sorted member ids."""
        ids = sorted(members)
        per, extra = divmod(self.partitions, len(ids))
        out, start = {}, 0
        for i, mid in enumerate(ids):
            n = per + (1 if i < extra else 0)
            out[mid] = list(range(start, start + n))
            start += n
        return out

    def sync(self, join: Any) -> Any:
        assignments = []
        if self.leader:
            self.leader_assigned = self.assign([m.member_id for m in join.members])
            assignments = [
                SyncGroupRequest.SyncGroupRequestAssignment(
                    member_id=mid,
                    assignment=encode_assignment(
                        ConsumerProtocolAssignment(
                            assigned_partitions=[ConsumerProtocolAssignment.TopicPartition(topic=self.topic, partitions=ps)]
                        ),
                        1,
                    ),
                )
                for mid, ps in self.leader_assigned.items()
            ]
        return self.wire.request(
            SyncGroupRequest(group_id=self.group, generation_id=self.generation, member_id=self.member_id,
                             assignments=assignments),
            SYNC_V,
        )

    def heartbeat(self) -> ErrorCode:
        resp = self.wire.request(
            HeartbeatRequest(group_id=self.group, generation_id=self.generation, member_id=self.member_id),
            HEARTBEAT_V,
        )
        return ErrorCode(resp.error_code)

    def leave(self) -> ErrorCode:
        resp = self.wire.request(
            LeaveGroupRequest(group_id=self.group, members=[LeaveGroupRequest.MemberIdentity(member_id=self.member_id)]),
            LEAVE_V,
        )
        return ErrorCode(resp.members[0].error_code)

    # -- the loop --------------------------------------------------------------------------------
    def run(self) -> None:
        try:
            while not self.stop.is_set():
                j = self.join()
                code = ErrorCode(j.error_code)
                if code is ErrorCode.MEMBER_ID_REQUIRED:
                    self.member_id = j.member_id
                    continue
                if code is ErrorCode.UNKNOWN_MEMBER_ID:
                    self.member_id = ""
                    continue
                assert code is ErrorCode.NONE, code
                with self.lock:
                    self.member_id, self.generation = j.member_id, j.generation_id
                    self.leader = j.leader == j.member_id
                s = self.sync(j)
                code = ErrorCode(s.error_code)
                if code in (ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION):
                    continue
                assert code is ErrorCode.NONE, code
                decoded = decode_assignment(s.assignment)
                assert decoded is not None
                parts = sorted(p for tp in decoded.assigned_partitions if tp.topic == self.topic for p in tp.partitions)
                with self.lock:
                    self.assignment = parts
                    self.synced[self.generation] = parts
                    self.last_sync_done = time.monotonic()
                # stay in the group: heartbeats until a rebalance or the end
                while not self.stop.wait(self.heartbeat_interval):  # the client's heartbeat interval
                    hb = self.heartbeat()
                    if hb is not ErrorCode.NONE:
                        assert hb in (ErrorCode.REBALANCE_IN_PROGRESS, ErrorCode.ILLEGAL_GENERATION), hb
                        break
        except BaseException as exc:
            self.errors.append(exc)

    def start(self) -> threading.Thread:
        t = threading.Thread(target=self.run, name=self.name, daemon=True)
        t.start()
        return t

    def close(self) -> None:
        self.wire.close()


def all_stable(members: list[WireMember]) -> int | None:
    """The generation all members have synced in, if they agree on one."""
    gens = set()
    for m in members:
        with m.lock:
            if m.assignment is None or m.generation not in m.synced:
                return None
            gens.add(m.generation)
    return gens.pop() if len(gens) == 1 else None
