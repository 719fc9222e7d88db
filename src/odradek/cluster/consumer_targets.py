"""The subscriptions and the target assignment of KIP-848 consumer groups (Kafka's
TargetAssignmentBuilder and the subscription bookkeeping of its GroupMetadataManager): the
regular expressions members subscribe with, resolved against the topics; the topics a group
subscribes to and its epoch, bumped when they change; the server-side assignor a group uses and
the target assignment it computes for a group epoch; and the reconciliation step of one member
towards its target (:func:`~odradek.cluster.consumer_reconciliation.reconcile`).  Each call
appends the records of what it decided to an operation's records; it changes no group."""

from __future__ import annotations

import enum
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping

from odradek.cluster.consumer_assignors import ASSIGNORS, MemberSpec, TopicSpec
from odradek.cluster.consumer_group_model import (
    EMPTY,
    Assignment,
    ConsumerGroup,
    ConsumerMember,
    CurrentAssignmentRecord,
    GroupEpochRecord,
    Record,
    RegexRecord,
    ResolvedRegex,
    SubscriptionMetadataRecord,
    TargetEpochRecord,
    TargetMemberRecord,
    TopicMetadata,
    TopicsView,
    compile_regex,
)
from odradek.cluster.consumer_reconciliation import reconcile
from odradek.errors import KafkaError

__all__ = ["RegexChange", "TargetAssignments"]

#: the consumer groups' logger: what happens to a group is told under one name
log = logging.getLogger("odradek.cluster.consumer_group")


class RegexChange(enum.Enum):
    """What a heartbeat changed of the group's regular expressions."""

    NO_CHANGE = 0
    UPDATED = 1
    UPDATED_AND_RESOLVED = 2


