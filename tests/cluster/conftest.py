"""Fixtures for ZooKeeper-coordinated clusters: real ZooKeeper (Debian's `zookeeper`), real brokers.

ZooKeeper must be installed (``apt-get install -y zookeeper``; scripts/test.sh does it). When it is
not, these fixtures FAIL with that message: the cluster tests are never skipped.

* ``zookeeper``: one ZooKeeper for the whole session. Shared: do not stop or restart it; give each
  cluster on it its own chroot (``Cluster(..., chroot="/my-test")``).
* ``zookeeper_factory``: private ZooKeeper servers (about 0.5 s to start), stopped at teardown;
  these a test may stop, kill and restart (``zk.restart()`` keeps port and data).
* ``cluster_factory``: ``cluster_factory(3, overrides={...})`` -> a started :class:`Cluster` of
  ``odradek serve --zookeeper`` brokers (ids 1..n) on a private ZooKeeper (or ``zk=...``).

A ZooKeeper restart does not by itself expire sessions: ZooKeeper reloads them and restarts their
timeouts, so a broker that reconnects in time keeps its session. To expire a broker's session,
freeze it past ``zookeeper.session.timeout.ms`` (``cluster.sigstop(i)``, wait, ``cluster.sigcont(i)``).
"""

from __future__ import annotations

import gc
import json
import os
import signal
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, TypeVar

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from odradek.coordination.zkserver import ZooKeeperServer, zookeeper_available
from odradek.testing import BrokerProcess, freeze, wait_for

T = TypeVar("T")

def require_zookeeper() -> None:
    """Fail (never skip) the test when ZooKeeper is not installed."""
    problem = zookeeper_available()
    if problem is not None:
        pytest.fail(problem, pytrace=False)


def kazoo_client(connect: str, session_timeout: float = 10.0, start_timeout: float = 15.0) -> KazooClient:
    """A started kazoo client that reconnects quickly (at most 1 s between attempts)."""
    client = KazooClient(
        hosts=connect,
        timeout=session_timeout,
        connection_retry={"max_tries": -1, "delay": 0.1, "backoff": 1.5, "max_delay": 1.0},
        command_retry={"max_tries": -1, "delay": 0.1, "backoff": 1.5, "max_delay": 1.0, "deadline": 20.0},
    )
    client.start(timeout=start_timeout)
    return client


