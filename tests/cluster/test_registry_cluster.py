"""The schema registry on a 3-broker ZooKeeper cluster: every broker serves it, ``_schemas`` is
replicated, the partition leader writes and the others forward to it.

* a schema registered through broker 1 is read through broker 3 at once (no waiting: a read
  waits for its replica's high watermark to cover what the replica holds);
* two clients registering the same new schema at the same moment through two brokers get one id;
* the ``_schemas`` leader is SIGKILLed: registrations and reads go on through the others;
* the whole cluster restarts: every schema has its id again, rebuilt from ``_schemas`` alone;
* ``_schemas`` holds Confluent's keys and values.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer

from tests.cluster.conftest import Cluster, wait_for
from tests.registry.conftest import avro_user, call

pytestmark = pytest.mark.slow

OVERRIDES = {
    "schema.registry.listeners": "http://127.0.0.1:0",
    "schema.registry.timeout.ms": 20000,
    "zookeeper.session.timeout.ms": 6000,
    "replica.lag.time.max.ms": 5000,
    "offsets.topic.num.partitions": 1,
    "controlled.shutdown.retry.backoff.ms": 500,
}


def url(cluster: Cluster, i: int) -> str:
    found = cluster.brokers[i].registry_url
    assert found is not None, f"broker {i} has no registry URL in its ready line"
    return found


def schema(tag: str) -> str:
    return avro_user({"name": f"f_{tag}", "type": "string", "default": ""})


def register(cluster: Cluster, i: int, subject: str, text: str) -> int:
    answer = call("POST", f"{url(cluster, i)}/subjects/{subject}/versions", {"schema": text}, timeout=60)
    assert answer.status == 200, (i, answer.status, answer.body)
    return int(answer.json["id"])


def test_registry_across_brokers_failover_and_restart(cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(3, OVERRIDES, log_level="INFO")
    subject = f"orders-{uuid.uuid4().hex[:6]}-value"
    first = register(cluster, 1, subject, schema("a"))
    assert cluster.topic_assignment("_schemas")[0] and len(cluster.topic_assignment("_schemas")[0]) == 3

    # read through broker 3 at once, and through broker 2
    got = call("GET", f"{url(cluster, 3)}/subjects/{subject}/versions/latest")
    assert (got.status, got.json["id"]) == (200, first)
    assert call("GET", f"{url(cluster, 2)}/schemas/ids/{first}").status == 200
    second = register(cluster, 3, subject, schema("b"))
    assert call("GET", f"{url(cluster, 1)}/subjects/{subject}/versions").json == [1, 2]
    assert call("GET", f"{url(cluster, 2)}/subjects/{subject}/versions/2").json["id"] == second

    # the same new schema at the same moment through two brokers: one id
    racing = f"race-{uuid.uuid4().hex[:6]}-value"
    ids: dict[int, int] = {}
    start = threading.Barrier(2)

    def race(i: int) -> None:
        start.wait()
        ids[i] = register(cluster, i, racing, schema("race"))

    threads = [threading.Thread(target=race, args=(i,)) for i in (2, 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(ids) == 2 and ids[2] == ids[3]
    assert call("GET", f"{url(cluster, 1)}/subjects/{racing}/versions").json == [1]

    # SIGKILL the writer: registrations and reads go on through the others
    leader = cluster.leader("_schemas", 0)
    assert leader in (1, 2, 3)
    cluster.kill(leader)
    others = [i for i in (1, 2, 3) if i != leader]
    after: dict[str, int] = {}

    def registered_after_failover() -> bool:
        answer = call("POST", f"{url(cluster, others[0])}/subjects/{subject}/versions", {"schema": schema("c")},
                      timeout=60)
        if answer.status != 200:
            return False
        after["id"] = int(answer.json["id"])
        return True

    wait_for(registered_after_failover, 90, "a registration after the _schemas leader was killed", interval=0.5)
    assert cluster.leader("_schemas", 0) in others
    for i in others:
        assert call("GET", f"{url(cluster, i)}/subjects/{subject}/versions").json == [1, 2, 3]
        assert call("GET", f"{url(cluster, i)}/schemas/ids/{first}").status == 200
    assert after["id"] not in (first, second)

    # the killed broker comes back and catches up; then the whole cluster restarts from _schemas alone
    cluster.start(leader)
    wait_for(lambda: call("GET", f"{url(cluster, leader)}/subjects/{subject}/versions").json == [1, 2, 3], 60,
             "the restarted broker's view")
    expected = {sid: call("GET", f"{url(cluster, others[0])}/schemas/ids/{sid}").json
                for sid in (first, second, after["id"], ids[2])}
    cluster.stop_all()
    cluster.start_all()
    for i in (1, 2, 3):
        def same(i: int = i) -> bool:
            answers = {sid: call("GET", f"{url(cluster, i)}/schemas/ids/{sid}") for sid in expected}
            return all(a.status == 200 and a.json == expected[sid] for sid, a in answers.items())

        wait_for(same, 60, f"broker {i} serving every schema under its id after the restart")
        assert call("GET", f"{url(cluster, i)}/subjects/{subject}/versions").json == [1, 2, 3]
    # a new schema after the restart gets a new id
    assert register(cluster, 2, subject, schema("d")) > max(expected)

    # _schemas holds Confluent's key and value formats
    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": f"g-{uuid.uuid4().hex[:6]}",
                         "auto.offset.reset": "earliest", "enable.auto.commit": False})
    consumer.subscribe(["_schemas"])
    keys: list[dict[str, object]] = []
    values: list[dict[str, object]] = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and len(keys) < 6:
        m = consumer.poll(0.5)
        if m is None or m.error() or m.key() is None:
            continue
        keys.append(json.loads(m.key()))
        if m.value() is not None:
            values.append(json.loads(m.value()))
    consumer.close()
    assert {"keytype": "SCHEMA", "subject": subject, "version": 1, "magic": 1} in keys
    v1 = next(v for v in values if v.get("subject") == subject and v.get("version") == 1)
    assert v1["id"] == first and v1["deleted"] is False and json.loads(str(v1["schema"])) == json.loads(schema("a"))
