"""The ZooKeeper backend: cluster metadata in ZooKeeper, through kazoo, in Kafka's znode layout.

Znodes (Kafka's formats, JSON):

* ``/cluster/id`` — created once by the first broker;
* ``/brokers/ids/<id>`` — ephemeral, the broker's endpoints (and its process id, an extra field);
  its creation zxid is the broker epoch;
* ``/brokers/topics/<t>`` — replica assignment, topic id, reassignment in progress;
* ``/brokers/topics/<t>/partitions/<p>/state`` — leader, leader epoch, ISR, controller epoch
  (persistent, written with version checks by the controller and by leaders changing the ISR);
* ``/controller`` (ephemeral) and ``/controller_epoch``;
* ``/admin/delete_topics/<t>``, ``/admin/reassign_partitions``, ``/admin/preferred_replica_election``;
* ``/isr_change_notification/isr_change_<seq>``;
* ``/log_dir_event_notification/log_dir_event_<seq>`` (a broker's log dir went offline);
* ``/config/topics/<t>`` and ``/config/changes/config_change_<seq>`` notifications;
* ``/latest_producer_id_block`` — producer id blocks handed out cluster-wide.

Brokers learn leaders and live brokers from the controller's UpdateMetadata and LeaderAndIsr
requests, as in Kafka: :meth:`ZooKeeperBackend.apply_metadata` installs the image those requests
describe.  Topic configs are read from ZooKeeper by every broker, on change notifications.

kazoo is blocking and calls watches on its own threads: every call runs in a worker thread and
every watch is handed to the event loop with ``call_soon_threadsafe``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import replace
from typing import Any

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    RuntimeInconsistency,
)
from kazoo.retry import KazooRetry

from odradek._clock import Clock, SystemClock
from odradek._timeouts import wait_for
from odradek.cluster.controller import LeaderIsr, TopicAssignment, place_replicas
from odradek.cluster.metadata import BrokerInfo, Endpoint, MetadataImage, PartitionState, TopicInfo
from odradek.coordination.base import AclEntry, MetadataBackend, StaleVersion, validate_topic_name
from odradek.coordination.inprocess import SCHEME as INPROCESS_SCHEME
from odradek.coordination.inprocess import client_for as inprocess_client
from odradek.errors import ErrorCode, KafkaError
from odradek.security.quota import QUOTA_KEYS, desanitize, sanitize

__all__ = [
    "BadVersionError",
    "NoNodeError",
    "NodeExistsError",
    "NotEmptyError",
    "RolledBackError",
    "RuntimeInconsistency",
    "ZkStore",
    "ZooKeeperBackend",
]

log = logging.getLogger(__name__)

PRODUCER_ID_BLOCK = 1000
SHUTDOWN_OP_TIMEOUT = 3.0  # seconds a ZooKeeper call may take once the broker is stopping
PERSISTENT_PATHS = (
    "/brokers/ids",
    "/brokers/topics",
    "/admin/delete_topics",
    "/isr_change_notification",
    "/log_dir_event_notification",
    "/kafka-acl",
    "/kafka-acl-changes",
    "/kafka-acl-extended/prefixed",
    "/kafka-acl-extended-changes",
    "/config/topics",
    "/config/changes",
    "/config/brokers",
    "/config/users",
    "/config/clients",
    "/config/ips",
    "/config/client-metrics",
    "/config/groups",
)
FEATURE_PATH = "/feature"
_SCRAM = ("SCRAM-SHA-256", "SCRAM-SHA-512")
ACL_LITERAL = "/kafka-acl"
ACL_PREFIXED = "/kafka-acl-extended/prefixed"
ACL_CHANGES = "/kafka-acl-changes"
ACL_EXTENDED_CHANGES = "/kafka-acl-extended-changes"
KEPT_ACL_NOTIFICATIONS = 1000


def _sequence(child: str) -> int:
    try:
        return int(child.rsplit("_", 1)[1])
    except (IndexError, ValueError):
        return -1


def _acl_path(resource: tuple[str, str, str]) -> str:
    rtype, pattern, name = resource
    if "/" in name or name in (".", ".."):
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"resource name {name!r} cannot be stored in ZooKeeper")
    return f"{ACL_LITERAL if pattern == 'LITERAL' else ACL_PREFIXED}/{rtype}/{name}"


def _acl_json(entry: AclEntry) -> dict[str, str]:
    principal, permission, operation, host = entry
    return {"principal": principal, "permissionType": permission, "operation": operation, "host": host}


def _acl_entries(data: Any, path: str) -> frozenset[AclEntry]:
    """The entries of a Kafka ACL node ({"version": 1, "acls": [...]}); unreadable ones are logged."""
    if not data:
        return frozenset()
    out = set()
    for a in data.get("acls", []) if isinstance(data, dict) else []:
        try:
            out.add((str(a["principal"]), str(a["permissionType"]), str(a["operation"]), str(a["host"])))
        except (KeyError, TypeError):
            log.warning("ignoring an ACL entry it cannot read in %s: %r", path, a)
    return frozenset(out)


def _acl_change_resource(raw: bytes | None, *, extended: bool) -> tuple[str, str, str] | None:
    """The resource a change notification names: ``Type:name`` (literal) or the extended JSON."""
    try:
        if extended:
            d = json.loads(raw or b"")
            return (str(d["resourceType"]), str(d["patternType"]), str(d["name"]))
        rtype, _, name = (raw or b"").decode().partition(":")
        return (rtype, "LITERAL", name) if rtype and name else None
    except (ValueError, KeyError, TypeError):
        return None


def dumps(data: Any) -> bytes:
    return json.dumps(data, separators=(",", ":")).encode()


def loads(raw: bytes | None) -> Any:
    return json.loads(raw) if raw else None


def broker_json(broker: BrokerInfo, now_ms: int | None = None) -> dict[str, Any]:
    """The JSON of ``/brokers/ids/<id>`` (``now_ms``: its timestamp, the system clock's by default)."""
    # "host" and "port" are the PLAINTEXT endpoint's (for 0.8-era readers), null and -1 without
    # one, as Kafka writes them
    plain = next((e for e in broker.endpoints if e.security_protocol == "PLAINTEXT"), None)
    extra = {"schema_registry_url": broker.registry_url} if broker.registry_url else {}
    return {
        **extra,
        "listener_security_protocol_map": {e.listener: e.security_protocol for e in broker.endpoints},
        "endpoints": [f"{e.listener}://{e.host}:{e.port}" for e in broker.endpoints],
        "rack": broker.rack,
        "jmx_port": -1,
        "features": {},
        "host": plain.host if plain is not None else None,
        "timestamp": str(SystemClock().now_ms() if now_ms is None else now_ms),
        "port": plain.port if plain is not None else -1,
        "version": 5,
    }


def broker_from_json(broker_id: int, data: Mapping[str, Any], epoch: int) -> BrokerInfo:
    protocols = data.get("listener_security_protocol_map") or {}
    endpoints = []
    for ep in data.get("endpoints", []):
        name, _, rest = ep.partition("://")
        host, _, port = rest.rpartition(":")
        endpoints.append(Endpoint(name, protocols.get(name, name), host.strip("[]"), int(port)))
    url = data.get("schema_registry_url")
    return BrokerInfo(broker_id, tuple(endpoints), data.get("rack"), epoch, url if isinstance(url, str) else None)


class ZkStore:
    """kazoo behind coroutines: each call runs in a worker thread; watches fire on the loop."""

    def __init__(self, connect: str, session_timeout_ms: int, connection_timeout_ms: int | None = None) -> None:
        self.connect = connect
        self.session_timeout = session_timeout_ms / 1000
        self.connection_timeout = (connection_timeout_ms or session_timeout_ms) / 1000
        self.zk: Any
        if connect.startswith(INPROCESS_SCHEME):  # a test cluster's ensemble in this process
            self.zk = inprocess_client(connect)
        else:
            self.zk = KazooClient(
                hosts=connect,
                timeout=self.session_timeout,
                connection_retry=KazooRetry(max_tries=-1, delay=0.2, max_delay=2.0),
                command_retry=KazooRetry(max_tries=20, delay=0.1, max_delay=1.0),
            )
        # kazoo queues a request while it is disconnected and waits for it without a deadline:
        # every call gets one, and runs on a daemon thread so a stuck call never blocks exit
        self.op_timeout = max(10.0, self.session_timeout)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.session_listeners: list[Callable[[], Awaitable[None]]] = []
        self._lost = False
        self.closed = False
        # set when the broker begins to stop: a call made while ZooKeeper is unreachable then
        # fails at once (REQUEST_TIMED_OUT) instead of waiting op_timeout for it
        self._shutting_down = False
        #: done once shutting down: calls already waiting then get the shutdown bound too
        self._shutdown_signal: asyncio.Future[None] | None = None
        self._given_up = False  # a call timed out while shutting down: ZooKeeper is treated as gone
        self._tasks: set[asyncio.Future[None]] = set()

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.zk.add_listener(self._on_state)
        try:
            await self.run(self.zk.start, self.connection_timeout, timeout=self.connection_timeout + 5)
            chroot = self.zk.chroot
            if chroot:
                # like Kafka, create the chroot path itself on first use
                self.zk.chroot = ""
                try:
                    await self.run(self.zk.ensure_path, chroot)
                finally:
                    self.zk.chroot = chroot
        except Exception as exc:
            with contextlib.suppress(Exception):
                await self.run(self.zk.stop, timeout=5)
            raise KafkaError(
                ErrorCode.UNKNOWN_SERVER_ERROR,
                f"cannot connect to ZooKeeper at {self.connect} within {self.connection_timeout:.0f}s: {exc}",
            ) from exc

    @property
    def connected(self) -> bool:
        """Whether the session is connected to a ZooKeeper server now."""
        return bool(self.zk.connected)

    async def close(self) -> None:
        """End the session (its ephemeral znodes go at once).  With ZooKeeper unreachable there is
        nothing to tell it: kazoo's stop is given a second, and its threads are daemons."""
        self.closed = True
        limit = 2.0 if self.connected and not self._given_up else 0.5
        for step in (self.zk.stop, self.zk.close):
            with contextlib.suppress(Exception):
                await self._call(step, limit)

    @property
    def shutting_down(self) -> bool:
        return self._shutting_down

    @shutting_down.setter
    def shutting_down(self, value: bool) -> None:
        """Set on the event loop when the broker begins to stop."""
        self._shutting_down = value
        signal = self._shutdown_signal
        if value and signal is not None and not signal.done():
            signal.set_result(None)

    @property
    def session_id(self) -> int:
        sid = self.zk.client_id
        return sid[0] if sid else 0

    def _on_state(self, state: str) -> None:
        # kazoo's thread; never block here
        if state == KazooState.LOST:
            self._lost = True
            if not self.closed:  # kazoo reports LOST for a session we ended ourselves too
                log.warning("ZooKeeper session expired")
        elif state == KazooState.CONNECTED and self._lost and not self.closed:
            self._lost = False
            self.call_soon(self._new_session)

    def _new_session(self) -> None:
        assert self.loop is not None
        for cb in self.session_listeners:
            task = asyncio.ensure_future(cb(), loop=self.loop)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    def call_soon(self, fn: Callable[..., Any], *args: Any) -> None:
        loop = self.loop
        if loop is not None and not loop.is_closed() and not self.closed:
            loop.call_soon_threadsafe(fn, *args)

    async def run(self, fn: Callable[..., Any], *args: Any, timeout: float | None = None) -> Any:
        """``fn(*args)`` on a daemon thread; KafkaError(REQUEST_TIMED_OUT) after ``timeout``
        (default ``max(10 s, session timeout)``) when ZooKeeper does not answer.  Once the broker
        is shutting down, a call while the session is disconnected fails at once."""
        if self.shutting_down and (self._given_up or not self.connected):
            raise KafkaError(
                ErrorCode.REQUEST_TIMED_OUT, f"ZooKeeper at {self.connect} is not reachable (shutting down without it)"
            )
        limit = self.op_timeout if timeout is None else timeout
        return await self._call(fn, limit, *args)

    async def _call(self, fn: Callable[..., Any], limit: float, *args: Any) -> Any:
        """``fn(*args)`` on a daemon thread, waited for at most ``limit`` s.  ZooKeeper may stop
        answering with the session still looking connected (a frozen or cut-off server is noticed
        only after two thirds of the session timeout): once the broker is stopping, a call waits
        at most SHUTDOWN_OP_TIMEOUT s more (also one made before it began to stop, e.g. by a
        controller starting up), and the first that times out ends every later one at once."""
        loop = self.loop
        assert loop is not None
        fut: asyncio.Future[Any] = loop.create_future()

        def deliver(ok: bool, value: Any) -> None:
            if not fut.done():
                if ok:
                    fut.set_result(value)
                else:
                    fut.set_exception(value)

        def work() -> None:
            try:
                result = (True, fn(*args))
            except BaseException as exc:  # handed to the awaiting coroutine
                result = (False, exc)
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits
                loop.call_soon_threadsafe(deliver, *result)

        threading.Thread(target=work, name="odradek-zk", daemon=True).start()
        give_up_at = loop.time() + limit
        if not self.shutting_down:
            if self._shutdown_signal is None:
                self._shutdown_signal = loop.create_future()
            await asyncio.wait((fut, self._shutdown_signal), timeout=limit, return_when=asyncio.FIRST_COMPLETED)
            if fut.done():
                return fut.result()
        if self.shutting_down:
            give_up_at = min(give_up_at, loop.time() + SHUTDOWN_OP_TIMEOUT)
        try:
            return await wait_for(fut, max(give_up_at - loop.time(), 0.0))
        except TimeoutError:
            if self.shutting_down and not self._given_up:
                self._given_up = True
                log.warning("ZooKeeper at %s did not answer while shutting down: going on without it", self.connect)
            raise KafkaError(
                ErrorCode.REQUEST_TIMED_OUT, f"ZooKeeper at {self.connect} did not answer within {limit:.0f}s"
            ) from None

    # -- operations ---------------------------------------------------------------------------
    async def get(self, path: str, watch: Callable[[], None] | None = None) -> tuple[Any, Any]:
        """``(json value, stat)``; raises NoNodeError."""
        w = None if watch is None else (lambda _event: self.call_soon(watch))
        raw, stat = await self.run(self.zk.retry, self.zk.get, path, w)
        return loads(raw), stat

    async def get_or_none(self, path: str, watch: Callable[[], None] | None = None) -> tuple[Any, Any]:
        try:
            return await self.get(path, watch)
        except NoNodeError:
            if watch is not None:
                await self.exists(path, watch)
            return None, None

    async def exists(self, path: str, watch: Callable[[], None] | None = None) -> Any:
        w = None if watch is None else (lambda _event: self.call_soon(watch))
        return await self.run(self.zk.retry, self.zk.exists, path, w)

    async def children(self, path: str, watch: Callable[[], None] | None = None) -> list[str]:
        w = None if watch is None else (lambda _event: self.call_soon(watch))
        try:
            return sorted(await self.run(self.zk.retry, self.zk.get_children, path, w))
        except NoNodeError:
            return []

    async def create(
        self, path: str, value: Any = None, *, ephemeral: bool = False, sequence: bool = False, makepath: bool = True
    ) -> str:
        data = b"" if value is None else dumps(value)
        return str(
            await self.run(self.zk.create, path, data, None, ephemeral, sequence, makepath)
        )

    async def set(self, path: str, value: Any, version: int = -1) -> Any:
        """Write JSON; raises BadVersionError when ``version`` is not current."""
        return await self.run(self.zk.set, path, dumps(value), version)

    async def upsert(self, path: str, value: Any) -> int:
        """Create or overwrite ``path``; the mzxid of the write."""
        try:
            return int((await self.set(path, value)).mzxid)
        except NoNodeError:
            with contextlib.suppress(NodeExistsError):
                await self.create(path, value)
                stat = await self.exists(path)
                return int(stat.mzxid) if stat is not None else 0
            return int((await self.set(path, value)).mzxid)

    async def delete(self, path: str, *, recursive: bool = False, version: int = -1) -> None:
        with contextlib.suppress(NoNodeError):
            await self.run(self.zk.retry, self.zk.delete, path, version, recursive)

    async def ensure_path(self, path: str) -> None:
        await self.run(self.zk.retry, self.zk.ensure_path, path)


class ZooKeeperBackend(MetadataBackend):
    """Metadata kept in ZooKeeper; the image comes from the controller's requests."""

    hosts_all_partitions = False

    def __init__(
        self, connect: str, session_timeout_ms: int, connection_timeout_ms: int | None = None, clock: Clock | None = None
    ) -> None:
        """``clock``: the broker's (the registration's timestamp)."""
        super().__init__()
        self.clock: Clock = clock or SystemClock()
        self.store = ZkStore(connect, session_timeout_ms, connection_timeout_ms)
        self.cluster_id = ""
        self.broker: BrokerInfo | None = None
        self._broker_epoch = -1
        self._image = MetadataImage.empty("")
        self._controller_metadata = False  # set by the controller's first metadata (apply_metadata)
        self._topic_configs: dict[str, dict[str, str]] = {}
        # the mzxid of /config/topics/<t> that _topic_configs[t] was read from (or written as):
        # a read that is older than what is held (a reload that raced a local alter) never wins
        self._config_zxids: dict[str, int] = {}
        #: SCRAM credentials from /config/users/<user> (user -> mechanism -> stored form)
        self._users: dict[str, dict[str, str]] = {}
        #: client quotas from /config/users|clients|ips (entity path -> quota -> value)
        self._quotas: dict[str, dict[str, float]] = {}
        #: the finalized features and the client-metrics subscriptions
        self._extras = ZkFeaturesAndMetrics(self.store, lambda: self._install(self._image))
        #: ACLs from /kafka-acl and /kafka-acl-extended, kept current by their change notifications
        self._acl_state = ZkAcls(self.store, self._acls_changed)
        self._waiters: list[tuple[Callable[[MetadataImage], bool], asyncio.Future[None]]] = []
        self.store.session_listeners.append(self._reregister)
        self.on_registered: list[Callable[[], Awaitable[None]]] = []

    @property
    def image(self) -> MetadataImage:
        return self._image

    def metadata_known(self) -> bool:
        return self._controller_metadata

    # -- start-up ---------------------------------------------------------------------------------
    async def connect(self, proposed_cluster_id: str | None) -> str:
        """Connect, create the persistent paths and ``/cluster/id`` once; returns the cluster id."""
        await self.store.start()
        for path in PERSISTENT_PATHS:
            await self.store.ensure_path(path)
        data, _ = await self.store.get_or_none("/cluster/id")
        if data is None:
            cid = proposed_cluster_id or _new_cluster_id()
            with contextlib.suppress(NodeExistsError):
                await self.store.create("/cluster/id", {"version": "1", "id": cid})
            data, _ = await self.store.get("/cluster/id")
        self.cluster_id = str(data["id"])
        self._image = MetadataImage.empty(self.cluster_id)
        await self.load_acls()
        return self.cluster_id

    async def start(self, broker: BrokerInfo) -> None:
        self.broker = broker
        await self._register(broker, wait_ms=int(self.store.session_timeout * 1000) + 2000)
        self._image = self._image.with_broker(replace(broker, epoch=self._broker_epoch))
        await self.store.children("/config/changes", self._config_changed)
        changed = await self._load_users()
        changed |= await self._extras.load_client_metrics()
        changed |= await self._extras.load_group_configs()
        changed |= await self._extras.load_features()
        if await self._load_quotas() or changed:
            self._install(self._image)

    async def _load_users(self) -> bool:
        """Read the SCRAM credentials of ``/config/users/*``; True when they changed."""
        users: dict[str, dict[str, str]] = {}
        for user in await self.store.children("/config/users"):
            data, _ = await self.store.get_or_none(f"/config/users/{user}")
            config = (data or {}).get("config", {}) if isinstance(data, dict) else {}
            creds = {m: str(config[m]) for m in _SCRAM if m in config}
            if creds:
                users[user] = creds
        if users == self._users:
            return False
        self._users = users
        return True

    async def _user_config(self, user: str) -> dict[str, str]:
        data, _ = await self.store.get_or_none(f"/config/users/{user}")
        config = (data or {}).get("config", {}) if isinstance(data, dict) else {}
        return {str(k): str(v) for k, v in config.items()}

    async def _register(self, broker: BrokerInfo, wait_ms: int) -> None:
        """Create ``/brokers/ids/<id>``; a node left by this broker's previous, dead session is
        waited out (it disappears when that session expires); a live one is a duplicate id."""
        path = f"/brokers/ids/{broker.broker_id}"
        deadline = time.monotonic() + wait_ms / 1000
        while True:
            try:
                # "pid": an extra field (only brokers and tools read /brokers/ids, and Kafka's
                # parser ignores unknown fields) for `odradek cluster` to find the process
                await self.store.create(path, {**broker_json(broker, self.clock.now_ms()), "pid": os.getpid()}, ephemeral=True)
                break
            except NodeExistsError:
                _, stat = await self.store.get_or_none(path)
                if stat is not None and stat.ephemeralOwner == self.store.session_id:
                    break
                if time.monotonic() >= deadline:
                    raise KafkaError(
                        ErrorCode.UNKNOWN_SERVER_ERROR,
                        f"broker id {broker.broker_id} is already registered in ZooKeeper at {path} by another "
                        "live broker: every broker needs its own broker.id",
                    ) from None
                await asyncio.sleep(0.5)
        _, stat = await self.store.get(path)
        self._broker_epoch = stat.czxid
        log.info("registered broker %d in ZooKeeper (epoch %d)", broker.broker_id, self._broker_epoch)

    async def _reregister(self) -> None:
        if self.broker is None or self.store.closed:
            return
        try:
            await self._register(self.broker, wait_ms=int(self.store.session_timeout * 1000) + 2000)
        except Exception:
            log.exception("could not re-register broker %d after session expiry", self.broker.broker_id)
            return
        await self._reload_configs()  # re-arms the watch; changes made while the session was gone
        await self._extras.reload_features()  # its watch too
        with contextlib.suppress(Exception):
            await self.load_acls()
        for cb in self.on_registered:
            await cb()

    def reachable(self) -> bool:
        return self.store.connected

    def begin_shutdown(self) -> None:
        self.store.shutting_down = True

    async def stop(self) -> None:
        self.store.shutting_down = True
        for _, fut in self._waiters:
            if not fut.done():
                fut.cancel()
        await self.store.close()

    # -- the image -----------------------------------------------------------------------------------
    async def apply_metadata(self, image: MetadataImage) -> None:
        """Install the image sent by the controller, with topic configs read from ZooKeeper."""
        missing = [t for t in image.topics if t not in self._topic_configs]
        for name in missing:
            self._hold_config(name, *await self._read_topic_config(name))
        self._controller_metadata = True
        self._install(image)

    def _install(self, image: MetadataImage) -> None:
        topics = {}
        for name, t in image.topics.items():
            cfg = self._topic_configs.get(name, {})
            topics[name] = t if dict(t.configs) == cfg else replace(t, configs=dict(cfg))
        for name in list(self._topic_configs):
            if name not in image.topics:
                del self._topic_configs[name]
                self._config_zxids.pop(name, None)
        self._image = replace(
            image, topics=topics, cluster_id=self.cluster_id, user_scram=dict(self._users), acls=self._acls,
            client_quotas=self._quotas, features=self._extras.features,
            features_epoch=self._extras.features_epoch, client_metrics=self._extras.client_metrics,
            group_configs=self._extras.group_configs,
        )
        self._publish(self._image)
        still = []
        for pred, fut in self._waiters:
            if fut.done():
                continue
            if pred(self._image):
                fut.set_result(None)
            else:
                still.append((pred, fut))
        self._waiters = still

    async def wait_for(self, predicate: Callable[[MetadataImage], bool], timeout: float) -> bool:
        if predicate(self._image):
            return True
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append((predicate, fut))
        try:
            await wait_for(fut, timeout)
            return True
        except TimeoutError:
            return False

    async def topic_config(self, name: str) -> dict[str, str]:
        """A topic's config overrides as ZooKeeper has them now (``/config/topics/<t>``), as
        Kafka's DescribeConfigs reads them in ZooKeeper mode: a config alter acknowledged by any
        broker is seen by every broker's DescribeConfigs at once.  The image's copy is brought up
        to date on the way (never back to an older version)."""
        cfg, zxid = await self._read_topic_config(name)
        if name in self._image.topics and self._hold_config(name, cfg, zxid):
            self._install(self._image)
        return cfg

    async def topic_exists(self, name: str) -> bool:
        """``/brokers/topics/<t>`` exists: what Kafka's ZooKeeper mode checks before altering a
        topic's configs, not the metadata the controller has sent this broker so far (which may
        lack a new topic, or still hold a deleted one)."""
        return await self.store.exists(f"/brokers/topics/{name}") is not None

    async def _read_topic_config(self, name: str) -> tuple[dict[str, str], int]:
        """The overrides in ``/config/topics/<t>`` and that znode's mzxid (0: no znode)."""
        data, stat = await self.store.get_or_none(f"/config/topics/{name}")
        zxid = int(stat.mzxid) if stat is not None else 0
        if not data:
            return {}, zxid
        return {str(k): str(v) for k, v in (data.get("config") or {}).items()}, zxid

    def _hold_config(self, name: str, cfg: dict[str, str], zxid: int) -> bool:
        """Keep ``cfg`` as the topic's overrides unless what is held is newer; whether it changed."""
        if zxid < self._config_zxids.get(name, -1):
            return False
        self._config_zxids[name] = zxid
        if self._topic_configs.get(name) == cfg:
            return False
        self._topic_configs[name] = cfg
        return True

    def _config_changed(self) -> None:
        asyncio.get_running_loop().create_task(self._reload_configs())

    async def _reload_configs(self) -> None:
        """A ``/config/changes`` notification: re-read the topics' overrides (the watch is re-armed
        first).  Every broker applies a change within a watch round trip and one read per topic
        (milliseconds on a healthy ZooKeeper); DescribeConfigs does not wait for it (it reads
        ZooKeeper), log configs (retention, segment size, ...) follow it."""
        with contextlib.suppress(Exception):
            await self.store.children("/config/changes", self._config_changed)
            changed = await self._load_users()
            changed |= await self._load_quotas()
            changed |= await self._extras.load_client_metrics()
            changed |= await self._extras.load_group_configs()
            for name in list(self._image.topics):
                changed |= self._hold_config(name, *await self._read_topic_config(name))
            if changed:
                self._install(self._image)

    # -- admin writes -----------------------------------------------------------------------------
    async def broker_registration(self, broker_id: int) -> BrokerInfo | None:
        data, stat = await self.store.get_or_none(f"/brokers/ids/{broker_id}")
        if not isinstance(data, dict) or stat is None:
            return None
        try:
            return broker_from_json(broker_id, data, stat.czxid)
        except (ValueError, TypeError, AttributeError):
            return None

    async def live_brokers(self) -> dict[int, str | None]:
        out: dict[int, str | None] = {}
        for child in await self.store.children("/brokers/ids"):
            data, _ = await self.store.get_or_none(f"/brokers/ids/{child}")
            if data is not None:
                out[int(child)] = data.get("rack")
        return out

    async def create_topic(
        self,
        name: str,
        num_partitions: int,
        replication_factor: int,
        configs: Mapping[str, str],
        assignments: Mapping[int, list[int]] | None = None,
        *,
        validate_only: bool = False,
        internal: bool = False,
        timeout: float = 10.0,
    ) -> TopicInfo:
        validate_topic_name(name)
        if await self.store.exists(f"/brokers/topics/{name}") is not None:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic '{name}' already exists")
        brokers = await self.live_brokers()
        if assignments:
            placed = {}
            for p, replicas in assignments.items():
                if not replicas or len(set(replicas)) != len(replicas):
                    raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"partition {p}: invalid replicas {replicas}")
                unknown = [r for r in replicas if r not in brokers]
                if unknown:
                    raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"partition {p}: unknown brokers {unknown}")
                placed[int(p)] = tuple(replicas)
            if sorted(placed) != list(range(len(placed))):
                raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "partitions must be numbered 0..n-1")
        else:
            if num_partitions <= 0:
                raise KafkaError(ErrorCode.INVALID_PARTITIONS, "number of partitions must be larger than 0")
            if replication_factor <= 0:
                raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR, "replication factor must be larger than 0")
            if replication_factor > len(brokers):
                raise KafkaError(
                    ErrorCode.INVALID_REPLICATION_FACTOR,
                    f"replication factor {replication_factor} is larger than the {len(brokers)} available brokers",
                )
            start = hash(name) % max(len(brokers), 1)
            placed = place_replicas(brokers, num_partitions, replication_factor, start_index=start)
        topic_id = uuid.uuid4()
        states = {
            p: PartitionState(name, p, r, (), -1) for p, r in placed.items()
        }
        info = TopicInfo(name, topic_id, states, dict(configs), internal)
        if validate_only:
            return info
        config_zxid = await self.store.upsert(f"/config/topics/{name}", {"version": 1, "config": dict(configs)})
        assignment = TopicAssignment(str(topic_id), dict(placed))
        try:
            await self.store.create(f"/brokers/topics/{name}", assignment.to_json())
        except NodeExistsError:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"topic '{name}' already exists") from None
        self._hold_config(name, {str(k): str(v) for k, v in configs.items()}, config_zxid)
        await self.wait_for(lambda img: _has_leaders(img, name, len(placed)), timeout)
        return self._image.topics.get(name, info)

    async def delete_topic(self, name: str, timeout: float = 10.0) -> None:
        if await self.store.exists(f"/brokers/topics/{name}") is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic '{name}' does not exist")
        with contextlib.suppress(NodeExistsError):
            await self.store.create(f"/admin/delete_topics/{name}")
        await self.wait_for(lambda img: name not in img.topics, timeout)

    async def create_partitions(
        self, name: str, total: int, assignments: list[list[int]] | None = None, *, validate_only: bool = False
    ) -> None:
        path = f"/brokers/topics/{name}"
        data, stat = await self.store.get_or_none(path)
        if data is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic '{name}' does not exist")
        current = TopicAssignment.from_json(data, str(uuid.uuid4()))
        count = len(current.replicas)
        if total <= count:
            raise KafkaError(
                ErrorCode.INVALID_PARTITIONS, f"topic currently has {count} partitions, {total} would not be an increase"
            )
        brokers = await self.live_brokers()
        rf = len(current.replicas.get(0, ())) or 1
        if assignments is not None:
            if len(assignments) != total - count:
                raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, "one assignment is needed per new partition")
            new = {}
            for i, replicas in enumerate(assignments):
                if not replicas or any(r not in brokers for r in replicas):
                    raise KafkaError(ErrorCode.INVALID_REPLICA_ASSIGNMENT, f"unknown broker in {replicas}")
                new[count + i] = tuple(replicas)
        else:
            if rf > len(brokers):
                raise KafkaError(
                    ErrorCode.INVALID_REPLICATION_FACTOR,
                    f"replication factor {rf} is larger than the {len(brokers)} available brokers",
                )
            new = place_replicas(brokers, total - count, rf, start_partition=count)
        if validate_only:
            return
        current.replicas.update(new)
        try:
            await self.store.set(path, current.to_json(), stat.version)
        except BadVersionError:
            raise KafkaError(ErrorCode.REASSIGNMENT_IN_PROGRESS, f"topic '{name}' changed concurrently; retry") from None
        await self.wait_for(lambda img: _has_leaders(img, name, total), 10.0)

    async def set_topic_configs(self, name: str, configs: Mapping[str, str]) -> None:
        if await self.store.exists(f"/brokers/topics/{name}") is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"topic '{name}' does not exist")
        # Kafka's order: the config, then the change notification; the alter is answered after
        # both, and this broker serves the new value at once
        zxid = await self.store.upsert(f"/config/topics/{name}", {"version": 1, "config": dict(configs)})
        self._hold_config(name, {str(k): str(v) for k, v in configs.items()}, zxid)
        self._install(self._image)
        await self.store.create(
            "/config/changes/config_change_", {"version": 2, "entity_path": f"topics/{name}"}, sequence=True
        )

    async def set_user_scram(self, user: str, credentials: Mapping[str, str]) -> None:
        # /config/users/<user> also holds the user's quotas: only the SCRAM entries change
        config = {k: v for k, v in (await self._user_config(user)).items() if k not in _SCRAM}
        config.update(credentials)
        await self.store.upsert(f"/config/users/{user}", {"version": 1, "config": config})
        await self.store.create(
            "/config/changes/config_change_", {"version": 2, "entity_path": f"users/{user}"}, sequence=True
        )
        if credentials:
            self._users[user] = dict(credentials)
        else:
            self._users.pop(user, None)
        self._install(self._image)

    # -- ACLs: /kafka-acl/<type>/<name>, /kafka-acl-extended/prefixed/<type>/<name> ---------------
    @property
    def _acls(self) -> dict[tuple[str, str, str], frozenset[AclEntry]]:
        return self._acl_state.acls

    def _acls_changed(self, acls: dict[tuple[str, str, str], frozenset[AclEntry]]) -> None:
        self._image = replace(self._image, acls=acls)
        self._publish(self._image)

    async def load_acls(self) -> None:
        """Read every ACL and watch both change-notification paths (Kafka's layout); called once
        the session is up and again after a new session (changes may have been missed)."""
        await self._acl_state.load()

    async def alter_acls(
        self, resource: tuple[str, str, str], change: Callable[[frozenset[AclEntry]], frozenset[AclEntry]]
    ) -> frozenset[AclEntry]:
        """Change one resource's ACL node (see :func:`write_acls`) and apply it here at once."""
        return await self._acl_state.alter(resource, change)

    # -- client quotas: /config/users/<u>[/clients/<c>], /config/clients/<c>, /config/ips/<ip> ------
    async def _load_quotas(self) -> bool:
        """Read every client quota entity; True when the quotas changed."""
        quotas: dict[str, dict[str, float]] = {}
        paths: list[str] = []
        for user in await self.store.children("/config/users"):
            paths.append(f"users/{user}")
            paths += [f"users/{user}/clients/{c}" for c in await self.store.children(f"/config/users/{user}/clients")]
        for root in ("clients", "ips"):
            paths += [f"{root}/{name}" for name in await self.store.children(f"/config/{root}")]
        for path in paths:
            data, _ = await self.store.get_or_none(f"/config/{path}")
            entity = _quota_values(data)
            if entity:
                quotas[path] = entity
        if quotas == self._quotas:
            return False
        self._quotas = quotas
        return True

    async def alter_client_quota(
        self, entity_path: str, change: Callable[[dict[str, float]], dict[str, float]]
    ) -> dict[str, float]:
        # Kafka's layout: {"version":1,"config":{name: value as a string}}; /config/users/<u> also
        # holds the user's SCRAM credentials, which stay as they are; then a change notification
        node = f"/config/{entity_path}"
        while True:
            data, stat = await self.store.get_or_none(node)
            config = (data or {}).get("config", {}) if isinstance(data, dict) else {}
            before = _quota_values(data)
            after = {k: float(v) for k, v in change(dict(before)).items()}
            if after == before:
                return after
            kept = {str(k): str(v) for k, v in config.items() if k not in QUOTA_KEYS}
            value = {"version": 1, "config": {**kept, **{k: repr(v) for k, v in sorted(after.items())}}}
            try:
                if stat is None:
                    await self.store.create(node, value)
                else:
                    await self.store.set(node, value, stat.version)
            except (BadVersionError, NodeExistsError):
                continue  # changed meanwhile (another broker): again on what it holds now
            break
        await self.store.create(
            "/config/changes/config_change_", {"version": 2, "entity_path": entity_path}, sequence=True
        )
        quotas = {k: v for k, v in self._quotas.items() if k != entity_path}
        if after:
            quotas[entity_path] = after
        self._quotas = quotas
        self._install(self._image)
        return after

    async def update_features(self, change: FeatureChange) -> tuple[Mapping[str, int] | None, int]:
        return await self._extras.update_features(change)

    async def alter_client_metrics(self, name: str, change: MetricsChange) -> dict[str, str]:
        return await self._extras.alter_client_metrics(name, change)

    async def alter_group_configs(
        self, group_id: str, change: Callable[[dict[str, str]], dict[str, str]]
    ) -> dict[str, str]:
        return await self._extras.alter_group_configs(group_id, change)

    async def set_broker_configs(self, configs: Mapping[str, str]) -> None:
        assert self.broker is not None
        await self.store.upsert(f"/config/brokers/{self.broker.broker_id}", {"version": 1, "config": dict(configs)})
        self._image = self._image.with_broker_configs(configs)
        self._publish(self._image)

    # -- used by leaders ----------------------------------------------------------------------------
    @property
    def broker_epoch(self) -> int:
        return self._broker_epoch

    async def allocate_producer_ids(self) -> tuple[int, int]:
        """Claim the next block of ``PRODUCER_ID_BLOCK`` producer ids with a version check."""
        path = "/latest_producer_id_block"
        for _ in range(100):
            data, stat = await self.store.get_or_none(path)
            if data is None:
                try:
                    await self.store.create(
                        path, {"version": 1, "broker": self.broker.broker_id if self.broker else -1,
                               "block_start": "0", "block_end": str(PRODUCER_ID_BLOCK - 1)}
                    )
                    return 0, PRODUCER_ID_BLOCK
                except NodeExistsError:
                    continue
            start = int(data["block_end"]) + 1
            try:
                await self.store.set(
                    path,
                    {"version": 1, "broker": self.broker.broker_id if self.broker else -1,
                     "block_start": str(start), "block_end": str(start + PRODUCER_ID_BLOCK - 1)},
                    stat.version,
                )
                return start, start + PRODUCER_ID_BLOCK
            except BadVersionError:
                continue
        raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, "could not allocate a producer id block")

    async def read_leader_isr(self, topic: str, partition: int) -> tuple[LeaderIsr, int] | None:
        data, stat = await self.store.get_or_none(_state_path(topic, partition))
        if data is None:
            return None
        return LeaderIsr.from_json(data, stat.version), stat.version

    async def write_leader_isr(self, topic: str, partition: int, state: LeaderIsr, version: int) -> int | None:
        try:
            stat = await self.store.set(_state_path(topic, partition), state.to_json(), version)
        except BadVersionError:
            raise StaleVersion(f"{topic}-{partition}: state is no longer at version {version}") from None
        except NoNodeError:
            return None
        return int(stat.version)

    async def notify_isr_change(self, partitions: list[tuple[str, int]]) -> None:
        await self.store.create(
            "/isr_change_notification/isr_change_",
            {"version": 1, "partitions": [{"topic": t, "partition": p} for t, p in partitions]},
            sequence=True,
        )

    async def notify_log_dir_failure(self) -> None:
        # Kafka's format: the controller asks the broker which of its replicas are offline
        await self.store.create(
            "/log_dir_event_notification/log_dir_event_",
            {"version": 1, "broker": self.broker.broker_id if self.broker else -1, "event": 1},
            sequence=True,
        )

    async def controller_id(self) -> int:
        data, _ = await self.store.get_or_none("/controller")
        return int(data["brokerid"]) if data else -1

    # -- the 0.8 consumers' offsets (OffsetCommit/OffsetFetch v0) ------------------------------
    stores_v0_offsets = True

    async def commit_v0_offsets(self, group_id: str, offsets: Mapping[tuple[str, int], int]) -> None:
        """``/consumers/<group>/offsets/<topic>/<partition>`` (persistent, the decimal offset),
        as Kafka 0.8.2-0.10 wrote it for OffsetCommit v0."""
        for (topic, partition), offset in offsets.items():
            await self.store.upsert(f"/consumers/{group_id}/offsets/{topic}/{partition}", int(offset))

    async def fetch_v0_offsets(self, group_id: str, partitions: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        out: dict[tuple[str, int], int] = {}
        for topic, partition in partitions:
            try:
                raw, _stat = await self.store.run(
                    self.store.zk.retry, self.store.zk.get, f"/consumers/{group_id}/offsets/{topic}/{partition}"
                )
                out[(topic, partition)] = int(raw.decode().strip()) if raw else -1
            except (NoNodeError, ValueError):
                out[(topic, partition)] = -1
        return out


def _state_path(topic: str, partition: int) -> str:
    return f"/brokers/topics/{topic}/partitions/{partition}/state"


def _has_leaders(image: MetadataImage, name: str, count: int) -> bool:
    t = image.topics.get(name)
    return t is not None and len(t.partitions) >= count and all(s.leader >= 0 for s in t.partitions.values())


def _new_cluster_id() -> str:
    import base64

    return base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()


# -- SCRAM users straight in ZooKeeper (bootstrapping a cluster before any broker runs) --------------


async def zk_user_scram(connect: str, user: str | None = None, timeout_ms: int = 10000) -> dict[str, dict[str, str]]:
    """SCRAM credentials in ``/config/users`` (of ``user``, or of every user): user -> mechanism
    -> stored form, as the brokers read them."""
    store = ZkStore(connect, timeout_ms)
    await store.start()
    try:
        names = [user] if user is not None else await store.children("/config/users") if await store.exists(
            "/config/users"
        ) is not None else []
        out: dict[str, dict[str, str]] = {}
        for name in names:
            data, _ = await store.get_or_none(f"/config/users/{name}")
            config = (data or {}).get("config", {}) if isinstance(data, dict) else {}
            creds = {m: str(config[m]) for m in _SCRAM if m in config}
            if creds:
                out[name] = creds
        return out
    finally:
        await store.close()


def _quota_values(data: Any) -> dict[str, float]:
    """The client quotas of a ``/config/<entity>`` node (other entries, unparsable values left out)."""
    config = data.get("config", {}) if isinstance(data, dict) else {}
    out: dict[str, float] = {}
    for k, v in config.items() if isinstance(config, dict) else ():
        if k in QUOTA_KEYS:
            with contextlib.suppress(TypeError, ValueError):
                out[str(k)] = float(v)
    return out


async def zk_set_user_scram(connect: str, user: str, credentials: Mapping[str, str], timeout_ms: int = 10000) -> None:
    """Write ``user``'s SCRAM credentials (mechanism -> stored form; other SCRAM entries are
    removed, the user's quotas kept) and notify running brokers, as kafka-configs --zookeeper."""
    store = ZkStore(connect, timeout_ms)
    await store.start()
    try:
        for path in ("/config/users", "/config/changes"):
            await store.ensure_path(path)
        data, _ = await store.get_or_none(f"/config/users/{user}")
        old = (data or {}).get("config", {}) if isinstance(data, dict) else {}
        config = {str(k): str(v) for k, v in old.items() if k not in _SCRAM}
        config.update(credentials)
        await store.upsert(f"/config/users/{user}", {"version": 1, "config": config})
        await store.create(
            "/config/changes/config_change_", {"version": 2, "entity_path": f"users/{user}"}, sequence=True
        )
    finally:
        await store.close()


async def write_acls(
    store: ZkStore, resource: tuple[str, str, str], change: Callable[[frozenset[AclEntry]], frozenset[AclEntry]]
) -> frozenset[AclEntry]:
    """Change one resource's ACL node with a version check (retried when someone changed it
    first), then write Kafka's change notification, so that every broker reloads it."""
    path = _acl_path(resource)
    for _ in range(50):
        data, stat = await store.get_or_none(path)
        before = _acl_entries(data, path)
        after = frozenset(change(before))
        if after == before:
            return after
        value = {"version": 1, "acls": [_acl_json(e) for e in sorted(after)]}
        try:
            if stat is None:
                await store.create(path, value)
            elif not after:
                await store.run(store.zk.delete, path, stat.version)
            else:
                await store.set(path, value, stat.version)
        except (NodeExistsError, BadVersionError, NoNodeError):
            continue
        break
    else:
        raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"{path} kept changing under this update")
    rtype, pattern, name = resource
    if pattern == "LITERAL":
        note, target = f"{rtype}:{name}".encode(), ACL_CHANGES
    else:
        note = dumps({"version": 1, "resourceType": rtype, "name": name, "patternType": pattern})
        target = ACL_EXTENDED_CHANGES
    created = str(await store.run(store.zk.create, f"{target}/acl_changes_", note, None, False, True, True))
    seq = _sequence(created.rsplit("/", 1)[-1])
    if seq > 0 and seq % 50 == 0:
        # notifications are kept for brokers that are busy; far older ones go (a broker that
        # finds a gap in what it has seen reloads every ACL)
        for child in await store.children(target):
            if 0 <= _sequence(child) < seq - KEPT_ACL_NOTIFICATIONS:
                await store.delete(f"{target}/{child}")
    return after


