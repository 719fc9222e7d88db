"""Only committed records reach the table: aborted transactions never, an open one not before it commits."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import confluent_kafka as ck

from odradek.testing import BrokerProcess
from tests.tables.conftest import FAST, create_topic, open_catalog, wait_rows

Placed = dict[tuple[int, int], bytes]


def _into(placed: Placed) -> Callable[[Any, Any], None]:
    def done(err: Any, msg: Any) -> None:
        assert err is None, err
        placed[(msg.partition(), msg.offset())] = msg.value()

    return done


def test_table_holds_exactly_the_committed_records(broker: BrokerProcess) -> None:
    topic = "kv-txn"
    create_topic(broker.bootstrap, topic, 2, {"odradek.iceberg.mode": "key_value", **FAST})
    tx = ck.Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "tables-tx", "linger.ms": 2})
    plain = ck.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 2})
    tx.init_transactions(30)
    committed: Placed = {}
    aborted: Placed = {}
    for round_ in range(6):
        tx.begin_transaction()
        this_round: Placed = {}
        for i in range(40):
            tx.produce(topic, f"r{round_}-{i}".encode(), partition=i % 2, on_delivery=_into(this_round))
            if i % 10 == 0:
                plain.produce(topic, f"plain-{round_}-{i}".encode(), partition=i % 2, on_delivery=_into(committed))
        plain.flush(30)
        tx.flush(30)
        if round_ % 3 == 1:
            tx.abort_transaction(30)
            aborted.update(this_round)
        else:
            tx.commit_transaction(30)
            committed.update(this_round)
    assert aborted and committed
    # a transaction left open: the table stops at its first offset (the last stable offset)
    opened: Placed = {}
    tx.begin_transaction()
    tx.produce(topic, b"open-0", partition=0, on_delivery=_into(opened))
    tx.flush(30)
    later: Placed = {}
    plain.produce(topic, b"after-open", partition=0, on_delivery=_into(later))
    plain.flush(30)
    table = wait_rows(broker.data_dir, topic, len(committed))
    assert dict(zip(zip(table["partition"].to_pylist(), table["offset"].to_pylist()), table["value"].to_pylist())) \
        == committed
    summary = open_catalog(broker.data_dir).load_table(("odradek", topic)).current_snapshot().summary
    [(_, open_offset)] = opened
    assert int(summary.additional_properties["odradek.next-offset.0"]) <= open_offset

    tx.commit_transaction(30)
    expected = {**committed, **opened, **later}
    table = wait_rows(broker.data_dir, topic, len(expected))
    rows = dict(zip(zip(table["partition"].to_pylist(), table["offset"].to_pylist()), table["value"].to_pylist()))
    assert table.num_rows == len(rows)  # nothing twice
    assert rows == expected
    assert not set(aborted) & set(rows)
