"""KIP-848 consumer groups: the group coordinator's side of the consumer rebalance protocol,
pure logic (Kafka 4's GroupMetadataManager, ConsumerGroup, CurrentAssignmentBuilder and
TargetAssignmentBuilder, in our own words).

The members of a consumer group no longer assign partitions: each heartbeats
(ConsumerGroupHeartbeat) with what it subscribes to and the partitions it owns, and the
coordinator answers with its epoch and the partitions it is to own.  Three levels of epochs make
the rebalance incremental and safe:

* the **group epoch** goes up whenever the group changes (a member joins, leaves or changes its
  subscription; a subscribed topic gains partitions; a regular expression matches other topics);
* the **target assignment** is computed by a server-side assignor (``uniform`` or ``range``,
  :mod:`odradek.cluster.consumer_assignors`) for a group epoch: its epoch catches up with the group
  epoch on the next heartbeat;
* each member's **member epoch** reaches the target assignment epoch through reconciliation
  (:func:`reconcile`): a member first revokes the partitions it must give up (it stays at its epoch
  in ``UNREVOKED_PARTITIONS`` until a heartbeat no longer lists them), then gets the partitions
  that are free; a partition still owned by another member is withheld
  (``UNRELEASED_PARTITIONS``) until that member has revoked it.  So no partition is ever owned by
  two members: :attr:`ConsumerGroup.owners` maps each partition to its one owner.

Fencing: a heartbeat with an epoch the coordinator does not know is FENCED_MEMBER_EPOCH (a member
that lost a response may come back with its previous epoch if it owns no more than it was given);
an unknown member id is UNKNOWN_MEMBER_ID; a static member (``group.instance.id``) replaces its
former instance only after that one left with epoch -2 (UNRELEASED_INSTANCE_ID until then), and
keeps its assignment without a rebalance.  A member silent for the session timeout, or not
revoking within its rebalance timeout, is fenced (removed, the group epoch bumped).

The group's state is kept in ``__consumer_offsets`` as Kafka's records, produced here as typed
values (:data:`Record`): an operation computes its records from the state without changing it,
then applies them (:meth:`ConsumerGroups.replay`, the same function that rebuilds the state when a
coordinator loads the partition), so the state is always exactly what its records say.  Timers
(sessions, rebalance timeouts) are soft state kept beside it.

Classic and consumer groups live side by side, and a live group moves between the protocols as
KIP-848 defines (``group.consumer.migration.policy``): a ConsumerGroupHeartbeat to a classic group
that uses the consumer embedded protocol converts it (its members keep their assignment and are
served through JoinGroup/SyncGroup/Heartbeat by this state machine, with the assignment computed
here); when the last member using the consumer protocol leaves a group whose other members use
the classic protocol, the group goes back to being a classic group, which then rebalances.

Group states (computed from the epochs, changed only along :data:`CONSUMER_GROUP_TRANSITIONS`)::

    Empty -> Reconciling / Stable            a member joins
    Stable -> Assigning                      the group epoch went past the target's (a leave)
    Assigning / Stable -> Reconciling        a new target assignment, members not there yet
    Reconciling / Assigning -> Stable        every member at the target epoch, stable
    any -> Empty                             the last member left;   any -> Dead: deleted

:class:`ConsumerGroups` (the coordinator shard's consumer groups: ConsumerGroupHeartbeat, leaving
and fencing, offsets' checks, deletion, timers, and applying records along the transition table)
is the entry point; its collaborators, each in its own module, are:

* :mod:`~odradek.cluster.consumer_group_model`: the values, records and one group (re-exported here);
* :mod:`~odradek.cluster.consumer_members`: finding, creating and replacing members, and the
  records removing members or a group;
* :mod:`~odradek.cluster.consumer_targets` (:class:`TargetAssignments`): regular expressions,
  subscriptions, group epoch bumps, the target assignment and one member's reconciliation
  (:mod:`~odradek.cluster.consumer_reconciliation`, :func:`reconcile`);
* :mod:`~odradek.cluster.consumer_classic` (:class:`ClassicMembers`): JoinGroup, SyncGroup,
  Heartbeat and LeaveGroup of members using the classic protocol;
* :mod:`~odradek.cluster.consumer_migration` (:class:`ProtocolMigration`): the conversions between
  the protocols and the classic group records they write.

Nothing here does I/O or reads a clock: every call takes ``now`` (ms).
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from odradek.cluster.consumer_classic import ClassicMembers
from odradek.cluster.consumer_group_model import (
    CONSUMER_GROUP_TRANSITIONS,
    CONSUMER_PROTOCOL,
    LEAVE_GROUP_MEMBER_EPOCH,
    LEAVE_GROUP_STATIC_MEMBER_EPOCH,
    MEMBER_TRANSITIONS,
    UNRELEASED_HEARTBEAT_DIVISOR,
    Assignment,
    ClassicGroupRecord,
    ClassicProtocols,
    ConsumerGroup,
    ConsumerGroupConfig,
    ConsumerGroupState,
    ConsumerMember,
    CurrentAssignmentRecord,
    GroupEpochRecord,
    HeartbeatRequest,
    HeartbeatResponse,
    MemberState,
    MemberSubscriptionRecord,
    Outcome,
    Record,
    RegexRecord,
    ResolvedRegex,
    SubscriptionMetadataRecord,
    TargetEpochRecord,
    TargetMemberRecord,
    TopicMetadata,
    TopicsView,
    compile_regex,
    freeze,
)
from odradek.cluster.consumer_members import (
    check_size,
    dynamic_member,
    group_tombstones,
    removal_records,
    static_member,
    subscription_changed,
)
from odradek.cluster.consumer_migration import ProtocolMigration
from odradek.cluster.consumer_reconciliation import reconcile
from odradek.cluster.consumer_targets import RegexChange, TargetAssignments
from odradek.cluster.group import SyncResult
from odradek.errors import ErrorCode, KafkaError

if TYPE_CHECKING:
    from odradek.cluster.group import GroupCoordinatorState
    from odradek.cluster.metadata import MetadataImage

__all__ = [
    "CONSUMER_GROUP_TRANSITIONS",
    "CONSUMER_PROTOCOL",
    "LEAVE_GROUP_MEMBER_EPOCH",
    "LEAVE_GROUP_STATIC_MEMBER_EPOCH",
    "MEMBER_TRANSITIONS",
    "Assignment",
    "ClassicGroupRecord",
    "ClassicProtocols",
    "ConsumerGroup",
    "ConsumerGroupConfig",
    "ConsumerGroupState",
    "ConsumerGroups",
    "ConsumerMember",
    "CurrentAssignmentRecord",
    "GroupEpochRecord",
    "HeartbeatRequest",
    "HeartbeatResponse",
    "MemberState",
    "MemberSubscriptionRecord",
    "Outcome",
    "Record",
    "RegexRecord",
    "ResolvedRegex",
    "SubscriptionMetadataRecord",
    "TargetEpochRecord",
    "TargetMemberRecord",
    "TopicMetadata",
    "TopicsView",
    "compile_regex",
    "reconcile",
    "validate_heartbeat",
]

log = logging.getLogger(__name__)


class ConsumerGroups:
    """The consumer groups of one ``__consumer_offsets`` partition, beside its classic groups
    (``classic``: the classic state machine, which also keeps every group's offsets).  Owns the
    groups and their states; computes targets through ``targets``, serves classic members
    through ``classic_members`` and converts groups between the protocols through ``migration``."""

    def __init__(self, classic: GroupCoordinatorState, config: ConsumerGroupConfig | None = None) -> None:
        self.classic = classic
        self.config = config or ConsumerGroupConfig()
        self.groups: dict[str, ConsumerGroup] = {}
        self._view: TopicsView | None = None
        #: rebalances that ended with the group stable
        self.completed_rebalances = 0
        self.targets = TargetAssignments(self.config.assignors)
        self.migration = ProtocolMigration(classic, self.config)
        self.classic_members = ClassicMembers(self, self.config, self.targets, self.migration)

    # -- topics ---------------------------------------------------------------------------------
    def view(self, image: MetadataImage) -> TopicsView:
        v = self._view
        if v is None or v.image is not image:
            v = self._view = TopicsView(image)
        return v

    # -- lookups --------------------------------------------------------------------------------
    def group(self, group_id: str) -> ConsumerGroup | None:
        return self.groups.get(group_id)

    def has(self, group_id: str) -> bool:
        return group_id in self.groups

    def consumer_group(self, group_id: str) -> ConsumerGroup:
        """The group, or GROUP_ID_NOT_FOUND."""
        g = self.groups.get(group_id)
        if g is None:
            raise KafkaError(ErrorCode.GROUP_ID_NOT_FOUND, f"Group {group_id} not found.")
        return g

    # ==========================================================================================
    # ConsumerGroupHeartbeat

    def heartbeat(
        self,
        now: int,
        req: HeartbeatRequest,
        image: MetadataImage,
        describable: Callable[[str], bool] = lambda _t: True,
    ) -> Outcome:
        """A ConsumerGroupHeartbeat (already validated, :func:`validate_heartbeat`): join,
        heartbeat or leave.  Raises KafkaError with the error to answer; nothing changed then."""
        if req.member_epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
            return self._leave(now, req, image)
        view = self.view(image)
        records: list[Record] = []
        outcome = Outcome(records=records)
        create = req.member_epoch == 0
        group = self._get_or_create(now, req.group_id, create, records, outcome, view)
        check_size(group, req.member_id, self.config.max_size)
        member_id = req.member_id or str(uuid.uuid4())
        if req.instance_id is None:
            member, is_new = dynamic_member(group, member_id, req.member_epoch, req.owned, create, classic=False)
        else:
            member, is_new = static_member(group, member_id, req.member_epoch, req.instance_id, req.owned, create,
                                           classic=False, records=records)
        updated = dataclasses.replace(
            member,
            instance_id=req.instance_id if req.instance_id is not None else member.instance_id,
            rack_id=req.rack_id if req.rack_id is not None else member.rack_id,
            rebalance_timeout_ms=req.rebalance_timeout_ms if req.rebalance_timeout_ms != -1 else member.rebalance_timeout_ms,
            server_assignor=req.server_assignor if req.server_assignor is not None else member.server_assignor,
            subscribed_topic_names=(tuple(sorted(set(req.subscribed_topic_names)))
                                    if req.subscribed_topic_names is not None else member.subscribed_topic_names),
            subscribed_topic_regex=(req.subscribed_topic_regex or None
                                    if req.subscribed_topic_regex is not None else member.subscribed_topic_regex),
            client_id=req.client_id,
            client_host=req.client_host,
            classic=None,
        )
        names_changed = subscription_changed(group, member, updated, records, is_new)
        regex = self.targets.update_regexes(now, group, member, updated, records, view, describable)
        resubscribed = names_changed or regex is not RegexChange.NO_CHANGE
        bump = group.group_epoch == 0 or names_changed or regex is RegexChange.UPDATED_AND_RESOLVED
        group_epoch = self.targets.maybe_bump(group, bump, updated, records, view)
        target_epoch, target = self.targets.target(group, group_epoch, updated, records, view)
        reconciled = self.targets.maybe_reconcile(group, updated, target_epoch, target, req.owned, resubscribed,
                                                  records, view)
        self.apply(now, records, outcome)
        if (g := self.groups.get(req.group_id)) is not None:
            g.heartbeat_timers(now, reconciled.member_id, self.config.session_timeout_ms)
        response = HeartbeatResponse(
            member_id=reconciled.member_id,
            member_epoch=reconciled.member_epoch,
            heartbeat_interval_ms=self._interval(reconciled),
        )
        full = req.rebalance_timeout_ms != -1 and (
            req.subscribed_topic_names is not None or req.subscribed_topic_regex is not None
        ) and req.owned is not None
        if req.member_epoch == 0 or full or reconciled.assigned != member.assigned:
            response.assignment = dict(reconciled.assigned)
        outcome.response = response
        return outcome

    def _interval(self, member: ConsumerMember) -> int:
        """The heartbeat interval a member is given: the configured one, or a tenth of it (at
        least 50 ms) while the member waits for partitions other members have yet to release, so
        that it takes them soon after they are freed rather than a whole interval later (Kafka
        always answers the configured interval)."""
        interval = self.config.heartbeat_interval_ms
        if member.state is MemberState.UNRELEASED_PARTITIONS:
            return max(min(interval, 50), interval // UNRELEASED_HEARTBEAT_DIVISOR)
        return interval

    def _leave(self, now: int, req: HeartbeatRequest, image: MetadataImage) -> Outcome:
        group = self.consumer_group(req.group_id)
        response = HeartbeatResponse(member_id=req.member_id, member_epoch=req.member_epoch)
        outcome = Outcome(response=response)
        if req.instance_id is None:
            member = group.members.get(req.member_id)
            if member is None:
                raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID,
                                 f"Member {req.member_id} is not a member of group {req.group_id}.")
            log.info("[GroupId %s] Member %s left the consumer group.", req.group_id, req.member_id)
            self._fence(now, group, member, outcome, image, "it left the group")
            return outcome
        member = group.static_member(req.instance_id)
        if member is None:
            raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID, f"Instance id {req.instance_id} is unknown.")
        if member.member_id != req.member_id:
            raise KafkaError(ErrorCode.FENCED_INSTANCE_ID, f"Static member {req.member_id} with instance id "
                             f"{req.instance_id} was fenced by member {member.member_id}.")
        if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            log.info("[GroupId %s] Static member %s with instance id %s temporarily left the consumer group.",
                     req.group_id, member.member_id, req.instance_id)
            leaving = dataclasses.replace(member, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH, pending_revocation={})
            outcome.records.append(CurrentAssignmentRecord(req.group_id, member.member_id, leaving))
            self.apply(now, outcome.records, outcome)
            # its session goes on: it comes back as a new member taking its place, or is fenced
            return outcome
        log.info("[GroupId %s] Static member %s with instance id %s left the consumer group.",
                 req.group_id, member.member_id, req.instance_id)
        self._fence(now, group, member, outcome, image, "it left the group")
        return outcome

    # -- members --------------------------------------------------------------------------------
    def _get_or_create(
        self, now: int, group_id: str, create: bool, records: list[Record], outcome: Outcome, view: TopicsView
    ) -> ConsumerGroup:
        g = self.groups.get(group_id)
        if g is not None:
            return g
        return self.migration.new_group(now, group_id, create, records, outcome, view)

    # -- fencing (or conversion back to a classic group) -------------------------------------------
    def _fence(self, now: int, group: ConsumerGroup, member: ConsumerMember, outcome: Outcome, image: MetadataImage,
               reason: str) -> None:
        """Remove a member (left, session expired, rebalance timed out): the group epoch goes up;
        or, when it was the last member using the consumer protocol, the group becomes a classic
        group again."""
        records = outcome.records
        if self.migration.downgradable(group, member.member_id):
            self.migration.to_classic(now, group, member.member_id, None, outcome, self.view(image))
            self.apply(now, records, outcome, rebalance_classic=True)
            return
        gid = group.group_id
        records.extend(removal_records(gid, member.member_id))
        regex = member.subscribed_topic_regex
        if regex and group.regex_subscribers(regex) == 1:
            records.append(RegexRecord(gid, regex, None))
        self.targets.members_removed(group, (member.member_id,), records, self.view(image))
        log.info("[GroupId %s] Member %s fenced from the group because %s.", gid, member.member_id, reason)
        self.apply(now, records, outcome)

    # ==========================================================================================
    # classic members in a consumer group (JoinGroup, SyncGroup, Heartbeat, LeaveGroup): ClassicMembers'

    def classic_join(
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
        return self.classic_members.join(
            now, image, group_id=group_id, member_id=member_id, group_instance_id=group_instance_id,
            protocol_type=protocol_type, protocols=protocols, session_timeout_ms=session_timeout_ms,
            rebalance_timeout_ms=rebalance_timeout_ms, client_id=client_id, client_host=client_host, version=version,
        )

    def classic_sync(self, now: int, image: MetadataImage, *, group_id: str, generation_id: int, member_id: str,
                     group_instance_id: str | None, protocol_type: str | None, protocol_name: str | None) -> SyncResult:
        return self.classic_members.sync(
            now, image, group_id=group_id, generation_id=generation_id, member_id=member_id,
            group_instance_id=group_instance_id, protocol_type=protocol_type, protocol_name=protocol_name,
        )

    def classic_heartbeat(self, now: int, *, group_id: str, member_id: str, group_instance_id: str | None,
                          generation_id: int) -> ErrorCode:
        return self.classic_members.heartbeat(now, group_id=group_id, member_id=member_id,
                                              group_instance_id=group_instance_id, generation_id=generation_id)

    def classic_leave(self, now: int, image: MetadataImage, group_id: str,
                      members: list[tuple[str, str | None]]) -> Outcome:
        return self.classic_members.leave(now, image, group_id, members)

    def preferred_assignor(self, members: Iterable[ConsumerMember]) -> str:
        """The assignor the group's members prefer (the coordinator's describe names it)."""
        return self.targets.preferred_assignor(members)

    # ==========================================================================================
    # offsets

    def validate_offset_commit(self, group_id: str, member_id: str, instance_id: str | None, epoch: int,
                               transactional: bool, api_version: int) -> None:
        """Kafka's ConsumerGroup.validateOffsetCommit: the member epoch is the generation."""
        group = self.consumer_group(group_id)
        if epoch < 0 and not group.members:
            return  # the admin's, or a consumer's outside the group
        member = group.members.get(member_id)
        if member is None:
            raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group_id}.")
        if not transactional and not member.uses_classic and api_version < 9:
            raise KafkaError(ErrorCode.UNSUPPORTED_VERSION,
                             "OffsetCommit version 9 or above must be used by members using the modern group protocol")
        self._check_member_epoch(member, epoch)

    def validate_offset_fetch(self, group_id: str, member_id: str | None, epoch: int) -> None:
        group = self.consumer_group(group_id)
        if member_id is None and epoch < 0:
            return
        member = group.members.get(member_id or "")
        if member is None:
            raise KafkaError(ErrorCode.UNKNOWN_MEMBER_ID, f"Member {member_id} is not a member of group {group_id}.")
        self._check_member_epoch(member, epoch)

    @staticmethod
    def _check_member_epoch(member: ConsumerMember, epoch: int) -> None:
        if epoch != member.member_epoch:
            if member.uses_classic:
                raise KafkaError(ErrorCode.ILLEGAL_GENERATION, f"The received generation id {epoch} does not match "
                                 f"the expected member epoch {member.member_epoch}.")
            raise KafkaError(ErrorCode.STALE_MEMBER_EPOCH, f"The received member epoch {epoch} does not match "
                             f"the expected member epoch {member.member_epoch}.")

    def subscribed_to(self, group_id: str, topic: str) -> bool:
        g = self.groups.get(group_id)
        return g is not None and topic in g.subscription_metadata

    # ==========================================================================================
    # deletion

    def delete(self, now: int, group_id: str) -> Outcome:
        """DeleteGroups of an empty consumer group: its records' tombstones (the offsets are the
        classic state's to delete)."""
        group = self.consumer_group(group_id)
        if group.members:
            raise KafkaError(ErrorCode.NON_EMPTY_GROUP, "The group is not empty.")
        outcome = Outcome(records=group_tombstones(group, ()))
        self.apply(now, outcome.records, outcome)
        return outcome

    # ==========================================================================================
    # time

    def next_deadline(self) -> int | None:
        found: list[int] = []
        for g in self.groups.values():
            found.extend(g.session_deadline.values())
            found.extend(d for _e, d in g.rebalance_deadline.values())
            found.extend(g.join_deadline.values())
            found.extend(g.sync_deadline.values())
        return min(found) if found else None

    def tick(self, now: int, image: MetadataImage) -> list[Outcome]:
        """Fence the members whose session expired, that did not revoke within their rebalance
        timeout, or (classic members) did not join or sync in time."""
        out: list[Outcome] = []
        for gid in list(self.groups):
            group = self.groups.get(gid)
            if group is None:
                continue
            for mid in list(group.members):
                group = self.groups.get(gid)
                if group is None or mid not in group.members:
                    continue
                member = group.members[mid]
                reason = None
                if group.session_deadline.get(mid, now + 1) <= now:
                    reason = "the member session expired"
                elif mid in group.rebalance_deadline:
                    epoch, deadline = group.rebalance_deadline[mid]
                    if deadline <= now:
                        if member.member_epoch == epoch:
                            reason = (f"it failed to transition from epoch {epoch} within "
                                      f"{member.rebalance_timeout_ms}ms")
                        else:
                            del group.rebalance_deadline[mid]
                elif group.join_deadline.get(mid, now + 1) <= now:
                    reason = "the classic member failed to join within the rebalance timeout"
                elif group.sync_deadline.get(mid, now + 1) <= now:
                    reason = "the member failed to sync within timeout"
                if reason is None:
                    continue
                outcome = Outcome()
                self._fence(now, group, member, outcome, image, reason)
                out.append(outcome)
        return out

    def loaded(self, now: int) -> None:
        """After loading: members get a fresh session; revocations in progress their rebalance
        timeout; each group its state (restored, not a transition)."""
        for g in self.groups.values():
            for mid, m in g.members.items():
                timeout = m.classic.session_timeout_ms if m.classic is not None else self.config.session_timeout_ms
                g.session_deadline[mid] = now + timeout
                if m.state is MemberState.UNREVOKED_PARTITIONS and not m.uses_classic:
                    g.rebalance_deadline[mid] = (m.member_epoch, now + max(m.rebalance_timeout_ms, 0))
            g._state = g.computed_state()
            g.state_timestamp = now

    # ==========================================================================================
    # records

    def apply(self, now: int, records: list[Record], outcome: Outcome, *, rebalance_classic: bool = False) -> None:
        """Apply an operation's records (as loading replays them), then move each group it
        touched to its new state along the transition table."""
        touched: dict[str, ConsumerGroupState] = {}
        for r in records:
            g = self.groups.get(r.group_id)
            if r.group_id not in touched:
                touched[r.group_id] = g.state if g is not None else ConsumerGroupState.DEAD
            if isinstance(r, ClassicGroupRecord):
                self.migration.replay(now, r, outcome, rebalance_classic)
            else:
                self.replay(r)
        for gid, before in touched.items():
            self._transition(gid, before, now)

    def _transition(self, group_id: str, before: ConsumerGroupState, now: int) -> None:
        """The one place a group's state changes after an operation: to the state its epochs now
        say, along :data:`CONSUMER_GROUP_TRANSITIONS` only (IllegalTransition otherwise)."""
        g = self.groups.get(group_id)
        after = ConsumerGroupState.DEAD if g is None else g.computed_state()
        if after is before:
            return
        CONSUMER_GROUP_TRANSITIONS.check(before, after, f"consumer group {group_id}")
        if after is ConsumerGroupState.STABLE and before in (ConsumerGroupState.ASSIGNING,
                                                             ConsumerGroupState.RECONCILING):
            self.completed_rebalances += 1
        if g is not None:
            g._state = after
            g.state_timestamp = now

    def replay(self, r: Record) -> None:
        """Apply one consumer-group record (a tombstone deletes); the classic group records are
        the classic state's."""
        gid = r.group_id
        g = self.groups.get(gid)
        if isinstance(r, ClassicGroupRecord):
            raise TypeError("classic group records are replayed by the classic state")
        if isinstance(r, GroupEpochRecord):
            if r.epoch is None:
                self.groups.pop(gid, None)
                return
            g = self._materialize(gid)
            g.group_epoch = r.epoch
            return
        if g is None:
            # a record of a group deleted since, or its creation records in their order: only
            # values create it (Kafka's getOrMaybeCreatePersistedConsumerGroup)
            if _is_tombstone(r):
                return
            g = self._materialize(gid)
        if isinstance(r, SubscriptionMetadataRecord):
            g.subscription_metadata = {} if r.topics is None else {t.name: t for t in r.topics}
        elif isinstance(r, MemberSubscriptionRecord):
            if r.member is None:
                g._remove_member(r.member_id)
            else:
                current = g.members.get(r.member_id) or ConsumerMember(r.member_id)
                s = r.member
                g._set_member(dataclasses.replace(
                    current, instance_id=s.instance_id, rack_id=s.rack_id, client_id=s.client_id,
                    client_host=s.client_host, subscribed_topic_names=s.subscribed_topic_names,
                    subscribed_topic_regex=s.subscribed_topic_regex, rebalance_timeout_ms=s.rebalance_timeout_ms,
                    server_assignor=s.server_assignor, classic=s.classic,
                ))
        elif isinstance(r, TargetEpochRecord):
            g.assignment_epoch = -1 if r.epoch is None else r.epoch
        elif isinstance(r, TargetMemberRecord):
            if r.assignment is None:
                g.target.pop(r.member_id, None)
            else:
                g.target[r.member_id] = freeze(r.assignment)
        elif isinstance(r, CurrentAssignmentRecord):
            old = g.members.get(r.member_id)
            if r.member is None:
                if old is not None:
                    g._set_member(dataclasses.replace(
                        old, member_epoch=LEAVE_GROUP_MEMBER_EPOCH, previous_member_epoch=LEAVE_GROUP_MEMBER_EPOCH,
                        assigned={}, pending_revocation={},
                    ))
                return
            base = old if old is not None else ConsumerMember(r.member_id)
            c = r.member
            g._set_member(dataclasses.replace(
                base, member_epoch=c.member_epoch, previous_member_epoch=c.previous_member_epoch, state=c.state,
                assigned=freeze(c.assigned), pending_revocation=freeze(c.pending_revocation),
            ))
        elif isinstance(r, RegexRecord):
            if r.resolved is None:
                g.resolved.pop(r.regex, None)
            else:
                g.resolved[r.regex] = r.resolved

    def _materialize(self, group_id: str) -> ConsumerGroup:
        g = self.groups.get(group_id)
        if g is None:
            g = self.groups[group_id] = ConsumerGroup(group_id)
        return g

    # ==========================================================================================
    # views

    def list_groups(self, states: set[str] | None = None) -> list[ConsumerGroup]:
        wanted = {s.strip().lower() for s in states or ()}
        return [g for g in self.groups.values() if not wanted or g.state.value.lower() in wanted]


