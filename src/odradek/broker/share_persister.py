"""The persister: how a partition leader keeps its share-partitions' state (KIP-932).

A share-partition's in-flight state lives with the partition leader; what must survive the
leader is persisted through the share coordinator of the share-partition, the leader of its
``__share_group_state`` partition (Kafka's DefaultStatePersister and PersisterStateManager).
:class:`SharePersister` is that narrow port:

* ``read(group_id, topic_id, partition, leader_epoch=-1)`` -> :class:`PersistedState` or None
  (never initialized); a leader epoch (>= 0) is checked (FENCED_LEADER_EPOCH) and recorded;
* ``initialize(group_id, topic_id, partition, start_offset, state_epoch=0)``;
* ``write(group_id, topic_id, partition, *, leader_epoch, state_epoch, start_offset, batches)``;
* ``delete(group_id, topics)`` -> an error code per (topic id, partition);
* ``summary(group_id, topic_id, partition)`` -> :class:`StateSummary` or None.

Each call finds the coordinator: this broker itself when it leads the ``__share_group_state``
partition of ``group:topicId:partition`` (the call goes straight to the local coordinator), else
that partition's leader in the metadata image, reached with the RPC (83-87) over the
inter-broker listener.  NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE
and network errors are retried with a growing backoff until ``request.timeout.ms`` has passed;
any other error (fencing, INVALID_REQUEST...) is raised at once as a KafkaError.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from odradek.broker.channel import BrokerChannel
from odradek.broker.topics import SHARE_STATE_TOPIC
from odradek.cluster.share_state import ShareKey, ShareState, StateBatch
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol.messages.delete_share_group_state import DeleteShareGroupStateRequest
from odradek.protocol.messages.initialize_share_group_state import InitializeShareGroupStateRequest
from odradek.protocol.messages.read_share_group_state import ReadShareGroupStateRequest
from odradek.protocol.messages.read_share_group_state_summary import ReadShareGroupStateSummaryRequest
from odradek.protocol.messages.write_share_group_state import WriteShareGroupStateRequest

if TYPE_CHECKING:
    from odradek._scheduler import Scheduler
    from odradek.broker.coordinators.share_state import ShareCoordinator
    from odradek.cluster.metadata import MetadataImage

__all__ = ["PersistedState", "SharePersister", "StateBatch", "StateSummary"]

log = logging.getLogger(__name__)

T = TypeVar("T")

#: answers that mean "ask again, maybe elsewhere"
RETRIABLE = frozenset({
    ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS, ErrorCode.COORDINATOR_NOT_AVAILABLE,
    ErrorCode.NETWORK_EXCEPTION, ErrorCode.REQUEST_TIMED_OUT, ErrorCode.BROKER_NOT_AVAILABLE,
})
_BACKOFF_MS = 50
_MAX_BACKOFF_MS = 1000


@dataclass(frozen=True, slots=True)
class PersistedState:
    """A share-partition's persisted state, as a read answers it."""

    state_epoch: int
    start_offset: int
    batches: tuple[StateBatch, ...]


@dataclass(frozen=True, slots=True)
class StateSummary:
    """What a summary read answers (the start offset: the share group's committed offset)."""

    state_epoch: int
    leader_epoch: int
    start_offset: int


def _raise(code: int, message: str | None) -> None:
    if code != ErrorCode.NONE:
        raise KafkaError(ErrorCode(code), message or "")


def _only(results: Sequence[Any]) -> Any:
    """The one partition result of a one-partition request."""
    if len(results) != 1 or len(results[0].partitions) != 1:
        raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "the share coordinator answered another partition")
    return results[0].partitions[0]