async def zk_acls(connect: str, timeout_ms: int = 10000) -> dict[tuple[str, str, str], frozenset[AclEntry]]:
    """Every ACL in ZooKeeper (resource -> entries), as the brokers read them."""
    store = ZkStore(connect, timeout_ms)
    await store.start()
    try:
        return await read_acls(store)
    finally:
        await store.close()


async def read_acls(store: ZkStore) -> dict[tuple[str, str, str], frozenset[AclEntry]]:
    """Every ACL node under ``/kafka-acl`` and ``/kafka-acl-extended/prefixed``: resource -> entries."""
    out: dict[tuple[str, str, str], frozenset[AclEntry]] = {}
    for root, pattern in ((ACL_LITERAL, "LITERAL"), (ACL_PREFIXED, "PREFIXED")):
        for rtype in await store.children(root):
            for name in await store.children(f"{root}/{rtype}"):
                data, _ = await store.get_or_none(f"{root}/{rtype}/{name}")
                entries = _acl_entries(data, f"{root}/{rtype}/{name}")
                if entries:
                    out[(rtype, pattern, name)] = entries
    return out


async def zk_alter_acls(
    connect: str,
    changes: Mapping[tuple[str, str, str], Callable[[frozenset[AclEntry]], frozenset[AclEntry]]],
    timeout_ms: int = 10000,
) -> dict[tuple[str, str, str], frozenset[AclEntry]]:
    """Apply ACL changes straight in ZooKeeper (no broker needed: before a cluster's first
    start), as kafka-acls with ``--authorizer-properties zookeeper.connect=`` did; running
    brokers take them from the change notifications.  Returns each resource's new entries."""
    store = ZkStore(connect, timeout_ms)
    await store.start()
    try:
        for path in (ACL_LITERAL, ACL_PREFIXED, ACL_CHANGES, ACL_EXTENDED_CHANGES):
            await store.ensure_path(path)
        return {resource: await write_acls(store, resource, change) for resource, change in changes.items()}
    finally:
        await store.close()


