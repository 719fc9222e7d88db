"""One contract for the cluster's metadata store, run on the in-process ZooKeeper (the fast test
cluster's, odradek.coordination.inprocess) and on Debian's ZooKeeper.

Every test runs twice, ``[inprocess]`` and ``[zookeeper]``, and asserts only what both must do the
same way: the znode semantics the brokers' ZooKeeperBackend and controller rely on (ephemeral
nodes and sessions, one-shot watches, version checks, sequential nodes, multi-op transactions that
fail as a whole), and the MetadataBackend operations on top of them (registration and liveness,
the controller znode and its election on loss, version-checked partition states, config
notifications, compare-and-set ACLs and features, producer id blocks).

The ZooKeeper is one server per module (about half a second to start), each test in its own chroot.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    RuntimeInconsistency,
)

from odradek.cluster.controller import LeaderIsr
from odradek.cluster.metadata import BrokerInfo, Endpoint
from odradek.coordination.base import StaleVersion
from odradek.coordination.inprocess import InProcessZooKeeper, client_for, register, unregister
from odradek.coordination.zkserver import ZooKeeperServer, zookeeper_available
from odradek.coordination.zookeeper import ZooKeeperBackend

KINDS = ["inprocess", "zookeeper"]
TIMEOUT = 10.0


class Ensemble:
    """Where one test's sessions connect: a fresh in-process tree, or a chroot of the real server."""

    def __init__(self, kind: str, server: ZooKeeperServer | None) -> None:
        self.kind = kind
        self.tree: InProcessZooKeeper | None = None
        if kind == "inprocess":
            self.tree = InProcessZooKeeper(f"contract-{uuid.uuid4().hex[:10]}")
            self.connect = register(self.tree)
        else:
            assert server is not None
            chroot = f"/contract-{uuid.uuid4().hex[:10]}"
            root = KazooClient(hosts=server.connect, timeout=10.0)
            root.start(TIMEOUT)
            root.ensure_path(chroot)  # as ZkStore does on first use
            root.stop()
            root.close()
            self.connect = server.connect + chroot
        self.server = server
        self.clients: list[Any] = []

    def client(self) -> Any:
        """A started kazoo-style client: KazooClient on ZooKeeper, InProcessClient in process."""
        if self.kind == "zookeeper":
            c = KazooClient(hosts=self.connect, timeout=10.0)
            c.start(TIMEOUT)
        else:
            c = client_for(self.connect)
            c.start()
        self.clients.append(c)
        return c

    def expire(self, client_id: tuple[int, bytes]) -> None:
        """Expire the session ``client_id`` as the server does for a silent client."""
        if self.tree is not None:
            self.tree.expire(client_id[0])
            return
        # ZooKeeper's way: a second connection on the same session, closed, ends the session
        assert self.server is not None
        twin = KazooClient(hosts=self.server.connect, client_id=client_id, timeout=10.0)
        twin.start(TIMEOUT)
        twin.stop()
        twin.close()

    def close(self) -> None:
        for c in self.clients:
            c.stop()
            c.close()
        if self.tree is not None:
            unregister(self.tree)


@pytest.fixture(scope="module")
def zk_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    problem = zookeeper_available()
    if problem is not None:
        pytest.fail(problem, pytrace=False)
    server = ZooKeeperServer(tmp_path_factory.mktemp("contract-zk"), extra_config={"forceSync": "no"})
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(params=KINDS)
def ensemble(request: pytest.FixtureRequest) -> Iterator[Ensemble]:
    server = request.getfixturevalue("zk_server") if request.param == "zookeeper" else None
    e = Ensemble(request.param, server)
    try:
        yield e
    finally:
        e.close()


def wait(predicate: Callable[[], Any], what: str, timeout: float = TIMEOUT) -> None:
    ev = threading.Event()
    deadline_ok = False
    for _ in range(int(timeout / 0.01)):
        if predicate():
            deadline_ok = True
            break
        ev.wait(0.01)
    assert deadline_ok, f"timed out waiting for {what}"


