"""The records of share groups (KIP-932) in ``__consumer_offsets``, in Kafka 4's formats.

A record's key is an int16 record type followed by the key struct (version 0); its value an int16
version (0) followed by the value struct; None is the tombstone.  The types (definitions in
``reference/kafka-protocol-4x/coordinator-records/group/``, codecs generated in
:mod:`odradek.protocol.messages.coordinator`):

====  ==========================================  ============================================
type  key                                         value
====  ==========================================  ============================================
10    ShareGroupMemberMetadataKey (group, member)  its rack, client id and host, subscription
11    ShareGroupMetadataKey (group)                the group epoch and the subscribed topics'
                                                   metadata hash
12    ShareGroupTargetAssignmentMetadataKey         the target assignment's epoch
13    ShareGroupTargetAssignmentMemberKey           a member's target partitions
14    ShareGroupCurrentMemberAssignmentKey          a member's epochs and partitions
====  ==========================================  ============================================

(Type 15, ShareGroupStatePartitionMetadata, is the share-state bookkeeping and not read here.)

The service writes the difference between a group's records before and after an operation
(:func:`group_records`, :func:`changes`); a partition's groups are rebuilt from the last record
of each key when it is loaded (:class:`ShareRecordLoader`).
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from odradek.cluster.share_group import ShareGroup, ShareMember
from odradek.protocol.messages.coordinator import (
    ShareGroupCurrentMemberAssignmentKey,
    ShareGroupCurrentMemberAssignmentValue,
    ShareGroupMemberMetadataKey,
    ShareGroupMemberMetadataValue,
    ShareGroupMetadataKey,
    ShareGroupMetadataValue,
    ShareGroupTargetAssignmentMemberKey,
    ShareGroupTargetAssignmentMemberValue,
    ShareGroupTargetAssignmentMetadataKey,
    ShareGroupTargetAssignmentMetadataValue,
)

__all__ = ["SHARE_GROUP_RECORD_TYPES", "ShareRecordLoader", "changes", "group_records"]

MEMBER_METADATA, GROUP_METADATA, TARGET_METADATA, TARGET_MEMBER, CURRENT_MEMBER = 10, 11, 12, 13, 14
SHARE_GROUP_RECORD_TYPES = frozenset({MEMBER_METADATA, GROUP_METADATA, TARGET_METADATA, TARGET_MEMBER, CURRENT_MEMBER})
#: the order records of one operation are written in: a group's metadata before its members';
#: tombstones the other way round
_WRITE_ORDER = (GROUP_METADATA, MEMBER_METADATA, TARGET_MEMBER, TARGET_METADATA, CURRENT_MEMBER)

_short = struct.Struct(">h")


def _versioned(version: int, body: bytes) -> bytes:
    return _short.pack(version) + body


def _group_key(record_type: int, gid: str) -> bytes:
    cls = ShareGroupMetadataKey if record_type == GROUP_METADATA else ShareGroupTargetAssignmentMetadataKey
    return _versioned(record_type, cls(group_id=gid).encode(record_type))


#: the key structs of a member's records (each: group id, member id)
_MEMBER_KEYS: dict[int, Any] = {
    MEMBER_METADATA: ShareGroupMemberMetadataKey, TARGET_MEMBER: ShareGroupTargetAssignmentMemberKey,
    CURRENT_MEMBER: ShareGroupCurrentMemberAssignmentKey,
}


def _member_key(record_type: int, gid: str, mid: str) -> bytes:
    return _versioned(record_type, _MEMBER_KEYS[record_type](group_id=gid, member_id=mid).encode(record_type))


def _sorted(parts: Mapping[uuid.UUID, frozenset[int]]) -> list[tuple[uuid.UUID, list[int]]]:
    return [(t, sorted(ps)) for t, ps in sorted(parts.items(), key=lambda kv: str(kv[0]))]


def group_records(group: ShareGroup | None) -> dict[bytes, bytes]:
    """Every record of the group's state: key -> value (none for no group)."""
    if group is None:
        return {}
    gid = group.group_id
    out = {
        _group_key(GROUP_METADATA, gid): _versioned(0, ShareGroupMetadataValue(
            epoch=group.group_epoch, metadata_hash=group.metadata_hash).encode(0)),
        _group_key(TARGET_METADATA, gid): _versioned(0, ShareGroupTargetAssignmentMetadataValue(
            assignment_epoch=group.assignment_epoch).encode(0)),
    }
    for mid, m in group.members.items():
        out[_member_key(MEMBER_METADATA, gid, mid)] = _versioned(0, ShareGroupMemberMetadataValue(
            rack_id=m.rack_id, client_id=m.client_id, client_host=m.client_host,
            subscribed_topic_names=list(m.subscribed_topic_names)).encode(0))
        TV = ShareGroupTargetAssignmentMemberValue
        out[_member_key(TARGET_MEMBER, gid, mid)] = _versioned(0, TV(topic_partitions=[
            TV.TopicPartition(topic_id=t, partitions=ps) for t, ps in _sorted(group.target.get(mid, {}))]).encode(0))
        CV = ShareGroupCurrentMemberAssignmentValue
        out[_member_key(CURRENT_MEMBER, gid, mid)] = _versioned(0, CV(
            member_epoch=m.member_epoch, previous_member_epoch=m.previous_epoch, state=0,
            assigned_partitions=[CV.TopicPartitions(topic_id=t, partitions=ps) for t, ps in _sorted(m.assigned)],
        ).encode(0))
    return out