#: a change of the finalized feature levels, of a client-metrics subscription's config
FeatureChange = Callable[[Mapping[str, int] | None], Mapping[str, int] | None]
MetricsChange = Callable[[dict[str, str]], dict[str, str]]


class ZkAcls:
    """The ACLs read from /kafka-acl and /kafka-acl-extended, kept current by Kafka's change
    notifications (``changed`` gets each new mapping)."""

    def __init__(
        self, store: ZkStore, changed: Callable[[dict[tuple[str, str, str], frozenset[AclEntry]]], None]
    ) -> None:
        self.store = store
        self._changed = changed
        self.acls: dict[tuple[str, str, str], frozenset[AclEntry]] = {}
        #: the last change notification applied, per notification path
        self._seen: dict[str, int] = {}
        self._lock = asyncio.Lock()

    async def load(self) -> None:
        """Read every ACL and watch both change-notification paths."""
        acls = await read_acls(self.store)
        for path in (ACL_CHANGES, ACL_EXTENDED_CHANGES):
            children = await self.store.children(path, functools.partial(self._on_change, path))
            self._seen[path] = max((_sequence(c) for c in children), default=-1)
        self._set(acls)

    def _set(self, acls: Mapping[tuple[str, str, str], frozenset[AclEntry]]) -> None:
        if acls == self.acls:
            return
        self.acls = dict(acls)  # a new mapping: the authorizer rebuilds its index on it
        self._changed(self.acls)

    def _on_change(self, path: str) -> None:
        asyncio.get_running_loop().create_task(self._apply_changes(path))

    async def _apply_changes(self, path: str) -> None:
        """Re-read the resources named by the notifications not seen yet (the watch re-armed first)."""
        async with self._lock:
            try:
                children = await self.store.children(path, functools.partial(self._on_change, path))
                seen = self._seen.get(path, -1)
                if seen >= 0 and children and min(_sequence(c) for c in children) > seen + 1:
                    # notifications this broker never saw were purged: read everything again
                    log.info("ACL change notifications under %s were purged before this broker read them: "
                             "reloading every ACL", path)
                    await self.load()
                    return
                changed: set[tuple[str, str, str]] = set()
                for child in children:
                    seq = _sequence(child)
                    if seq <= seen:
                        continue
                    try:
                        raw, _ = await self.store.run(self.store.zk.retry, self.store.zk.get, f"{path}/{child}")
                    except NoNodeError:
                        continue
                    resource = _acl_change_resource(raw, extended=path == ACL_EXTENDED_CHANGES)
                    if resource is None:
                        log.warning("ignoring an ACL change notification it cannot read: %s/%s", path, child)
                    else:
                        changed.add(resource)
                    seen = max(seen, seq)
                self._seen[path] = seen
                if not changed:
                    return
                acls = dict(self.acls)
                for resource in changed:
                    data, _ = await self.store.get_or_none(_acl_path(resource))
                    entries = _acl_entries(data, _acl_path(resource))
                    if entries:
                        acls[resource] = entries
                    else:
                        acls.pop(resource, None)
                if acls != self.acls:
                    log.info(
                        "applied ACL changes from ZooKeeper on %s: %d bindings now",
                        ", ".join(":".join(r) for r in sorted(changed)), sum(len(v) for v in acls.values()),
                    )
                self._set(acls)
            except Exception:
                log.exception("could not apply ACL changes from %s", path)

    async def alter(
        self, resource: tuple[str, str, str], change: Callable[[frozenset[AclEntry]], frozenset[AclEntry]]
    ) -> frozenset[AclEntry]:
        """Change one resource's ACL node and apply it here at once: the node as it is now, read
        under the lock (another broker's change may have been written, notified and applied here
        since ours was written; our own result would then be older than what this broker holds,
        and no notification would come to correct it)."""
        after = await write_acls(self.store, resource, change)
        async with self._lock:
            data, _ = await self.store.get_or_none(_acl_path(resource))
            current = _acl_entries(data, _acl_path(resource))
            acls = dict(self.acls)
            if current:
                acls[resource] = current
            else:
                acls.pop(resource, None)
            self._set(acls)
        return after