def _is_tombstone(r: Record) -> bool:
    if isinstance(r, (GroupEpochRecord, TargetEpochRecord)):
        return r.epoch is None
    if isinstance(r, SubscriptionMetadataRecord):
        return r.topics is None
    if isinstance(r, (MemberSubscriptionRecord, CurrentAssignmentRecord)):
        return r.member is None
    if isinstance(r, TargetMemberRecord):
        return r.assignment is None
    if isinstance(r, RegexRecord):
        return r.resolved is None
    return r.group is None


_JAVA_TRIMMED = "".join(chr(c) for c in range(0x21))


def validate_heartbeat(req: HeartbeatRequest, assignors: Iterable[str]) -> None:
    """Kafka's checks of a ConsumerGroupHeartbeat before it reaches a group: INVALID_REQUEST or
    UNSUPPORTED_ASSIGNOR with Kafka's message."""

    def blank(value: str | None) -> bool:
        """Java's ``value.trim().isEmpty()``: trim drops every character up to U+0020."""
        return value is not None and not value.strip(_JAVA_TRIMMED)

    if (req.version >= 1 or req.member_epoch > 0 or req.member_epoch == LEAVE_GROUP_MEMBER_EPOCH) and (
        blank(req.member_id)
    ):
        raise KafkaError(ErrorCode.INVALID_REQUEST, "MemberId can't be empty.")
    if blank(req.group_id):
        raise KafkaError(ErrorCode.INVALID_REQUEST, "GroupId can't be empty.")
    if blank(req.instance_id):
        raise KafkaError(ErrorCode.INVALID_REQUEST, "InstanceId can't be empty.")
    if blank(req.rack_id):
        raise KafkaError(ErrorCode.INVALID_REQUEST, "RackId can't be empty.")
    if req.member_epoch == 0:
        if req.rebalance_timeout_ms == -1:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "RebalanceTimeoutMs must be provided in first request.")
        if req.owned is None or req.owned:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "TopicPartitions must be empty when (re-)joining.")
        if not req.subscribed_topic_names and not req.subscribed_topic_regex:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             "SubscribedTopicNames or SubscribedTopicRegex must be set in first request.")
    elif req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        if req.instance_id is None:
            raise KafkaError(ErrorCode.INVALID_REQUEST, "InstanceId can't be null.")
    elif req.member_epoch < LEAVE_GROUP_STATIC_MEMBER_EPOCH:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "MemberEpoch is invalid.")
    names = list(assignors)
    if req.server_assignor is not None and req.server_assignor not in names:
        raise KafkaError(ErrorCode.UNSUPPORTED_ASSIGNOR, f"ServerAssignor {req.server_assignor} is not supported. "
                         f"Supported assignors: {', '.join(names)}.")
