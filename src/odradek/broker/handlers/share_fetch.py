"""Share groups at the partition leaders (KIP-932): ShareFetch (78) and ShareAcknowledge (79), v1-2
(v2, KIP-1222: the record-limit acquire mode — never more than MaxRecords — and RENEW
acknowledgements, which extend the lock of records a member holds, where the group's
``share.renew.acknowledge.enable`` allows; a ShareFetch carrying renewals fetches nothing).

A member fetches through a share session (:mod:`odradek.broker.share_partitions`): epoch 0 opens
it with the partitions of the request, each later request carries the next epoch and may add
partitions or forget some, -1 closes it (no fetch then: only the acknowledgements it carries).
Acknowledgements are applied first, each partition's answered in ``AcknowledgeErrorCode``; then
every partition of the session this broker leads is read from its share partition's next
available offset and what the read holds is acquired for the member (its batch headers are read,
not its records): the response carries the record batches holding the acquired offsets, as
stored and sent from the log file, and the acquired offset ranges with their delivery counts (a
client delivers only acquired offsets).  When nothing was acquired the request waits up to
``MaxWaitMs`` for records to arrive or be released.

ACLs as Kafka: READ on the group (else the whole answer is GROUP_AUTHORIZATION_FAILED) and READ on
each topic (TOPIC_AUTHORIZATION_FAILED for its partitions).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from odradek.broker.dispatch import RequestContext, handles
from odradek.broker.handlers.fetch import _topic_by_id
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol import ApiKey
from odradek.protocol.messages.share_acknowledge import ShareAcknowledgeRequest, ShareAcknowledgeResponse
from odradek.protocol.messages.share_fetch import ShareFetchRequest, ShareFetchResponse
from odradek.security.acl import Operation, ResourceType

if TYPE_CHECKING:
    from odradek.broker.ports import FileRegion, Partition, SharePort
    from odradek.broker.share_partitions import ShareKey, ShareSession
    from odradek.records import BatchHeader

log = logging.getLogger(__name__)

R = ShareFetchResponse
A = ShareAcknowledgeResponse
_INITIAL, _FINAL = 0, -1
#: one answer's records per partition at most, when the request allows more (as fetch.max.bytes)
_PARTITION_MAX_BYTES = 1024 * 1024
_VALID_TYPES = frozenset({0, 1, 2, 3})
#: v2 (KIP-1222): RENEW (4) extends the lock of records the member holds
_VALID_TYPES_V2 = frozenset({0, 1, 2, 3, 4})
_RENEW = 4


@dataclass(slots=True)
class _Part:
    topic_id: uuid.UUID
    index: int
    name: str | None
    error: ErrorCode = ErrorCode.NONE
    message: str | None = None
    ack_error: ErrorCode = ErrorCode.NONE
    acked: bool = False
    records: bytes | FileRegion = b""
    acquired: list[Any] | None = None
    leader: tuple[int, int] = (-1, -1)


def _refuse(R_: type, code: ErrorCode, message: str | None = None, **extra: Any) -> Any:
    return R_(throttle_time_ms=0, error_code=int(code), error_message=message, **extra)


def _check_ids(group_id: str | None, member_id: str | None) -> str | None:
    if not group_id:
        return "the group id is empty"
    if not member_id:
        return "the member id is empty"
    return None


def _ack_batches(batches: list[Any], valid: frozenset[int] = _VALID_TYPES
                 ) -> tuple[list[tuple[int, int, list[int]]] | None, str | None]:
    """The acknowledgement batches of one partition, checked as Kafka's request validation does:
    ranges ascending and not overlapping, types in range, one type or one per offset."""
    out: list[tuple[int, int, list[int]]] = []
    last_end = -1
    for b in batches:
        first, last, types = b.first_offset, b.last_offset, list(b.acknowledge_types)
        if first < 0 or last < first:
            return None, f"acknowledgement batch {first}-{last} is not a range"
        if first <= last_end:
            return None, f"acknowledgement batch {first}-{last} overlaps the one before it"
        if not types or (len(types) != 1 and len(types) != last - first + 1):
            return None, f"acknowledgement batch {first}-{last} has {len(types)} types"
        kinds = set(types)
        if not kinds <= valid:
            return None, f"acknowledgement batch {first}-{last} has an unknown acknowledge type"
        # a type per offset, all the same (what clients send for a batch they accepted): one type,
        # so that the range is applied at once rather than offset by offset
        out.append((first, last, [types[0]] if len(kinds) == 1 else types))
        last_end = last
    return out, None


class _Request:
    """What ShareFetch and ShareAcknowledge share: the group, the member, their partitions."""

    def __init__(self, ctx: RequestContext, group_id: str, member_id: str) -> None:
        self.ctx = ctx
        self.port: SharePort = ctx.ports.share
        self.group_id = group_id
        self.member_id = member_id
        self.parts: dict[tuple[uuid.UUID, int], _Part] = {}
        self._allowed: dict[str, bool] = {}
        #: the acknowledge types this request may carry (RENEW from v2, where the group allows it)
        self.valid_types = _VALID_TYPES
        if ctx.version >= 2 and self.port.settings_for(group_id).renew_enabled:
            self.valid_types = _VALID_TYPES_V2

    def part(self, topic_id: uuid.UUID, index: int) -> _Part:
        key = (topic_id, index)
        part = self.parts.get(key)
        if part is None:
            info = _topic_by_id(self.port.metadata.image, topic_id)
            part = _Part(topic_id, index, info.name if info is not None else None)
            if part.name is None:
                part.error, part.message = ErrorCode.UNKNOWN_TOPIC_ID, f"no topic has id {topic_id}"
            elif not self._may_read(part.name):
                part.error = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            self.parts[key] = part
        return part

    def _may_read(self, topic: str) -> bool:
        allowed = self._allowed.get(topic)
        if allowed is None:
            allowed = self._allowed[topic] = self.ctx.authorize(Operation.READ, ResourceType.TOPIC, topic)
        return allowed

    def led(self, part: _Part) -> Partition | None:
        """The partition when this broker leads it (else the part's error says why not)."""
        if part.error or part.name is None:
            return None
        try:
            p = self.port.partitions.for_fetch(part.name, part.index, -1, -1)
        except KafkaError as exc:
            part.error, part.message = exc.code, exc.message
            state = self.port.metadata.image.partition(part.name, part.index)
            if state is not None:
                part.leader = (state.leader, state.leader_epoch)
            return None
        part.leader = (self.port.broker_id, p.leader_epoch)
        return p

    def key(self, part: _Part) -> ShareKey:
        return (self.group_id, part.topic_id, part.index)

    async def acknowledge(self, topic_id: uuid.UUID, index: int, batches: list[Any]) -> None:
        part = self.part(topic_id, index)
        part.acked = True
        if part.error:
            part.ack_error = part.error
            return
        checked, why = _ack_batches(batches, self.valid_types)
        if checked is None:
            part.ack_error, part.message = ErrorCode.INVALID_REQUEST, why
            return
        p = self.led(part)
        if p is None:
            part.ack_error = part.error
            return
        shares = self.port.shares
        sp = shares.partitions.get(self.key(part))
        if sp is None:  # nothing was acquired here (a new leader: the state was re-read, locks gone)
            part.ack_error = ErrorCode.INVALID_RECORD_STATE
            part.message = "the records are not acquired by this member"
            return
        try:
            part.ack_error = await shares.acknowledge(self.key(part), sp, p.leader_epoch, self.member_id, checked)
        except KafkaError as exc:
            part.ack_error, part.message = exc.code, exc.message

    def leaders(self) -> list[Any]:
        """NodeEndpoints: the brokers named as leaders of partitions answered NOT_LEADER_OR_FOLLOWER."""
        ids = {p.leader[0] for p in self.parts.values() if p.error == ErrorCode.NOT_LEADER_OR_FOLLOWER and p.leader[0] >= 0}
        brokers = self.port.metadata.image.brokers
        out = []
        for node in sorted(ids):
            b = brokers.get(node)
            e = None if b is None else (b.endpoint(self.ctx.listener) or b.endpoint())
            if b is not None and e is not None:
                out.append((node, e.host, e.port, b.rack))
        return out


def _admit(ctx: RequestContext, response: type, group_id: str | None, member_id: str | None) -> _Request | Any:
    """The request's group and member, checked (INVALID_REQUEST) and authorized (READ on the
    group, else GROUP_AUTHORIZATION_FAILED): its :class:`_Request`, or the whole answer."""
    why = _check_ids(group_id, member_id)
    if why is not None:
        return _refuse(response, ErrorCode.INVALID_REQUEST, why)
    assert group_id is not None and member_id is not None
    if not ctx.authorize(Operation.READ, ResourceType.GROUP, group_id):
        return _refuse(response, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    return _Request(ctx, group_id, member_id)


def _topic_of(topics: dict[uuid.UUID, Any], cls: type, part: _Part) -> Any:
    """The answer's entry of the part's topic (made on first use)."""
    found = topics.get(part.topic_id)
    if found is None:
        found = topics[part.topic_id] = cls(topic_id=part.topic_id)
    return found


@handles(ApiKey.SHARE_FETCH, versions=(1, 2))
async def share_fetch(ctx: RequestContext, request: ShareFetchRequest) -> ShareFetchResponse:
    req = _admit(ctx, R, request.group_id, request.member_id)
    if not isinstance(req, _Request):
        return req
    assert request.group_id is not None and request.member_id is not None
    port = req.port
    shares = port.shares
    skey = (request.group_id, request.member_id)
    epoch = request.share_session_epoch
    settings = port.settings_for(request.group_id)
    try:
        if epoch == _INITIAL:
            if any(fp.acknowledgement_batches for t in request.topics for fp in t.partitions):
                return _refuse(R, ErrorCode.INVALID_REQUEST, "a share session's first request acknowledges nothing")
            session: ShareSession | None = shares.open_session(skey, ctx.session)
        elif epoch == _FINAL:
            session = None
        else:
            session = shares.session(skey, epoch)
    except KafkaError as exc:
        return _refuse(R, exc.code, exc.message, acquisition_lock_timeout_ms=settings.lock_ms)

    for t in request.topics:
        for fp in t.partitions:
            req.part(t.topic_id, fp.partition_index)
            if session is not None:
                session.partitions.add((t.topic_id, fp.partition_index))
            if fp.acknowledgement_batches:
                await req.acknowledge(t.topic_id, fp.partition_index, list(fp.acknowledgement_batches))
    if session is not None:
        for forgotten in request.forgotten_topics_data:
            for index in forgotten.partitions:
                session.partitions.discard((forgotten.topic_id, index))
                shares.release(request.member_id, request.group_id, [(forgotten.topic_id, index)])
    if epoch == _FINAL:
        if shares.close_session(skey) is None and not req.parts:
            return _refuse(R, ErrorCode.SHARE_SESSION_NOT_FOUND, f"no share session for member {request.member_id}")
        return _response(req, settings.lock_ms)
    assert session is not None
    for topic_id, index in sorted(session.partitions, key=lambda k: (str(k[0]), k[1])):
        req.part(topic_id, index)
    if ctx.version >= 2 and request.is_renew_ack:  # KIP-1222: a renewal fetches nothing
        return _response(req, settings.lock_ms)
    strict = ctx.version >= 2 and request.share_acquire_mode == 1
    await _fetch(req, request, session, settings.read_committed, strict)
    return _response(req, settings.lock_ms)


async def _fetch(req: _Request, request: ShareFetchRequest, session: ShareSession, read_committed: bool,
                 strict: bool) -> None:
    """Acquire records for the member from every partition of its session led here; when none
    were, wait up to MaxWaitMs for records to arrive or come back, and try again."""
    port = req.port
    clock = port.timers.clock
    deadline = clock.monotonic_ms() + max(request.max_wait_ms, 0)
    max_bytes = request.max_bytes if request.max_bytes > 0 else 2**31 - 1
    max_records = request.max_records if request.max_records > 0 else 500
    led: list[tuple[_Part, Partition]] = []
    for key in session.partitions:
        part = req.parts[key]
        p = req.led(part)
        if p is not None:
            led.append((part, p))
    while True:
        got = 0
        budget, records_left = max_bytes, max_records
        for part, p in led:
            if budget <= 0 or records_left <= 0:
                break
            try:
                n = await _acquire(req, part, p, min(budget, _PARTITION_MAX_BYTES), records_left, read_committed,
                                   strict)
            except KafkaError as exc:
                part.error, part.message = exc.code, exc.message
                continue
            got += n
            records_left -= n
            budget -= len(part.records)
        remaining = deadline - clock.monotonic_ms()
        if got or remaining <= 0 or not led or port.run.stopping:
            return
        fut = port.shares.waiter([req.key(part) for part, _p in led])
        for _part, p in led:
            p.watch(fut, False)
        try:
            with contextlib.suppress(TimeoutError):
                await port.timers.wait_for(asyncio.shield(fut), remaining)
        finally:
            for _part, p in led:
                p.unwatch(fut, False)
            if not fut.done():
                fut.cancel()


async def _acquire(req: _Request, part: _Part, p: Partition, max_bytes: int, max_records: int,
                   read_committed: bool, strict: bool) -> int:
    """Read and acquire one partition's next records; how many offsets were acquired."""
    port = req.port
    key = req.key(part)
    sp = await port.shares.partition(key, p)
    if p.log.log_start_offset > sp.start_offset:
        sp.advance_start(p.log.log_start_offset)
    offset = sp.next_fetch_offset()
    result = port.replicas.read(p, offset, max_bytes, isolation_committed=read_committed, replica_id=-1,
                                min_one=True)
    region = result.region
    if region is None:
        return 0
    # the batch headers only (a small read each): the records go from the file as they are
    headers = region.headers()
    aborted: list[tuple[int, int]] = []
    if read_committed:
        aborted = [(t.producer_id, t.first_offset) for t in p.log.aborted_transactions(offset, p.log.last_stable_offset)]
    acquired = port.shares.acquire(key, sp, p, req.member_id, headers, aborted, fetch_offset=offset,
                                   max_records=max_records, read_committed=read_committed, strict=strict)
    if not acquired:
        return 0
    part.records = _covering(region, headers, acquired[0].first_offset, acquired[-1].last_offset)
    part.acquired = acquired
    return sum(a.last_offset - a.first_offset + 1 for a in acquired)


def _covering(region: FileRegion, headers: list[BatchHeader], first: int, last: int) -> FileRegion:
    """The part of ``region`` whose batches hold offsets ``first``..``last`` (what was acquired):
    the batches read past them are not sent (as Kafka slices a share fetch's records)."""
    lo = hi = None
    for h in headers:
        if h.last_offset < first:
            continue
        if h.base_offset > last:
            break
        if lo is None:
            lo = h.position
        hi = h.end
    if lo is None or hi is None:
        return region
    return region.slice(lo, hi)


def _response(req: _Request, lock_ms: int) -> ShareFetchResponse:
    topics: dict[uuid.UUID, Any] = {}
    for part in req.parts.values():
        _topic_of(topics, R.ShareFetchableTopicResponse, part).partitions.append(R.PartitionData(
            partition_index=part.index,
            error_code=int(part.error),
            error_message=part.message if part.error else None,
            acknowledge_error_code=int(part.ack_error),
            acknowledge_error_message=part.message if part.ack_error else None,
            current_leader=R.LeaderIdAndEpoch(leader_id=part.leader[0], leader_epoch=part.leader[1]),
            records=part.records,
            acquired_records=[
                R.AcquiredRecords(first_offset=a.first_offset, last_offset=a.last_offset, delivery_count=a.delivery_count)
                for a in part.acquired or ()
            ],
        ))
    endpoints = [R.NodeEndpoint(node_id=n, host=h, port=pt, rack=r) for n, h, pt, r in req.leaders()]
    return R(throttle_time_ms=0, error_code=0, acquisition_lock_timeout_ms=lock_ms,
             responses=list(topics.values()), node_endpoints=endpoints)


@handles(ApiKey.SHARE_ACKNOWLEDGE, versions=(1, 2))
async def share_acknowledge(ctx: RequestContext, request: ShareAcknowledgeRequest) -> ShareAcknowledgeResponse:
    req = _admit(ctx, A, request.group_id, request.member_id)
    if not isinstance(req, _Request):
        return req
    assert request.group_id is not None and request.member_id is not None
    shares = req.port.shares
    skey = (request.group_id, request.member_id)
    epoch = request.share_session_epoch
    if epoch == _INITIAL:
        return _refuse(A, ErrorCode.INVALID_SHARE_SESSION_EPOCH, "ShareAcknowledge cannot open a share session")
    if epoch != _FINAL:
        try:
            shares.session(skey, epoch)
        except KafkaError as exc:
            return _refuse(A, exc.code, exc.message)
    for t in request.topics:
        for ap in t.partitions:
            await req.acknowledge(t.topic_id, ap.partition_index, list(ap.acknowledgement_batches))
    if epoch == _FINAL:
        shares.close_session(skey)
    topics: dict[uuid.UUID, Any] = {}
    for part in req.parts.values():
        _topic_of(topics, A.ShareAcknowledgeTopicResponse, part).partitions.append(A.PartitionData(
            partition_index=part.index,
            error_code=int(part.ack_error),
            error_message=part.message if part.ack_error else None,
            current_leader=A.LeaderIdAndEpoch(leader_id=part.leader[0], leader_epoch=part.leader[1]),
        ))
    endpoints = [A.NodeEndpoint(node_id=n, host=h, port=pt, rack=r) for n, h, pt, r in req.leaders()]
    return A(throttle_time_ms=0, error_code=0, responses=list(topics.values()), node_endpoints=endpoints,
             acquisition_lock_timeout_ms=req.port.settings_for(request.group_id).lock_ms)