class ZkFeaturesAndMetrics:
    """The finalized features (``/feature``, watched: every broker follows a change) and the
    client-metrics subscriptions (``/config/client-metrics``) as the backend holds them;
    ``changed`` installs the backend's image again after a change."""

    def __init__(self, store: ZkStore, changed: Callable[[], None]) -> None:
        self.store = store
        self._changed = changed
        #: the finalized levels (None: no /feature znode) and the znode's version (the epoch)
        self.features: dict[str, int] | None = None
        self.features_epoch = 0
        self.client_metrics: dict[str, dict[str, str]] = {}
        #: group configs (``/config/groups/<group>``, the group id sanitized as Kafka's entity names)
        self.group_configs: dict[str, dict[str, str]] = {}

    async def load_features(self) -> bool:
        """Read ``/feature`` and watch it; True when it changed."""
        features, epoch = await zk_read_features(self.store, self._feature_changed)
        if (features, epoch) == (self.features, self.features_epoch):
            return False
        self.features, self.features_epoch = features, epoch
        return True

    async def reload_features(self) -> None:
        """Read ``/feature`` again (a watch fired, the session was re-established)."""
        with contextlib.suppress(Exception):
            if await self.load_features():
                self._changed()

    def _feature_changed(self) -> None:
        asyncio.get_running_loop().create_task(self.reload_features())

    async def update_features(
        self, change: Callable[[Mapping[str, int] | None], Mapping[str, int] | None]
    ) -> tuple[Mapping[str, int] | None, int]:
        unchanged = await zk_update_features(self.store, change)
        if unchanged is not None:
            return unchanged
        await self.load_features()
        self._changed()
        return self.features, self.features_epoch

    async def load_client_metrics(self) -> bool:
        found = await zk_read_client_metrics(self.store)
        if found == self.client_metrics:
            return False
        self.client_metrics = found
        return True

    async def alter_client_metrics(
        self, name: str, change: Callable[[dict[str, str]], dict[str, str]]
    ) -> dict[str, str]:
        after = await zk_alter_client_metrics(self.store, name, change)
        metrics = {k: v for k, v in self.client_metrics.items() if k != name}
        if after:
            metrics[name] = after
        self.client_metrics = metrics
        self._changed()
        return after

    async def load_group_configs(self) -> bool:
        found = await zk_read_group_configs(self.store)
        if found == self.group_configs:
            return False
        self.group_configs = found
        return True

    async def alter_group_configs(
        self, group_id: str, change: Callable[[dict[str, str]], dict[str, str]]
    ) -> dict[str, str]:
        after = await zk_alter_group_configs(self.store, group_id, change)
        configs = {k: v for k, v in self.group_configs.items() if k != group_id}
        if after:
            configs[group_id] = after
        self.group_configs = configs
        self._changed()
        return after


