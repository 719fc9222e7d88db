"""A pytest plugin: a real Odradek broker (or a ZooKeeper cluster) inside your test suite.

Installing Odradek registers it (entry point ``pytest11``), so a test only asks for a fixture::

    from confluent_kafka import Consumer, Producer

    def test_roundtrip(odradek_broker):
        topic = odradek_broker.create_topic("orders", partitions=3)
        p = Producer({"bootstrap.servers": odradek_broker.bootstrap_servers})
        p.produce(topic, b"hello")
        p.flush(10)
        ...
        odradek_broker.wait_for_group_lag("billing", topic, 0, timeout=30)

Fixtures:

* ``odradek_broker`` — one ``odradek serve`` process for the whole session (``--odradek-scope``
  or the ini option ``odradek_broker_scope`` change that: ``module``, ``function``...), on a
  free port of 127.0.0.1 (kept across restarts), data in a temporary directory, stopped by PID
  (SIGTERM, then SIGKILL) at teardown.  It is an :class:`OdradekBroker`: ``bootstrap_servers``,
  ``create_topic()``, ``wait_for_group_lag()``, ``admin()``, ``restart()``...
* ``odradek_broker_per_test`` — a fresh broker for one test, data in its ``tmp_path``; a marker
  gives it settings: ``@pytest.mark.odradek(overrides={"log.retention.ms": 1000})``.
* ``odradek_broker_factory`` — ``odradek_broker_factory(overrides={...})`` starts as many brokers
  as a test wants; all are stopped after it.
* ``odradek_cluster`` — opt-in: ZooKeeper (Debian's ``zookeeper`` package) and N brokers
  (ini ``odradek_cluster_brokers``, default 3; needs ``pip install odradek[cluster]``), one per
  session unless ``odradek_cluster_scope`` says otherwise.  An :class:`OdradekCluster`: the same
  helpers, plus ``stop_broker(i)``, ``start_broker(i)``, ``kill_broker(i)``.
* ``odradek_fast_cluster`` — the same number of brokers in this process on an in-process
  ZooKeeper (for tests only: :mod:`odradek.testcluster`), ready in well under a second, no JVM;
  ``.faults`` moves leaders and coordinators, stops or kills brokers, and is restored after each test.

Broker settings for every broker the plugin starts: ini ``odradek_broker_overrides`` (lines of
``key=value``).  Defaults suited to tests: ``group.initial.rebalance.delay.ms=0`` (a consumer
group forms at once), ``offsets.topic.num.partitions=5`` and ``transaction.state.log.num.partitions=5``
(fewer files to create: the first transaction starts in a fraction of a second).

This module imports only pytest and the standard library when pytest loads it; Odradek itself is
imported when a fixture is first used.
"""

from __future__ import annotations

import contextlib
import importlib.util
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Generator, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from odradek.client import Admin
    from odradek.coordination.zkserver import ZooKeeperServer
    from odradek.testing import BrokerProcess, Faults

__all__ = ["OdradekBroker", "OdradekCluster"]

_SCOPES = ("session", "package", "module", "class", "function")
#: what every broker started by the plugin gets unless the ini option or a marker says otherwise
DEFAULT_OVERRIDES: dict[str, Any] = {
    "group.initial.rebalance.delay.ms": 0,
    "offsets.topic.num.partitions": 5,
    "transaction.state.log.num.partitions": 5,
}


# -- options --------------------------------------------------------------------------------------


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("odradek", "Odradek broker fixtures")
    group.addoption(
        "--odradek-scope",
        dest="odradek_scope",
        choices=_SCOPES,
        default=None,
        help="scope of the odradek_broker fixture (default: ini odradek_broker_scope, else session)",
    )
    group.addoption(
        "--odradek-log-level",
        dest="odradek_log_level",
        default=None,
        help="log level of the brokers the fixtures start (default WARNING); their output is kept for reports",
    )
    parser.addini("odradek_broker_scope", "scope of the odradek_broker fixture (default session)", default="session")
    parser.addini("odradek_cluster_scope", "scope of the odradek_cluster fixture (default session)", default="session")
    parser.addini("odradek_cluster_brokers", "number of brokers of odradek_cluster (default 3)", default="3")
    parser.addini(
        "odradek_broker_overrides",
        "broker settings for every broker the fixtures start, one key=value per line",
        type="linelist",
        default=[],
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "odradek(overrides=None, faults=None): settings of the broker odradek_broker_per_test starts for this test; "
        "faults armed on odradek_broker / odradek_broker_per_test before the test starts (a list of fault rules, "
        "e.g. {'kind': 'error', 'api': 'Produce', 'error': 'NOT_LEADER_OR_FOLLOWER', 'times': 2})",
    )


