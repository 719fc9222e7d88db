"""Which ``__consumer_offsets`` partition coordinates a group: Kafka's
``Utils.abs(groupId.hashCode()) % offsets.topic.num.partitions``, where ``hashCode`` is Java's
``String.hashCode`` over UTF-16 code units and ``Utils.abs(Integer.MIN_VALUE) == 0``.

The expected values were computed with OpenJDK 17 (``"...".hashCode()`` and Kafka's ``Utils.abs``);
"abc" is also worked out by hand.  Real clients then find the coordinator (FindCoordinator from
confluent-kafka and at every protocol version) and their commits land in that partition on disk.
"""

from __future__ import annotations

import pytest
from confluent_kafka import Consumer, TopicPartition
from hypothesis import given
from hypothesis import strategies as st

from odradek.cluster.assignment import java_string_hash, partition_for
from odradek.protocol.messages.coordinator import OffsetCommitKey
from odradek.records import read_batches
from odradek.testing import BrokerProcess, WireClient
from tests.groups.group_helpers import CK_COMMON, committed_offsets, create_topic
from tests.groups.wire_group import find_coordinator

INT_MIN = -(1 << 31)

# (group id, Java String.hashCode, Kafka's Utils.abs(hash) % 50) -- from OpenJDK 17
JAVA = [
    ("", 0, 0),
    ("a", 97, 47),
    ("abc", 96354, 4),  # 97*31^2 + 98*31 + 99
    ("my-group", -1906497762, 12),
    ("console-consumer-12345", 158455506, 6),
    ("polygenelubricants", INT_MIN, 0),  # hashCode == Integer.MIN_VALUE: Utils.abs gives 0
    ("GydZG_", INT_MIN, 0),
    ("caf\u00e9", 3045921, 21),
    ("\u65e5\u672c\u8a9e\u30b0\u30eb\u30fc\u30d7", -305235731, 31),  # 日本語グループ
    ("grupa-\u017c\u00f3\u0142\u0107", -1755706514, 14),  # grupa-żółć
    ("emoji-\U0001f600", 1164511306, 6),  # a surrogate pair: two UTF-16 code units
    ("group-with-a-rather-long-name-to-wrap-around-many-times-0123456789", 2097697556, 6),
]


def reference_hash(s: str) -> int:
    """Java's String.hashCode written out independently: s[0]*31^(n-1) + ... + s[n-1] over
    UTF-16 code units, in 32-bit two's complement."""
    units: list[int] = []
    for ch in s:
        cp = ord(ch)
        if cp >= 0x10000:
            cp -= 0x10000
            units += [0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF)]
        else:
            units.append(cp)
    n = len(units)
    total = sum(u * pow(31, n - 1 - i, 1 << 32) for i, u in enumerate(units)) % (1 << 32)
    return total - (1 << 32) if total >= 1 << 31 else total


def test_abc_by_hand() -> None:
    assert 97 * 31 * 31 + 98 * 31 + 99 == 96354 == java_string_hash("abc")


@pytest.mark.parametrize(("group", "java_hash", "partition"), JAVA)
def test_matches_java(group: str, java_hash: int, partition: int) -> None:
    assert reference_hash(group) == java_hash
    assert java_string_hash(group) == java_hash
    assert partition_for(group, 50) == partition


def test_integer_min_value_maps_to_partition_zero() -> None:
    for group in ("polygenelubricants", "GydZG_"):
        assert java_string_hash(group) == INT_MIN
        for n in (1, 3, 7, 50, 64):
            assert partition_for(group, n) == 0


@given(st.text(max_size=40), st.integers(1, 200))
def test_partition_for_any_group_id(group: str, partitions: int) -> None:
    h = reference_hash(group)
    assert java_string_hash(group) == h
    expected = 0 if h == INT_MIN else abs(h) % partitions
    assert partition_for(group, partitions) == expected
    assert 0 <= partition_for(group, partitions) < partitions


# ------------------------------------------------------------------------------------------------
# against the broker (50 offsets partitions, Kafka's default)

GROUPS = ["polygenelubricants", "caf\u00e9", "\u65e5\u672c\u8a9e\u30b0\u30eb\u30fc\u30d7", "emoji-\U0001f600", "my-group"]


def test_find_coordinator_every_version(broker: BrokerProcess) -> None:
    w = WireClient(broker.host, broker.port)
    try:
        for version in range(5):
            resp = find_coordinator(w, "my-group", version)
            if version >= 4:
                assert [(c.key, c.error_code, c.node_id, c.host, c.port) for c in resp.coordinators] == [
                    ("my-group", 0, 0, broker.host, broker.port)
                ]
            else:
                assert (resp.error_code, resp.node_id, resp.host, resp.port) == (0, 0, broker.host, broker.port)
    finally:
        w.close()


def test_commits_land_in_the_coordinator_partition(broker: BrokerProcess, name: str) -> None:
    """confluent-kafka finds the coordinator of each group and commits; the commit records are in
    ``__consumer_offsets-<partition_for(group, 50)>`` on disk, and nowhere else."""
    topic = name
    create_topic(broker.bootstrap, topic, 1)
    suffix = name[-8:]
    groups = [g if g == "polygenelubricants" else f"{g}-{suffix}" for g in GROUPS]
    for i, group in enumerate(groups):
        c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, **CK_COMMON})
        try:
            c.commit(offsets=[TopicPartition(topic, 0, 100 + i)], asynchronous=False)
            assert [(tp.offset, tp.error) for tp in c.committed([TopicPartition(topic, 0)], timeout=10)] == [
                (100 + i, None)
            ]
        finally:
            c.close()
        assert committed_offsets(broker.bootstrap, group, topic, 1) == {0: 100 + i}

    where: dict[str, set[int]] = {}
    for d in broker.data_dir.glob("__consumer_offsets-*"):
        p = int(d.name.rsplit("-", 1)[1])
        for seg in sorted(d.glob("*.log")):
            for batch in read_batches(seg.read_bytes()):
                for rec in batch.records:
                    key = rec.key
                    assert key is not None
                    version = int.from_bytes(key[:2], "big")
                    if version > 1:
                        continue  # group metadata
                    k = OffsetCommitKey.decode_from(key, 2, version)[0]
                    if k.topic == topic:
                        where.setdefault(k.group, set()).add(p)
    assert where == {g: {partition_for(g, 50)} for g in groups}
    assert where["polygenelubricants"] == {0}
