"""One reconciliation step of a KIP-848 consumer group member towards its target assignment
(Kafka's CurrentAssignmentBuilder): revoke first, then assign what is free.  A pure function of
the member, the target and the partitions' owners; the member's state changes only along
:data:`~odradek.cluster.consumer_group_model.MEMBER_TRANSITIONS`."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping

from odradek.cluster.consumer_group_model import (
    MEMBER_TRANSITIONS,
    Assignment,
    ConsumerMember,
    MemberState,
    owns_any,
)
from odradek.errors import ErrorCode, KafkaError

__all__ = ["reconcile"]


def reconcile(
    member: ConsumerMember,
    target_epoch: int,
    target: Assignment,
    owner_epoch: Callable[[uuid.UUID, int], int],
    owned: Mapping[uuid.UUID, frozenset[int]] | None,
    subscribed: frozenset[uuid.UUID],
    enforce_subscription: bool = False,
) -> ConsumerMember:
    """One reconciliation step of a member towards the target assignment (Kafka's
    CurrentAssignmentBuilder): revoke first, then assign what is free.  ``owner_epoch`` gives the
    epoch of a partition's current owner (-1: free); ``owned`` is what the member reported (None:
    not reported); ``subscribed`` the topic ids it subscribes to now.  Returns ``member`` itself
    when nothing changes."""
    state = member.state
    if state is MemberState.STABLE:
        if member.member_epoch != target_epoch:
            new = _next_assignment(member, member.member_epoch, target_epoch, target, owner_epoch, owned, subscribed)
        elif enforce_subscription:
            new = _drop_unsubscribed(member, owned, subscribed)
        else:
            return member
    elif state is MemberState.UNREVOKED_PARTITIONS:
        if owns_any(owned, member.pending_revocation):
            if not enforce_subscription:
                return member
            new = _drop_unsubscribed(member, owned, subscribed)
        else:
            new = _next_assignment(member, member.member_epoch, target_epoch, target, owner_epoch, owned, subscribed)
    elif state is MemberState.UNRELEASED_PARTITIONS:
        new = _next_assignment(member, member.member_epoch, target_epoch, target, owner_epoch, owned, subscribed)
    else:  # a state a newer broker wrote: start again from nothing
        if owned is None or any(owned.values()):
            raise KafkaError(
                ErrorCode.FENCED_MEMBER_EPOCH,
                "The consumer group member is in a unknown state. The member must abandon all its partitions and rejoin.",
            )
        new = _next_assignment(member, target_epoch, target_epoch, target, owner_epoch, owned, subscribed)
    if new.state is not member.state:
        MEMBER_TRANSITIONS.check(member.state, new.state, f"member {member.member_id}")
    return new


def _drop_unsubscribed(
    member: ConsumerMember, owned: Mapping[uuid.UUID, frozenset[int]] | None, subscribed: frozenset[uuid.UUID]
) -> ConsumerMember:
    """The member's subscription changed: the partitions of topics it no longer subscribes to
    are revoked at once, before the next target assignment."""
    assigned = member.assigned
    if not subscribed and not member.pending_revocation:
        new_assigned: dict[uuid.UUID, frozenset[int]] = {}
        pending = dict(assigned)
    else:
        new_assigned = {t: ps for t, ps in assigned.items() if t in subscribed}
        pending = dict(member.pending_revocation)
        for t, ps in assigned.items():
            if t not in subscribed:
                pending[t] = pending.get(t, frozenset()) | ps
    if new_assigned == dict(assigned):
        return member
    if pending and owns_any(owned, pending):
        return member.with_epoch(member.member_epoch, state=MemberState.UNREVOKED_PARTITIONS,
                                 assigned=new_assigned, pending_revocation=pending)
    return member.with_epoch(member.member_epoch, assigned=new_assigned)


def _next_assignment(
    member: ConsumerMember,
    epoch: int,
    target_epoch: int,
    target: Assignment,
    owner_epoch: Callable[[uuid.UUID, int], int],
    owned: Mapping[uuid.UUID, frozenset[int]] | None,
    subscribed: frozenset[uuid.UUID],
) -> ConsumerMember:
    unreleased = False
    new_assigned: dict[uuid.UUID, frozenset[int]] = {}
    revoke: dict[uuid.UUID, frozenset[int]] = {}
    add: dict[uuid.UUID, frozenset[int]] = {}
    for tid in set(target) | set(member.assigned):
        tgt = target.get(tid, frozenset()) if tid in subscribed else frozenset()
        cur = member.assigned.get(tid, frozenset())
        keep = cur & tgt
        gone = cur - keep
        own_pending = member.pending_revocation.get(tid, frozenset())
        wanted = tgt - keep
        free = frozenset(p for p in wanted if owner_epoch(tid, p) == -1 or p in own_pending)
        if free != wanted:
            unreleased = True
        if keep:
            new_assigned[tid] = keep
        if gone:
            revoke[tid] = gone
        if free:
            add[tid] = free
    if revoke and owns_any(owned, revoke):
        return member.with_epoch(epoch, state=MemberState.UNREVOKED_PARTITIONS, assigned=new_assigned,
                                 pending_revocation=revoke)
    for tid, ps in add.items():
        new_assigned[tid] = new_assigned.get(tid, frozenset()) | ps
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return member.with_epoch(target_epoch, state=state, assigned=new_assigned, pending_revocation={})

