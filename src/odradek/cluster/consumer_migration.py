"""The online migration of a live group between the classic and the consumer protocol (KIP-848,
``group.consumer.migration.policy``): a classic group whose members use the consumer embedded
protocol becomes a consumer group when a member joins it with a ConsumerGroupHeartbeat (upgrade),
and a consumer group whose last member using the consumer protocol leaves goes back to being a
classic group (downgrade).  :class:`ProtocolMigration` owns the hand-over between the two state
machines: it reads and hands over the classic state's groups, writes the records converting a
group, and replays the classic group records those write."""

from __future__ import annotations

import logging
import uuid
from typing import TYPE_CHECKING

from odradek.cluster.assignment import decode_assignment, decode_subscription, encode_assignment
from odradek.cluster.consumer_group_model import (
    CONSUMER_PROTOCOL,
    EMPTY,
    Assignment,
    ClassicGroupRecord,
    ClassicProtocols,
    ConsumerGroup,
    ConsumerGroupConfig,
    ConsumerMember,
    CurrentAssignmentRecord,
    GroupEpochRecord,
    MemberState,
    MemberSubscriptionRecord,
    Outcome,
    Record,
    TargetEpochRecord,
    TargetMemberRecord,
    TopicsView,
    freeze,
)
from odradek.cluster.consumer_members import group_tombstones
from odradek.cluster.group import Group, JoinResult, Member, SyncResult
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol.messages.data import ConsumerProtocolAssignment

if TYPE_CHECKING:
    from odradek.cluster.group import GroupCoordinatorState

__all__ = ["ProtocolMigration", "classic_assignment"]

#: the consumer groups' logger: what happens to a group is told under one name
log = logging.getLogger("odradek.cluster.consumer_group")


def _consumer_protocol_version(metadata: bytes) -> int:
    """The version a classic member's subscription is in: its assignment is answered in it."""
    if len(metadata) < 2:
        return 0
    version = int.from_bytes(metadata[:2], "big", signed=True)
    return min(max(version, 0), 3)


def classic_assignment(view: TopicsView, assignment: Assignment, subscription: bytes) -> bytes:
    """A member's assignment as a classic member gets it (ConsumerProtocolAssignment, in the
    version of the subscription it joined with)."""
    parts = view.by_name(assignment)
    return encode_assignment(ConsumerProtocolAssignment(assigned_partitions=[
        ConsumerProtocolAssignment.TopicPartition(topic=t, partitions=ps) for t, ps in sorted(parts.items())
    ]), _consumer_protocol_version(subscription))


