"""Child process of the group tests: a confluent-kafka group consumer that commits nothing.

Usage: ``python consumer_child.py <bootstrap> <group> <topic> <client id> <json consumer conf>``.
Prints one JSON line per event: ``{"assigned": [partitions], "member_id": ...}``,
``{"revoked": [partitions]}`` and ``{"record": [partition, offset, value]}``.  It runs until it is
killed (the test SIGKILLs it to see its partitions move after the session timeout).
"""

from __future__ import annotations

import json
import sys

import confluent_kafka as ck


def main() -> None:
    bootstrap, group, topic, name, conf_json = sys.argv[1:6]
    conf = json.loads(conf_json)
    conf.update({"bootstrap.servers": bootstrap, "group.id": group, "client.id": name, "enable.auto.commit": False})
    c = ck.Consumer(conf)

    def emit(event: dict[str, object]) -> None:
        sys.stdout.write(json.dumps(event) + "\n")
        sys.stdout.flush()

    def on_assign(consumer: ck.Consumer, parts: list[ck.TopicPartition]) -> None:
        emit({"assigned": sorted(tp.partition for tp in parts), "member_id": consumer.memberid()})

    def on_revoke(_consumer: ck.Consumer, parts: list[ck.TopicPartition]) -> None:
        emit({"revoked": sorted(tp.partition for tp in parts)})

    c.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
    while True:
        msg = c.poll(0.05)
        if msg is None or msg.error() is not None:
            continue
        emit({"record": [msg.partition(), msg.offset(), (msg.value() or b"").decode()]})


if __name__ == "__main__":
    main()