def _scope_option(config: pytest.Config, ini: str, option: str | None) -> Any:
    value = (config.getoption(option) if option else None) or config.getini(ini) or "session"
    if value not in _SCOPES:
        raise pytest.UsageError(f"{ini} = {value!r}: one of {', '.join(_SCOPES)}")
    return value


def _broker_scope(fixture_name: str, config: pytest.Config) -> Any:
    return _scope_option(config, "odradek_broker_scope", "odradek_scope")


def _cluster_scope(fixture_name: str, config: pytest.Config) -> Any:
    return _scope_option(config, "odradek_cluster_scope", None)


def _overrides(
    config: pytest.Config, extra: Mapping[str, Any] | None = None, *, base: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Broker settings: the plugin's defaults, ``base``, the ini option, then ``extra`` (a marker's)."""
    out = {**DEFAULT_OVERRIDES, **(base or {})}
    for line in config.getini("odradek_broker_overrides"):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        key, sep, value = line.partition("=")
        if not sep or not key.strip():
            raise pytest.UsageError(f"odradek_broker_overrides: {line!r} is not key=value")
        out[key.strip()] = value.strip()
    out.update(extra or {})
    return out


def _log_level(config: pytest.Config) -> str:
    return str(config.getoption("odradek_log_level") or "WARNING")


# -- what the fixtures give ---------------------------------------------------------------------


class _Helpers:
    """Topic and consumer-group helpers over Odradek's Admin client (any Kafka-protocol broker)."""

    bootstrap_servers: str
    _admin: Admin | None = None

    def config(self, extra: Mapping[str, Any] | None = None, **kwargs: Any) -> dict[str, Any]:
        """Client settings: ``{"bootstrap.servers": ...}`` plus ``extra`` (Kafka names) and
        ``kwargs`` (underscores for dots: ``group_id="g"``) — for confluent-kafka and the others."""
        out: dict[str, Any] = {"bootstrap.servers": self.bootstrap_servers}
        out.update(extra or {})
        out.update({k.replace("_", "."): v for k, v in kwargs.items()})
        return out

    def admin(self) -> Admin:
        """Odradek's blocking Admin client on this broker (made once, closed at teardown)."""
        if self._admin is None:
            from odradek.client import Admin

            self._admin = Admin({"bootstrap.servers": self.bootstrap_servers, "client.id": "odradek-pytest"})
        return self._admin

    def _close_admin(self) -> None:
        if self._admin is not None:
            with contextlib.suppress(Exception):
                self._admin.close()
            self._admin = None

    def create_topic(
        self,
        name: str | None = None,
        partitions: int = 1,
        replication_factor: int = -1,
        config: Mapping[str, Any] | None = None,
        *,
        timeout: float = 30.0,
    ) -> str:
        """Create a topic and wait until every partition has a leader; returns its name.

        ``name=None`` makes a unique one (``test-<hex>``): handy on a broker shared by the session.
        ``replication_factor=-1`` is the broker's ``default.replication.factor``."""
        from odradek.client import NewTopic

        name = name or f"test-{uuid.uuid4().hex[:12]}"
        self.admin().create_topics(
            [NewTopic(name, partitions, replication_factor, dict(config or {}))], timeout=timeout
        )
        self._wait(lambda: self._leaders_ready(name, partitions), timeout, f"leaders of topic {name!r}")
        return name

    def _leaders_ready(self, name: str, partitions: int) -> bool:
        desc = self.admin().describe_topics([name], timeout=5)[name]
        parts = desc.partitions
        return (partitions < 0 or len(parts) >= partitions) and all(p.leader >= 0 for p in parts)

    def delete_topic(self, name: str, *, timeout: float = 30.0) -> None:
        self.admin().delete_topics([name], timeout=timeout)

    def end_offsets(self, topic: str, *, timeout: float = 10.0) -> dict[int, int]:
        """The high watermark of each partition of ``topic``."""
        admin = self.admin()
        parts = [p.partition for p in admin.describe_topics([topic], timeout=timeout)[topic].partitions]
        ends = admin.list_offsets({(topic, p): "latest" for p in parts}, timeout=timeout)
        return {p: ends[(topic, p)].offset for p in parts}

    def group_lag(self, group: str, topic: str | None = None, *, timeout: float = 10.0) -> dict[tuple[str, int], int]:
        """Records the group still has to read, per partition: log end offset minus its committed
        offset (or minus the log start offset where it committed nothing).  ``topic=None``:
        the topics the group has committed offsets for."""
        admin = self.admin()
        committed = admin.list_group_offsets(group, timeout=timeout)
        topics = [topic] if topic is not None else sorted({t for t, _p in committed})
        if not topics:
            return {}
        described = admin.describe_topics(topics, timeout=timeout)
        tps = [(t, p.partition) for t in topics for p in described[t].partitions]
        ends = admin.list_offsets(dict.fromkeys(tps, "latest"), timeout=timeout)
        starts = admin.list_offsets(dict.fromkeys(tps, "earliest"), timeout=timeout)
        out = {}
        for tp in tps:
            pos = committed[tp].offset if tp in committed and committed[tp].offset >= 0 else starts[tp].offset
            out[tp] = max(0, ends[tp].offset - pos)
        return out

    def wait_for_group_lag(
        self, group: str, topic: str | None = None, lag: int = 0, timeout: float = 30.0
    ) -> dict[tuple[str, int], int]:
        """Wait until the group's total lag (on ``topic``, or on every topic it committed for — at
        least one) is at most ``lag``, i.e. its consumers have caught up and committed;
        TimeoutError otherwise.  Returns the lag per partition.

        It reads committed offsets: a consumer that auto-commits does so every
        ``auto.commit.interval.ms`` (5 s by default), so commit by hand or lower that setting."""
        last: dict[tuple[str, int], int] = {}

        def caught_up() -> bool:
            nonlocal last
            last = self.group_lag(group, topic)
            # without a topic, a group that has committed nothing yet has not caught up with anything
            return (topic is not None or bool(last)) and sum(last.values()) <= lag

        self._wait(caught_up, timeout, f"group {group!r} to reach lag {lag}", lambda: f"lag now {last}")
        return last

    @staticmethod
    def _wait(
        predicate: Callable[[], bool], timeout: float, what: str, detail: Callable[[], str] | None = None
    ) -> None:
        deadline = time.monotonic() + timeout
        failure: BaseException | None = None
        while True:
            try:
                if predicate():
                    return
                failure = None
            except Exception as exc:  # not there yet (unknown topic, coordinator loading...)
                failure = exc
            if time.monotonic() >= deadline:
                why = f"; last error: {failure!r}" if failure is not None else (f"; {detail()}" if detail else "")
                raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}{why}")
            time.sleep(0.1)