class ProtocolMigration:
    """Converts live groups between the protocols as the migration policy allows, over the
    classic groups of the shard (``classic``, the classic state machine)."""

    def __init__(self, classic: GroupCoordinatorState, config: ConsumerGroupConfig) -> None:
        self.classic = classic
        self.config = config

    # -- upgrade ---------------------------------------------------------------------------------
    def new_group(self, now: int, group_id: str, create: bool, records: list[Record], outcome: Outcome,
                  view: TopicsView) -> ConsumerGroup:
        """The consumer group a first heartbeat makes where none is: a new one (taking the place
        of an empty classic group), or a live classic group converted; else GROUP_ID_NOT_FOUND."""
        classic = self.classic.describe(group_id)
        if classic is None and not create:
            raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"Consumer group {group_id} not found.")
        if classic is None or (create and not classic.members):
            if classic is not None:
                records.append(ClassicGroupRecord(group_id, None))  # an empty classic group goes
            return ConsumerGroup(group_id, state_timestamp=now)
        if create and self._upgradable(classic):
            return self._from_classic(now, classic, records, outcome, view)
        raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} is not a consumer group.")

    def _upgradable(self, classic: Group) -> bool:
        if not self.config.upgrade:
            log.info("Cannot upgrade classic group %s to consumer group because the online upgrade is disabled.",
                     classic.group_id)
            return False
        if classic.protocol_type != CONSUMER_PROTOCOL:
            log.info("Cannot upgrade classic group %s to consumer group because the group does not use the "
                     "consumer embedded protocol.", classic.group_id)
            return False
        if len(classic.members) > self.config.max_size:
            log.info("Cannot upgrade classic group %s to consumer group because the group size exceeds the "
                     "consumer group maximum size.", classic.group_id)
            return False
        return True

    def _from_classic(self, now: int, classic: Group, records: list[Record], outcome: Outcome,
                      view: TopicsView) -> ConsumerGroup:
        """Kafka's ConsumerGroup.fromClassicGroup: every classic member becomes a member at the
        group's generation, keeping its last assignment as its current and target assignment."""
        gid = classic.group_id
        g = ConsumerGroup(gid, group_epoch=classic.generation_id, assignment_epoch=classic.generation_id,
                          state_timestamp=now)
        protocol = classic.protocol_name
        for m in classic.members.values():
            sub = decode_subscription(m.metadata(protocol) if protocol else b"")
            if sub is None:
                raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"Cannot upgrade classic group {gid} to consumer group "
                                 "because the embedded consumer protocol is malformed.")
            assignment = decode_assignment(m.assignment) if m.assignment else None
            assigned: dict[uuid.UUID, set[int]] = {}
            if assignment is not None:
                for tp in assignment.assigned_partitions:
                    tid = view.id_of(tp.topic)
                    if tid is not None:
                        assigned.setdefault(tid, set()).update(tp.partitions)
            frozen = freeze(assigned)
            cm = ConsumerMember(
                m.member_id, instance_id=m.group_instance_id, rack_id=getattr(sub, "rack_id", None) or None,
                client_id=m.client_id, client_host=m.client_host,
                subscribed_topic_names=tuple(sorted(set(sub.topics))),
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                classic=ClassicProtocols(m.session_timeout_ms, tuple(m.protocols)),
                member_epoch=classic.generation_id, previous_member_epoch=classic.generation_id,
                state=MemberState.STABLE, assigned=frozen,
            )
            g.target[cm.member_id] = frozen
            g._set_member(cm)
        records.append(ClassicGroupRecord(gid, None))
        records.extend(MemberSubscriptionRecord(gid, mid, m) for mid, m in g.members.items())
        records.append(GroupEpochRecord(gid, g.group_epoch))
        records.extend(TargetMemberRecord(gid, mid, g.target[mid]) for mid in g.members)
        records.append(TargetEpochRecord(gid, g.assignment_epoch))
        records.extend(CurrentAssignmentRecord(gid, mid, m) for mid, m in g.members.items())
        # classic members waiting on the classic rebalance start again with the consumer group
        for m in classic.members.values():
            if m.awaiting_join:
                outcome.classic_effects.append(JoinResult(m.member_id, ErrorCode.REBALANCE_IN_PROGRESS))
            if m.awaiting_sync:
                outcome.classic_effects.append(SyncResult(m.member_id, ErrorCode.REBALANCE_IN_PROGRESS))
        log.info("[GroupId %s] Converted the classic group to a consumer group.", gid)
        return g

    # -- downgrade -------------------------------------------------------------------------------
    def downgradable(self, group: ConsumerGroup, leaving: str) -> bool:
        """Whether the group goes back to classic when ``leaving``, its last member using the
        consumer protocol, leaves (members using the classic protocol remaining)."""
        m = group.members.get(leaving)
        if m is None or m.uses_classic or group.num_classic() != len(group.members) - 1:
            return False
        if len(group.members) <= 1:
            return False
        if not self.config.downgrade:
            log.info("Cannot downgrade consumer group %s to classic group because the online downgrade is disabled.",
                     group.group_id)
            return False
        if len(group.members) - 1 > self.config.classic_max_size:
            log.info("Cannot downgrade consumer group %s to classic group because its group size is greater than "
                     "classic group max size.", group.group_id)
            return False
        return True

    def downgradable_replacing(self, group: ConsumerGroup, replaced: str) -> bool:
        """A static member using the classic protocol takes the place of the last member using the
        consumer protocol: the group goes back to classic."""
        m = group.members.get(replaced)
        if m is None or m.uses_classic or group.num_classic(except_member=replaced) != len(group.members) - 1:
            return False
        if not self.config.downgrade:
            return False
        return len(group.members) <= self.config.classic_max_size

    def to_classic(self, now: int, group: ConsumerGroup, leaving: str | None, joining: ConsumerMember | None,
                   outcome: Outcome, view: TopicsView) -> None:
        """Kafka's ClassicGroup.fromConsumerGroup: the remaining members (and ``joining``, taking
        the place of ``leaving``) become a classic group at the group epoch, Stable, each with its
        target assignment in the consumer protocol.  Appends the records to ``outcome``; the
        caller applies them, rebalancing the classic group when a member left (``joining`` None)."""
        gid = group.group_id
        records = outcome.records
        records.extend(group_tombstones(group, keep_members=()))
        classic = Group(gid, protocol_type=CONSUMER_PROTOCOL, generation_id=group.group_epoch, state_timestamp=now)
        members = [m for mid, m in group.members.items() if mid != leaving]
        if joining is not None:
            members = [m for m in members if m.member_id != joining.member_id] + [joining]
        for m in members:
            assert m.classic is not None
            cm = Member(m.member_id, m.instance_id, m.client_id, m.client_host, m.rebalance_timeout_ms,
                        m.classic.session_timeout_ms, CONSUMER_PROTOCOL, list(m.classic.protocols))
            classic.members[cm.member_id] = cm
            if cm.group_instance_id is not None:
                classic.static_members[cm.group_instance_id] = cm.member_id
        if classic.members:
            classic.protocol_name = classic.select_protocol()
            classic.leader_id = next(iter(classic.members))
        for cm in classic.members.values():
            source = leaving if joining is not None and cm.member_id == joining.member_id and leaving else cm.member_id
            cm.assignment = classic_assignment(view, group.target.get(source, EMPTY),
                                               cm.metadata(classic.protocol_name or ""))
        records.append(ClassicGroupRecord(gid, classic))
        log.info("[GroupId %s] Converted the consumer group to a classic group.", gid)

    # -- the classic group records ---------------------------------------------------------------
    def replay(self, now: int, r: ClassicGroupRecord, outcome: Outcome, rebalance: bool) -> None:
        """Apply a classic group record of a conversion to the classic state: a tombstone hands
        the group over to the consumer groups, a group is loaded (and rebalanced if asked)."""
        if r.group is None:
            self.classic.hand_over(r.group_id)
            return
        self.classic.load_group(r.group, now)
        if rebalance:
            outcome.classic_effects.extend(
                e for e in self.classic.rebalance(now, r.group_id, "the group went back to the classic protocol")
                if isinstance(e, (JoinResult, SyncResult))
            )