async def zk_read_features(store: ZkStore, watch: Callable[[], None] | None = None) -> tuple[dict[str, int] | None, int]:
    """The finalized levels in ``/feature`` (None: no such znode) and its version (the epoch)."""
    data, stat = await store.get_or_none(FEATURE_PATH, watch)
    return _feature_levels(data), stat.version if stat is not None else 0


async def zk_update_features(
    store: ZkStore, change: Callable[[Mapping[str, int] | None], Mapping[str, int] | None]
) -> tuple[dict[str, int] | None, int] | None:
    """Apply ``change`` to ``/feature`` with a compare-and-set (Kafka's FeatureZNode v2), again
    on what it holds when another broker changed it meanwhile; None once written, the levels and
    epoch as they are when nothing changed."""
    while True:
        data, stat = await store.get_or_none(FEATURE_PATH)
        before = _feature_levels(data)
        after = change(before)
        if after is None or (before is not None and dict(after) == before):
            return before, stat.version if stat is not None else 0
        value = {
            "version": 2, "status": 1,
            "features": {k: {"max_version_level": int(v)} for k, v in sorted(after.items()) if v > 0},
        }
        try:
            if stat is None:
                await store.create(FEATURE_PATH, value)
            else:
                await store.set(FEATURE_PATH, value, stat.version)
        except (BadVersionError, NodeExistsError):
            continue
        return None