class Cluster:
    """N brokers (``broker.id`` 1..n) joined through ZooKeeper, each a real ``odradek serve`` process.

    Ids start at 1, so that a broker id is always truthy: ``wait_for(lambda: cluster.leader(t, 0), ...)``
    works. Brokers listen on 127.0.0.1, on ephemeral ports at the first start and on the same port (and data
    dir) at every restart. Every process is stopped by PID in :meth:`close`.
    """

    def __init__(
        self,
        zk: ZooKeeperServer,
        base_dir: str | Path,
        size: int = 3,
        *,
        overrides: Mapping[str, Any] | None = None,
        chroot: str | None = None,
        log_level: str = "WARNING",
        extra_args: list[str] | None = None,
        listeners: str | None = None,
        security: str = "plaintext",
    ) -> None:
        """``listeners``: every broker's listeners (``NAME://127.0.0.1:0,...``) instead of one
        PLAINTEXT listener; ``bootstrap`` then names each broker's PLAINTEXT (or first) one.
        ``security="sasl_ssl"``: the brokers talk to each other over an INTERNAL SASL_SSL
        listener with SCRAM-SHA-512 (a throwaway CA; the user written to ZooKeeper before the first
        start); clients keep the PLAINTEXT one."""
        self.listeners = listeners
        self.security = security
        self._security_ready = security == "plaintext"
        if security == "sasl_ssl":
            from tests.security.pki import make_pki

            pki = make_pki(Path(base_dir) / "pki")
            self.listeners = "PLAINTEXT://127.0.0.1:0,INTERNAL://127.0.0.1:0"
            overrides = {
                **(overrides or {}),
                "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SASL_SSL",
                "inter.broker.listener.name": "INTERNAL",
                "ssl.keystore.location": pki.broker_keystore,
                "ssl.truststore.location": pki.ca,
                "sasl.enabled.mechanisms": "SCRAM-SHA-512",
                "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
                "listener.name.internal.scram-sha-512.sasl.jaas.config": (
                    "org.apache.kafka.common.security.scram.ScramLoginModule required "
                    'username="broker" password="broker-secret";'
                ),
            }
        elif security != "plaintext":
            raise ValueError(f"security {security!r}: plaintext or sasl_ssl")
        if chroot is not None and not chroot.startswith("/"):
            raise ValueError(f"chroot must start with '/': {chroot!r}")
        self.zk = zk
        self.base_dir = Path(base_dir)
        self.size = size
        self.overrides = dict(overrides or {})
        self.chroot = chroot or ""
        self.log_level = log_level
        self.extra_args = list(extra_args or [])
        self.brokers: dict[int, BrokerProcess] = {}
        self.ports: dict[int, int] = {}
        self.stopped: set[int] = set()  # SIGSTOPped
        self._kazoo: KazooClient | None = None

    # -- addresses ---------------------------------------------------------------------------------

    @property
    def zookeeper_connect(self) -> str:
        """What the brokers get as ``--zookeeper``: ``127.0.0.1:PORT[/chroot]``."""
        return self.zk.connect + self.chroot

    @property
    def ids(self) -> list[int]:
        return list(range(1, self.size + 1))

    @property
    def bootstrap(self) -> str:
        """All brokers, comma-separated (``host:port,host:port,...``)."""
        return ",".join(f"127.0.0.1:{self.ports[i]}" if i in self.ports else self.broker(i).bootstrap for i in self.ids)

    def broker(self, i: int) -> BrokerProcess:
        if i not in self.brokers:
            self.brokers[i] = BrokerProcess(
                self.base_dir / f"broker-{i}",
                overrides=self.overrides,
                broker_id=i,
                log_level=self.log_level,
                extra_args=["--zookeeper", self.zookeeper_connect, *self.extra_args],
                listeners=self.listeners,
            )
        return self.brokers[i]

    def running(self, i: int) -> bool:
        return i in self.brokers and self.brokers[i].running()

    def live_ids(self) -> list[int]:
        return [i for i in self.ids if self.running(i) and i not in self.stopped]

    # -- lifecycle ---------------------------------------------------------------------------------

    def _ensure_chroot(self) -> None:
        if self.chroot:
            client = kazoo_client(self.zk.connect)
            try:
                client.ensure_path(self.chroot)
            finally:
                client.stop()
                client.close()

    def _bootstrap_security(self) -> None:
        """The brokers' SCRAM user, in ZooKeeper before any broker starts (kafka-configs --zookeeper's way)."""
        if self._security_ready:
            return
        import asyncio

        from odradek.coordination.zookeeper import zk_set_user_scram
        from odradek.security import ScramCredential

        self._ensure_chroot()
        cred = ScramCredential.from_password("SCRAM-SHA-512", "broker-secret").to_text()
        asyncio.run(zk_set_user_scram(self.zookeeper_connect, "broker", {"SCRAM-SHA-512": cred}))
        self._security_ready = True

    def start(self, i: int, timeout: float = 60.0) -> BrokerProcess:
        """Start broker ``i`` (again): same port and data dir as before, if it ran before."""
        self._bootstrap_security()
        b = self.broker(i)
        if b.running():
            raise RuntimeError(f"broker {i} is already running (pid {b.pid})")
        if i in self.ports:
            b.port = self.ports[i]
        b.start(timeout)
        self.ports[i] = b.port
        self.stopped.discard(i)
        return b

    def start_all(self, timeout: float = 60.0) -> Cluster:
        """Start every broker that is not running, concurrently; raise if any did not become ready."""
        self._bootstrap_security()
        self._ensure_chroot()
        errors: dict[int, BaseException] = {}

        def one(i: int) -> None:
            try:
                self.start(i, timeout)
            except BaseException as exc:
                errors[i] = exc

        threads = [threading.Thread(target=one, args=(i,)) for i in self.ids if not self.running(i)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise RuntimeError(
                "brokers did not start: " + "; ".join(f"broker {i}: {exc}" for i, exc in sorted(errors.items()))
            )
        if self.listeners is None or any(x.startswith("PLAINTEXT://") for x in self.listeners.split(",")):
            # (only on a PLAINTEXT listener can it ask without credentials)
            self.wait_for_metadata(timeout)
        return self

    def stop(self, i: int, timeout: float = 30.0) -> int | None:
        """SIGTERM (controlled shutdown), SIGKILL after ``timeout`` s; the exit status."""
        self.sigcont(i)
        return self.brokers[i].stop(timeout) if i in self.brokers else None

    def kill(self, i: int) -> None:
        """SIGKILL broker ``i``: a crash."""
        if i in self.brokers:
            self.brokers[i].kill()
        self.stopped.discard(i)

    def restart(self, i: int, timeout: float = 60.0, *, clean: bool = True) -> BrokerProcess:
        """Stop broker ``i`` (SIGTERM, or SIGKILL with ``clean=False``) if it runs, and start it again."""
        if self.running(i):
            if clean:
                self.stop(i)
            else:
                self.kill(i)
        return self.start(i, timeout)

    def sigstop(self, i: int) -> None:
        """Freeze broker ``i`` (SIGSTOP): it stops heartbeating to ZooKeeper and answering clients."""
        self.stopped.add(i)
        freeze(self.brokers[i].pid)

    def sigcont(self, i: int) -> None:
        """Let a SIGSTOPped broker run again."""
        if i in self.stopped and self.running(i):
            os.kill(self.brokers[i].pid, signal.SIGCONT)
        self.stopped.discard(i)

    def stop_all(self, timeout: float = 30.0) -> None:
        """SIGTERM every running broker at once (SIGCONT first if frozen), SIGKILL after ``timeout`` s."""
        for i in list(self.stopped):
            self.sigcont(i)
        threads = [
            threading.Thread(target=self.brokers[i].stop, args=(timeout,)) for i in self.brokers if self.running(i)
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for b in self.brokers.values():  # anything left: by PID, no mercy
            b.kill()

    def close(self) -> None:
        try:
            self.stop_all()
        finally:
            if self._kazoo is not None:
                self._kazoo.stop()
                self._kazoo.close()
                self._kazoo = None

    def __enter__(self) -> Cluster:
        return self.start_all()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def logs(self, i: int, lines: int = 50) -> str:
        """The last stderr lines of broker ``i`` (for assertion messages)."""
        return "".join(self.brokers[i].stderr_lines[-lines:]) if i in self.brokers else ""

    # -- ZooKeeper views ---------------------------------------------------------------------------

    def kazoo(self) -> KazooClient:
        """A kazoo client rooted at the brokers' chroot (created on first use, closed in :meth:`close`)."""
        if self._kazoo is None:
            self._kazoo = kazoo_client(self.zookeeper_connect)
        return self._kazoo

    def zk_get(self, path: str) -> bytes | None:
        client = self.kazoo()
        try:
            data, _stat = client.retry(client.get, path)
        except NoNodeError:
            return None
        return bytes(data)

    def zk_json(self, path: str) -> Any:
        """A znode's data parsed as JSON; None if the znode does not exist (or is empty)."""
        data = self.zk_get(path)
        return json.loads(data.decode()) if data else None

    def zk_children(self, path: str) -> list[str]:
        client = self.kazoo()
        try:
            return sorted(client.retry(client.get_children, path))
        except NoNodeError:
            return []

    def registered_brokers(self) -> list[int]:
        """Broker ids registered (ephemeral znodes) under /brokers/ids."""
        return sorted(int(c) for c in self.zk_children("/brokers/ids"))

    def controller_id(self) -> int | None:
        """``brokerid`` of /controller, or None while there is no controller."""
        data = self.zk_json("/controller")
        return int(data["brokerid"]) if isinstance(data, dict) and "brokerid" in data else None

    def controller_epoch(self) -> int | None:
        data = self.zk_json("/controller_epoch")
        return int(data) if data is not None else None

    def topic_assignment(self, topic: str) -> dict[int, list[int]]:
        """Replicas per partition from /brokers/topics/<topic> (empty if there is no such topic)."""
        data = self.zk_json(f"/brokers/topics/{topic}")
        if not isinstance(data, dict):
            return {}
        return {int(p): list(r) for p, r in data.get("partitions", {}).items()}

    def partition_state(self, topic: str, partition: int) -> dict[str, Any] | None:
        """/brokers/topics/<topic>/partitions/<p>/state: leader, leader_epoch, isr, controller_epoch."""
        data = self.zk_json(f"/brokers/topics/{topic}/partitions/{partition}/state")
        return data if isinstance(data, dict) else None

    def leader(self, topic: str, partition: int) -> int | None:
        state = self.partition_state(topic, partition)
        return None if state is None or state.get("leader", -1) == -1 else int(state["leader"])

    def isr(self, topic: str, partition: int) -> list[int]:
        state = self.partition_state(topic, partition)
        return sorted(state.get("isr", [])) if state else []

    def wait_for(self, predicate: Callable[[], T], timeout: float, what: str, interval: float = 0.1) -> T:
        """See :func:`wait_for`."""
        return wait_for(predicate, timeout, what, interval)

    def wait_for_controller(self, timeout: float = 30.0) -> int:
        """The controller's broker id, once there is one."""
        return wait_for(self.controller_id, timeout, "a controller")

    def metadata_ready(self) -> bool:
        """Whether every live broker answers Metadata naming a controller and every live broker.

        A broker is "ready" once registered, but learns the controller only from the controller's
        first UpdateMetadata; a client that asks in between is told there is none (as Kafka's
        brokers say), and librdkafka's admin client then waits for a metadata refresh that may be
        tens of seconds away."""
        from confluent_kafka.admin import AdminClient

        live = self.live_ids()
        for i in live:
            admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{self.ports[i]}"})
            try:
                md = admin.list_topics(timeout=5)
            except Exception:
                return False
            if md.controller_id < 0 or not set(live) <= set(md.brokers):
                return False
        return True

    def wait_for_metadata(self, timeout: float = 30.0) -> None:
        """Until :meth:`metadata_ready`: what a test may assume once :meth:`start_all` returns."""
        wait_for(self.metadata_ready, timeout, "every broker naming the controller and the live brokers", 0.2)

    def wait_for_registered(self, ids: list[int] | None = None, timeout: float = 30.0) -> None:
        want = sorted(self.ids if ids is None else ids)
        wait_for(lambda: all(i in self.registered_brokers() for i in want), timeout, f"brokers {want} registered")


# -- fixtures ----------------------------------------------------------------------------------------


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ZooKeeperServer]:
    """One ZooKeeper for the session (shared: do not stop it; use a chroot per cluster)."""
    require_zookeeper()
    zk = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper"))
    zk.start()
    try:
        yield zk
    finally:
        zk.stop()


@pytest.fixture
def zookeeper_factory(tmp_path: Path) -> Iterator[Callable[..., ZooKeeperServer]]:
    """``zookeeper_factory(**ZooKeeperServer kwargs)`` -> a started private ZooKeeper, stopped at teardown."""
    require_zookeeper()
    servers: list[ZooKeeperServer] = []

    def make(name: str | None = None, **kwargs: Any) -> ZooKeeperServer:
        zk = ZooKeeperServer(tmp_path / (name or f"zk-{len(servers)}"), **kwargs)
        servers.append(zk)
        zk.start()
        return zk

    try:
        yield make
    finally:
        for zk in servers:
            zk.stop()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    """A failed cluster test reports the last log lines of each of its brokers: a failure in CI
    can only be understood from what the brokers said."""
    outcome = yield
    report = outcome.get_result()
    clusters: list[Cluster] = getattr(item, "_odradek_clusters", [])
    if not report.failed or report.when == "teardown" or not clusters:
        return
    for n, cluster in enumerate(clusters):
        for i in sorted(cluster.brokers):
            tail = cluster.logs(i, 120)
            if tail:
                report.sections.append((f"cluster {n} broker {i} log (last 120 lines)", tail))


@pytest.fixture
def cluster_factory(
    request: pytest.FixtureRequest, tmp_path: Path, zookeeper_factory: Callable[..., ZooKeeperServer]
) -> Iterator[Callable[..., Cluster]]:
    """``cluster_factory(size=3, overrides=None, zk=None, chroot=None, start=True, **Cluster kwargs)``.

    Without ``zk`` each cluster gets its own ZooKeeper (which the test may restart or kill).
    """
    clusters: list[Cluster] = []
    request.node._odradek_clusters = clusters  # for pytest_runtest_makereport

    def make(
        size: int = 3,
        overrides: Mapping[str, Any] | None = None,
        *,
        zk: ZooKeeperServer | None = None,
        chroot: str | None = None,
        start: bool = True,
        **kwargs: Any,
    ) -> Cluster:
        n = len(clusters)
        server = zk if zk is not None else zookeeper_factory(f"zk-cluster-{n}")
        if zk is not None and chroot is None:
            chroot = f"/odradek-{uuid.uuid4().hex[:8]}"  # a shared ZooKeeper: keep clusters apart
        cluster = Cluster(server, tmp_path / f"cluster-{n}", size, overrides=overrides, chroot=chroot, **kwargs)
        clusters.append(cluster)
        if start:
            cluster.start_all()
        return cluster

    try:
        yield make
    finally:
        # confluent-kafka's AdminClient can end up in a reference cycle: left to the garbage
        # collector it outlives its brokers and logs a failed reconnect every second into the
        # tests that follow.  Collected here, its handle closes while the brokers still run.
        gc.collect()
        for cluster in clusters:
            cluster.close()
