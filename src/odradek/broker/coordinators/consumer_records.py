"""The records of KIP-848 consumer groups in ``__consumer_offsets``, in Kafka's formats.

Kafka 4's group coordinator writes, beside the classic groups' GroupMetadata and the offset
commits, one record type per part of a consumer group's state.  A record's key is an int16 record
type followed by the key struct (version 0, not flexible); its value an int16 version (0) followed
by the value struct (flexible: compact strings and arrays, tagged fields).  The types, from the
definitions in ``reference/kafka-protocol-4x/coordinator-records/group/``:

====  ==============================================  ==================================
type  key                                             value
====  ==============================================  ==================================
3     ConsumerGroupMetadataKey (group)                group epoch (tagged: metadata hash)
4     ConsumerGroupPartitionMetadataKey (group)       the subscribed topics' partitions and racks
5     ConsumerGroupMemberMetadataKey (group, member)  a member's subscription (tagged: its classic
                                                      protocols when it uses the classic protocol)
6     ConsumerGroupTargetAssignmentMetadataKey        the target assignment's epoch
7     ConsumerGroupTargetAssignmentMemberKey          a member's target partitions
8     ConsumerGroupCurrentMemberAssignmentKey         a member's epochs, state, partitions and
                                                      those it is revoking
16    ConsumerGroupRegularExpressionKey (group, re)   the topics a regular expression matched
====  ==============================================  ==================================

A value of None is the record's tombstone.  The code generator does not emit these yet (it reads
Kafka 3.x's definitions, which hold only the first), so they are written and read here, field by
field in the order of the definitions; unknown tagged fields are skipped on reading, as Kafka
does.  A value of a higher version than 0 (written by a newer version) is not read by the fields
this version knows: it fails the partition's load (:mod:`.record_versions`).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Callable, Mapping

from odradek._varint import decode_uvarint, write_uvarint
from odradek.broker.coordinators.record_versions import check_value_version
from odradek.cluster.consumer_group import (
    ClassicProtocols,
    ConsumerMember,
    CurrentAssignmentRecord,
    GroupEpochRecord,
    MemberState,
    MemberSubscriptionRecord,
    Record,
    RegexRecord,
    ResolvedRegex,
    SubscriptionMetadataRecord,
    TargetEpochRecord,
    TargetMemberRecord,
    TopicMetadata,
)
from odradek.protocol.errors import DecodeError

__all__ = [
    "CONSUMER_GROUP_RECORD_TYPES",
    "decode_record",
    "encode_record",
]

GROUP_METADATA, PARTITION_METADATA, MEMBER_METADATA = 3, 4, 5
TARGET_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT, REGULAR_EXPRESSION = 6, 7, 8, 16
#: the record types (the key's first int16) this module reads and writes
CONSUMER_GROUP_RECORD_TYPES = frozenset(
    {GROUP_METADATA, PARTITION_METADATA, MEMBER_METADATA, TARGET_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT,
     REGULAR_EXPRESSION}
)

_i8 = struct.Struct(">b")
_i16 = struct.Struct(">h")
_i32 = struct.Struct(">i")
_i64 = struct.Struct(">q")


# ------------------------------------------------------------------------------------------------
# writing


class _Out:
    __slots__ = ("buf",)

    def __init__(self) -> None:
        self.buf = bytearray()

    def i8(self, v: int) -> None:
        self.buf += _i8.pack(v)

    def i16(self, v: int) -> None:
        self.buf += _i16.pack(v)

    def i32(self, v: int) -> None:
        self.buf += _i32.pack(v)

    def i64(self, v: int) -> None:
        self.buf += _i64.pack(v)

    def uuid(self, v: uuid.UUID) -> None:
        self.buf += v.bytes

    def string(self, v: str) -> None:
        """A non-flexible string (keys): int16 length."""
        data = v.encode()
        self.i16(len(data))
        self.buf += data

    def cstring(self, v: str | None) -> None:
        if v is None:
            self.buf.append(0)
            return
        data = v.encode()
        write_uvarint(self.buf, len(data) + 1)
        self.buf += data

    def cbytes(self, v: bytes) -> None:
        write_uvarint(self.buf, len(v) + 1)
        self.buf += v

    def count(self, n: int) -> None:
        write_uvarint(self.buf, n + 1)

    def no_tags(self) -> None:
        self.buf.append(0)

    def tags(self, fields: list[tuple[int, bytes]]) -> None:
        write_uvarint(self.buf, len(fields))
        for tag, raw in fields:
            write_uvarint(self.buf, tag)
            write_uvarint(self.buf, len(raw))
            self.buf += raw


def _key(record_type: int, *parts: str) -> bytes:
    out = _Out()
    out.i16(record_type)
    for p in parts:
        out.string(p)
    return bytes(out.buf)


def _value(write: Callable[[_Out], None]) -> bytes:
    out = _Out()
    out.i16(0)
    write(out)
    return bytes(out.buf)


def _partitions(out: _Out, assignment: Mapping[uuid.UUID, frozenset[int]], *, with_tags: bool = True) -> None:
    items = sorted(assignment.items(), key=lambda kv: str(kv[0]))
    out.count(len(items))
    for tid, parts in items:
        out.uuid(tid)
        ps = sorted(parts)
        out.count(len(ps))
        for p in ps:
            out.i32(p)
        if with_tags:
            out.no_tags()


def _epoch_value(epoch: int) -> bytes:
    def write(o: _Out) -> None:
        o.i32(epoch)
        o.no_tags()

    return _value(write)


def _assignment_value(assignment: Mapping[uuid.UUID, frozenset[int]]) -> bytes:
    def write(o: _Out) -> None:
        _partitions(o, assignment)
        o.no_tags()

    return _value(write)


def encode_record(r: Record) -> tuple[bytes, bytes | None]:
    """The key and value (None: a tombstone) of a consumer-group record."""
    gid = r.group_id
    if isinstance(r, GroupEpochRecord):
        return _key(GROUP_METADATA, gid), None if r.epoch is None else _epoch_value(r.epoch)
    if isinstance(r, SubscriptionMetadataRecord):
        topics = r.topics
        if topics is None:
            return _key(PARTITION_METADATA, gid), None

        def write_topics(o: _Out) -> None:
            assert topics is not None
            o.count(len(topics))
            for t in topics:
                o.uuid(t.topic_id)
                o.cstring(t.name)
                o.i32(t.partitions)
                o.count(len(t.racks))
                for p, racks in t.racks:
                    o.i32(p)
                    o.count(len(racks))
                    for rack in racks:
                        o.cstring(rack)
                    o.no_tags()
                o.no_tags()
            o.no_tags()

        return _key(PARTITION_METADATA, gid), _value(write_topics)
    if isinstance(r, MemberSubscriptionRecord):
        key = _key(MEMBER_METADATA, gid, r.member_id)
        m = r.member
        if m is None:
            return key, None

        def write_member(o: _Out) -> None:
            assert m is not None
            o.cstring(m.instance_id)
            o.cstring(m.rack_id)
            o.cstring(m.client_id)
            o.cstring(m.client_host)
            o.count(len(m.subscribed_topic_names))
            for name in m.subscribed_topic_names:
                o.cstring(name)
            o.cstring(m.subscribed_topic_regex)
            o.i32(m.rebalance_timeout_ms)
            o.cstring(m.server_assignor)
            if m.classic is None:
                o.no_tags()
                return
            c = _Out()
            c.i8(1)  # a nullable struct: present
            c.i32(m.classic.session_timeout_ms)
            c.count(len(m.classic.protocols))
            for name, meta in m.classic.protocols:
                c.cstring(name)
                c.cbytes(meta)
                c.no_tags()
            c.no_tags()
            o.tags([(0, bytes(c.buf))])

        return key, _value(write_member)
    if isinstance(r, TargetEpochRecord):
        return _key(TARGET_METADATA, gid), None if r.epoch is None else _epoch_value(r.epoch)
    if isinstance(r, TargetMemberRecord):
        key = _key(TARGET_MEMBER, gid, r.member_id)
        return key, None if r.assignment is None else _assignment_value(r.assignment)
    if isinstance(r, CurrentAssignmentRecord):
        key = _key(CURRENT_ASSIGNMENT, gid, r.member_id)
        cm = r.member
        if cm is None:
            return key, None

        def write_current(o: _Out) -> None:
            assert cm is not None
            o.i32(cm.member_epoch)
            o.i32(cm.previous_member_epoch)
            o.i8(int(cm.state))
            _partitions(o, cm.assigned)
            _partitions(o, cm.pending_revocation)
            o.no_tags()

        return key, _value(write_current)
    if isinstance(r, RegexRecord):
        key = _key(REGULAR_EXPRESSION, gid, r.regex)
        resolved = r.resolved
        if resolved is None:
            return key, None

        def write_regex(o: _Out) -> None:
            assert resolved is not None
            topics = sorted(resolved.topics)
            o.count(len(topics))
            for t in topics:
                o.cstring(t)
            o.i64(resolved.version)
            o.i64(resolved.timestamp)
            o.no_tags()

        return key, _value(write_regex)
    raise TypeError(f"not a consumer group record: {r!r}")


# ------------------------------------------------------------------------------------------------
# reading


class _In:
    __slots__ = ("buf", "pos")

    def __init__(self, data: bytes, pos: int) -> None:
        self.buf = memoryview(data)
        self.pos = pos

    def _take(self, n: int) -> memoryview:
        end = self.pos + n
        if n < 0 or end > len(self.buf):
            raise DecodeError("truncated consumer group record")
        chunk = self.buf[self.pos:end]
        self.pos = end
        return chunk

    def i8(self) -> int:
        return int(_i8.unpack(self._take(1))[0])

    def i16(self) -> int:
        return int(_i16.unpack(self._take(2))[0])

    def i32(self) -> int:
        return int(_i32.unpack(self._take(4))[0])

    def i64(self) -> int:
        return int(_i64.unpack(self._take(8))[0])

    def uuid(self) -> uuid.UUID:
        return uuid.UUID(bytes=bytes(self._take(16)))

    def uvarint(self) -> int:
        if self.pos >= len(self.buf):
            raise DecodeError("truncated consumer group record")
        v, self.pos = decode_uvarint(self.buf, self.pos)
        return int(v)

    def string(self) -> str:
        n = self.i16()
        if n < 0:
            raise DecodeError("a null string in a consumer group record key")
        return bytes(self._take(n)).decode()

    def cstring(self) -> str | None:
        n = self.uvarint() - 1
        if n < 0:
            return None
        return bytes(self._take(n)).decode()

    def cstring_nn(self) -> str:
        v = self.cstring()
        if v is None:
            raise DecodeError("a null string where the record has none")
        return v

    def cbytes(self) -> bytes:
        n = self.uvarint() - 1
        if n < 0:
            raise DecodeError("null bytes where the record has none")
        return bytes(self._take(n))

    def count(self) -> int:
        n = self.uvarint() - 1
        if n < 0:
            raise DecodeError("a null array where the record has none")
        if n > len(self.buf) - self.pos:
            raise DecodeError(f"an array of {n} elements in {len(self.buf) - self.pos} bytes")
        return n

    def tags(self) -> dict[int, bytes]:
        found: dict[int, bytes] = {}
        for _ in range(self.uvarint()):
            tag = self.uvarint()
            size = self.uvarint()
            found[tag] = bytes(self._take(size))
        return found


def _read_partitions(i: _In, *, with_tags: bool = True) -> dict[uuid.UUID, frozenset[int]]:
    out: dict[uuid.UUID, frozenset[int]] = {}
    for _ in range(i.count()):
        tid = i.uuid()
        parts = frozenset(i.i32() for _ in range(i.count()))
        if with_tags:
            i.tags()  # AssignmentEpochs (tag 0, Kafka 4.3+): not kept
        if parts:
            out[tid] = out.get(tid, frozenset()) | parts
    return out


def decode_record(key: bytes, value: bytes | None) -> Record | None:
    """The consumer-group record of a ``__consumer_offsets`` record, or None when the key is of
    another type.  Raises DecodeError for one of these types that cannot be read."""
    if len(key) < 2:
        return None
    (record_type,) = _i16.unpack_from(key, 0)
    if record_type not in CONSUMER_GROUP_RECORD_TYPES:
        return None
    k = _In(key, 2)
    gid = k.string()
    second = k.string() if record_type in (MEMBER_METADATA, TARGET_MEMBER, CURRENT_ASSIGNMENT,
                                           REGULAR_EXPRESSION) else ""
    if value is None:
        return _tombstone(record_type, gid, second)
    v = _In(value, 0)
    check_value_version(f"consumer group record of type {record_type}", v.i16(), (0, 0))
    if record_type == GROUP_METADATA:
        return GroupEpochRecord(gid, v.i32())
    if record_type == PARTITION_METADATA:
        topics = []
        for _ in range(v.count()):
            tid = v.uuid()
            name = v.cstring_nn()
            partitions = v.i32()
            racks: list[tuple[int, tuple[str, ...]]] = []
            for _ in range(v.count()):
                p = v.i32()
                names = tuple(v.cstring_nn() for _ in range(v.count()))
                v.tags()
                if names:
                    racks.append((p, names))
            v.tags()
            topics.append(TopicMetadata(tid, name, partitions, tuple(racks)))
        return SubscriptionMetadataRecord(gid, tuple(topics))
    if record_type == MEMBER_METADATA:
        instance_id = v.cstring()
        rack_id = v.cstring()
        client_id = v.cstring_nn()
        client_host = v.cstring_nn()
        names = tuple(v.cstring_nn() for _ in range(v.count()))
        regex = v.cstring()
        rebalance_timeout = v.i32()
        assignor = v.cstring()
        classic = None
        raw = v.tags().get(0)
        if raw is not None:
            c = _In(raw, 0)
            if c.i8() >= 0:
                session_timeout = c.i32()
                protocols = []
                for _ in range(c.count()):
                    name = c.cstring_nn()
                    meta = c.cbytes()
                    c.tags()
                    protocols.append((name, meta))
                c.tags()
                classic = ClassicProtocols(session_timeout, tuple(protocols))
        return MemberSubscriptionRecord(gid, second, ConsumerMember(
            second, instance_id=instance_id, rack_id=rack_id, client_id=client_id, client_host=client_host,
            subscribed_topic_names=tuple(sorted(set(names))), subscribed_topic_regex=regex or None,
            rebalance_timeout_ms=rebalance_timeout, server_assignor=assignor, classic=classic,
        ))
    if record_type == TARGET_METADATA:
        return TargetEpochRecord(gid, v.i32())
    if record_type == TARGET_MEMBER:
        return TargetMemberRecord(gid, second, _read_partitions(v, with_tags=True))
    if record_type == CURRENT_ASSIGNMENT:
        epoch = v.i32()
        previous = v.i32()
        raw_state = v.i8()
        try:
            state = MemberState(raw_state)
        except ValueError:
            state = MemberState.UNKNOWN
        assigned = _read_partitions(v)
        pending = _read_partitions(v)
        return CurrentAssignmentRecord(gid, second, ConsumerMember(
            second, member_epoch=epoch, previous_member_epoch=previous, state=state, assigned=assigned,
            pending_revocation=pending,
        ))
    # REGULAR_EXPRESSION
    topics_matched = frozenset(v.cstring_nn() for _ in range(v.count()))
    version = v.i64()
    timestamp = v.i64()
    return RegexRecord(gid, second, ResolvedRegex(topics_matched, version, timestamp))


def _tombstone(record_type: int, gid: str, second: str) -> Record:
    if record_type == GROUP_METADATA:
        return GroupEpochRecord(gid, None)
    if record_type == PARTITION_METADATA:
        return SubscriptionMetadataRecord(gid, None)
    if record_type == MEMBER_METADATA:
        return MemberSubscriptionRecord(gid, second, None)
    if record_type == TARGET_METADATA:
        return TargetEpochRecord(gid, None)
    if record_type == TARGET_MEMBER:
        return TargetMemberRecord(gid, second, None)
    if record_type == CURRENT_ASSIGNMENT:
        return CurrentAssignmentRecord(gid, second, None)
    return RegexRecord(gid, second, None)
