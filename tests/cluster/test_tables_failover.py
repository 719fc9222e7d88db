"""Topics as Iceberg tables across a leader failover: the new leader resumes from the table's own
record of what it holds (a shared catalog), so the table has every record of the log once."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest

from tests.cluster.conftest import Cluster
from tests.cluster.test_replication import OVERRIDES, consume_all, create_topic, isr_full

pytestmark = pytest.mark.slow
pytest.importorskip("pyiceberg")


def _catalog(home: Path) -> Any:
    from pyiceberg.catalog.sql import SqlCatalog

    return SqlCatalog("odradek", uri=f"sqlite:///{home / 'catalog.db'}", warehouse=(home / "warehouse").as_uri())


def _produce(bootstrap: str, topic: str, start: int, n: int) -> None:
    p = ck.Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
                     "message.timeout.ms": 60000, "topic.metadata.refresh.interval.ms": 1000})
    errors: list[Any] = []
    for i in range(start, start + n):
        p.produce(topic, f"r{i}".encode(), on_delivery=lambda err, _m: errors.append(err) if err else None)
    assert p.flush(90) == 0 and not errors, errors[:3]


def _rows(home: Path, topic: str) -> Any:
    return _catalog(home).load_table(("odradek", topic)).scan().to_arrow()


def test_the_new_leader_resumes_the_table_where_the_old_one_left_it(
    cluster_factory: Callable[..., Cluster], tmp_path: Path
) -> None:
    home = tmp_path / "lake"
    (home / "warehouse").mkdir(parents=True)
    cluster = cluster_factory(3, {**OVERRIDES, "odradek.iceberg.catalog.uri": f"sqlite:///{home / 'catalog.db'}",
                                  "odradek.iceberg.warehouse": str(home / "warehouse")})
    topic = "orders-lake"
    create_topic(cluster.bootstrap, topic, 1, 3, config={
        "min.insync.replicas": "2", "odradek.iceberg.mode": "key_value", "odradek.iceberg.commit.interval.ms": "200",
    })
    cluster.wait_for(lambda: isr_full(cluster, topic, 1), 30, "a full ISR")
    _produce(cluster.bootstrap, topic, 0, 300)
    cluster.wait_for(lambda: _rows(home, topic).num_rows >= 300, 60, "the first records in the table")
    leader = cluster.leader(topic, 0)
    assert leader is not None
    cluster.kill(leader)
    cluster.wait_for(lambda: cluster.leader(topic, 0) not in (leader, -1, None), 30, "a new leader")
    _produce(cluster.bootstrap, topic, 300, 300)
    cluster.start(leader)
    got = consume_all(cluster.bootstrap, topic, 600)
    in_log = {(p, o) for p, recs in got.items() for o, _v in recs}
    table = cluster.wait_for(lambda: (lambda t: t if t.num_rows >= len(in_log) else None)(_rows(home, topic)), 90,
                             "every record in the table")
    pairs = list(zip(table["partition"].to_pylist(), table["offset"].to_pylist()))
    assert len(pairs) == len(set(pairs))  # nothing twice
    assert set(pairs) == in_log  # nothing skipped