def changes(before: Mapping[bytes, bytes], after: Mapping[bytes, bytes]) -> list[tuple[bytes, bytes | None]]:
    """The records that turn ``before`` into ``after``: new and changed values, then tombstones."""
    def kind(key: bytes) -> int:
        return _WRITE_ORDER.index(_short.unpack_from(key, 0)[0])

    written = sorted((k for k, v in after.items() if before.get(k) != v), key=kind)
    gone = sorted((k for k in before if k not in after), key=kind, reverse=True)
    return [(k, after[k]) for k in written] + [(k, None) for k in gone]


@dataclass(slots=True)
class _Partial:
    epoch: tuple[int, int] | None = None  # (group epoch, metadata hash)
    assignment_epoch: int | None = None
    members: dict[str, ShareGroupMemberMetadataValue] = field(default_factory=dict)
    targets: dict[str, dict[uuid.UUID, frozenset[int]]] = field(default_factory=dict)
    current: dict[str, ShareGroupCurrentMemberAssignmentValue] = field(default_factory=dict)


class ShareRecordLoader:
    """Collects a partition's share-group records while it loads; :meth:`groups` builds them."""

    def __init__(self) -> None:
        self._groups: dict[str, _Partial] = {}

    def replay(self, key: bytes, value: bytes | None) -> None:
        (record_type,) = _short.unpack_from(key, 0)
        tombstone = value is None
        if record_type in (GROUP_METADATA, TARGET_METADATA):
            kcls = ShareGroupMetadataKey if record_type == GROUP_METADATA else ShareGroupTargetAssignmentMetadataKey
            gid = kcls.decode_from(key, 2, record_type)[0].group_id
            g = self._groups.setdefault(gid, _Partial())
            if record_type == GROUP_METADATA:
                if tombstone:
                    del self._groups[gid]
                    return
                assert value is not None
                v = ShareGroupMetadataValue.decode_from(value, 2, 0)[0]
                g.epoch = (v.epoch, v.metadata_hash)
            elif tombstone:
                g.assignment_epoch = None
            else:
                assert value is not None
                g.assignment_epoch = ShareGroupTargetAssignmentMetadataValue.decode_from(value, 2, 0)[0].assignment_epoch
            return
        k = _MEMBER_KEYS[record_type].decode_from(key, 2, record_type)[0]
        g = self._groups.setdefault(k.group_id, _Partial())
        mid = k.member_id
        if record_type == MEMBER_METADATA:
            if tombstone:
                g.members.pop(mid, None)
            else:
                assert value is not None
                g.members[mid] = ShareGroupMemberMetadataValue.decode_from(value, 2, 0)[0]
        elif record_type == TARGET_MEMBER:
            if tombstone:
                g.targets.pop(mid, None)
            else:
                assert value is not None
                tv = ShareGroupTargetAssignmentMemberValue.decode_from(value, 2, 0)[0]
                g.targets[mid] = {tp.topic_id: frozenset(tp.partitions) for tp in tv.topic_partitions}
        elif tombstone:
            g.current.pop(mid, None)
        else:
            assert value is not None
            g.current[mid] = ShareGroupCurrentMemberAssignmentValue.decode_from(value, 2, 0)[0]

    def groups(self) -> dict[str, ShareGroup]:
        """The groups the records describe (a group without its metadata record is left out)."""
        out = {}
        for gid, p in self._groups.items():
            if p.epoch is None:
                continue
            group = ShareGroup(gid, group_epoch=p.epoch[0], metadata_hash=p.epoch[1],
                               assignment_epoch=p.assignment_epoch or 0)
            for mid, meta in p.members.items():
                cur = p.current.get(mid)
                group.members[mid] = ShareMember(
                    mid, member_epoch=cur.member_epoch if cur else 0, previous_epoch=cur.previous_member_epoch if cur else 0,
                    rack_id=meta.rack_id, client_id=meta.client_id, client_host=meta.client_host,
                    subscribed_topic_names=tuple(meta.subscribed_topic_names),
                    assigned={} if cur is None else {tp.topic_id: frozenset(tp.partitions)
                                                     for tp in cur.assigned_partitions},
                )
                group.target[mid] = dict(p.targets.get(mid, {}))
            out[gid] = group
        self._groups = {}
        return out