# -- znodes, sessions, watches ------------------------------------------------------------------


def test_ephemeral_nodes_go_with_their_session_and_others_watch_them_go(ensemble: Ensemble) -> None:
    a, b = ensemble.client(), ensemble.client()
    a.ensure_path("/brokers/ids")
    a.create("/brokers/ids/1", b"{}", ephemeral=True)
    stat = b.exists("/brokers/ids/1")
    assert stat is not None and stat.ephemeralOwner == a.client_id[0]
    events: list[Any] = []
    b.get_children("/brokers/ids", watch=events.append)
    b.get("/brokers/ids/1", watch=events.append)
    with pytest.raises(NoChildrenForEphemeralsError):
        a.create("/brokers/ids/1/child", b"")
    states: list[str] = []
    a.add_listener(states.append)
    ensemble.expire(a.client_id)
    wait(lambda: b.exists("/brokers/ids/1") is None, "the expired session's ephemeral node to go")
    wait(lambda: len(events) == 2, "both watches to fire")
    assert sorted(e.type for e in events) == ["CHILD", "DELETED"]
    assert {e.path for e in events} == {"/brokers/ids", "/brokers/ids/1"}
    # the client learns its session is gone, and gets a new one (kazoo reconnects)
    wait(lambda: KazooState.LOST in states, "LOST")
    wait(lambda: a.connected and a.client_id is not None, "a new session")
    a.create("/brokers/ids/1", b"{}", ephemeral=True)
    assert b.exists("/brokers/ids/1").ephemeralOwner == a.client_id[0]


def test_an_expired_sessions_own_watches_fire_with_no_event_type(ensemble: Ensemble) -> None:
    """kazoo resets a lost session's watches by calling each with a NONE event (the controller
    counts on its handlers running then, before its resignation)."""
    a, b = ensemble.client(), ensemble.client()
    b.create("/watched", b"")
    events: list[Any] = []
    a.get("/watched", watch=events.append)
    a.get_children("/", watch=events.append)
    ensemble.expire(a.client_id)
    wait(lambda: len(events) >= 1, "the watches to be reset")
    assert {e.type for e in events} == {"NONE"} and all(e.path is None for e in events)
    b.set("/watched", b"changed")  # the watches are gone: nothing more
    wait(lambda: a.connected and a.client_id is not None, "a new session")
    assert {e.type for e in events} == {"NONE"}


def test_closing_a_session_removes_its_ephemeral_nodes_at_once(ensemble: Ensemble) -> None:
    a, b = ensemble.client(), ensemble.client()
    a.create("/controller", b'{"brokerid":1}', ephemeral=True)
    fired = threading.Event()
    assert b.exists("/controller", watch=lambda _e: fired.set()) is not None
    a.stop()
    assert fired.wait(TIMEOUT)
    assert b.exists("/controller") is None


def test_controller_election_moves_to_a_waiting_session_when_the_winner_is_lost(ensemble: Ensemble) -> None:
    """The brokers' election: create the ephemeral /controller; a loser watches it and runs again
    when it goes."""
    sessions = [ensemble.client() for _ in range(3)]
    winners: list[int] = []
    lock = threading.Lock()

    def run_for(i: int) -> None:
        c = sessions[i]
        try:
            c.create("/controller", f'{{"brokerid":{i}}}'.encode(), ephemeral=True)
            with lock:
                winners.append(i)
        except NodeExistsError:
            if c.exists("/controller", watch=lambda _e: run_for(i)) is None:
                run_for(i)

    for i in range(3):
        run_for(i)
    assert winners == [0]
    ensemble.expire(sessions[0].client_id)
    wait(lambda: len(winners) == 2, "a second controller")
    assert winners[1] in (1, 2)
    data, stat = sessions[winners[1]].get("/controller")
    assert data == f'{{"brokerid":{winners[1]}}}'.encode()
    assert stat.ephemeralOwner == sessions[winners[1]].client_id[0]


