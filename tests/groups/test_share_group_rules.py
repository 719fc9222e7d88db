"""The share-group rules (:mod:`odradek.cluster.share_group`) on the pure state machine.

Whatever sequence of joins, heartbeats (at the member's epoch, a stale or a future one), leaves,
session expiries, subscription changes and partitions added:

* every answer is a result or Kafka's error for that case (FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID,
  GROUP_MAX_SIZE_REACHED), never another exception;
* once every member has heartbeated with nothing new, each member's epoch is the group's
  assignment epoch, which is the group epoch; every partition of every subscribed topic is
  assigned to a member subscribed to it; every member has a partition of each subscribed topic
  (shared when members outnumber partitions), a topic's partitions are shared evenly and its
  subscribers' partition counts are within one of each other;
* the group epoch never goes back;
* the records written for each change (:mod:`odradek.broker.coordinators.share_records`),
  replayed into a fresh coordinator (a failover), give the same group: epochs, members, their
  subscriptions, epochs and partitions, the target assignment.
"""

from __future__ import annotations

import uuid
from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from odradek.broker.coordinators.share_records import ShareRecordLoader, changes, group_records
from odradek.cluster.share_group import ShareGroupConfig, ShareGroups, ShareHeartbeat, simple_assign
from odradek.errors import ErrorCode, KafkaError
from tests.cluster.consumer_sim import image, topic_id

GROUP = "g"
TOPICS = {"a": 2, "b": 3, "c": 1}
SUBSCRIPTIONS = st.sampled_from([("a",), ("b",), ("a", "b"), ("a", "b", "c"), ("c",)])
SESSION = 1000

op = st.one_of(
    st.tuples(st.just("join"), SUBSCRIPTIONS),
    st.tuples(st.just("heartbeat"), st.integers(0, 7)),
    st.tuples(st.just("stale"), st.integers(0, 7), st.integers(-3, 3)),
    st.tuples(st.just("leave"), st.integers(0, 7)),
    st.tuples(st.just("subscribe"), st.integers(0, 7), SUBSCRIPTIONS),
    st.tuples(st.just("wait"), st.integers(1, SESSION)),
    st.tuples(st.just("grow"), st.sampled_from(sorted(TOPICS)), st.integers(1, 3)),
)
ALLOWED = {ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.GROUP_MAX_SIZE_REACHED}


