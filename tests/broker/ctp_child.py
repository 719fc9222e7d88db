"""A consume-transform-produce loop for the kill test: ``python ctp_child.py BOOTSTRAP SRC DST``.

Reads SRC (both partitions, assigned; read_committed), writes ``out-<value>`` to DST and the
consumed offsets in the same transaction, until it is killed or has nothing to do for a while.
"""

from __future__ import annotations

import sys
import time

import confluent_kafka as ck


def main() -> int:
    bootstrap, src, dst = sys.argv[1:4]
    c = ck.Consumer({
        "bootstrap.servers": bootstrap, "group.id": f"ctp-{src}", "isolation.level": "read_committed",
        "auto.offset.reset": "earliest", "enable.auto.commit": False,
    })
    c.assign([ck.TopicPartition(src, 0), ck.TopicPartition(src, 1)])
    p = ck.Producer({"bootstrap.servers": bootstrap, "transactional.id": f"ctp-{src}", "linger.ms": 5})
    p.init_transactions(60)
    idle_since = time.monotonic()
    while time.monotonic() - idle_since < 5:
        msgs = [m for m in c.consume(50, 0.2) if m.error() is None]
        if not msgs:
            continue
        idle_since = time.monotonic()
        p.begin_transaction()
        for m in msgs:
            p.produce(dst, b"out-" + m.value())
        p.send_offsets_to_transaction(c.position(c.assignment()), c.consumer_group_metadata(), 60)
        p.commit_transaction(60)
    c.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