def test_watches_are_one_shot_and_see_creation_change_and_deletion(ensemble: Ensemble) -> None:
    a = ensemble.client()
    events: list[Any] = []
    assert a.exists("/n", watch=events.append) is None
    a.create("/n", b"1")
    wait(lambda: len(events) == 1, "the creation")
    a.set("/n", b"2")  # no watch left
    a.get("/n", watch=events.append)
    a.get("/n", watch=events.append)  # the same watch twice: once
    a.set("/n", b"3")
    wait(lambda: len(events) == 2, "the change")
    a.exists("/n", watch=events.append)
    a.delete("/n")
    wait(lambda: len(events) == 3, "the deletion")
    assert [e.type for e in events] == ["CREATED", "CHANGED", "DELETED"]
    assert all(e.path == "/n" for e in events)


def test_versioned_writes_compare_and_set(ensemble: Ensemble) -> None:
    a, b = ensemble.client(), ensemble.client()
    a.create("/config/topics/t", b"v0", makepath=True)
    _, stat = b.get("/config/topics/t")
    assert stat.version == 0
    assert a.set("/config/topics/t", b"v1", stat.version).version == 1
    with pytest.raises(BadVersionError):
        b.set("/config/topics/t", b"lost", stat.version)
    assert b.get("/config/topics/t")[0] == b"v1"
    with pytest.raises(BadVersionError):
        b.delete("/config/topics/t", version=0)
    with pytest.raises(NodeExistsError):
        b.create("/config/topics/t", b"")
    with pytest.raises(NotEmptyError):
        b.delete("/config/topics")
    with pytest.raises(NoNodeError):
        b.get("/config/topics/none")
    with pytest.raises(NoNodeError):
        b.create("/no/parent", b"")  # makepath=False
    b.delete("/config", recursive=True)
    assert a.exists("/config") is None


def test_zxids_order_writes_across_sessions(ensemble: Ensemble) -> None:
    a, b = ensemble.client(), ensemble.client()
    a.create("/x", b"")
    b.create("/y", b"")
    sx, sy = a.exists("/x"), a.exists("/y")
    assert sy.czxid > sx.czxid
    a.set("/x", b"again")
    assert a.exists("/x").mzxid > sy.czxid
    assert a.exists("/x").czxid == sx.czxid


def test_sequential_nodes_number_upwards_per_parent(ensemble: Ensemble) -> None:
    a, b = ensemble.client(), ensemble.client()
    a.ensure_path("/isr_change_notification")
    first = a.create("/isr_change_notification/isr_change_", b"", sequence=True)
    second = b.create("/isr_change_notification/isr_change_", b"", sequence=True)
    assert first.startswith("/isr_change_notification/isr_change_") and len(first.rsplit("_", 1)[1]) == 10
    assert int(second.rsplit("_", 1)[1]) > int(first.rsplit("_", 1)[1])
    assert sorted(a.get_children("/isr_change_notification")) == [first.rsplit("/", 1)[1], second.rsplit("/", 1)[1]]


def test_a_multi_op_transaction_is_all_or_nothing(ensemble: Ensemble) -> None:
    """The controller's fenced writes: check /controller_epoch, then write; a failed op fails all."""
    a = ensemble.client()
    a.create("/controller_epoch", b"1")
    a.create("/state", b"s0")
    t = a.transaction()
    t.check("/controller_epoch", 0)
    t.set_data("/state", b"s1", 0)
    t.create("/new", b"")
    results = t.commit()
    assert results[0] is True and results[1].version == 1 and results[2] == "/new"
    t = a.transaction()
    t.check("/controller_epoch", 0)
    t.set_data("/state", b"s2", 0)  # stale: fails
    t.create("/newer", b"")
    results = t.commit()
    assert isinstance(results[0], RolledBackError)
    assert isinstance(results[1], BadVersionError)
    assert isinstance(results[2], RuntimeInconsistency)
    assert a.get("/state")[0] == b"s1" and a.exists("/newer") is None
    a.set("/controller_epoch", b"2")  # another controller took over
    t = a.transaction()
    t.check("/controller_epoch", 0)
    t.set_data("/state", b"s3", 1)
    results = t.commit()
    assert isinstance(results[0], BadVersionError) and isinstance(results[1], RuntimeInconsistency)
    assert a.get("/state")[0] == b"s1"