@given(st.lists(op, max_size=40))
def test_any_sequence_settles_with_every_partition_assigned(ops: list[tuple]) -> None:
    groups = ShareGroups(ShareGroupConfig(session_timeout_ms=SESSION, heartbeat_interval_ms=100, max_size=6))
    topics = dict(TOPICS)
    now = 0
    epochs: dict[str, int] = {}  # the clients' view: member id -> epoch (0: must rejoin)
    subs: dict[str, tuple[str, ...]] = {}
    last_group_epoch = 0
    written: list[tuple[bytes, bytes | None]] = []

    def beat(mid: str, epoch: int, names: tuple[str, ...] | None = None) -> None:
        nonlocal last_group_epoch
        if names is not None:
            subs[mid] = names
        if epoch == 0:
            names = subs[mid]
        before = group_records(groups.group(GROUP))
        try:
            r = groups.heartbeat(now, ShareHeartbeat(GROUP, mid, epoch, subscribed_topic_names=names),
                                 image(topics), lambda _g: None)
        except KafkaError as exc:
            assert group_records(groups.group(GROUP)) == before, "an error changed the group"
            assert exc.code in ALLOWED, exc
            if exc.code is ErrorCode.FENCED_MEMBER_EPOCH:
                epochs[mid] = 0  # the client rejoins with its member id
            elif exc.code is ErrorCode.UNKNOWN_MEMBER_ID:
                epochs.pop(mid, None)  # removed: the client would rejoin as a new member
            return
        written.extend(changes(before, group_records(groups.group(GROUP))))
        if epoch == -1:
            epochs.pop(mid, None)
        else:
            epochs[mid] = r.member_epoch
        g = groups.group(GROUP)
        assert g is not None and g.group_epoch >= last_group_epoch
        last_group_epoch = g.group_epoch

    def pick(i: int) -> str | None:
        ids = sorted(epochs)
        return ids[i % len(ids)] if ids else None

    for o in ops:
        if o[0] == "join":
            beat(str(uuid.uuid4()), 0, o[1])
        elif o[0] in ("heartbeat", "leave", "stale", "subscribe") and (mid := pick(o[1])) is not None:
            if o[0] == "heartbeat":
                beat(mid, epochs[mid])
            elif o[0] == "leave":
                beat(mid, -1)
            elif o[0] == "stale":
                beat(mid, max(1, epochs[mid] + o[2]))
            else:
                beat(mid, epochs[mid], o[2])
        elif o[0] == "wait":
            now += o[1]
            before = group_records(groups.group(GROUP))
            expired = groups.tick(now, image(topics))
            written.extend(changes(before, group_records(groups.group(GROUP))))
            for gid, mid in expired:
                assert gid == GROUP
                epochs.pop(mid, None)
        elif o[0] == "grow":
            topics[o[1]] += o[2]

    g = groups.group(GROUP)
    loader = ShareRecordLoader()
    for key, value in written:
        loader.replay(key, value)
    again = loader.groups()
    if g is None:
        assert again == {}
    else:
        h = again[GROUP]
        assert (h.group_epoch, h.assignment_epoch, h.metadata_hash, h.target) == (
            g.group_epoch, g.assignment_epoch, g.metadata_hash, g.target)
        assert {mid: (m.member_epoch, m.previous_epoch, m.subscribed_topic_names, m.assigned)
                for mid, m in h.members.items()} == {
            mid: (m.member_epoch, m.previous_epoch, m.subscribed_topic_names, m.assigned)
            for mid, m in g.members.items()}
    # everyone still there heartbeats twice with nothing new
    for _ in range(2):
        for mid in sorted(g.members if g is not None else ()):
            beat(mid, epochs[mid])
    if g is None or not g.members:
        return
    assert g.state == "Stable" and g.assignment_epoch == g.group_epoch
    for m in g.members.values():
        assert m.member_epoch == g.assignment_epoch and m.assigned == g.target[m.member_id]
    for name in {t for m in g.members.values() for t in m.subscribed_topic_names}:
        tid = topic_id(name)
        subscribers = [m for m in g.members.values() if name in m.subscribed_topic_names]
        counts = Counter(p for m in subscribers for p in m.assigned.get(tid, ()))
        assert set(counts) == set(range(topics[name])), (name, counts)
        assert all(m.assigned.get(tid) for m in subscribers)
        assert max(counts.values()) - min(counts.values()) <= 1
        sizes = [len(m.assigned.get(tid, ())) for m in subscribers]
        assert max(sizes) - min(sizes) <= 1, (name, sizes)
        for m in g.members.values():
            if name not in m.subscribed_topic_names:
                assert tid not in m.assigned


def test_the_simple_assignor_balances_first_then_keeps_what_members_had() -> None:
    tid = uuid.uuid4()
    # five members over two partitions: each partition shared by three (5/2 rounded up), the six
    # places dealt one or two per member
    out = simple_assign({f"m{i}": ["t"] for i in range(5)}, {"t": (tid, 2)})
    assert sorted(len(parts[tid]) for parts in out.values()) == [1, 1, 1, 1, 2]
    assert Counter(p for parts in out.values() for p in parts[tid]) == {0: 3, 1: 3}
    out = simple_assign({"m0": ["t"], "m1": ["t"]}, {"t": (tid, 5)})
    assert sorted(len(parts[tid]) for parts in out.values()) == [2, 3]
    assert simple_assign({"m0": ["gone"]}, {}) == {"m0": {}}
    # a third member joins two that had three partitions each: they keep two of their three
    before = {"m0": {tid: frozenset({0, 1, 2})}, "m1": {tid: frozenset({3, 4, 5})}}
    after = simple_assign({"m0": ["t"], "m1": ["t"], "m2": ["t"]}, {"t": (tid, 6)}, before)
    assert len(after["m0"][tid] & before["m0"][tid]) == 2 and len(after["m1"][tid] & before["m1"][tid]) == 2
    assert sorted(p for parts in after.values() for p in parts[tid]) == list(range(6))
    # and when it leaves, they get their partitions back without moving the others
    again = simple_assign({"m0": ["t"], "m1": ["t"]}, {"t": (tid, 6)}, {k: after[k] for k in ("m0", "m1")})
    assert again["m0"][tid] >= after["m0"][tid] and again["m1"][tid] >= after["m1"][tid]


