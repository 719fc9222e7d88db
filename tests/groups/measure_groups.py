"""Timing of the group coordinator (not collected by pytest; figures for reports, never asserted).

Run: ``.venv/bin/python -m tests.groups.measure_groups [trials]``.  Starts ``odradek serve`` with
``group.initial.rebalance.delay.ms=0`` and prints JSON with

* ``join10``: ten raw-protocol members (``wire_group.WireMember``, one thread each) released
  together by a barrier; per trial the time from the last member's first JoinGroup to every member
  holding its SyncGroup answer in one common generation, the time from the last JoinGroup sent
  (rejoins included) to the last SyncGroup answer, and how many JoinGroups/generations it took;
* ``commits``: sequential synchronous OffsetCommits from one client -- raw OffsetCommit v8 (a
  standalone commit, generation -1, and as the member of a one-member group), and confluent-kafka
  ``commit(asynchronous=False)``.
"""

from __future__ import annotations

import json
import statistics
import sys
import tempfile
import threading
import time
from typing import Any

import confluent_kafka as ck

from odradek.errors import ErrorCode
from odradek.testing import BrokerProcess, WireClient
from tests.groups.group_helpers import BROKER_OVERRIDES, CK_COMMON, create_topic, wait_until
from tests.groups.wire_group import WireMember, all_stable, commit, find_coordinator

MEMBERS = 10


def join10(broker: BrokerProcess, topic: str, group: str) -> dict[str, Any]:
    members = [WireMember(broker.host, broker.port, group, topic, 20, f"m{i}") for i in range(MEMBERS)]
    barrier = threading.Barrier(MEMBERS)

    def go(m: WireMember) -> None:
        barrier.wait()
        m.run()

    threads = [threading.Thread(target=go, args=(m,), daemon=True) for m in members]
    for t in threads:
        t.start()
    gen = wait_until(lambda: all_stable(members), timeout=60, what="stable")
    assert not [e for m in members for e in m.errors]
    last_first_join = max(m.first_join_sent for m in members)
    last_join = max(m.last_join_sent for m in members)
    last_sync = max(m.last_sync_done for m in members)
    out = {
        "last_first_join_to_all_synced_ms": (last_sync - last_first_join) * 1000,
        "last_join_to_last_sync_ms": (last_sync - last_join) * 1000,
        "first_join_to_all_synced_ms": (last_sync - min(m.first_join_sent for m in members)) * 1000,
        "join_requests": sum(m.joins for m in members),
        "generation": gen,
    }
    for m in members:
        m.stop.set()
    for t in threads:
        t.join(10)
    for m in members:
        m.leave()
        m.close()
    return out


def wire_commits(broker: BrokerProcess, topic: str, group: str, n: int, as_member: bool) -> float:
    w = WireClient(broker.host, broker.port)
    find_coordinator(w, group)
    generation, member_id = -1, ""
    m = None
    t = None
    if as_member:
        m = WireMember(broker.host, broker.port, group, topic, 1, "committer", heartbeat_interval=0.5)
        t = m.start()
        wait_until(lambda: all_stable([m]), what="one member stable")
        generation, member_id = m.generation, m.member_id
    t0 = time.perf_counter()
    for i in range(n):
        assert commit(w, group, generation, member_id, topic, {0: i}) == {0: ErrorCode.NONE}
    rate = n / (time.perf_counter() - t0)
    if m is not None and t is not None:
        m.stop.set()
        t.join(10)
        m.leave()
        m.close()
    w.close()
    return rate


def confluent_commits(broker: BrokerProcess, topic: str, group: str, n: int) -> float:
    c = ck.Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, **CK_COMMON})
    c.commit(offsets=[ck.TopicPartition(topic, 0, 0)], asynchronous=False)  # coordinator found
    t0 = time.perf_counter()
    for i in range(1, n + 1):
        c.commit(offsets=[ck.TopicPartition(topic, 0, i)], asynchronous=False)
    rate = n / (time.perf_counter() - t0)
    c.close()
    return rate


def main() -> None:
    trials = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    with tempfile.TemporaryDirectory() as d, BrokerProcess(d, overrides=BROKER_OVERRIDES) as broker:
        create_topic(broker.bootstrap, "measure", 20)
        w = WireClient(broker.host, broker.port)
        find_coordinator(w, "warm-up")  # creates __consumer_offsets
        w.close()
        joins = [join10(broker, "measure", f"join10-{i}") for i in range(trials)]
        result: dict[str, Any] = {
            "broker": {"group.initial.rebalance.delay.ms": 0},
            "join10": {
                "trials": joins,
                "median_last_first_join_to_all_synced_ms": statistics.median(
                    j["last_first_join_to_all_synced_ms"] for j in joins
                ),
                "median_last_join_to_last_sync_ms": statistics.median(j["last_join_to_last_sync_ms"] for j in joins),
            },
            "commits_per_s": {
                "wire_standalone_v8": statistics.median(
                    wire_commits(broker, "measure", f"commit-s-{i}", 2000, False) for i in range(3)
                ),
                "wire_member_v8": statistics.median(
                    wire_commits(broker, "measure", f"commit-m-{i}", 2000, True) for i in range(3)
                ),
                "confluent_sync": statistics.median(
                    confluent_commits(broker, "measure", f"commit-ck-{i}", 1000) for i in range(3)
                ),
            },
        }
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