# -- the MetadataBackend on top ------------------------------------------------------------------


def run(coro: Coroutine[Any, Any, Any]) -> Any:
    return asyncio.run(asyncio.wait_for(coro, 60))


def broker(i: int) -> BrokerInfo:
    return BrokerInfo(i, (Endpoint("PLAINTEXT", "PLAINTEXT", "127.0.0.1", 9000 + i),), None)


async def backends(ensemble: Ensemble, n: int) -> list[ZooKeeperBackend]:
    out = []
    for i in range(1, n + 1):
        b = ZooKeeperBackend(ensemble.connect, 6000)
        await b.connect(None)
        await b.start(broker(i))
        out.append(b)
    return out


async def stop_all(bs: list[ZooKeeperBackend]) -> None:
    for b in bs:
        await b.stop()


async def until(predicate: Callable[[], Coroutine[Any, Any, Any]], what: str) -> Any:
    for _ in range(int(TIMEOUT / 0.02)):
        value = await predicate()
        if value:
            return value
        await asyncio.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def test_backends_share_one_cluster_id_and_see_each_others_registration(ensemble: Ensemble) -> None:
    async def scenario() -> None:
        bs = await backends(ensemble, 3)
        try:
            assert len({b.cluster_id for b in bs}) == 1 and bs[0].cluster_id
            assert await bs[0].live_brokers() == {1: None, 2: None, 3: None}
            reg = await bs[2].broker_registration(1)
            assert reg is not None and reg.endpoints == broker(1).endpoints and reg.epoch == bs[0].broker_epoch
            epochs = [b.broker_epoch for b in bs]
            assert epochs == sorted(epochs) and len(set(epochs)) == 3
            assert await bs[0].broker_registration(7) is None
        finally:
            await stop_all(bs)

    run(scenario())


def test_a_lost_session_unregisters_the_broker_and_it_registers_again_with_a_new_epoch(ensemble: Ensemble) -> None:
    async def scenario() -> None:
        bs = await backends(ensemble, 2)
        try:
            old_epoch = bs[1].broker_epoch
            sid = bs[1].store.session_id
            await asyncio.to_thread(ensemble.expire, (sid, bs[1].store.zk.client_id[1]))
            await until(lambda: _registered_with(bs[0], 2, lambda e: e > old_epoch), "broker 2 registered again")
            await until(lambda: _true(bs[1].broker_epoch > old_epoch), "broker 2 to know its new epoch")
            assert bs[1].store.session_id != sid
            # a stopped broker's registration goes at once
            await bs[1].stop()
            assert await bs[0].live_brokers() == {1: None}
        finally:
            await stop_all(bs)

    run(scenario())


async def _registered_with(b: ZooKeeperBackend, broker_id: int, epoch_ok: Callable[[int], bool]) -> bool:
    reg = await b.broker_registration(broker_id)
    return reg is not None and epoch_ok(reg.epoch)


def test_controller_id_follows_the_controller_znode(ensemble: Ensemble) -> None:
    async def scenario() -> None:
        bs = await backends(ensemble, 2)
        try:
            assert await bs[0].controller_id() == -1
            await bs[1].store.create("/controller", {"version": 1, "brokerid": 2, "timestamp": "0"}, ephemeral=True)
            assert await bs[0].controller_id() == 2
            await asyncio.to_thread(ensemble.expire, bs[1].store.zk.client_id)
            await until(lambda: _is(bs[0].controller_id(), -1), "the controller znode to go with its session")
        finally:
            await stop_all(bs)

    run(scenario())


