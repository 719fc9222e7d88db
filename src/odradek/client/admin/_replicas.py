"""Where replicas live: partition reassignments, leader elections and log directories (Kafka's
Admin ``alterPartitionReassignments``, ``listPartitionReassignments``, ``electLeaders``,
``describeLogDirs``, ``alterReplicaLogDirs``).

Reassignments and elections go to the controller (found again after NOT_CONTROLLER); log-dir
operations go to the broker that holds the replicas.  Per-partition errors are Kafka's: an
unknown partition is UNKNOWN_TOPIC_OR_PARTITION, a bad target INVALID_REPLICA_ASSIGNMENT (with the
controller's reason), cancelling a partition that is not moving NO_REASSIGNMENT_IN_PROGRESS; an
election answers ELECTION_NOT_NEEDED, ELIGIBLE_LEADERS_NOT_AVAILABLE or
PREFERRED_LEADER_NOT_AVAILABLE per partition; AlterReplicaLogDirs KAFKA_STORAGE_ERROR,
LOG_DIR_NOT_FOUND or REPLICA_NOT_AVAILABLE per replica.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from odradek.client.admin._base import AdminBase, _check, _error, _Pending
from odradek.client.admin.types import TopicPartition
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol.messages.alter_partition_reassignments import (
    AlterPartitionReassignmentsRequest,
    AlterPartitionReassignmentsResponse,
)
from odradek.protocol.messages.alter_replica_log_dirs import (
    AlterReplicaLogDirsRequest,
    AlterReplicaLogDirsResponse,
)
from odradek.protocol.messages.describe_log_dirs import DescribeLogDirsRequest, DescribeLogDirsResponse
from odradek.protocol.messages.elect_leaders import ElectLeadersRequest, ElectLeadersResponse
from odradek.protocol.messages.list_partition_reassignments import (
    ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse,
)
from odradek.transport import AsyncBrokerConnection

__all__ = [
    "ELECTION_TYPES",
    "LogDirDescription",
    "PartitionReassignment",
    "ReplicaAdmin",
    "ReplicaInfo",
    "TopicPartitionReplica",
]

#: ElectLeaders' election types by name
ELECTION_TYPES = {"preferred": 0, "unclean": 1}

#: a replica of a partition on a broker: (topic, partition, broker id)
TopicPartitionReplica = tuple[str, int, int]


@dataclass(frozen=True, slots=True)
class PartitionReassignment:
    """A reassignment in progress: the partition's replicas now (the union of the old and the new
    ones), the replicas being added and those to be removed once the new ones have caught up."""

    replicas: list[int]
    adding_replicas: list[int]
    removing_replicas: list[int]


@dataclass(frozen=True, slots=True)
class ReplicaInfo:
    """A replica in a log dir: its size in bytes, how far its log end is behind the high watermark
    (0 on the leader) and whether it is a future replica (being moved into this dir)."""

    size: int
    offset_lag: int
    is_future: bool = False


@dataclass(slots=True)
class LogDirDescription:
    """One log dir of a broker: its error (None, or KAFKA_STORAGE_ERROR for an offline dir), the
    replicas in it, and its file system's total and usable bytes (None when the broker does not say)."""

    path: str
    error: KafkaError | None
    replicas: dict[TopicPartition, ReplicaInfo] = field(default_factory=dict)
    total_bytes: int | None = None
    usable_bytes: int | None = None


