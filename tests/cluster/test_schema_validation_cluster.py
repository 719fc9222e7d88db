"""Broker-side schema validation on a 3-broker cluster: each partition's leader checks produced
records against its own view of ``_schemas``, including a leader whose view is a follower replica
that has not yet applied a schema registered a moment ago through another broker."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from tests.cluster.conftest import Cluster, wait_for
from tests.cluster.test_registry_cluster import OVERRIDES, register, schema

pytestmark = pytest.mark.slow


def test_every_leader_validates_against_its_own_view(cluster_factory: Callable[..., Cluster]) -> None:
    cluster = cluster_factory(3, OVERRIDES)
    topic = f"validated-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 3, 3, config={"confluent.value.schema.validation": "true"})])[topic].result(60)
    schema_id = register(cluster, 1, f"{topic}-value", schema("v"))  # through broker 1, produced at once below
    leaders = {p: wait_for(lambda p=p: cluster.leader(topic, p), 60, f"a leader of partition {p}") for p in range(3)}
    assert len(set(leaders.values())) == 3, f"the three partitions are led by three brokers: {leaders}"

    framed = b"\x00" + schema_id.to_bytes(4, "big") + b"\x00"
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 50, "retries": 0})
    results: list[tuple[int, Any]] = []
    for p in range(3):
        for value in (framed, b"unframed"):
            producer.produce(topic, value, partition=p, on_delivery=lambda err, msg: results.append((msg.partition(), err)))
    assert producer.flush(60) == 0
    by_partition: dict[int, list[Any]] = {}
    for p, err in results:
        by_partition.setdefault(p, []).append(err)
    for p in range(3):
        errs = by_partition[p]
        # the framed and the unframed record went in one batch: refused together, or each on its own
        assert any(e is not None and e.code() == KafkaError.INVALID_RECORD for e in errs), (p, errs)
    # each on its own: a batch of only framed records lands on every leader
    ok: list[Any] = []
    for p in range(3):
        producer.produce(topic, framed, partition=p, on_delivery=lambda err, msg: ok.append(err))
    assert producer.flush(60) == 0
    assert ok == [None, None, None]