async def zk_read_client_metrics(store: ZkStore) -> dict[str, dict[str, str]]:
    """The client-metrics subscriptions (KIP-714) in ``/config/client-metrics/<name>``."""
    found: dict[str, dict[str, str]] = {}
    for name in await store.children("/config/client-metrics"):
        data, _ = await store.get_or_none(f"/config/client-metrics/{name}")
        config = (data or {}).get("config", {}) if isinstance(data, dict) else {}
        if config:
            found[name] = {str(k): str(v) for k, v in config.items()}
    return found


async def zk_alter_client_metrics(
    store: ZkStore, name: str, change: Callable[[dict[str, str]], dict[str, str]]
) -> dict[str, str]:
    """Apply ``change`` to subscription ``name`` (compare-and-set; empty deletes it) and notify
    the brokers through ``/config/changes``; returns its new config."""
    node = f"/config/client-metrics/{name}"
    while True:
        data, stat = await store.get_or_none(node)
        config = (data or {}).get("config", {}) if isinstance(data, dict) else {}
        before = {str(k): str(v) for k, v in config.items()}
        after = dict(change(dict(before)))
        if after == before:
            return after
        try:
            if not after:
                if stat is not None:
                    await store.delete(node, version=stat.version)
            elif stat is None:
                await store.create(node, {"version": 1, "config": after})
            else:
                await store.set(node, {"version": 1, "config": after}, stat.version)
        except (BadVersionError, NodeExistsError, NoNodeError):
            continue
        break
    await store.create(
        "/config/changes/config_change_", {"version": 2, "entity_path": f"client-metrics/{name}"}, sequence=True
    )
    return after