def _by_topic(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for topic, p in partitions:
        out.setdefault(topic, []).append(int(p))
    return out


class ReplicaAdmin(AdminBase):
    """:class:`AsyncAdmin`'s replica-placement operations: ``alter_partition_reassignments``,
    ``list_partition_reassignments``, ``elect_leaders``, ``describe_log_dirs``,
    ``alter_replica_log_dirs``."""

    async def alter_partition_reassignments(
        self,
        reassignments: Mapping[TopicPartition, Sequence[int] | None],
        *,
        allow_replication_factor_change: bool = True,
        timeout: float | None = None,
    ) -> None:
        """Start moving partitions to new replica lists: ``{("orders", 0): [2, 3]}``; ``None`` as
        the target cancels the partition's reassignment (back to its original replicas).  Returns
        once the controller has accepted them (the copying goes on; follow it with
        :meth:`list_partition_reassignments`); :class:`AdminError` names the refused partitions.
        ``allow_replication_factor_change=False`` (KIP-860, AlterPartitionReassignments v1) has
        targets of another length refused with INVALID_REPLICATION_FACTOR."""
        dl = self._deadline(timeout)
        wanted: dict[TopicPartition, list[int] | None] = {
            (t, int(p)): (None if r is None else [int(b) for b in r]) for (t, p), r in reassignments.items()
        }
        if not wanted:
            return
        state: _Pending[TopicPartition, None] = _Pending(wanted, lambda tp: f"reassignment of {tp[0]}-{tp[1]}")
        Q = AlterPartitionReassignmentsRequest

        async def attempt() -> None:
            conn = await self._controller(dl)
            v = conn.version_for(Q)
            if v < 1 and not allow_replication_factor_change:
                raise KafkaError(ErrorCode.UNSUPPORTED_VERSION,
                                 "the broker cannot refuse replication factor changes (AlterPartitionReassignments v0)")
            asked = list(state.todo)
            topics = _by_topic(asked)
            req = Q(
                timeout_ms=dl.remaining_ms(),
                allow_replication_factor_change=allow_replication_factor_change,
                topics=[
                    Q.ReassignableTopic(
                        name=name,
                        partitions=[Q.ReassignablePartition(partition_index=p, replicas=state.todo[(name, p)]) for p in ps],
                    )
                    for name, ps in topics.items()
                ],
            )
            resp: AlterPartitionReassignmentsResponse = await self._request(conn, req, v, dl)
            if resp.error_code:
                raise _error(resp.error_code, "alter partition reassignments", resp.error_message)
            state.unanswered(asked, {(t.name, p.partition_index) for t in resp.responses for p in t.partitions})
            for t in resp.responses:
                for p in t.partitions:
                    tp = (t.name, p.partition_index)
                    if tp not in state.todo:
                        continue
                    if p.error_code:
                        state.fail(tp, p.error_code, p.error_message)
                    else:
                        state.done(tp, None)

        await self._drive(state, dl, attempt)
        _check(state.errors, state.results)

    async def list_partition_reassignments(
        self, partitions: Iterable[TopicPartition] | None = None, *, timeout: float | None = None
    ) -> dict[TopicPartition, PartitionReassignment]:
        """The reassignments in progress (of ``partitions``; None: all of them).  A partition that
        is not moving is not in the result."""
        dl = self._deadline(timeout)
        wanted = None if partitions is None else sorted({(t, int(p)) for t, p in partitions})
        if wanted is not None and not wanted:
            return {}
        state: _Pending[str, dict[TopicPartition, PartitionReassignment]] = _Pending(
            {"": None}, lambda _k: "list partition reassignments"
        )
        Q = ListPartitionReassignmentsRequest

        async def attempt() -> None:
            conn = await self._controller(dl)
            req = Q(
                timeout_ms=dl.remaining_ms(),
                topics=None
                if wanted is None
                else [Q.ListPartitionReassignmentsTopics(name=n, partition_indexes=ps) for n, ps in _by_topic(wanted).items()],
            )
            resp: ListPartitionReassignmentsResponse = await self._request(conn, req, conn.version_for(Q), dl)
            if resp.error_code:
                state.fail("", resp.error_code, resp.error_message)
                return
            state.done(
                "",
                {
                    (t.name, p.partition_index): PartitionReassignment(
                        list(p.replicas), list(p.adding_replicas), list(p.removing_replicas)
                    )
                    for t in resp.topics
                    for p in t.partitions
                },
            )

        await self._drive(state, dl, attempt)
        if state.errors:
            raise state.errors[""]
        return state.results[""]

    async def elect_leaders(
        self,
        election_type: str = "preferred",
        partitions: Iterable[TopicPartition] | None = None,
        *,
        timeout: float | None = None,
    ) -> dict[TopicPartition, KafkaError | None]:
        """Elect leaders (``"preferred"``: the first replica, where it is in the ISR;
        ``"unclean"``: any live replica, for partitions without a leader) for ``partitions``
        (None: every partition that needs one).  Returns each partition's outcome as Kafka's
        Admin does: None when a leader was elected, or its error (ELECTION_NOT_NEEDED when the
        partition already has the leader asked for); only a failure of the whole request raises."""
        kind = ELECTION_TYPES.get(election_type.lower()) if isinstance(election_type, str) else None
        if kind is None:
            raise ValueError(f"election_type must be 'preferred' or 'unclean', not {election_type!r}")
        dl = self._deadline(timeout)
        wanted = None if partitions is None else sorted({(t, int(p)) for t, p in partitions})
        if wanted is not None and not wanted:
            return {}
        state: _Pending[str, dict[TopicPartition, KafkaError | None]] = _Pending({"": None}, lambda _k: "elect leaders")
        Q = ElectLeadersRequest

        async def attempt() -> None:
            conn = await self._controller(dl)
            v = conn.version_for(Q)
            if v < 1 and kind != 0:
                raise KafkaError(ErrorCode.UNSUPPORTED_VERSION, "the broker only has preferred elections (ElectLeaders v0)")
            req = Q(
                election_type=kind,
                topic_partitions=None
                if wanted is None
                else [Q.TopicPartitions(topic=n, partitions=ps) for n, ps in _by_topic(wanted).items()],
                timeout_ms=dl.remaining_ms(),
            )
            resp: ElectLeadersResponse = await self._request(conn, req, v, dl)
            if resp.error_code:
                state.fail("", resp.error_code, "elect leaders")
                return
            out: dict[TopicPartition, KafkaError | None] = {}
            for r in resp.replica_election_results:
                for p in r.partition_result:
                    tp = (r.topic, p.partition_id)
                    out[tp] = None if not p.error_code else _error(p.error_code, f"{tp[0]}-{tp[1]}", p.error_message)
            state.done("", out)

        await self._drive(state, dl, attempt)
        if state.errors:
            raise state.errors[""]
        return state.results[""]

    async def describe_log_dirs(
        self,
        brokers: Iterable[int] | None = None,
        partitions: Iterable[TopicPartition] | None = None,
        *,
        timeout: float | None = None,
    ) -> dict[int, dict[str, LogDirDescription]]:
        """Each broker's log dirs (``brokers``; None: every broker in the metadata) and the
        replicas in them (of ``partitions``; None: all): ``{broker: {path: LogDirDescription}}``.
        A broker that cannot be asked raises :class:`AdminError` naming it (with the others'
        answers in ``results``)."""
        dl = self._deadline(timeout)
        await self._metadata([], dl)  # the brokers' addresses
        if brokers is None:
            ids = sorted(self._cluster.brokers)
        else:
            ids = sorted({int(b) for b in brokers})
        want = None if partitions is None else _by_topic(sorted({(t, int(p)) for t, p in partitions}))
        state: _Pending[int, dict[str, LogDirDescription]] = _Pending(
            {b: None for b in ids}, lambda b: f"describe log dirs of broker {b}"
        )
        Q = DescribeLogDirsRequest

        async def send(conn: AsyncBrokerConnection, batch: list[int]) -> None:
            v = conn.version_for(Q)
            req = Q(topics=None if want is None else [Q.DescribableLogDirTopic(topic=n, partitions=ps) for n, ps in want.items()])
            resp: DescribeLogDirsResponse = await self._request(conn, req, v, dl)
            code = resp.error_code if v >= 3 else 0
            if code:
                state.fail(batch[0], code)
                return
            dirs: dict[str, LogDirDescription] = {}
            for r in resp.results:
                dirs[r.log_dir] = LogDirDescription(
                    r.log_dir,
                    None if not r.error_code else _error(r.error_code, f"log dir {r.log_dir}"),
                    {
                        (t.name, p.partition_index): ReplicaInfo(p.partition_size, p.offset_lag, p.is_future_key)
                        for t in r.topics
                        for p in t.partitions
                    },
                    r.total_bytes if v >= 4 and r.total_bytes >= 0 else None,
                    r.usable_bytes if v >= 4 and r.usable_bytes >= 0 else None,
                )
            state.done(batch[0], dirs)

        async def attempt() -> None:
            await self._per_node(state, {b: [b] for b in state.todo}, send, dl)

        await self._drive(state, dl, attempt)
        _check(state.errors, state.results)
        return {b: state.results[b] for b in ids}

    async def alter_replica_log_dirs(
        self, moves: Mapping[TopicPartitionReplica, str], *, timeout: float | None = None
    ) -> None:
        """Move replicas between their broker's log dirs: ``{("orders", 0, 2): "/data2"}`` (the
        broker copies the replica into the dir online, then swaps; the absolute path of one of its
        ``log.dirs``).  :class:`AdminError` names the replicas that were refused."""
        dl = self._deadline(timeout)
        wanted = {(t, int(p), int(b)): str(d) for (t, p, b), d in moves.items()}
        if not wanted:
            return
        state: _Pending[TopicPartitionReplica, None] = _Pending(
            wanted, lambda r: f"move of {r[0]}-{r[1]} on broker {r[2]}"
        )
        Q = AlterReplicaLogDirsRequest

        async def send(conn: AsyncBrokerConnection, batch: list[TopicPartitionReplica]) -> None:
            by_dir: dict[str, dict[str, list[int]]] = {}
            for r in batch:
                by_dir.setdefault(state.todo[r], {}).setdefault(r[0], []).append(r[1])
            broker = batch[0][2]
            req = Q(
                dirs=[
                    Q.AlterReplicaLogDir(path=d, topics=[Q.AlterReplicaLogDirTopic(name=n, partitions=ps) for n, ps in ts.items()])
                    for d, ts in by_dir.items()
                ]
            )
            resp: AlterReplicaLogDirsResponse = await self._request(conn, req, conn.version_for(Q), dl)
            state.unanswered(batch, {(t.topic_name, p.partition_index, broker) for t in resp.results for p in t.partitions})
            for t in resp.results:
                for p in t.partitions:
                    key = (t.topic_name, p.partition_index, broker)
                    if key not in state.todo:
                        continue
                    if p.error_code:
                        state.fail(key, p.error_code)
                    else:
                        state.done(key, None)

        async def attempt() -> None:
            await self._metadata([], dl)
            groups: dict[int | None, list[TopicPartitionReplica]] = {}
            for r in state.todo:
                groups.setdefault(r[2], []).append(r)
            await self._per_node(state, groups, send, dl)

        await self._drive(state, dl, attempt)
        _check(state.errors, state.results)
