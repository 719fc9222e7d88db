"""Group configs (resource type GROUP) in a ZooKeeper cluster: set through one broker, kept in
ZooKeeper (``/config/groups/<group>``) and described by the other (which follows the
``/config/changes`` notification into its metadata image, the view the group code reads), deleted
the same way, and still there after the whole cluster restarts."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from odradek.protocol.messages.describe_configs import DescribeConfigsRequest
from odradek.protocol.messages.incremental_alter_configs import IncrementalAlterConfigsRequest
from odradek.testing import WireClient
from tests.cluster.conftest import Cluster, kazoo_client

pytestmark = pytest.mark.slow

GROUP = 32
R = IncrementalAlterConfigsRequest
D = DescribeConfigsRequest


def _alter(w: WireClient, group: str, name: str, value: str | None) -> int:
    op = 1 if value is None else 0
    res = w.request(R(resources=[R.AlterConfigsResource(resource_type=GROUP, resource_name=group, configs=[
        R.AlterableConfig(name=name, config_operation=op, value=value)])]), 1)
    return int(res.responses[0].error_code)


def _describe(w: WireClient, group: str, name: str) -> tuple[str | None, int]:
    res = w.request(D(resources=[D.DescribeConfigsResource(resource_type=GROUP, resource_name=group,
                                                          configuration_keys=[name])]), 4)
    entry = res.results[0].configs[0]
    return entry.value, entry.config_source


def test_a_group_config_set_through_one_broker_is_seen_by_the_other(
    cluster_factory: Callable[..., Cluster],
) -> None:
    cluster = cluster_factory(2)
    one, two = (cluster.broker(i) for i in cluster.ids)
    w1, w2 = WireClient(one.host, one.port, "gc-1"), WireClient(two.host, two.port, "gc-2")
    try:
        assert _alter(w1, "workers/a b", "share.auto.offset.reset", "earliest") == 0
        zk = kazoo_client(cluster.zk.connect)
        try:
            assert zk.exists(f"{cluster.chroot}/config/groups/workers%2Fa%20b") is not None
        finally:
            zk.stop()
            zk.close()
        cluster.wait_for(lambda: _describe(w2, "workers/a b", "share.auto.offset.reset") == ("earliest", 8), 30,
                         "the other broker describing the group config")
        assert _alter(w2, "workers/a b", "share.auto.offset.reset", None) == 0
        cluster.wait_for(lambda: _describe(w1, "workers/a b", "share.auto.offset.reset") == ("latest", 5), 30,
                         "the first broker seeing the delete")
        assert _alter(w1, "workers/a b", "share.delivery.count.limit", "3") == 0
    finally:
        w1.close()
        w2.close()
    for i in cluster.ids:
        cluster.restart(i, clean=True)
    two = cluster.broker(cluster.ids[1])
    w2 = WireClient(two.host, two.port, "gc-3")
    try:
        cluster.wait_for(lambda: _describe(w2, "workers/a b", "share.delivery.count.limit") == ("3", 8), 30,
                         "the group config after a restart")
    finally:
        w2.close()
