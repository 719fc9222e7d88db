"""Who a request to a KIP-848 consumer group comes from: finding, creating and fencing its
members (dynamic ones by member id and epoch, static ones by instance id, a new instance taking
the place of the former one), the group's size limit, and the records that write or remove a
member's subscription or a whole group.  Functions of a group's state: they return members and
records and change nothing."""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Iterable, Mapping

from odradek.cluster.consumer_group_model import (
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    ConsumerGroup,
    ConsumerMember,
    CurrentAssignmentRecord,
    GroupEpochRecord,
    MemberSubscriptionRecord,
    Record,
    RegexRecord,
    SubscriptionMetadataRecord,
    TargetEpochRecord,
    TargetMemberRecord,
    is_subset,
)
from odradek.errors import ErrorCode, KafkaError

__all__ = [
    "check_epoch",
    "check_size",
    "dynamic_member",
    "group_tombstones",
    "removal_records",
    "static_member",
    "subscription_changed",
]

#: the consumer groups' logger: what happens to a group is told under one name
log = logging.getLogger("odradek.cluster.consumer_group")


def check_size(group: ConsumerGroup, member_id: str, max_size: int) -> None:
    """GROUP_MAX_SIZE_REACHED when a member not in the group would join one at its maximum size."""
    if len(group.members) >= max_size and (not member_id or member_id not in group.members):
        raise KafkaError(ErrorCode.GROUP_MAX_SIZE_REACHED, "The consumer group has reached its maximum "
                         f"capacity of {max_size} members.")


def check_epoch(member: ConsumerMember, epoch: int, owned: Mapping[uuid.UUID, frozenset[int]] | None) -> None:
    """FENCED_MEMBER_EPOCH for a consumer-protocol member whose epoch is not the coordinator's."""
    if epoch == 0:
        return  # joining again (a fenced member's way back)
    if epoch > member.member_epoch:
        raise KafkaError(ErrorCode.FENCED_MEMBER_EPOCH, f"The consumer group member has a greater member "
                         f"epoch ({epoch}) than the one known by the group coordinator ({member.member_epoch}). "
                         "The member must abandon all its partitions and rejoin.")
    if epoch < member.member_epoch and (epoch != member.previous_member_epoch
                                        or not is_subset(owned, member.assigned)):
        # the previous epoch with no more than what it has: the response bumping it was lost
        raise KafkaError(ErrorCode.FENCED_MEMBER_EPOCH, f"The consumer group member has a smaller member "
                         f"epoch ({epoch}) than the one known by the group coordinator ({member.member_epoch}). "
                         "The member must abandon all its partitions and rejoin.")


def dynamic_member(group: ConsumerGroup, member_id: str, epoch: int,
                   owned: Mapping[uuid.UUID, frozenset[int]] | None, create: bool, *,
                   classic: bool) -> tuple[ConsumerMember, bool]:
    """The member (and whether it is new), or UNKNOWN_MEMBER_ID / FENCED_MEMBER_EPOCH."""
    member = group.members.get(member_id)
    if member is None:
        if not create:
            raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID,
                             f"Member {member_id} is not a member of group {group.group_id}.")
        log.info("[GroupId %s] Member %s joins the consumer group using the %s protocol.", group.group_id,
                 member_id, "classic" if classic else "consumer")
        return ConsumerMember(member_id), True
    if not classic:
        check_epoch(member, epoch, owned)
    return member, False


def static_member(group: ConsumerGroup, member_id: str, epoch: int, instance_id: str,
                  owned: Mapping[uuid.UUID, frozenset[int]] | None, create: bool, *, classic: bool,
                  records: list[Record]) -> tuple[ConsumerMember, bool]:
    """The static member (and whether it is new); a new instance replaces the former one
    (records), or UNRELEASED_INSTANCE_ID / UNKNOWN_MEMBER_ID / FENCED_INSTANCE_ID."""
    existing = group.static_member(instance_id)
    if create:
        if existing is None:
            log.info("[GroupId %s] Static member %s with instance id %s joins the consumer group using the %s "
                     "protocol.", group.group_id, member_id, instance_id, "classic" if classic else "consumer")
            found = group.members.get(member_id)
            return (found, False) if found is not None else (ConsumerMember(member_id), True)
        if existing.member_id == member_id:
            if not classic:
                check_epoch(existing, epoch, owned)
            return existing, False
        if not classic and not existing.uses_classic and existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            raise KafkaError(ErrorCode.UNRELEASED_INSTANCE_ID, f"Static member {member_id} with instance id "
                             f"{instance_id} cannot join the group because the instance id is owned by "
                             f"{existing.member_id} member.")
        # the new instance takes the place of the old one, with its assignment
        new = dataclasses.replace(existing, member_id=member_id, member_epoch=0, previous_member_epoch=0)
        gid = group.group_id
        records.extend(removal_records(gid, existing.member_id))
        records.append(MemberSubscriptionRecord(gid, member_id, new))
        records.append(TargetMemberRecord(gid, member_id, group.target_of(existing.member_id)))
        records.append(CurrentAssignmentRecord(gid, member_id, new))
        log.info("[GroupId %s] Static member with instance id %s re-joins the consumer group using the %s "
                 "protocol. Created a new member %s to replace the existing member %s.", gid, instance_id,
                 "classic" if classic else "consumer", member_id, existing.member_id)
        return new, False
    if existing is None:
        raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {instance_id} is unknown.")
    if existing.member_id != member_id:
        raise KafkaError(ErrorCode.FENCED_INSTANCE_ID, f"Static member {member_id} with instance id "
                         f"{instance_id} was fenced by member {existing.member_id}.")
    if not classic:
        check_epoch(existing, epoch, owned)
    return existing, False


def removal_records(group_id: str, member_id: str) -> list[Record]:
    """The records removing one member (its assignment, target and subscription)."""
    return [
        CurrentAssignmentRecord(group_id, member_id, None),
        TargetMemberRecord(group_id, member_id, None),
        MemberSubscriptionRecord(group_id, member_id, None),
    ]


def subscription_changed(group: ConsumerGroup, member: ConsumerMember, updated: ConsumerMember,
                         records: list[Record], is_new: bool) -> bool:
    """Write the member's subscription record when anything of it changed (a new member
    always); whether its topic names changed (a new member's always)."""
    if is_new or member.subscription() != updated.subscription():
        records.append(MemberSubscriptionRecord(group.group_id, updated.member_id, updated))
        return is_new or member.subscribed_topic_names != updated.subscribed_topic_names
    return False


def group_tombstones(group: ConsumerGroup, keep_members: Iterable[str]) -> list[Record]:
    """The records deleting a consumer group (Kafka's createGroupTombstoneRecords)."""
    gid = group.group_id
    keep = set(keep_members)
    out: list[Record] = []
    for mid in group.members:
        if mid not in keep:
            out.append(CurrentAssignmentRecord(gid, mid, None))
    for mid in group.members:
        if mid not in keep:
            out.append(MemberSubscriptionRecord(gid, mid, None))
    for mid in group.target:
        out.append(TargetMemberRecord(gid, mid, None))
    out.append(TargetEpochRecord(gid, None))
    out.append(SubscriptionMetadataRecord(gid, None))
    for regex in sorted(group.resolved):
        out.append(RegexRecord(gid, regex, None))
    out.append(GroupEpochRecord(gid, None))
    return out