class OdradekBroker(_Helpers):
    """One running ``odradek serve`` process (what ``odradek_broker`` gives), in test mode:
    ``faults`` scripts its faults (see :class:`odradek.testing.Faults`)."""

    def __init__(self, process: BrokerProcess) -> None:
        self.process = process
        self._faults: Faults | None = None

    @property
    def faults(self) -> Faults:
        """Fault scripting of this broker: ``faults.fail("Produce", "NOT_LEADER_OR_FOLLOWER", times=3)``,
        ``faults.delay("Fetch", 0.5)``, ``faults.pause()``/``resume()``, ``faults.received("Produce")``..."""
        if self._faults is None:
            self._faults = self.process.faults
        return self._faults

    @property
    def bootstrap_servers(self) -> str:  # type: ignore[override]
        return self.process.bootstrap

    @property
    def host(self) -> str:
        return self.process.host

    @property
    def port(self) -> int:
        return self.process.port

    @property
    def data_dir(self) -> Path:
        return self.process.data_dir

    @property
    def pid(self) -> int:
        return self.process.pid

    def running(self) -> bool:
        return self.process.running()

    def logs(self, lines: int = 50) -> str:
        """The last lines the broker wrote to stderr."""
        return "".join(self.process.stderr_lines[-lines:])

    def stop(self, timeout: float = 30.0) -> int | None:
        """SIGTERM to its PID (a clean shutdown), SIGKILL after ``timeout``; the exit status."""
        self._close_admin()
        return self.process.stop(timeout)

    def restart(self, timeout: float = 30.0) -> OdradekBroker:
        """Stop it cleanly and start it again: same port, same data."""
        self.stop(timeout)
        self.process.start(timeout)
        return self

    def __repr__(self) -> str:
        state = f"pid {self.process.pid}" if self.process.proc is not None else "not started"
        return f"<OdradekBroker {self.bootstrap_servers} ({state}, data in {self.data_dir})>"


