"""Members using the classic protocol inside a KIP-848 consumer group (Kafka's
classicGroupJoinToConsumerGroup and its SyncGroup, Heartbeat and LeaveGroup counterparts): such a
member is a member like the others, its assignment computed by the coordinator; JoinGroup answers
with no leader, so the member sends an empty SyncGroup and gets its partitions there, and a
rebalance reaches it as REBALANCE_IN_PROGRESS on its heartbeat.  A static member using the classic
protocol that takes the place of the last member using the consumer protocol turns the group back
into a classic group (:class:`~odradek.cluster.consumer_migration.ProtocolMigration`).

:class:`ClassicMembers` owns these four requests and the join and sync deadlines they set; the
shard's groups are reached through :class:`ShardGroups` (find a group, see the topics, apply an
operation's records)."""

from __future__ import annotations

import dataclasses
import logging
import uuid
from typing import TYPE_CHECKING, Protocol

from odradek.cluster.assignment import decode_subscription
from odradek.cluster.consumer_group_model import (
    CONSUMER_PROTOCOL,
    ClassicProtocols,
    ConsumerGroup,
    ConsumerGroupConfig,
    ConsumerMember,
    MemberState,
    Outcome,
    Record,
    TopicsView,
    freeze,
)
from odradek.cluster.consumer_members import (
    check_size,
    dynamic_member,
    removal_records,
    static_member,
    subscription_changed,
)
from odradek.cluster.consumer_migration import ProtocolMigration, classic_assignment
from odradek.cluster.consumer_targets import RegexChange, TargetAssignments
from odradek.cluster.group import JoinResult, SyncResult
from odradek.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from odradek.cluster.metadata import MetadataImage

__all__ = ["ClassicMembers", "ShardGroups"]

#: the consumer groups' logger: what happens to a group is told under one name
log = logging.getLogger("odradek.cluster.consumer_group")


class ShardGroups(Protocol):
    """What the classic members need of the shard's consumer groups."""

    def group(self, group_id: str) -> ConsumerGroup | None: ...

    def consumer_group(self, group_id: str) -> ConsumerGroup:
        """The group, or GROUP_ID_NOT_FOUND."""
        ...

    def view(self, image: MetadataImage) -> TopicsView: ...

    def apply(self, now: int, records: list[Record], outcome: Outcome, *, rebalance_classic: bool = False) -> None:
        """Apply an operation's records, moving each group it touched along its transition table."""
        ...