async def _true(value: bool) -> bool:
    return value


async def _is(coro: Coroutine[Any, Any, Any], value: Any) -> bool:
    return bool(await coro == value)


def test_partition_state_writes_are_version_checked(ensemble: Ensemble) -> None:
    async def scenario() -> None:
        bs = await backends(ensemble, 2)
        try:
            # no controller runs here: nobody elects leaders, so the wait for them is cut short
            info = await bs[0].create_topic("orders", 1, 2, {}, {0: [1, 2]}, timeout=0.05)
            assert info.name == "orders" and await bs[1].topic_exists("orders")
            state = LeaderIsr(1, 0, (1, 2), 1)
            await bs[0].store.create("/brokers/topics/orders/partitions/0/state", state.to_json())
            read = await bs[1].read_leader_isr("orders", 0)
            assert read is not None and read[0].leader == 1 and read[0].isr == (1, 2)
            version = read[1]
            new = await bs[0].write_leader_isr("orders", 0, LeaderIsr(1, 0, (1,), 1), version)
            assert new == version + 1
            with pytest.raises(StaleVersion):
                await bs[1].write_leader_isr("orders", 0, LeaderIsr(1, 0, (1, 2), 1), version)
            again = await bs[1].read_leader_isr("orders", 0)
            assert again is not None and again[0].isr == (1,)
            assert await bs[0].write_leader_isr("gone", 0, state, 0) is None
            await bs[0].notify_isr_change([("orders", 0)])
            await bs[1].notify_isr_change([("orders", 0)])
            assert len(await bs[0].store.children("/isr_change_notification")) == 2
        finally:
            await stop_all(bs)

    run(scenario())


def test_topic_config_changes_reach_every_broker(ensemble: Ensemble) -> None:
    async def scenario() -> None:
        bs = await backends(ensemble, 2)
        try:
            await bs[0].create_topic("payments", 1, 1, {"retention.ms": "1000"}, {0: [1]}, timeout=0.05)
            assert await bs[1].topic_config("payments") == {"retention.ms": "1000"}
            await bs[1].set_topic_configs("payments", {"retention.ms": "2000", "cleanup.policy": "compact"})
            assert await bs[0].topic_config("payments") == {"retention.ms": "2000", "cleanup.policy": "compact"}
        finally:
            await stop_all(bs)

    run(scenario())


def test_acl_and_feature_changes_compare_and_set_across_brokers(ensemble: Ensemble) -> None:
    async def scenario() -> None:
        bs = await backends(ensemble, 3)
        try:
            resource = ("Topic", "LITERAL", "orders")
            entries = [(f"User:u{i}", "Allow", "Read", "*") for i in range(6)]
            # six concurrent read-modify-writes from three brokers: none is lost
            await asyncio.gather(*(
                bs[i % 3].alter_acls(resource, lambda cur, e=e: cur | {e}) for i, e in enumerate(entries)
            ))
            final = await bs[0].alter_acls(resource, lambda cur: cur)
            assert final == frozenset(entries)
            await until(lambda: _acls_seen(bs[2], resource, frozenset(entries)), "broker 3 to see the ACLs")
            _, epoch = await bs[0].update_features(lambda cur: {"metadata.version": 1})
            levels2, epoch2 = await bs[1].update_features(lambda cur: {**(cur or {}), "group.version": 1})
            assert dict(levels2 or {}) == {"metadata.version": 1, "group.version": 1} and epoch2 > epoch
        finally:
            await stop_all(bs)

    run(scenario())


async def _acls_seen(b: ZooKeeperBackend, resource: tuple[str, str, str], want: frozenset[Any]) -> bool:
    return b.image.acls.get(resource) == want