def _start_broker(data_dir: Path, overrides: Mapping[str, Any], log_level: str) -> OdradekBroker:
    from odradek.testing import BrokerProcess

    return OdradekBroker(BrokerProcess(data_dir, overrides=overrides, log_level=log_level, test_mode=True).start())


def _stop_broker(broker: OdradekBroker) -> None:
    code = broker.stop()
    if code not in (0, None):
        warnings.warn(
            f"odradek broker {broker.bootstrap_servers} exited with {code}:\n{broker.logs(30)}",
            RuntimeWarning,
            stacklevel=1,
        )


class OdradekCluster(_Helpers):
    """ZooKeeper and brokers ``1..n`` (what ``odradek_cluster`` gives)."""

    def __init__(self, base_dir: Path, size: int, overrides: Mapping[str, Any], log_level: str) -> None:
        from odradek.coordination.zkserver import ZooKeeperServer

        self.base_dir = base_dir
        self.size = size
        # no fsync: a test cluster's metadata need not survive a power cut
        self.zookeeper: ZooKeeperServer = ZooKeeperServer(base_dir / "zookeeper", extra_config={"forceSync": "no"})
        self.overrides = dict(overrides)
        self.log_level = log_level
        self.brokers: dict[int, BrokerProcess] = {}

    @property
    def bootstrap_servers(self) -> str:  # type: ignore[override]
        return ",".join(b.bootstrap for _i, b in sorted(self.brokers.items()))

    @property
    def ids(self) -> list[int]:
        return list(range(1, self.size + 1))

    def broker(self, i: int) -> BrokerProcess:
        return self.brokers[i]

    def start(self, timeout: float = 60.0) -> OdradekCluster:
        from odradek.testing import BrokerProcess

        self.zookeeper.start(timeout)
        for i in self.ids:
            self.brokers[i] = BrokerProcess(
                self.base_dir / f"broker-{i}",
                overrides=self.overrides,
                broker_id=i,
                log_level=self.log_level,
                extra_args=["--zookeeper", self.zookeeper.connect],
            )
        errors: dict[int, BaseException] = {}

        def one(i: int) -> None:
            try:
                self.brokers[i].start(timeout)
            except BaseException as exc:
                errors[i] = exc

        threads = [threading.Thread(target=one, args=(i,)) for i in self.ids]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise RuntimeError("brokers did not start: " + "; ".join(f"broker {i}: {e}" for i, e in errors.items()))
        self._wait(
            lambda: len(self.admin().describe_cluster(timeout=5).brokers) == self.size,
            timeout,
            f"all {self.size} brokers to register",
        )
        return self

    def _leaders_ready(self, name: str, partitions: int) -> bool:
        desc = self.admin().describe_topics([name], timeout=5)[name]
        parts = desc.partitions
        ok = (partitions < 0 or len(parts) >= partitions) and all(p.leader >= 0 for p in parts)
        return ok and all(len(p.isr) == len(p.replicas) for p in parts)

    def stop_broker(self, i: int, timeout: float = 30.0) -> int | None:
        """Controlled shutdown of broker ``i`` (SIGTERM to its PID)."""
        return self.brokers[i].stop(timeout)

    def kill_broker(self, i: int) -> None:
        """SIGKILL broker ``i``: a crash."""
        self.brokers[i].kill()

    def start_broker(self, i: int, timeout: float = 60.0) -> BrokerProcess:
        """Start broker ``i`` again (same port, same data)."""
        return self.brokers[i].start(timeout)

    def close(self) -> None:
        """Stop every broker (SIGTERM: controlled shutdown), the controller last, then ZooKeeper.

        The controller goes last because a broker's controlled shutdown asks it to move
        leadership away: stopped together, the others wait and retry (seconds each)."""
        controller = None
        if self._admin is not None or any(b.running() for b in self.brokers.values()):
            with contextlib.suppress(Exception):
                controller = self.admin().describe_cluster(timeout=5).controller_id
        self._close_admin()
        first = [b for i, b in self.brokers.items() if i != controller]
        threads = [threading.Thread(target=b.stop) for b in first]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if controller in self.brokers:
            self.brokers[controller].stop()
        if self.zookeeper.running():
            self.zookeeper.stop()

    def __repr__(self) -> str:
        return f"<OdradekCluster {self.size} brokers {self.bootstrap_servers}, ZooKeeper {self.zookeeper.connect}>"