class ClassicMembers:
    """JoinGroup, SyncGroup, Heartbeat and LeaveGroup of members using the classic protocol in the
    consumer groups of a shard."""

    def __init__(self, groups: ShardGroups, config: ConsumerGroupConfig, targets: TargetAssignments,
                 migration: ProtocolMigration) -> None:
        self.groups = groups
        self.config = config
        self.targets = targets
        self.migration = migration

    def join(
        self,
        now: int,
        image: MetadataImage,
        *,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        client_id: str,
        client_host: str,
        version: int,
    ) -> Outcome:
        """A JoinGroup from a member using the classic protocol to a consumer group: it is a member
        like the others, its assignment computed here; the answer names no leader, so the member
        sends an empty SyncGroup and gets its partitions there."""
        group = self.groups.consumer_group(group_id)
        view = self.groups.view(image)
        records: list[Record] = []
        outcome = Outcome(records=records)
        unknown = not member_id
        if unknown:
            member_id = f"{client_id}-{uuid.uuid4()}"
        check_size(group, member_id, self.config.max_size)
        if not group.supports_classic(protocol_type, [n for n, _ in protocols]):
            raise KafkaError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, f"Member {member_id}'s protocols are not supported.")
        if unknown and version >= 4 and group_instance_id is None:
            outcome.response = JoinResult(member_id, ErrorCode.MEMBER_ID_REQUIRED)
            return outcome
        if group_instance_id is None:
            member, is_new = dynamic_member(group, member_id, -1, {}, True, classic=True)
        else:
            member, is_new = static_member(group, member_id, -1, group_instance_id, {}, unknown, classic=True,
                                           records=records)
        replaced = group.static_member(group_instance_id) if group_instance_id is not None else None
        downgrade = (replaced is not None and replaced.member_id != member_id
                     and self.migration.downgradable_replacing(group, replaced.member_id))
        sub = decode_subscription(protocols[0][1]) if protocols else None
        topics = tuple(sorted(set(sub.topics))) if sub is not None else member.subscribed_topic_names
        rack = (getattr(sub, "rack_id", None) or None) if sub is not None else None
        updated = dataclasses.replace(
            member,
            instance_id=group_instance_id if group_instance_id is not None else member.instance_id,
            rack_id=rack if rack is not None else member.rack_id,
            rebalance_timeout_ms=rebalance_timeout_ms if rebalance_timeout_ms != -1 else member.rebalance_timeout_ms,
            subscribed_topic_names=topics,
            subscribed_topic_regex=None,
            client_id=client_id,
            client_host=client_host,
            classic=ClassicProtocols(session_timeout_ms, tuple(protocols)),
        )
        changed = subscription_changed(group, member, updated, records, is_new)
        regex = self.targets.update_regexes(now, group, member, updated, records, view, lambda _t: True)
        bump = changed or regex is not RegexChange.NO_CHANGE
        owned: dict[uuid.UUID, set[int]] = {}
        for tp in getattr(sub, "owned_partitions", None) or []:
            tid = view.id_of(tp.topic)
            if tid is not None:
                owned.setdefault(tid, set()).update(tp.partitions)
        frozen_owned = freeze(owned)
        group_epoch = self.targets.maybe_bump(group, bump, updated, records, view)
        if downgrade:
            if not bump:
                updated = self.targets.maybe_reconcile(group, updated, group.assignment_epoch,
                                                       group.target_of(updated.member_id, updated.instance_id),
                                                       frozen_owned, False, records, view)
            assert replaced is not None
            self.migration.to_classic(now, group, replaced.member_id, updated, outcome, view)
            self.groups.apply(now, records, outcome)
        else:
            target_epoch, target = self.targets.target(group, group_epoch, updated, records, view)
            updated = self.targets.maybe_reconcile(group, updated, target_epoch, target, frozen_owned, bump, records,
                                                   view)
            self.groups.apply(now, records, outcome)
            g = self.groups.group(group_id)
            if g is not None and updated.member_id in g.members:
                g.heartbeat_timers(now, updated.member_id, session_timeout_ms)
                g.join_deadline.pop(updated.member_id, None)
                g.sync_deadline[updated.member_id] = now + max(rebalance_timeout_ms, 0)
        assert updated.classic is not None
        outcome.response = JoinResult(
            updated.member_id, ErrorCode.NONE, updated.member_epoch, CONSUMER_PROTOCOL,
            updated.classic.protocols[0][0] if updated.classic.protocols else None, "", [],
        )
        return outcome

    @staticmethod
    def _member(group: ConsumerGroup, member_id: str, instance_id: str | None) -> ConsumerMember:
        if instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID,
                                 f"Member {member_id} is not a member of group {group.group_id}.")
        else:
            member = group.static_member(instance_id)
            if member is None:
                raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID,
                                 f"Member with instance id {instance_id} is not a member of group {group.group_id}.")
            if member.member_id != member_id:
                raise KafkaError(ErrorCode.FENCED_INSTANCE_ID, f"Static member {member_id} with instance id "
                                 f"{instance_id} was fenced by member {member.member_id}.")
        if not member.uses_classic:
            raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member.member_id} does not use the classic protocol.")
        return member

    @staticmethod
    def _rejoin_needed(group: ConsumerGroup, member: ConsumerMember, now: int) -> None:
        group.join_deadline.setdefault(member.member_id, now + max(member.rebalance_timeout_ms, 0))

    def sync(self, now: int, image: MetadataImage, *, group_id: str, generation_id: int, member_id: str,
             group_instance_id: str | None, protocol_type: str | None, protocol_name: str | None) -> SyncResult:
        group = self.groups.consumer_group(group_id)
        member = self._member(group, member_id, group_instance_id)
        assert member.classic is not None
        if generation_id != member.member_epoch:
            raise KafkaError(ErrorCode.ILLEGAL_GENERATION, f"The request generation id {generation_id} is not equal "
                             f"to the member epoch {member.member_epoch} of member {member_id}.")
        name = member.classic.protocols[0][0] if member.classic.protocols else ""
        if (protocol_type is not None and protocol_type != CONSUMER_PROTOCOL) or (
            protocol_name is not None and protocol_name != name
        ):
            raise KafkaError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if group.group_epoch > member.member_epoch and member.state is not MemberState.UNREVOKED_PARTITIONS:
            self._rejoin_needed(group, member, now)
            raise KafkaError(ErrorCode.REBALANCE_IN_PROGRESS, f"A new rebalance is triggered in group {group_id} "
                             f"and member {member_id} should rejoin to catch up.")
        group.sync_deadline.pop(member.member_id, None)
        group.session_deadline[member.member_id] = now + member.classic.session_timeout_ms
        assignment = classic_assignment(self.groups.view(image), member.assigned, member.classic.metadata())
        return SyncResult(member.member_id, ErrorCode.NONE, CONSUMER_PROTOCOL, name, assignment)

    def heartbeat(self, now: int, *, group_id: str, member_id: str, group_instance_id: str | None,
                  generation_id: int) -> ErrorCode:
        group = self.groups.consumer_group(group_id)
        member = self._member(group, member_id, group_instance_id)
        assert member.classic is not None
        if generation_id != member.member_epoch:
            return ErrorCode.ILLEGAL_GENERATION
        group.session_deadline[member.member_id] = now + member.classic.session_timeout_ms
        if (member.member_epoch < group.group_epoch or member.state is MemberState.UNREVOKED_PARTITIONS
                or (member.state is MemberState.UNRELEASED_PARTITIONS and not group.waiting_on_unreleased(member))):
            self._rejoin_needed(group, member, now)
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def leave(self, now: int, image: MetadataImage, group_id: str, members: list[tuple[str, str | None]]) -> Outcome:
        """LeaveGroup of classic members of a consumer group; ``response``: the error of each."""
        group = self.groups.consumer_group(group_id)
        records: list[Record] = []
        outcome = Outcome(records=records)
        errors: list[ErrorCode] = []
        leaving: dict[str, ConsumerMember | None] = {}
        for member_id, instance_id in members:
            try:
                if instance_id is None:
                    member = group.members.get(member_id)
                    if member is None or member_id in leaving:
                        raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID)
                else:
                    member = group.static_member(instance_id)
                    if member is None or member.member_id in leaving:
                        raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
                    if member_id and member.member_id != member_id:
                        raise KafkaError(ErrorCode.FENCED_INSTANCE_ID)
                if not member.uses_classic:
                    raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID)
            except KafkaError as exc:
                errors.append(exc.code)
                continue
            log.info("[GroupId %s] Member %s has left group through explicit `LeaveGroup` request.",
                     group_id, member.member_id)
            records.extend(removal_records(group_id, member.member_id))
            leaving[member.member_id] = None
            errors.append(ErrorCode.NONE)
        if records:
            self.targets.members_removed(group, leaving, records, self.groups.view(image))
            self.groups.apply(now, records, outcome)
        outcome.response = errors
        return outcome
