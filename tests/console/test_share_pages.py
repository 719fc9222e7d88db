"""The console's share group pages over HTTP against a real broker, with confluent-kafka's
ShareConsumer as the group's member: the list, and a group's members, start offsets and lag."""

from __future__ import annotations

import time

import confluent_kafka as ck
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from odradek.client import Admin
from odradek.testing import BrokerProcess
from tests.console.conftest import Console
from tests.console.test_pages import _cells

T = 30.0


def test_share_group_pages(broker: BrokerProcess, console: Console) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic("share-q", 1, 1)]).values():
        f.result(T)
    res = ConfigResource(ResourceType.GROUP, "console-workers", incremental_configs=[
        ConfigEntry("share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([res]).values():
        f.result(T)
    p = ck.Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(6):
        p.produce("share-q", value=b"%d" % i)
    assert p.flush(T) == 0
    c = ck.ShareConsumer({"bootstrap.servers": broker.bootstrap, "group.id": "console-workers",
                          "client.id": "console-share-client"})
    c.subscribe(["share-q"])
    try:
        seen = 0
        deadline = time.monotonic() + T
        with Admin(bootstrap_servers=broker.bootstrap) as odr:
            while True:
                seen += sum(1 for m in c.poll(0.3) if m.error() is None)
                offsets = odr.describe_share_group_offsets("console-workers")
                if seen >= 6 and offsets.get(("share-q", 0)) and offsets[("share-q", 0)].start_offset == 6:
                    break
                assert time.monotonic() < deadline, (seen, offsets)
        listing = {r[0]: r for r in _cells(console.page("/share-groups"), "share-groups")}
        assert listing["console-workers"][1:] == ["Stable", "1", "share-q", "0"]
        body = console.page("/share-groups/console-workers")
        [member] = _cells(body, "share-members")
        assert member[1] == "console-share-client" and member[3] == "share-q-0"
        assert _cells(body, "share-offsets") == [["share-q", "0", "6", "0"]]
    finally:
        c.close()
    assert console.get("/share-groups/no-such-group")[0] == 404
