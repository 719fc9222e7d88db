"""The Kafka 4 Java AdminClient (the kafka-clients jar built from source in /work/java-kafka, when
present, with its AdminScenario driver) runs reassignment, election and log-dir calls against an
Odradek cluster (three brokers with two log dirs each, the fast in-process cluster) and gets
Kafka's results: a move to a broker that is not alive is InvalidReplicaAssignmentException, a move
completes and is no longer listed, cancelling then is NoReassignmentInProgressException, a
preferred election where the leader is preferred is ElectionNotNeededException, describeLogDirs
names each broker's dirs and replicas, alterReplicaLogDirs moves a replica to the other dir and a
path that is not a log dir is LogDirNotFoundException."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

RUN = Path("/work/java-kafka/run.sh")

pytestmark = pytest.mark.skipif(not RUN.exists(), reason="the Kafka Java client is not built here (/work/java-kafka)")


def _java(bootstrap: str, *args: str) -> tuple[int, list[dict[str, Any]]]:
    done = subprocess.run([str(RUN), "AdminScenario", "--bootstrap", bootstrap, *args],
                          capture_output=True, text=True, timeout=180)
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return done.returncode, [e for e in events if e.get("event") not in ("start", "done")]


def test_the_java_admin_client_reassigns_elects_and_moves_log_dirs(tmp_path: Path) -> None:
    from odradek.client import Admin, NewTopic
    from odradek.testcluster import FastCluster

    with FastCluster(tmp_path, 3, log_dirs=2) as cluster:
        boot = cluster.bootstrap_servers
        with Admin({"bootstrap.servers": boot}) as admin:
            admin.create_topics([NewTopic("jt", assignments={0: [1, 2]})])
        cluster.wait_until(lambda: sorted(cluster.isr("jt", 0)) == [1, 2], 30, "a full ISR")

        rc, events = _java(boot, "describe-log-dirs", "--brokers", "1,2,3")
        assert rc == 0, events
        holding = {e["broker"] for e in events if "jt-0" in e["replicas"]}
        assert holding == {1, 2} and {e["broker"] for e in events} == {1, 2, 3}
        assert len([e for e in events if e["broker"] == 3]) == 2  # two log dirs each

        rc, events = _java(boot, "reassign", "--topic", "jt", "--partition", "0", "--replicas", "2,9")
        assert rc == 1 and events[0]["error_class"].endswith("InvalidReplicaAssignmentException"), events
        rc, events = _java(boot, "reassign", "--topic", "jt", "--partition", "0", "--replicas", "2,3")
        assert rc == 0 and events[0]["event"] == "reassigned", events
        cluster.wait_until(lambda: sorted(cluster.replicas("jt", 0)) == [2, 3], 30, "the move")
        rc, events = _java(boot, "list-reassignments")
        assert rc == 0 and events[-1]["count"] == 0, events
        rc, events = _java(boot, "reassign", "--topic", "jt", "--partition", "0", "--replicas", "none")
        assert rc == 1 and events[0]["error_class"].endswith("NoReassignmentInProgressException"), events

        rc, events = _java(boot, "elect-leaders", "--topic", "jt", "--partition", "0")
        assert rc == 0 and events == [{**events[0], "partition": "jt-0", "error": "ElectionNotNeededException"}], events

        broker = cluster.brokers[2]
        current = broker.replicas.get("jt", 0).log_dir  # type: ignore[union-attr]
        other = next(d for d in broker.logs.dirs if d != current)
        rc, events = _java(boot, "alter-replica-log-dir", "--topic", "jt", "--partition", "0", "--broker", "2",
                           "--dir", str(other))
        assert rc == 0 and events[0]["event"] == "log_dir_altered", events
        cluster.wait_until(lambda: broker.replicas.get("jt", 0).log_dir == other, 30, "the replica in its new dir")  # type: ignore[union-attr]
        rc, events = _java(boot, "alter-replica-log-dir", "--topic", "jt", "--partition", "0", "--broker", "2",
                           "--dir", "/nonexistent")
        assert rc == 1 and events[0]["error_class"].endswith("LogDirNotFoundException"), events
        rc, events = _java(boot, "describe-log-dirs", "--brokers", "2")
        assert {Path(e["path"]).name: sorted(e["replicas"]) for e in events} == {other.name: ["jt-0"], current.name: []}