def test_producer_id_blocks_never_overlap(ensemble: Ensemble) -> None:
    async def scenario() -> None:
        bs = await backends(ensemble, 3)
        try:
            blocks = await asyncio.gather(*(bs[i % 3].allocate_producer_ids() for i in range(9)))
            ids = [pid for start, end in blocks for pid in range(start, end)]
            assert len(ids) == len(set(ids)) == 9 * (blocks[0][1] - blocks[0][0])
        finally:
            await stop_all(bs)

    run(scenario())


def test_an_unregistered_inprocess_name_is_refused(tmp_path: Path) -> None:
    """A config file naming an in-process ensemble (test clusters only) starts nothing."""
    with pytest.raises(LookupError, match="no in-process ZooKeeper named 'nowhere'"):
        ZooKeeperBackend("inprocess:nowhere", 6000)


# -- the same random operations on both ----------------------------------------------------------

_NAMES = ["/a", "/b", "/a/x", "/a/y", "/b/x", "/s"]
_op = st.one_of(
    st.tuples(st.just("create"), st.sampled_from(_NAMES), st.booleans(), st.booleans()),  # ephemeral, sequence
    st.tuples(st.just("set"), st.sampled_from(_NAMES), st.integers(-1, 2)),
    st.tuples(st.just("delete"), st.sampled_from(_NAMES), st.integers(-1, 2)),
    st.tuples(st.just("get"), st.sampled_from(_NAMES)),
    st.tuples(st.just("children"), st.sampled_from(["/", "/a", "/b", "/s"])),
    st.tuples(st.just("multi"), st.lists(st.tuples(st.sampled_from(["check", "set", "create", "delete"]),
                                                   st.sampled_from(_NAMES), st.integers(-1, 1)),
                                         min_size=1, max_size=3)),
)


def _apply(c: Any, op: tuple[Any, ...], n: int) -> Any:
    """The operation's outcome without what differs between two servers (zxids, times, session ids)."""
    try:
        kind = op[0]
        if kind == "create":
            path = c.create(op[1], b"%d" % n, ephemeral=op[2], sequence=op[3])
            return ("created", path)
        if kind == "set":
            return ("set", c.set(op[1], b"%d" % n, op[2]).version)
        if kind == "delete":
            return ("deleted", c.delete(op[1], op[2]))
        if kind == "get":
            data, stat = c.get(op[1])
            return ("got", data, stat.version, stat.numChildren, stat.ephemeralOwner != 0, stat.cversion)
        if kind == "children":
            return ("children", sorted(c.get_children(op[1])))
        t = c.transaction()
        for sub, path, version in op[1]:
            if sub == "check":
                t.check(path, version)
            elif sub == "set":
                t.set_data(path, b"m%d" % n, version)
            elif sub == "create":
                t.create(path, b"m%d" % n)
            else:
                t.delete(path, version)
        return ("multi", [type(r).__name__ if isinstance(r, Exception) else
                          (r.version if hasattr(r, "version") else r) for r in t.commit()])
    except Exception as exc:
        return ("error", type(exc).__name__)


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture], deadline=None)
@given(ops=st.lists(_op, min_size=2, max_size=12))
def test_random_operations_have_the_same_outcome_on_both(zk_server: ZooKeeperServer, ops: list[Any]) -> None:
    """Whatever sequence of creates, sets, deletes, reads and multi-ops (with versions right or
    wrong, ephemeral and sequential nodes): the same answer, error or tree on both."""
    inproc, real = Ensemble("inprocess", None), Ensemble("zookeeper", zk_server)
    try:
        a, b = inproc.client(), real.client()
        for c in (a, b):  # a few nodes to start from: most operations then find something
            c.create("/a", b"")
            c.create("/a/x", b"")
            c.create("/s", b"")
        for n, op in enumerate(ops):
            assert _apply(a, op, n) == _apply(b, op, n), (n, op)
        for path in ["/", *_NAMES]:
            assert _apply(a, ("get", path), -1) == _apply(b, ("get", path), -1), path
    finally:
        inproc.close()
        real.close()
