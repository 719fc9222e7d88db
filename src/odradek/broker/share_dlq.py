"""Dead letters for share groups (KIP-1191): a record a share group archives because a member
rejected it or it reached the delivery-count limit is written to the group's dead-letter topic.

The group names the topic (``errors.deadletterqueue.topic.name``); it must start with the broker's
``errors.deadletterqueue.topic.name.prefix`` (``dlq.``) and its owner must allow the use
(``errors.deadletterqueue.group.enable=true`` on the topic), so that no group can make the broker
write into a topic that did not ask for it.  A dead letter carries headers naming its origin —
``__dlq.errors.topic``, ``__dlq.errors.partition``, ``__dlq.errors.offset``,
``__dlq.errors.group.id``, ``__dlq.errors.delivery.count`` and ``__dlq.errors.reason``
(``rejected`` or ``delivery_limit``) — and, with ``errors.deadletterqueue.copy.record.enable``,
the original key, value and headers.  It goes to the dead-letter partition of the same index
modulo their count, appended here when this broker leads it, else produced to its leader
(acks=all) over the inter-broker listener.

Writing never holds up the share partition: the archived records are queued (at most
``MAX_PENDING``; beyond, the broker logs how many went without a dead letter) and written in order
by one task.  A write that fails is logged with the records it concerned; the records stay
archived (a dead letter is a copy, never the record itself).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from odradek.cluster.share_partition import Archived, ArchiveReason
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol.messages.produce import ProduceRequest
from odradek.records import BatchBuilder, Compression, read_batches

if TYPE_CHECKING:
    from odradek._clock import Clock
    from odradek.broker.channel import BrokerChannel
    from odradek.broker.ports import Partition
    from odradek.cluster.metadata import MetadataImage
    from odradek.storage import LogConfig

__all__ = ["HEADER_PREFIX", "DeadLetterWriter", "DeadLetters"]

log = logging.getLogger(__name__)

HEADER_PREFIX = "__dlq.errors."
#: archived records waiting for their dead letters at most
MAX_PENDING = 10_000
_READ_BYTES = 1 << 20
_REASONS = {ArchiveReason.REJECTED: "rejected", ArchiveReason.DELIVERY_LIMIT: "delivery_limit"}


@dataclass(frozen=True, slots=True)
class DeadLetters:
    """Records one share partition archived, for one dead-letter topic."""

    group_id: str
    topic: str
    topic_id: uuid.UUID
    source: Partition
    archived: tuple[Archived, ...]
    dlq_topic: str
    copy_record: bool


class DeadLetterWriter:
    """Writes :class:`DeadLetters` to their topics, in order, off the share partitions' path."""

    def __init__(
        self,
        broker_id: int,
        image: Callable[[], MetadataImage],
        led_partition: Callable[[str, int], Partition],
        read: Callable[[Partition, int], Any],
        append: Callable[[Partition, bytes], Any],
        topic_config: Callable[[str], LogConfig],
        prefix: Callable[[], str],
        clock: Clock,
        *,
        channel_factory: Callable[..., BrokerChannel] | None = None,
        inter_broker_listener: str | None = None,
        request_timeout_ms: int = 30_000,
    ) -> None:
        self.broker_id = broker_id
        self._image = image
        self._led = led_partition
        self._read = read
        self._append = append
        self._topic_config = topic_config
        self._prefix = prefix
        self._clock = clock
        self._channel_factory = channel_factory
        self._listener = inter_broker_listener
        self._timeout_ms = request_timeout_ms
        self._queue: deque[DeadLetters] = deque()
        self._pending = 0
        self._wake: asyncio.Event | None = None
        self._task: asyncio.Task[None] | None = None
        self._channels: dict[int, BrokerChannel] = {}
        #: dead letters written, and archived records that got none (refused topic, full queue, failure)
        self.written = 0
        self.dropped = 0

    # -- the queue -----------------------------------------------------------------------------
    def submit(self, letters: DeadLetters) -> None:
        """Queue ``letters`` (records whose reason calls for a dead letter); never waits."""
        wanted = tuple(a for a in letters.archived if a.reason in _REASONS)
        if not wanted:
            return
        why = self._refusal(letters.group_id, letters.dlq_topic)
        if why is not None:
            self.dropped += len(wanted)
            log.warning("share group %s: %d archived records of %s-%d get no dead letter: %s", letters.group_id,
                        len(wanted), letters.topic, letters.source.index, why)
            return
        if self._pending + len(wanted) > MAX_PENDING:
            self.dropped += len(wanted)
            log.warning("share group %s: dead-letter queue full (%d records waiting): %d archived records of %s-%d "
                        "get no dead letter", letters.group_id, self._pending, len(wanted), letters.topic,
                        letters.source.index)
            return
        self._pending += len(wanted)
        self._queue.append(DeadLetters(letters.group_id, letters.topic, letters.topic_id, letters.source, wanted,
                                       letters.dlq_topic, letters.copy_record))
        if self._task is None or self._task.done():
            self._wake = asyncio.Event()
            self._task = asyncio.get_running_loop().create_task(self._run(), name="share-dead-letters")
        assert self._wake is not None
        self._wake.set()

    def _refusal(self, group_id: str, dlq_topic: str) -> str | None:
        prefix = self._prefix()
        if prefix and not dlq_topic.startswith(prefix):
            return f"its dead-letter topic {dlq_topic!r} does not start with {prefix!r} " \
                   "(errors.deadletterqueue.topic.name.prefix)"
        if dlq_topic not in self._image().topics:
            return f"its dead-letter topic {dlq_topic!r} does not exist"
        if not self._topic_config(dlq_topic).errors_deadletterqueue_group_enable:
            return f"the topic {dlq_topic!r} does not allow dead letters (errors.deadletterqueue.group.enable=false)"
        return None

    async def _run(self) -> None:
        wake = self._wake
        assert wake is not None
        while True:
            if not self._queue:
                wake.clear()
                await wake.wait()
                continue
            letters = self._queue.popleft()
            try:
                await self._write(letters)
                self.written += len(letters.archived)
            except Exception as exc:  # logged with what it concerned; the records stay archived
                self.dropped += len(letters.archived)
                log.warning("share group %s: %d dead letters for %s-%d (offsets %s) not written to %s: %s",
                            letters.group_id, len(letters.archived), letters.topic, letters.source.index,
                            _ranges([a.offset for a in letters.archived]), letters.dlq_topic, exc)
            finally:
                self._pending -= len(letters.archived)

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        channels, self._channels = self._channels, {}
        for ch in channels.values():
            with contextlib.suppress(Exception):
                await ch.close()

    # -- one write -------------------------------------------------------------------------------
    async def _write(self, letters: DeadLetters) -> None:
        records = self._originals(letters)
        builder = BatchBuilder(compression=Compression.NONE)
        now = self._clock.now_ms()
        for a in letters.archived:
            original = records.get(a.offset)
            headers: list[tuple[str, bytes | None]] = []
            key = value = None
            if letters.copy_record and original is not None:
                key, value = original.key, original.value
                headers.extend(original.headers)
            headers += [
                (HEADER_PREFIX + "topic", letters.topic.encode()),
                (HEADER_PREFIX + "partition", str(letters.source.index).encode()),
                (HEADER_PREFIX + "offset", str(a.offset).encode()),
                (HEADER_PREFIX + "group.id", letters.group_id.encode()),
                (HEADER_PREFIX + "delivery.count", str(a.delivery_count).encode()),
                (HEADER_PREFIX + "reason", _REASONS[a.reason].encode()),
            ]
            builder.append(now, key, value, headers)
        batch = builder.build()
        info = self._image().topics[letters.dlq_topic]
        index = letters.source.index % max(len(info.partitions), 1)
        state = self._image().partition(letters.dlq_topic, index)
        if state is not None and state.leader == self.broker_id:
            p = self._led(letters.dlq_topic, index)
            await self._append(p, batch)
            return
        await self._produce_remote(letters.dlq_topic, index, batch, state.leader if state is not None else -1)

    def _originals(self, letters: DeadLetters) -> dict[int, Any]:
        """The archived records as the source log holds them (those still there)."""
        wanted = {a.offset for a in letters.archived}
        found: dict[int, Any] = {}
        offset, last = min(wanted), max(wanted)
        for _ in range(len(wanted) + 1):  # each read moves past at least one wanted offset
            if offset > last:
                break
            result = self._read(letters.source, offset)
            data = result.to_bytes() if result.region is not None else b""
            if not data:
                break
            end = offset
            for batch in read_batches(data):
                for r in batch.records:
                    if r.offset in wanted:
                        found[r.offset] = r
                end = max(end, batch.last_offset + 1)
            offset = max(end, offset + 1)
            nxt = [o for o in wanted if o >= offset]
            if not nxt:
                break
            offset = min(nxt)
        return found

    async def _produce_remote(self, topic: str, index: int, batch: bytes, leader: int) -> None:
        ch = self._channel(leader)
        if ch is None:
            raise KafkaError(ErrorCode.LEADER_NOT_AVAILABLE, f"{topic}-{index} has no reachable leader ({leader})")
        R = ProduceRequest
        req = R(acks=-1, timeout_ms=self._timeout_ms, topic_data=[R.TopicProduceData(
            name=topic, partition_data=[R.PartitionProduceData(index=index, records=batch)],
        )])
        resp = await ch.request(req, 9)
        code = resp.responses[0].partition_responses[0].error_code
        if code:
            raise KafkaError(ErrorCode.of(code), f"{topic}-{index} refused the dead letters")

    def _channel(self, broker_id: int) -> BrokerChannel | None:
        ch = self._channels.get(broker_id)
        if ch is not None or self._channel_factory is None:
            return ch
        b = self._image().brokers.get(broker_id)
        ep = None if b is None else ((b.endpoint(self._listener) if self._listener else None) or b.endpoint())
        if ep is None:
            return None
        ch = self._channels[broker_id] = self._channel_factory(
            ep.host, ep.port, client_id=f"share-dead-letters-{self.broker_id}", timeout=self._timeout_ms / 1000
        )
        return ch


def _ranges(offsets: list[int]) -> str:
    out: list[str] = []
    for o in sorted(offsets):
        if out and out[-1].split("-")[-1] == str(o - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{o}"
        else:
            out.append(str(o))
    return ",".join(out)