def test_a_groups_own_timeouts_override_the_brokers() -> None:
    groups = ShareGroups(ShareGroupConfig(session_timeout_ms=45000, heartbeat_interval_ms=5000))
    groups.group_timeouts = lambda gid: (500, 50) if gid == "own" else (None, None)
    topics = image({"a": 1})
    mine = groups.heartbeat(0, ShareHeartbeat("own", "m1", 0, subscribed_topic_names=("a",)), topics, lambda _g: None)
    other = groups.heartbeat(0, ShareHeartbeat("other", "m2", 0, subscribed_topic_names=("a",)), topics,
                             lambda _g: None)
    assert (mine.heartbeat_interval_ms, other.heartbeat_interval_ms) == (50, 5000)
    assert groups.next_deadline() == 500
    assert groups.tick(499, topics) == []
    assert groups.tick(500, topics) == [("own", "m1")]
    assert groups.next_deadline() == 45000


@given(members=st.integers(1, 9), count=st.integers(1, 9),
       previous=st.lists(st.sets(st.integers(0, 12), max_size=6), max_size=9))
def test_the_simple_assignor_from_any_previous_assignment(members: int, count: int, previous: list[set[int]]) -> None:
    """Whatever the previous target (partitions gone, members new): every partition is assigned,
    each to at most the members over the partitions rounded up; every member gets one or more,
    the counts within one."""
    tid = uuid.uuid4()
    ids = [f"m{i}" for i in range(members)]
    current = {m: {tid: frozenset(ps)} for m, ps in zip(ids, previous, strict=False)}
    out = simple_assign(dict.fromkeys(ids, ("t",)), {"t": (tid, count)}, current)
    sharing = -(-members // count)
    holders = Counter(p for parts in out.values() for p in parts.get(tid, ()))
    assert set(holders) == set(range(count))
    assert max(holders.values()) <= sharing
    sizes = [len(out[m].get(tid, ())) for m in ids]
    assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1, sizes


def test_a_member_joining_a_balanced_group_never_leaves_a_partition_short() -> None:
    """Four members sharing two partitions two by two, a fifth joins: each partition gets three
    members, whatever the member ids (the sticky deal once gave one partition only two when the
    member due a second partition already held the one still short)."""
    import random

    from odradek.cluster.share_group import simple_assign

    tid = uuid.uuid4()
    for seed in range(300):
        rnd = random.Random(seed)
        old = [str(uuid.UUID(int=rnd.getrandbits(128))) for _ in range(4)]
        current = {m: {tid: frozenset({i % 2})} for i, m in enumerate(old)}
        members = [*old, str(uuid.UUID(int=rnd.getrandbits(128)))]
        out = simple_assign({m: ["t"] for m in members}, {"t": (tid, 2)}, current)
        owners = [sum(1 for m in members if p in out[m].get(tid, ())) for p in (0, 1)]
        sizes = sorted(len(out[m].get(tid, ())) for m in members)
        assert owners == [3, 3] and sizes[0] >= 1 and sizes[-1] - sizes[0] <= 1, (seed, owners, sizes)
