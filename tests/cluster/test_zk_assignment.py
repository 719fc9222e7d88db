"""The ZooKeeper consumer's partition assignment (Kafka 0.10's range and round-robin)."""

from __future__ import annotations

from collections import Counter

import pytest

from odradek.cluster.zk_assignment import java_string_hash, range_assign, roundrobin_assign, thread_id_key


def test_range_gives_three_consumers_two_contiguous_partitions_each() -> None:
    subs = {"c2": {"t": 1}, "c1": {"t": 1}, "c3": {"t": 1}}
    got = range_assign(subs, {"t": [5, 4, 3, 2, 1, 0]})
    assert got == {("t", 0): "c1-0", ("t", 1): "c1-0", ("t", 2): "c2-0", ("t", 3): "c2-0", ("t", 4): "c3-0", ("t", 5): "c3-0"}


def test_range_gives_the_extra_partitions_to_the_first_threads() -> None:
    got = range_assign({"a": {"t": 2}, "b": {"t": 1}}, {"t": list(range(7))})
    assert Counter(got.values()) == {"a-0": 3, "a-1": 2, "b-0": 2}
    assert [got[("t", p)] for p in range(7)] == ["a-0"] * 3 + ["a-1"] * 2 + ["b-0"] * 2


def test_range_orders_threads_by_number_not_text() -> None:
    got = range_assign({"c": {"t": 11}}, {"t": list(range(11))})
    assert got[("t", 10)] == "c-10" and got[("t", 2)] == "c-2"
    assert sorted(["c-10", "c-2", "b-3"], key=thread_id_key) == ["b-3", "c-2", "c-10"]


def test_range_per_topic_and_more_consumers_than_partitions() -> None:
    subs = {"a": {"x": 1, "y": 1}, "b": {"x": 1}, "c": {"x": 1}}
    got = range_assign(subs, {"x": [0, 1], "y": [0, 1, 2]})
    assert got == {("x", 0): "a-0", ("x", 1): "b-0", ("y", 0): "a-0", ("y", 1): "a-0", ("y", 2): "a-0"}
    assert range_assign(subs, {}) == {}


def test_java_string_hash_matches_java() -> None:
    assert java_string_hash("hello") == 99162322
    assert java_string_hash("") == 0
    assert java_string_hash("polygenelubricants") == -2147483648


def test_roundrobin_deals_every_partition_evenly() -> None:
    subs = {"a": {"x": 1, "y": 1}, "b": {"x": 1, "y": 1}, "c": {"x": 1, "y": 1}}
    parts = {"x": list(range(4)), "y": list(range(5))}
    got = roundrobin_assign(subs, parts)
    assert set(got) == {(t, p) for t, ps in parts.items() for p in ps}
    assert sorted(Counter(got.values()).values()) == [3, 3, 3]
    order = sorted(got, key=lambda tp: java_string_hash(f"[{tp[0]},{tp[1]}]"))
    assert [got[tp] for tp in order] == ["a-0", "b-0", "c-0"] * 3


def test_roundrobin_needs_identical_subscriptions() -> None:
    with pytest.raises(ValueError):
        roundrobin_assign({"a": {"x": 1}, "b": {"y": 1}}, {"x": [0], "y": [0]})
    with pytest.raises(ValueError):
        roundrobin_assign({"a": {"x": 2}, "b": {"x": 1}}, {"x": [0]})
    assert roundrobin_assign({}, {"x": [0]}) == {}
