"""Fetch (1), v0-16.

Consumers (replica id -1) read up to the high watermark; followers (replica id >= 0) up to the
log end, and their fetch offset tells the leader their log end offset (ISR, high watermark).  ``max_wait_ms`` + ``min_bytes`` are served by waiting on the partitions' data futures
(the fetch purgatory) until enough bytes are visible or the wait ends.  From v3 the first
partition that has data returns its first batch whole even beyond the size limits (KIP-74);
v0-2 have hard limits and the client retries with a larger buffer.  v0-3 get down-converted
message sets (magic 0 for v0-1, magic 1 for v2-3).  v13+ address topics by id.  Fetch sessions
are not kept: every response has session id 0, so clients send full fetch requests.
"""

from __future__ import annotations

import asyncio
from typing import Any

from odradek.broker.compat import down_convert, magic_for_fetch_version
from odradek.broker.dispatch import RequestContext, handles
from odradek.broker.replica import Partition
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol import ApiKey
from odradek.protocol.messages.fetch import FetchRequest, FetchResponse
from odradek.storage import FileRegion, OffsetOutOfRangeError

R = FetchResponse
INT32_MAX = 2147483647


class _Slot:
    __slots__ = ("fetch_offset", "max_bytes", "name", "partition", "response")

    def __init__(self, name: str | None, partition: Any, response: R.PartitionData) -> None:
        self.name = name
        self.partition = partition
        self.fetch_offset = partition.fetch_offset
        self.max_bytes = partition.partition_max_bytes
        self.response = response


@handles(ApiKey.FETCH, versions=(0, 16))
async def fetch(ctx: RequestContext, request: FetchRequest) -> FetchResponse:
    broker = ctx.broker
    version = ctx.version
    replica_id = request.replica_state.replica_id if version >= 15 else request.replica_id
    max_bytes = request.max_bytes if version >= 3 else INT32_MAX
    magic = magic_for_fetch_version(version)
    image = broker.image
    topics: list[R.FetchableTopicResponse] = []
    slots: list[_Slot] = []
    for t in request.topics:
        if version >= 13:
            info = image.topic_by_id(t.topic_id)
            name = info.name if info is not None else None
            tr = R.FetchableTopicResponse(topic_id=t.topic_id)
        else:
            name = t.topic
            tr = R.FetchableTopicResponse(topic=t.topic)
        topics.append(tr)
        for fp in t.partitions:
            pr = R.PartitionData(
                partition_index=fp.partition,
                high_watermark=-1,
                last_stable_offset=-1,
                log_start_offset=-1,
                aborted_transactions=None,
                records=b"",
            )
            tr.partitions.append(pr)
            if name is None:
                pr.error_code = int(ErrorCode.UNKNOWN_TOPIC_ID)
                continue
            slots.append(_Slot(name, fp, pr))

    partitions: dict[int, Partition] = {}
    for i, slot in enumerate(slots):
        try:
            assert slot.name is not None
            p = broker.fetch_partition(slot.name, slot.partition.partition, slot.partition.current_leader_epoch, replica_id)
            if replica_id >= 0:
                broker.on_follower_fetch(p, replica_id, slot.fetch_offset)
            partitions[i] = p
        except KafkaError as exc:
            slot.response.error_code = int(exc.code)

    def read_all() -> int:
        total = 0
        for i, slot in enumerate(slots):
            p = partitions.get(i)
            if p is None:
                continue
            pr = slot.response
            budget = max_bytes - total
            limit = min(slot.max_bytes, budget)
            min_one = version >= 3 and total == 0
            data: bytes | FileRegion
            try:
                if limit <= 0 and not min_one:
                    data = b""
                else:
                    result = broker.replicas.read(
                        p,
                        slot.fetch_offset,
                        max(limit, 0),
                        isolation_committed=version >= 4 and request.isolation_level == 1,
                        replica_id=replica_id,
                        min_one=min_one,
                    )
                    data = result.region if result.region is not None else b""
                    if magic < 2 and result.region is not None:
                        data = down_convert(result.to_bytes(), magic)
                pr.error_code = 0
            except OffsetOutOfRangeError:
                pr.error_code = int(ErrorCode.OFFSET_OUT_OF_RANGE)
                data = b""
            except KafkaError as exc:
                pr.error_code = int(exc.code)
                data = b""
            pr.records = data
            pr.high_watermark = p.high_watermark
            pr.last_stable_offset = p.high_watermark
            pr.log_start_offset = p.log.log_start_offset
            total += len(data)
        return total

    total = read_all()
    wait_ms = request.max_wait_ms
    if wait_ms > 0 and total < request.min_bytes and partitions and not any(s.response.error_code for s in slots):
        loop = asyncio.get_running_loop()
        deadline = loop.time() + wait_ms / 1000
        while total < request.min_bytes:
            remaining = deadline - loop.time()
            if remaining <= 0 or broker.stopping:
                break
            if replica_id >= 0:
                waiters = [p.wait_for_append() for p in partitions.values()]
            else:
                waiters = [p.wait_for_data() for p in partitions.values()]
            await asyncio.wait(waiters, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
            for w in waiters:
                w.cancel()
            total = read_all()
    return R(throttle_time_ms=0, error_code=0, session_id=0, responses=topics)