class TargetAssignments:
    """The subscriptions, epochs and target assignments of a shard's consumer groups, computed
    with the server-side assignors it is given (the first the default)."""

    def __init__(self, assignors: tuple[str, ...]) -> None:
        self.assignors = assignors

    # -- regular expressions --------------------------------------------------------------------
    def update_regexes(self, now: int, group: ConsumerGroup, member: ConsumerMember, updated: ConsumerMember,
                       records: list[Record], view: TopicsView, describable: Callable[[str], bool]) -> RegexChange:
        """Resolve a regular expression a member brings, and resolve the group's again when topics
        appeared or went since (Kafka resolves them in the background no more than every 10 s;
        here at once, which costs one pass over the topics when they change)."""
        old, new = member.subscribed_topic_regex, updated.subscribed_topic_regex
        status = RegexChange.NO_CHANGE
        resolve: set[str] = set()
        if old != new:
            status = RegexChange.UPDATED
            if old and group.regex_subscribers(old) == 1:
                records.append(RegexRecord(group.group_id, old, None))
            if new:
                if new not in group.resolved:
                    compile_regex(new)  # INVALID_REGULAR_EXPRESSION before anything is written
                    resolve.add(new)
                status = RegexChange.UPDATED_AND_RESOLVED
            elif old:
                status = RegexChange.UPDATED_AND_RESOLVED
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
        if changed and status is RegexChange.NO_CHANGE:
            status = RegexChange.UPDATED_AND_RESOLVED  # topics matched changed: a rebalance
        return status

    # -- subscriptions and epochs ---------------------------------------------------------------
    def topic_names(self, group: ConsumerGroup, replace: Mapping[str, ConsumerMember | None],
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
    def pending_regexes(records: list[Record], group_id: str) -> dict[str, ResolvedRegex | None]:
        return {r.regex: r.resolved for r in records if isinstance(r, RegexRecord) and r.group_id == group_id}

    def subscription_metadata(self, names: Iterable[str], view: TopicsView) -> dict[str, TopicMetadata]:
        out: dict[str, TopicMetadata] = {}
        for name in names:
            meta = view.metadata(name)
            if meta is not None:
                out[name] = meta
        return out

    @staticmethod
    def replacing(group: ConsumerGroup, updated: ConsumerMember) -> dict[str, ConsumerMember | None]:
        """The group's members as this change leaves them: ``updated`` in, the static member it
        takes the place of out."""
        replace: dict[str, ConsumerMember | None] = {}
        previous = group.static_members.get(updated.instance_id) if updated.instance_id is not None else None
        if previous is not None and previous != updated.member_id:
            replace[previous] = None
        replace[updated.member_id] = updated
        return replace

    def maybe_bump(self, group: ConsumerGroup, bump: bool, updated: ConsumerMember, records: list[Record],
                   view: TopicsView) -> int:
        """The subscription metadata of the group with this change (a record when it differs,
        which bumps the epoch too); the group epoch, bumped if ``bump`` or so."""
        names = self.topic_names(group, self.replacing(group, updated), self.pending_regexes(records, group.group_id))
        metadata = self.subscription_metadata(names, view)
        if metadata != group.subscription_metadata:
            bump = True
            records.append(SubscriptionMetadataRecord(group.group_id, tuple(metadata[n] for n in sorted(metadata))))
        epoch = group.group_epoch
        if bump:
            epoch += 1
            records.append(GroupEpochRecord(group.group_id, epoch))
            log.info("[GroupId %s] Bumped group epoch to %d.", group.group_id, epoch)
        return epoch

    def preferred_assignor(self, members: Iterable[ConsumerMember]) -> str:
        counts: dict[str, int] = {}
        for m in members:
            if m.server_assignor:
                counts[m.server_assignor] = counts.get(m.server_assignor, 0) + 1
        if counts:
            order = {name: i for i, name in enumerate(self.assignors)}
            return max(counts, key=lambda a: (counts[a], -order.get(a, len(order))))
        return self.assignors[0]

    def subscribed_ids(self, member: ConsumerMember, group: ConsumerGroup, view: TopicsView,
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

    def compute_target(self, group: ConsumerGroup, epoch: int, updated: ConsumerMember | None,
                       records: list[Record], view: TopicsView) -> Assignment:
        """Kafka's TargetAssignmentBuilder: run the assignor over the members (with ``updated``)
        and write the target of each member whose target changed, then the target's epoch.
        Returns ``updated``'s new target."""
        gid = group.group_id
        members = dict(group.members)
        current = dict(group.target)
        regexes = self.pending_regexes(records, gid)
        replace = self.replacing(group, updated) if updated is not None else {}
        for mid, m in replace.items():
            if m is None:
                members.pop(mid, None)
                assert updated is not None
                current[updated.member_id] = group.target.get(mid, EMPTY)
            else:
                members[mid] = m
        metadata = {m.topic_id: m for m in self.subscription_metadata(
            self.topic_names(group, replace, regexes), view).values()}
        topics = {tid: TopicSpec(m.partitions, {p: frozenset(r) for p, r in m.racks}) for tid, m in metadata.items()}
        specs = {
            mid: MemberSpec(self.subscribed_ids(m, group, view, regexes) & topics.keys(), current.get(mid, EMPTY),
                            m.instance_id, m.rack_id)
            for mid, m in members.items()
        }
        name = self.preferred_assignor(members.values())
        assign = ASSIGNORS.get(name, ASSIGNORS[self.assignors[0]])
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

    def maybe_reconcile(self, group: ConsumerGroup, member: ConsumerMember, target_epoch: int, target: Assignment,
                        owned: Mapping[uuid.UUID, frozenset[int]] | None, subscription_changed: bool,
                        records: list[Record], view: TopicsView) -> ConsumerMember:
        """One reconciliation step of ``member`` towards ``target`` against the partitions' owners as
        this operation's records leave them (its current assignment record when it changed)."""
        if not subscription_changed and member.reconciled_to(target_epoch) and member.member_id in group.members:
            return member
        regexes = self.pending_regexes(records, group.group_id)
        subscribed = self.subscribed_ids(member, group, view, regexes)
        # the owners as this operation's records leave them: a replaced static member frees its own
        replaced = {r.member_id for r in records if isinstance(r, CurrentAssignmentRecord) and r.member is None}

        def owner_epoch(tid: uuid.UUID, p: int) -> int:
            found = group.owners.get((tid, p))
            return -1 if found is None or found[0] in replaced else found[1]

        new = reconcile(member, target_epoch, target, owner_epoch, owned, subscribed, subscription_changed)
        if new != member or member.member_id not in group.members:
            records.append(CurrentAssignmentRecord(group.group_id, new.member_id, new))
        return new

    def target(self, group: ConsumerGroup, group_epoch: int, member: ConsumerMember, records: list[Record],
               view: TopicsView) -> tuple[int, Assignment]:
        """The target ``member`` reconciles to and its epoch: a new target assignment (records)
        when the group epoch went past the target's, else the member's in the current one."""
        if group_epoch > group.assignment_epoch:
            return group_epoch, self.compute_target(group, group_epoch, member, records, view)
        return group.assignment_epoch, group.target_of(member.member_id, member.instance_id)

    def members_removed(self, group: ConsumerGroup, removed: Iterable[str], records: list[Record],
                        view: TopicsView) -> None:
        """After members leave (their removal records written): the group's subscription metadata
        when it changed, and the group epoch bumped."""
        gid = group.group_id
        names = self.topic_names(group, dict.fromkeys(removed), self.pending_regexes(records, gid))
        metadata = self.subscription_metadata(names, view)
        if metadata != group.subscription_metadata:
            records.append(SubscriptionMetadataRecord(gid, tuple(metadata[n] for n in sorted(metadata))))
        records.append(GroupEpochRecord(gid, group.group_epoch + 1))