# -- fixtures -----------------------------------------------------------------------------------


@pytest.fixture(scope=_broker_scope)
def odradek_broker(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OdradekBroker]:
    """A real Odradek broker on a free port (one per session unless configured otherwise)."""
    broker = _start_broker(
        tmp_path_factory.mktemp("odradek-broker"), _overrides(request.config), _log_level(request.config)
    )
    try:
        yield broker
    finally:
        _stop_broker(broker)


@pytest.fixture
def odradek_broker_factory(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[Callable[..., OdradekBroker]]:
    """``odradek_broker_factory(overrides={...})``: start a broker for this test (as many as wanted)."""
    started: list[OdradekBroker] = []

    def start(overrides: Mapping[str, Any] | None = None) -> OdradekBroker:
        data_dir = tmp_path / f"odradek-data-{len(started)}"
        broker = _start_broker(data_dir, _overrides(request.config, overrides), _log_level(request.config))
        started.append(broker)
        return broker

    try:
        yield start
    finally:
        for broker in started:
            _stop_broker(broker)


@pytest.fixture
def odradek_broker_per_test(
    request: pytest.FixtureRequest, odradek_broker_factory: Callable[..., OdradekBroker]
) -> OdradekBroker:
    """A fresh broker for this test, data in its ``tmp_path``; ``@pytest.mark.odradek(overrides=...)``."""
    marker = request.node.get_closest_marker("odradek")
    overrides = dict(marker.kwargs.get("overrides") or {}) if marker is not None else {}
    return odradek_broker_factory(overrides)


# -- fault scripting: faults armed by the marker, reset between tests, reported on failure -----------

_BROKER_FIXTURES = ("odradek_broker", "odradek_broker_per_test")
_FAULTS_KEY = pytest.StashKey[list["OdradekBroker"]]()


@pytest.fixture(autouse=True)
def _odradek_faults(request: pytest.FixtureRequest) -> Iterator[None]:
    """For a test using a plugin broker: its faults start cleared (what it received counted from
    zero), ``@pytest.mark.odradek(faults=[...])`` arms the marker's, and what was scripted is kept
    for the failure report."""
    used = [name for name in _BROKER_FIXTURES if name in request.fixturenames]
    if not used:
        yield
        return
    marker = request.node.get_closest_marker("odradek")
    specs = list(marker.kwargs.get("faults") or []) if marker is not None else []
    brokers: list[OdradekBroker] = []
    for name in used:
        broker = request.getfixturevalue(name)
        if not isinstance(broker, OdradekBroker) or broker.process.fault_url is None:
            continue
        faults = broker.faults
        faults.history.clear()
        faults.reset()
        if specs:
            faults.arm(*specs)
        brokers.append(broker)
    request.node.stash[_FAULTS_KEY] = brokers
    yield
    for broker in brokers:
        if broker.running() and broker.faults.history[1:]:  # more than the reset: let the next test start clean
            with contextlib.suppress(Exception):
                broker.faults.reset()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    outcome: Any = yield
    report = outcome.get_result()
    if report.when != "call" or not report.failed:
        return
    for broker in item.stash.get(_FAULTS_KEY, []):
        faults = broker._faults
        if faults is None or len(faults.history) <= 1:  # only the reset: nothing was scripted
            continue
        report.sections.append((f"odradek faults ({broker.bootstrap_servers})", faults.report()))


@pytest.fixture(scope=_cluster_scope)
def odradek_cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[OdradekCluster]:
    """ZooKeeper and N brokers (ini ``odradek_cluster_brokers``, default 3), started on first use."""
    from odradek.coordination.zkserver import zookeeper_available

    problem = zookeeper_available()
    if problem is not None:
        pytest.fail(f"odradek_cluster: {problem}", pytrace=False)
    if importlib.util.find_spec("kazoo") is None:
        pytest.fail("odradek_cluster: brokers coordinated by ZooKeeper need kazoo: pip install 'odradek[cluster]'",
                    pytrace=False)
    try:
        size = int(request.config.getini("odradek_cluster_brokers"))
    except ValueError as exc:
        raise pytest.UsageError(f"odradek_cluster_brokers: {exc}") from exc
    rf = min(3, size)
    overrides = _overrides(
        request.config,
        base={"offsets.topic.replication.factor": rf, "transaction.state.log.replication.factor": rf},
    )
    cluster = OdradekCluster(tmp_path_factory.mktemp("odradek-cluster"), size, overrides, _log_level(request.config))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()


# -- the fast cluster (in this process, for tests only) -----------------------------------------


def _fast_cluster_class() -> type:
    """:class:`odradek.testcluster.FastCluster` with the helpers above (made on first use: this
    module imports no Odradek code when pytest loads it)."""
    global _FAST_CLUSTER
    if _FAST_CLUSTER is None:
        from odradek.testcluster import FastCluster

        class OdradekFastCluster(FastCluster, _Helpers):
            """What ``odradek_fast_cluster`` gives: a :class:`FastCluster` with the topic and group helpers."""

            bootstrap_servers = FastCluster.bootstrap_servers

            def _leaders_ready(self, name: str, partitions: int) -> bool:
                return OdradekCluster._leaders_ready(self, name, partitions)  # type: ignore[arg-type]

            def close(self) -> None:
                self._close_admin()
                super().close()

        _FAST_CLUSTER = OdradekFastCluster
    return _FAST_CLUSTER


_FAST_CLUSTER: type | None = None


def __getattr__(name: str) -> Any:
    if name == "OdradekFastCluster":
        return _fast_cluster_class()
    raise AttributeError(name)


@pytest.fixture(scope=_cluster_scope)
def _odradek_fast_cluster(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    yield from fast_cluster_lifetime(request, tmp_path_factory)


def fast_cluster_lifetime(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """The fast cluster's start and stop (a test suite may give it another scope by defining a
    ``_odradek_fast_cluster`` fixture of its own that yields from this)."""
    try:
        size = int(request.config.getini("odradek_cluster_brokers"))
    except ValueError as exc:
        raise pytest.UsageError(f"odradek_cluster_brokers: {exc}") from exc
    if importlib.util.find_spec("kazoo") is None:
        pytest.fail("odradek_fast_cluster: the brokers' coordination needs kazoo: pip install 'odradek[cluster]'",
                    pytrace=False)
    cluster = _fast_cluster_class()(tmp_path_factory.mktemp("odradek-fast-cluster"), size,
                                    overrides=_overrides(request.config))
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.close()


@pytest.fixture
def odradek_fast_cluster(_odradek_fast_cluster: Any) -> Iterator[Any]:
    """N brokers (ini ``odradek_cluster_brokers``, default 3) in this process on an in-process
    ZooKeeper, ready in about a second, no JVM (for tests only); one per session unless
    ``odradek_cluster_scope`` says otherwise.  ``.faults`` moves leaders and coordinators and stops
    or kills brokers; whatever a test moved is restored after it."""
    cluster = _odradek_fast_cluster
    try:
        yield cluster
    finally:
        cluster.faults.restore()