class SharePersister:
    """Persists share-partition state through the share coordinator (see the module docstring)."""

    def __init__(
        self,
        broker_id: int,
        coordinator: ShareCoordinator,
        image: Callable[[], MetadataImage],
        timers: Scheduler,
        *,
        channel_factory: Callable[..., BrokerChannel] | None = None,
        inter_broker_listener: str | None = None,
        request_timeout_ms: int = 30000,
    ) -> None:
        self.broker_id = broker_id
        self.coordinator = coordinator
        self.image = image
        #: the broker's timers and clock: the backoff and the deadline of a call
        self.timers = timers
        self.channel_factory = channel_factory
        self.inter_broker_listener = inter_broker_listener
        self.request_timeout_ms = request_timeout_ms
        self._channels: dict[int, tuple[tuple[str, int], BrokerChannel]] = {}

    async def close(self) -> None:
        channels, self._channels = self._channels, {}
        for _addr, ch in channels.values():
            try:
                await ch.close()
            except Exception:  # closing: nothing left to tell
                log.debug("closing a share-state channel failed", exc_info=True)

    # ------------------------------------------------------------------------------------------
    # the port

    async def read(
        self, group_id: str, topic_id: uuid.UUID, partition: int, *, leader_epoch: int = -1
    ) -> PersistedState | None:
        key = ShareKey(group_id, topic_id, partition)

        async def local() -> PersistedState | None:
            return _persisted(await self.coordinator.read(key, leader_epoch=leader_epoch))

        async def remote(ch: BrokerChannel) -> PersistedState | None:
            R = ReadShareGroupStateRequest
            resp = await ch.request(R(group_id=group_id, topics=[R.ReadStateData(
                topic_id=topic_id, partitions=[R.PartitionData(partition=partition, leader_epoch=leader_epoch)]
            )]), 0)
            p = _only(resp.results)
            _raise(p.error_code, p.error_message)
            if p.start_offset == -1 and not p.state_batches:
                return None
            return PersistedState(p.state_epoch, p.start_offset, tuple(
                StateBatch(b.first_offset, b.last_offset, b.delivery_count, b.delivery_state) for b in p.state_batches
            ))

        return await self._call(key, local, remote)

    async def initialize(
        self, group_id: str, topic_id: uuid.UUID, partition: int, start_offset: int, state_epoch: int = 0
    ) -> None:
        key = ShareKey(group_id, topic_id, partition)

        async def local() -> None:
            await self.coordinator.initialize(key, state_epoch=state_epoch, start_offset=start_offset)

        async def remote(ch: BrokerChannel) -> None:
            R = InitializeShareGroupStateRequest
            resp = await ch.request(R(group_id=group_id, topics=[R.InitializeStateData(
                topic_id=topic_id,
                partitions=[R.PartitionData(partition=partition, state_epoch=state_epoch, start_offset=start_offset)],
            )]), 0)
            p = _only(resp.results)
            _raise(p.error_code, p.error_message)

        await self._call(key, local, remote)

    async def write(
        self, group_id: str, topic_id: uuid.UUID, partition: int, *, leader_epoch: int, state_epoch: int,
        start_offset: int, batches: Sequence[StateBatch],
    ) -> None:
        key = ShareKey(group_id, topic_id, partition)
        mine = [StateBatch(b.first_offset, b.last_offset, b.delivery_count, int(b.state)) for b in batches]

        async def local() -> None:
            await self.coordinator.write(
                key, leader_epoch=leader_epoch, state_epoch=state_epoch, start_offset=start_offset, batches=mine
            )

        async def remote(ch: BrokerChannel) -> None:
            R = WriteShareGroupStateRequest
            resp = await ch.request(R(group_id=group_id, topics=[R.WriteStateData(
                topic_id=topic_id, partitions=[R.PartitionData(
                    partition=partition, state_epoch=state_epoch, leader_epoch=leader_epoch,
                    start_offset=start_offset,
                    state_batches=[R.StateBatch(first_offset=b.first_offset, last_offset=b.last_offset,
                                                delivery_state=b.state, delivery_count=b.delivery_count) for b in mine],
                )],
            )]), 0)
            p = _only(resp.results)
            _raise(p.error_code, p.error_message)

        await self._call(key, local, remote)

    async def delete(
        self, group_id: str, topics: Mapping[uuid.UUID, Iterable[int]]
    ) -> dict[tuple[uuid.UUID, int], ErrorCode]:
        """Delete the state of the share-partitions ``topics`` (topic id -> partitions); the
        error of each (NONE when deleted, or when there was none)."""
        out: dict[tuple[uuid.UUID, int], ErrorCode] = {}
        for topic_id, partitions in topics.items():
            for partition in partitions:
                key = ShareKey(group_id, topic_id, partition)

                async def local(key: ShareKey = key) -> None:
                    await self.coordinator.delete(key)

                async def remote(ch: BrokerChannel, topic_id: uuid.UUID = topic_id, partition: int = partition) -> None:
                    R = DeleteShareGroupStateRequest
                    resp = await ch.request(R(group_id=group_id, topics=[R.DeleteStateData(
                        topic_id=topic_id, partitions=[R.PartitionData(partition=partition)]
                    )]), 0)
                    p = _only(resp.results)
                    _raise(p.error_code, p.error_message)

                try:
                    await self._call(key, local, remote)
                    out[(topic_id, partition)] = ErrorCode.NONE
                except KafkaError as exc:
                    out[(topic_id, partition)] = exc.code
        return out

    async def summary(self, group_id: str, topic_id: uuid.UUID, partition: int) -> StateSummary | None:
        key = ShareKey(group_id, topic_id, partition)

        async def local() -> StateSummary | None:
            s = await self.coordinator.summary(key)
            return None if s is None else StateSummary(s.state_epoch, s.leader_epoch, s.start_offset)

        async def remote(ch: BrokerChannel) -> StateSummary | None:
            R = ReadShareGroupStateSummaryRequest
            resp = await ch.request(R(group_id=group_id, topics=[R.ReadStateSummaryData(
                topic_id=topic_id, partitions=[R.PartitionData(partition=partition, leader_epoch=-1)]
            )]), 0)
            p = _only(resp.results)
            _raise(p.error_code, p.error_message)
            if p.start_offset == -1:
                return None
            return StateSummary(p.state_epoch, p.leader_epoch, p.start_offset)

        return await self._call(key, local, remote)

    # ------------------------------------------------------------------------------------------
    # finding the coordinator

    async def _call(
        self, key: ShareKey, local: Callable[[], Awaitable[T]], remote: Callable[[BrokerChannel], Awaitable[T]]
    ) -> T:
        clock = self.timers.clock
        deadline = clock.monotonic_ms() + self.request_timeout_ms
        backoff = _BACKOFF_MS
        while True:
            try:
                await self.coordinator.ensure_topic()
                partition = self.coordinator.partition_of(key)
                state = self.image().partition(SHARE_STATE_TOPIC, partition)
                leader = state.leader if state is not None else -1
                if leader == self.broker_id:
                    return await local()
                if leader < 0:
                    raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"{SHARE_STATE_TOPIC}-{partition} has no leader")
                channel = self._channel(leader)
                try:
                    return await remote(channel)
                except (ConnectionError, OSError, TimeoutError) as exc:
                    self._drop(leader)
                    raise KafkaError(ErrorCode.NETWORK_EXCEPTION, f"broker {leader}: {exc}") from exc
            except KafkaError as exc:
                if exc.code not in RETRIABLE or clock.monotonic_ms() >= deadline:
                    raise
                log.debug("share state of %s: %s, retrying", key, exc)
            await self.timers.sleep(min(backoff, max(0, deadline - clock.monotonic_ms())))
            backoff = min(backoff * 2, _MAX_BACKOFF_MS)

    def _channel(self, broker_id: int) -> BrokerChannel:
        info = self.image().brokers.get(broker_id)
        ep = None
        if info is not None:
            ep = (info.endpoint(self.inter_broker_listener) if self.inter_broker_listener else None) or info.endpoint()
        if ep is None or self.channel_factory is None:
            raise KafkaError(ErrorCode.COORDINATOR_NOT_AVAILABLE, f"broker {broker_id} cannot be reached")
        addr = (ep.host, ep.port)
        known = self._channels.get(broker_id)
        if known is not None and known[0] == addr:
            return known[1]
        if known is not None:
            self._drop(broker_id)
        ch = self.channel_factory(
            ep.host, ep.port, client_id=f"share-persister-{self.broker_id}", timeout=self.request_timeout_ms / 1000
        )
        self._channels[broker_id] = (addr, ch)
        return ch

    def _drop(self, broker_id: int) -> None:
        known = self._channels.pop(broker_id, None)
        if known is not None:
            task = asyncio.get_running_loop().create_task(known[1].close())
            task.add_done_callback(lambda t: t.cancelled() or t.exception())


def _persisted(state: ShareState | None) -> PersistedState | None:
    if state is None or (state.start_offset == -1 and not state.batches):  # as the RPC answers it
        return None
    return PersistedState(state.state_epoch, state.start_offset, state.batches)