def group_node(group_id: str) -> str:
    """A group's znode name: Kafka's ``Sanitizer.sanitize`` of the id (URL-encoding), with ``.``
    and ``..`` (not znode names) encoded too."""
    name = sanitize(group_id)
    return name.replace(".", "%2E") if name in (".", "..") else name


async def zk_read_group_configs(store: ZkStore) -> dict[str, dict[str, str]]:
    """Every group's configs in ``/config/groups/<group>``."""
    found: dict[str, dict[str, str]] = {}
    for node in await store.children("/config/groups"):
        data, _ = await store.get_or_none(f"/config/groups/{node}")
        config = (data or {}).get("config", {}) if isinstance(data, dict) else {}
        if config:
            found[desanitize(node)] = {str(k): str(v) for k, v in config.items()}
    return found


async def zk_alter_group_configs(
    store: ZkStore, group_id: str, change: Callable[[dict[str, str]], dict[str, str]]
) -> dict[str, str]:
    """Apply ``change`` to a group's configs (compare-and-set; none left deletes the znode) and
    notify the brokers through ``/config/changes``; returns its new configs."""
    entity = f"groups/{group_node(group_id)}"
    node = f"/config/{entity}"
    while True:
        data, stat = await store.get_or_none(node)
        config = (data or {}).get("config", {}) if isinstance(data, dict) else {}
        before = {str(k): str(v) for k, v in config.items()}
        after = dict(change(dict(before)))
        if after == before:
            return after
        try:
            if not after:
                if stat is not None:
                    await store.delete(node, version=stat.version)
            elif stat is None:
                await store.create(node, {"version": 1, "config": after})
            else:
                await store.set(node, {"version": 1, "config": after}, stat.version)
        except (BadVersionError, NodeExistsError, NoNodeError):
            continue
        break
    await store.create("/config/changes/config_change_", {"version": 2, "entity_path": entity}, sequence=True)
    return after


def _feature_levels(data: Any) -> dict[str, int] | None:
    """The finalized levels of a FeatureZNode (v1 or v2; a disabled one has none); None when there
    is none."""
    if not isinstance(data, dict):
        return None
    if data.get("status") != 1:
        return {}
    out = {}
    for name, levels in (data.get("features") or {}).items():
        if isinstance(levels, dict) and "max_version_level" in levels:
            out[str(name)] = int(levels["max_version_level"])
    return out
