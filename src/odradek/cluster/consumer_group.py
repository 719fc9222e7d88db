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

Nothing here does I/O or reads a clock: every call takes ``now`` (ms).
"""


from __future__ import annotations

import dataclasses
import enum
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from odradek.cluster.assignment import decode_assignment, decode_subscription, encode_assignment
from odradek.cluster.consumer_assignors import ASSIGNORS, MemberSpec, TopicSpec
from odradek.cluster.consumer_group_model import (
    CONSUMER_GROUP_TRANSITIONS,
    CONSUMER_PROTOCOL,
    EMPTY,
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
    is_subset,
)
from odradek.cluster.consumer_reconciliation import reconcile
from odradek.cluster.group import Group, JoinResult, Member, SyncResult
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol.messages.data import ConsumerProtocolAssignment

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


class _Regex(enum.Enum):
    NO_CHANGE = 0
    UPDATED = 1
    UPDATED_AND_RESOLVED = 2



class ConsumerGroups:
    """The consumer groups of one ``__consumer_offsets`` partition, beside its classic groups
    (``classic``: the classic state machine, which also keeps every group's offsets)."""

    def __init__(self, classic: GroupCoordinatorState, config: ConsumerGroupConfig | None = None) -> None:
        self.classic = classic
        self.config = config or ConsumerGroupConfig()
        self.groups: dict[str, ConsumerGroup] = {}
        self._view: TopicsView | None = None
        #: rebalances that ended with the group stable
        self.completed_rebalances = 0

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

    def _consumer_group(self, group_id: str) -> ConsumerGroup:
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
        self._check_size(group, req.member_id)
        member_id = req.member_id or str(uuid.uuid4())
        if req.instance_id is None:
            member, is_new = self._dynamic_member(group, member_id, req.member_epoch, req.owned, create, classic=False)
        else:
            member, is_new = self._static_member(group, member_id, req.member_epoch, req.instance_id, req.owned, create,
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
        names_changed = self._subscription_changed(group, member, updated, records, is_new)
        regex = self._update_regexes(now, group, member, updated, records, view, describable)
        subscription_changed = names_changed or regex is not _Regex.NO_CHANGE
        bump = group.group_epoch == 0 or names_changed or regex is _Regex.UPDATED_AND_RESOLVED
        group_epoch = self._maybe_bump(group, bump, updated, records, view)
        if group_epoch > group.assignment_epoch:
            target = self._compute_target(group, group_epoch, updated, records, view)
            target_epoch = group_epoch
        else:
            target_epoch = group.assignment_epoch
            target = group.target_of(updated.member_id, updated.instance_id)
        reconciled = self._maybe_reconcile(group, updated, target_epoch, target, req.owned, subscription_changed,
                                           records, view)
        self._apply(now, records, outcome)
        self._timers_after(now, req.group_id, reconciled, self.config.session_timeout_ms)
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
        group = self._consumer_group(req.group_id)
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
            self._apply(now, outcome.records, outcome)
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

    def _check_size(self, group: ConsumerGroup, member_id: str) -> None:
        if len(group.members) >= self.config.max_size and (not member_id or member_id not in group.members):
            raise KafkaError(ErrorCode.GROUP_MAX_SIZE_REACHED, "The consumer group has reached its maximum "
                             f"capacity of {self.config.max_size} members.")

    @staticmethod
    def _check_epoch(member: ConsumerMember, epoch: int, owned: Mapping[uuid.UUID, frozenset[int]] | None) -> None:
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

    def _dynamic_member(self, group: ConsumerGroup, member_id: str, epoch: int,
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
            self._check_epoch(member, epoch, owned)
        return member, False

    def _static_member(self, group: ConsumerGroup, member_id: str, epoch: int, instance_id: str,
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
                    self._check_epoch(existing, epoch, owned)
                return existing, False
            if not classic and not existing.uses_classic and existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                raise KafkaError(ErrorCode.UNRELEASED_INSTANCE_ID, f"Static member {member_id} with instance id "
                                 f"{instance_id} cannot join the group because the instance id is owned by "
                                 f"{existing.member_id} member.")
            # the new instance takes the place of the old one, with its assignment
            new = dataclasses.replace(existing, member_id=member_id, member_epoch=0, previous_member_epoch=0)
            gid = group.group_id
            records.extend(self._removal_records(gid, existing.member_id))
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
            self._check_epoch(existing, epoch, owned)
        return existing, False

    @staticmethod
    def _removal_records(group_id: str, member_id: str) -> list[Record]:
        return [
            CurrentAssignmentRecord(group_id, member_id, None),
            TargetMemberRecord(group_id, member_id, None),
            MemberSubscriptionRecord(group_id, member_id, None),
        ]

    @staticmethod
    def _subscription_changed(group: ConsumerGroup, member: ConsumerMember, updated: ConsumerMember,
                              records: list[Record], is_new: bool) -> bool:
        """Write the member's subscription record when anything of it changed (a new member
        always); whether its topic names changed (a new member's always)."""
        if is_new or member.subscription() != updated.subscription():
            records.append(MemberSubscriptionRecord(group.group_id, updated.member_id, updated))
            return is_new or member.subscribed_topic_names != updated.subscribed_topic_names
        return False

    # -- regular expressions --------------------------------------------------------------------
    def _update_regexes(self, now: int, group: ConsumerGroup, member: ConsumerMember, updated: ConsumerMember,
                        records: list[Record], view: TopicsView, describable: Callable[[str], bool]) -> _Regex:
        """Resolve a regular expression a member brings, and resolve the group's again when topics
        appeared or went since (Kafka resolves them in the background no more than every 10 s;
        here at once, which costs one pass over the topics when they change)."""
        old, new = member.subscribed_topic_regex, updated.subscribed_topic_regex
        status = _Regex.NO_CHANGE
        resolve: set[str] = set()
        if old != new:
            status = _Regex.UPDATED
            if old and group.regex_subscribers(old) == 1:
                records.append(RegexRecord(group.group_id, old, None))
            if new:
                if new not in group.resolved:
                    compile_regex(new)  # INVALID_REGULAR_EXPRESSION before anything is written
                    resolve.add(new)
                status = _Regex.UPDATED_AND_RESOLVED
            elif old:
                status = _Regex.UPDATED_AND_RESOLVED
        wanted = group.subscribed_regexes()
        if old and group.regex_subscribers(old) == 1:
            wanted.discard(old)
        if new:
            wanted.add(new)
        stale = {r for r in wanted if r in group.resolved and group.resolved[r].version != view.version}
        resolve |= stale
        if not resolve:
            return status
        changed = False
        for regex in sorted(resolve):
            try:
                matches = compile_regex(regex)
            except KafkaError:
                log.error("[GroupId %s] Couldn't parse regular expression '%s'. Ignoring it.", group.group_id, regex)
                topics: frozenset[str] = frozenset()
            else:
                topics = frozenset(t for t in view.names() if matches(t) and describable(t))
            before = group.resolved.get(regex)
            if before is None or before.topics != topics:
                changed = True
            records.append(RegexRecord(group.group_id, regex, ResolvedRegex(topics, view.version, now)))
        if changed and status is _Regex.NO_CHANGE:
            status = _Regex.UPDATED_AND_RESOLVED  # topics matched changed: a rebalance
        return status

    # -- subscriptions and epochs ---------------------------------------------------------------
    def _topic_names(self, group: ConsumerGroup, replace: Mapping[str, ConsumerMember | None],
                     regexes: Mapping[str, ResolvedRegex | None] | None = None) -> set[str]:
        """Every topic name the group subscribes to, with members replaced (None: removed) and
        regular expressions resolved anew."""
        members = dict(group.members)
        for mid, m in replace.items():
            if m is None:
                members.pop(mid, None)
            else:
                members[mid] = m
        resolved = dict(group.resolved)
        for r, v in (regexes or {}).items():
            if v is None:
                resolved.pop(r, None)
            else:
                resolved[r] = v
        names: set[str] = set()
        for m in members.values():
            names.update(m.subscribed_topic_names)
            if m.subscribed_topic_regex and m.subscribed_topic_regex in resolved:
                names |= resolved[m.subscribed_topic_regex].topics
        return names

    @staticmethod
    def _pending_regexes(records: list[Record], group_id: str) -> dict[str, ResolvedRegex | None]:
        return {r.regex: r.resolved for r in records if isinstance(r, RegexRecord) and r.group_id == group_id}

    def _subscription_metadata(self, names: Iterable[str], view: TopicsView) -> dict[str, TopicMetadata]:
        out: dict[str, TopicMetadata] = {}
        for name in names:
            meta = view.metadata(name)
            if meta is not None:
                out[name] = meta
        return out

    @staticmethod
    def _replacing(group: ConsumerGroup, updated: ConsumerMember) -> dict[str, ConsumerMember | None]:
        """The group's members as this change leaves them: ``updated`` in, the static member it
        takes the place of out."""
        replace: dict[str, ConsumerMember | None] = {}
        previous = group.static_members.get(updated.instance_id) if updated.instance_id is not None else None
        if previous is not None and previous != updated.member_id:
            replace[previous] = None
        replace[updated.member_id] = updated
        return replace

    def _maybe_bump(self, group: ConsumerGroup, bump: bool, updated: ConsumerMember, records: list[Record],
                    view: TopicsView) -> int:
        """The subscription metadata of the group with this change (a record when it differs,
        which bumps the epoch too); the group epoch, bumped if ``bump`` or so."""
        names = self._topic_names(group, self._replacing(group, updated), self._pending_regexes(records, group.group_id))
        metadata = self._subscription_metadata(names, view)
        if metadata != group.subscription_metadata:
            bump = True
            records.append(SubscriptionMetadataRecord(group.group_id, tuple(metadata[n] for n in sorted(metadata))))
        epoch = group.group_epoch
        if bump:
            epoch += 1
            records.append(GroupEpochRecord(group.group_id, epoch))
            log.info("[GroupId %s] Bumped group epoch to %d.", group.group_id, epoch)
        return epoch

    def _preferred_assignor(self, members: Iterable[ConsumerMember]) -> str:
        counts: dict[str, int] = {}
        for m in members:
            if m.server_assignor:
                counts[m.server_assignor] = counts.get(m.server_assignor, 0) + 1
        if counts:
            order = {name: i for i, name in enumerate(self.config.assignors)}
            return max(counts, key=lambda a: (counts[a], -order.get(a, len(order))))
        return self.config.assignors[0]

    def _subscribed_ids(self, member: ConsumerMember, group: ConsumerGroup, view: TopicsView,
                        regexes: Mapping[str, ResolvedRegex | None] | None = None) -> frozenset[uuid.UUID]:
        names = set(member.subscribed_topic_names)
        regex = member.subscribed_topic_regex
        if regex:
            resolved = group.resolved.get(regex)
            if regexes and regex in regexes:
                resolved = regexes[regex]
            if resolved is not None:
                names |= resolved.topics
        ids = {view.id_of(n) for n in names}
        ids.discard(None)
        return frozenset(ids)  # type: ignore[arg-type]

    def _compute_target(self, group: ConsumerGroup, epoch: int, updated: ConsumerMember | None,
                        records: list[Record], view: TopicsView) -> Assignment:
        """Kafka's TargetAssignmentBuilder: run the assignor over the members (with ``updated``)
        and write the target of each member whose target changed, then the target's epoch.
        Returns ``updated``'s new target."""
        gid = group.group_id
        members = dict(group.members)
        current = dict(group.target)
        regexes = self._pending_regexes(records, gid)
        replace = self._replacing(group, updated) if updated is not None else {}
        for mid, m in replace.items():
            if m is None:
                members.pop(mid, None)
                assert updated is not None
                current[updated.member_id] = group.target.get(mid, EMPTY)
            else:
                members[mid] = m
        metadata = {m.topic_id: m for m in self._subscription_metadata(
            self._topic_names(group, replace, regexes), view).values()}
        topics = {tid: TopicSpec(m.partitions, {p: frozenset(r) for p, r in m.racks}) for tid, m in metadata.items()}
        specs = {
            mid: MemberSpec(self._subscribed_ids(m, group, view, regexes) & topics.keys(), current.get(mid, EMPTY),
                            m.instance_id, m.rack_id)
            for mid, m in members.items()
        }
        name = self._preferred_assignor(members.values())
        assign = ASSIGNORS.get(name, ASSIGNORS[self.config.assignors[0]])
        result = assign(specs, topics)
        for mid in sorted(members):
            new = {t: ps for t, ps in result.get(mid, {}).items() if ps}
            old = group.target.get(mid)
            if old is None or dict(old) != new:
                records.append(TargetMemberRecord(gid, mid, new))
        records.append(TargetEpochRecord(gid, epoch))
        log.info("[GroupId %s] Computed a new target assignment for epoch %d with '%s' assignor.", gid, epoch, name)
        if updated is None:
            return EMPTY
        return {t: ps for t, ps in result.get(updated.member_id, {}).items() if ps}

    def _maybe_reconcile(self, group: ConsumerGroup, member: ConsumerMember, target_epoch: int, target: Assignment,
                         owned: Mapping[uuid.UUID, frozenset[int]] | None, subscription_changed: bool,
                         records: list[Record], view: TopicsView) -> ConsumerMember:
        if not subscription_changed and member.reconciled_to(target_epoch) and member.member_id in group.members:
            return member
        regexes = self._pending_regexes(records, group.group_id)
        subscribed = self._subscribed_ids(member, group, view, regexes)
        # the owners as this operation's records leave them: a replaced static member frees its own
        replaced = {r.member_id for r in records if isinstance(r, CurrentAssignmentRecord) and r.member is None}

        def owner_epoch(tid: uuid.UUID, p: int) -> int:
            found = group.owners.get((tid, p))
            return -1 if found is None or found[0] in replaced else found[1]

        new = reconcile(member, target_epoch, target, owner_epoch, owned, subscribed, subscription_changed)
        if new != member or member.member_id not in group.members:
            records.append(CurrentAssignmentRecord(group.group_id, new.member_id, new))
        return new

    def _timers_after(self, now: int, group_id: str, member: ConsumerMember, session_timeout_ms: int) -> None:
        """After a member's heartbeat: its session starts again; a revocation it must make has
        its rebalance timeout (consumer protocol; classic members have join and sync timeouts)."""
        g = self.groups.get(group_id)
        if g is None or member.member_id not in g.members:
            return
        m = g.members[member.member_id]
        g.session_deadline[m.member_id] = now + session_timeout_ms
        if m.uses_classic:
            return
        if m.state is MemberState.UNREVOKED_PARTITIONS:
            epoch_deadline = g.rebalance_deadline.get(m.member_id)
            if epoch_deadline is None or epoch_deadline[0] != m.member_epoch:
                g.rebalance_deadline[m.member_id] = (m.member_epoch, now + max(m.rebalance_timeout_ms, 0))
        else:
            g.rebalance_deadline.pop(m.member_id, None)

    # -- fencing and conversion back --------------------------------------------------------------
    def _fence(self, now: int, group: ConsumerGroup, member: ConsumerMember, outcome: Outcome, image: MetadataImage,
               reason: str) -> None:
        """Remove a member (left, session expired, rebalance timed out): the group epoch goes up;
        or, when it was the last member using the consumer protocol, the group becomes a classic
        group again."""
        records = outcome.records
        if self._downgradable(group, member.member_id):
            self._to_classic(now, group, member.member_id, None, outcome, self.view(image))
            return
        gid = group.group_id
        records.extend(self._removal_records(gid, member.member_id))
        regex = member.subscribed_topic_regex
        if regex and group.regex_subscribers(regex) == 1:
            records.append(RegexRecord(gid, regex, None))
        view = self.view(image)
        names = self._topic_names(group, {member.member_id: None}, self._pending_regexes(records, gid))
        metadata = self._subscription_metadata(names, view)
        if metadata != group.subscription_metadata:
            records.append(SubscriptionMetadataRecord(gid, tuple(metadata[n] for n in sorted(metadata))))
        records.append(GroupEpochRecord(gid, group.group_epoch + 1))
        log.info("[GroupId %s] Member %s fenced from the group because %s.", gid, member.member_id, reason)
        self._apply(now, records, outcome)

    def _downgradable(self, group: ConsumerGroup, leaving: str) -> bool:
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

    def _to_classic(self, now: int, group: ConsumerGroup, leaving: str | None, joining: ConsumerMember | None,
                    outcome: Outcome, view: TopicsView) -> None:
        """Kafka's ClassicGroup.fromConsumerGroup: the remaining members (and ``joining``, taking
        the place of ``leaving``) become a classic group at the group epoch, Stable, each with its
        target assignment in the consumer protocol; a member that left makes it rebalance."""
        gid = group.group_id
        records = outcome.records
        records.extend(self._group_tombstones(group, keep_members=()))
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
            parts = view.by_name(group.target.get(source, EMPTY))
            version = _consumer_protocol_version(cm.metadata(classic.protocol_name or ""))
            cm.assignment = encode_assignment(ConsumerProtocolAssignment(assigned_partitions=[
                ConsumerProtocolAssignment.TopicPartition(topic=t, partitions=ps) for t, ps in sorted(parts.items())
            ]), version)
        records.append(ClassicGroupRecord(gid, classic))
        log.info("[GroupId %s] Converted the consumer group to a classic group.", gid)
        self._apply(now, records, outcome, rebalance_classic=joining is None)

    @staticmethod
    def _group_tombstones(group: ConsumerGroup, keep_members: Iterable[str]) -> list[Record]:
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

    # ==========================================================================================
    # classic members in a consumer group (JoinGroup, SyncGroup, Heartbeat, LeaveGroup)

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
        """A JoinGroup from a member using the classic protocol to a consumer group: it is a member
        like the others, its assignment computed here; the answer names no leader, so the member
        sends an empty SyncGroup and gets its partitions there."""
        group = self._consumer_group(group_id)
        view = self.view(image)
        records: list[Record] = []
        outcome = Outcome(records=records)
        unknown = not member_id
        if unknown:
            member_id = f"{client_id}-{uuid.uuid4()}"
        self._check_size(group, member_id)
        if not group.supports_classic(protocol_type, [n for n, _ in protocols]):
            raise KafkaError(ErrorCode.INCONSISTENT_GROUP_PROTOCOL, f"Member {member_id}'s protocols are not supported.")
        if unknown and version >= 4 and group_instance_id is None:
            outcome.response = JoinResult(member_id, ErrorCode.MEMBER_ID_REQUIRED)
            return outcome
        if group_instance_id is None:
            member, is_new = self._dynamic_member(group, member_id, -1, {}, True, classic=True)
        else:
            member, is_new = self._static_member(group, member_id, -1, group_instance_id, {}, unknown, classic=True,
                                                 records=records)
        replaced = group.static_member(group_instance_id) if group_instance_id is not None else None
        downgrade = (replaced is not None and replaced.member_id != member_id
                     and self._downgradable_replacing(group, replaced.member_id))
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
        changed = self._subscription_changed(group, member, updated, records, is_new)
        regex = self._update_regexes(now, group, member, updated, records, view, lambda _t: True)
        bump = changed or regex is not _Regex.NO_CHANGE
        owned: dict[uuid.UUID, set[int]] = {}
        for tp in getattr(sub, "owned_partitions", None) or []:
            tid = view.id_of(tp.topic)
            if tid is not None:
                owned.setdefault(tid, set()).update(tp.partitions)
        frozen_owned = freeze(owned)
        group_epoch = self._maybe_bump(group, bump, updated, records, view)
        if downgrade:
            if not bump:
                updated = self._maybe_reconcile(group, updated, group.assignment_epoch,
                                                group.target_of(updated.member_id, updated.instance_id),
                                                frozen_owned, False, records, view)
            assert replaced is not None
            self._to_classic(now, group, replaced.member_id, updated, outcome, view)
        else:
            if group_epoch > group.assignment_epoch:
                target = self._compute_target(group, group_epoch, updated, records, view)
                target_epoch = group_epoch
            else:
                target_epoch = group.assignment_epoch
                target = group.target_of(updated.member_id, updated.instance_id)
            updated = self._maybe_reconcile(group, updated, target_epoch, target, frozen_owned, bump, records, view)
            self._apply(now, records, outcome)
            self._timers_after(now, group_id, updated, session_timeout_ms)
            g = self.groups.get(group_id)
            if g is not None and updated.member_id in g.members:
                g.join_deadline.pop(updated.member_id, None)
                g.sync_deadline[updated.member_id] = now + max(rebalance_timeout_ms, 0)
        assert updated.classic is not None
        outcome.response = JoinResult(
            updated.member_id, ErrorCode.NONE, updated.member_epoch, CONSUMER_PROTOCOL,
            updated.classic.protocols[0][0] if updated.classic.protocols else None, "", [],
        )
        return outcome

    def _downgradable_replacing(self, group: ConsumerGroup, replaced: str) -> bool:
        """A static member using the classic protocol takes the place of the last member using the
        consumer protocol: the group goes back to classic."""
        m = group.members.get(replaced)
        if m is None or m.uses_classic or group.num_classic(except_member=replaced) != len(group.members) - 1:
            return False
        if not self.config.downgrade:
            return False
        return len(group.members) <= self.config.classic_max_size

    def _classic_member(self, group: ConsumerGroup, member_id: str, instance_id: str | None) -> ConsumerMember:
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

    def _rejoin_needed(self, group: ConsumerGroup, member: ConsumerMember, now: int) -> None:
        group.join_deadline.setdefault(member.member_id, now + max(member.rebalance_timeout_ms, 0))

    def classic_sync(self, now: int, image: MetadataImage, *, group_id: str, generation_id: int, member_id: str,
                     group_instance_id: str | None, protocol_type: str | None, protocol_name: str | None) -> SyncResult:
        group = self._consumer_group(group_id)
        member = self._classic_member(group, member_id, group_instance_id)
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
        view = self.view(image)
        parts = view.by_name(member.assigned)
        version = _consumer_protocol_version(member.classic.metadata())
        assignment = encode_assignment(ConsumerProtocolAssignment(assigned_partitions=[
            ConsumerProtocolAssignment.TopicPartition(topic=t, partitions=ps) for t, ps in sorted(parts.items())
        ]), version)
        return SyncResult(member.member_id, ErrorCode.NONE, CONSUMER_PROTOCOL, name, assignment)

    def classic_heartbeat(self, now: int, *, group_id: str, member_id: str, group_instance_id: str | None,
                          generation_id: int) -> ErrorCode:
        group = self._consumer_group(group_id)
        member = self._classic_member(group, member_id, group_instance_id)
        assert member.classic is not None
        if generation_id != member.member_epoch:
            return ErrorCode.ILLEGAL_GENERATION
        group.session_deadline[member.member_id] = now + member.classic.session_timeout_ms
        if (member.member_epoch < group.group_epoch or member.state is MemberState.UNREVOKED_PARTITIONS
                or (member.state is MemberState.UNRELEASED_PARTITIONS and not group.waiting_on_unreleased(member))):
            self._rejoin_needed(group, member, now)
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def classic_leave(self, now: int, image: MetadataImage, group_id: str,
                      members: list[tuple[str, str | None]]) -> Outcome:
        """LeaveGroup of classic members of a consumer group; ``response``: the error of each."""
        group = self._consumer_group(group_id)
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
            records.extend(self._removal_records(group_id, member.member_id))
            leaving[member.member_id] = None
            errors.append(ErrorCode.NONE)
        if records:
            view = self.view(image)
            metadata = self._subscription_metadata(self._topic_names(group, leaving), view)
            if metadata != group.subscription_metadata:
                records.append(SubscriptionMetadataRecord(group_id, tuple(metadata[n] for n in sorted(metadata))))
            records.append(GroupEpochRecord(group_id, group.group_epoch + 1))
            self._apply(now, records, outcome)
        outcome.response = errors
        return outcome

    # ==========================================================================================
    # offsets

    def validate_offset_commit(self, group_id: str, member_id: str, instance_id: str | None, epoch: int,
                               transactional: bool, api_version: int) -> None:
        """Kafka's ConsumerGroup.validateOffsetCommit: the member epoch is the generation."""
        group = self._consumer_group(group_id)
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
        group = self._consumer_group(group_id)
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
        group = self._consumer_group(group_id)
        if group.members:
            raise KafkaError(ErrorCode.NON_EMPTY_GROUP, "The group is not empty.")
        outcome = Outcome(records=self._group_tombstones(group, ()))
        self._apply(now, outcome.records, outcome)
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

    def _apply(self, now: int, records: list[Record], outcome: Outcome, *, rebalance_classic: bool = False) -> None:
        """Apply an operation's records (as loading replays them), then move each group it
        touched to its new state along the transition table."""
        touched: dict[str, ConsumerGroupState] = {}
        for r in records:
            g = self.groups.get(r.group_id)
            if r.group_id not in touched:
                touched[r.group_id] = g.state if g is not None else ConsumerGroupState.DEAD
            if isinstance(r, ClassicGroupRecord):
                self._replay_classic(now, r, outcome, rebalance_classic)
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

    def _replay_classic(self, now: int, r: ClassicGroupRecord, outcome: Outcome, rebalance: bool) -> None:
        if r.group is None:
            self.classic.hand_over(r.group_id)
            return
        self.classic.load_group(r.group, now)
        if rebalance:
            outcome.classic_effects.extend(
                e for e in self.classic.rebalance(now, r.group_id, "the group went back to the classic protocol")
                if isinstance(e, (JoinResult, SyncResult))
            )

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


def _consumer_protocol_version(metadata: bytes) -> int:
    """The version a classic member's subscription is in: its assignment is answered in it."""
    if len(metadata) < 2:
        return 0
    version = int.from_bytes(metadata[:2], "big", signed=True)
    return min(max(version, 0), 3)


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
