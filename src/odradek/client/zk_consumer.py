"""ZookeeperConsumer: the high-level consumer of Kafka 0.8-0.10, coordinated through ZooKeeper.

The seeds' consumer (file 000, "Consumer registration algorithm" and "Consumer rebalancing
algorithm"), with Kafka 0.10's ZooKeeper layout, so that a Kafka 0.10 tool reading ``/consumers``
understands it::

    /consumers/<group>/ids/<group>_<consumer.id>  ephemeral: {"version":1,"subscription":{topic: n},
                                                  "pattern":"static"|"white_list"|"black_list",
                                                  "timestamp":"<ms>"}
    /consumers/<group>/owners/<topic>/<partition> ephemeral: the owning thread, "<group>_<consumer.id>-<n>"
    /consumers/<group>/offsets/<topic>/<partition> persistent: the next offset to consume (decimal)

Usage (configured with the 0.8-era names)::

    c = ZookeeperConsumer({"zookeeper.connect": "127.0.0.1:2181", "group.id": "g",
                           "auto.offset.reset": "smallest"})
    [stream] = c.create_message_streams({"events": 1})["events"]
    for m in stream:                       # MessageAndMetadata(topic, partition, offset, key, value, ...)
        handle(m.value)
    c.shutdown()

A stream is also an async iterator (``async for m in stream``) for asyncio programs: the event loop
polls it without blocking.  Registration, watches and rebalancing run on kazoo's threads either way.

Watches on the group's consumer registry, ``/brokers/ids`` and ``/brokers/topics`` trigger a
rebalance: stop the fetcher, drop what it fetched and nobody consumed, commit (with
``auto.commit.enable``), release the partitions owned, compute the assignment from the sorted
consumer threads and partitions (``partition.assignment.strategy`` range or roundrobin), claim
each new partition with an ephemeral owner node — retrying the whole rebalance after
``rebalance.backoff.ms`` while another consumer still holds one, up to ``rebalance.max.retries``
times — read the offsets and restart the fetcher.  Records come from the partition leaders
through :class:`~odradek.client.SimpleConsumer` (brokers found in ``/brokers/ids``, at the first
endpoint whose listener speaks ``security.protocol``, or at ``bootstrap.servers`` if given).  The
client's TLS and SASL settings (``security.protocol``, ``ssl.*``, ``sasl.*``) go to the fetching
and committing clients; Kafka 0.10's ZooKeeper consumer had no security, this one has.

Offsets: ``offsets.storage=zookeeper`` (the default) keeps them under ``/consumers``;
``offsets.storage=kafka`` commits them to the group coordinator (OffsetCommit v1+, into
``__consumer_offsets``); ``dual.commit.enabled=true`` commits to both and starts from the larger
of the two — the seeds' migration: set ``offsets.storage=kafka`` with ``dual.commit.enabled=true``,
roll the consumers, then turn dual commit off and roll them again.  Dual commit (default true)
applies to Kafka storage; with ``offsets.storage=zookeeper`` only when set explicitly, for the
roll-back (the same steps with ``offsets.storage=zookeeper``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import platform
import queue
import re
import threading
import time
import uuid
from collections import deque
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

from kazoo.client import KazooClient, KazooState
from kazoo.exceptions import NodeExistsError, NoNodeError
from kazoo.recipe.watchers import ChildrenWatch, DataWatch

from odradek.client._config import CONSUMER_DEFAULTS, ClientConfigError
from odradek.client.admin import Admin
from odradek.client.consumer import Blacklist, Whitelist
from odradek.client.consumer_simple import SimpleConsumer
from odradek.client.errors import OffsetOutOfRangeError
from odradek.cluster.zk_assignment import ZK_ASSIGNORS
from odradek.errors import OdradekError

__all__ = ["ZK_CONSUMER_DEFAULTS", "ConsumerTimeoutError", "MessageAndMetadata", "ZookeeperConsumer", "write_zk_offset"]

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]

#: the 0.8-era consumer settings this consumer takes, with Kafka's defaults
ZK_CONSUMER_DEFAULTS: dict[str, Any] = {
    "zookeeper.connect": None,
    "group.id": None,
    "consumer.id": None,
    "client.id": None,
    "zookeeper.session.timeout.ms": 6000,
    "zookeeper.connection.timeout.ms": 6000,
    "auto.commit.enable": True,
    "auto.commit.interval.ms": 60000,
    "auto.offset.reset": "largest",
    "rebalance.max.retries": 4,
    "rebalance.backoff.ms": 2000,
    "consumer.timeout.ms": -1,
    "queued.max.message.chunks": 2,
    "fetch.message.max.bytes": 1048576,
    "fetch.wait.max.ms": 100,
    "fetch.min.bytes": 1,
    "socket.timeout.ms": 30000,
    "offsets.storage": "zookeeper",
    "dual.commit.enabled": True,
    "partition.assignment.strategy": "range",
    "exclude.internal.topics": True,
    # not in Kafka 0.10's ZooKeeper consumer: brokers' addresses instead of those registered in
    # ZooKeeper, and the client's TLS/SASL settings (the endpoint taken from /brokers/ids is the
    # first whose listener speaks security.protocol)
    "bootstrap.servers": None,
    **{k: v for k, v in CONSUMER_DEFAULTS.items() if k.startswith(("security.", "ssl.", "sasl.")) or k == "oauth_cb"},
}

#: the settings handed to the SimpleConsumer and Admin that fetch and commit for this consumer
_CLIENT_KEYS = tuple(k for k in ZK_CONSUMER_DEFAULTS if k.startswith(("security.", "ssl.", "sasl.")) or k == "oauth_cb")

_INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state"})


class ConsumerTimeoutError(OdradekError):
    """No message within ``consumer.timeout.ms`` (Kafka's ConsumerTimeoutException); the stream
    can be iterated again."""


class MessageAndMetadata(NamedTuple):
    """One message a :class:`ZookeeperConsumer` stream yields: topic, partition, offset, key, value and
    timestamp (-1 for messages without one)."""

    topic: str
    partition: int
    offset: int
    key: Any
    value: Any
    timestamp: int = -1


_SHUTDOWN = object()


class KafkaStream:
    """An iterator over the messages of the partitions one consumer thread owns."""

    def __init__(self, consumer: ZookeeperConsumer, thread_id: str, timeout_ms: int, capacity: int) -> None:
        self.consumer = consumer
        self.thread_id = thread_id
        self.timeout = None if timeout_ms < 0 else timeout_ms / 1000
        self.queue: queue.Queue[Any] = queue.Queue(max(capacity, 1))
        self._pending: deque[tuple[int, Any]] = deque()
        self._done = False

    def __iter__(self) -> Iterator[MessageAndMetadata]:
        return self

    def __next__(self) -> MessageAndMetadata:
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        while True:
            msg = self._take(block=True, deadline=deadline)
            if msg is not None:
                return msg

    def __aiter__(self) -> KafkaStream:
        """``async for m in stream``: the asyncio twin of iteration.  The event loop polls the
        stream's queue without blocking (no thread holds a message a cancelled task would lose)."""
        return self

    async def __anext__(self) -> MessageAndMetadata:
        deadline = None if self.timeout is None else time.monotonic() + self.timeout
        pause = 0.001
        while True:
            try:
                msg = self._take(block=False, deadline=deadline)
            except StopIteration:
                raise StopAsyncIteration from None
            if msg is not None:
                return msg
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.05)

    def _take(self, *, block: bool, deadline: float | None) -> MessageAndMetadata | None:
        """The next message; None when ``block`` is false and none is there yet.  Raises
        StopIteration after shutdown and ConsumerTimeoutError past ``deadline``."""
        if self._done:
            raise StopIteration
        while self._pending:
            generation, record = self._pending.popleft()
            msg = self.consumer._consumed(self.thread_id, generation, record)
            if msg is not None:
                return msg
        try:
            if not block:
                item = self.queue.get_nowait()
            elif deadline is None:
                item = self.queue.get()
            else:
                item = self.queue.get(timeout=max(deadline - time.monotonic(), 0.0))
        except queue.Empty:
            if deadline is not None and time.monotonic() >= deadline:
                raise ConsumerTimeoutError(f"no message within {self.timeout:.3f}s") from None
            return None
        if item is _SHUTDOWN:
            self._done = True
            raise StopIteration
        generation, records = item
        self._pending = deque((generation, r) for r in records)
        return None

    def clear(self) -> None:
        """Drop what was fetched and not consumed (a rebalance)."""
        with contextlib.suppress(queue.Empty):
            while True:
                item = self.queue.get_nowait()
                if item is _SHUTDOWN:  # keep the end marker
                    self.queue.put_nowait(item)
                    return


class ZookeeperConsumer:
    """The ZooKeeper-coordinated high-level consumer (see the module docstring)."""

    def __init__(self, config: Mapping[str, Any] | None = None, **kwargs: Any) -> None:
        given = dict(config or {})
        for key, value in kwargs.items():
            given[key.replace("_", ".")] = value
        unknown = sorted(set(given) - set(ZK_CONSUMER_DEFAULTS))
        if unknown:
            raise ClientConfigError(f"unknown ZooKeeper consumer configuration {', '.join(unknown)}")
        cfg = {**ZK_CONSUMER_DEFAULTS, **given}
        self.config = cfg
        if not cfg["zookeeper.connect"]:
            raise ClientConfigError("the ZooKeeper consumer needs zookeeper.connect")
        if not cfg["group.id"]:
            raise ClientConfigError("the ZooKeeper consumer needs a group.id")
        self.group = str(cfg["group.id"])
        strategy = str(cfg["partition.assignment.strategy"]).lower()
        if strategy not in ZK_ASSIGNORS:
            raise ClientConfigError(f"partition.assignment.strategy must be range or roundrobin, not {strategy!r}")
        self._assign = ZK_ASSIGNORS[strategy]
        reset = str(cfg["auto.offset.reset"]).lower()
        if reset not in ("smallest", "largest", "earliest", "latest"):
            raise ClientConfigError(f"auto.offset.reset must be smallest or largest, not {reset!r}")
        self._reset_earliest = reset in ("smallest", "earliest")
        storage = str(cfg["offsets.storage"]).lower()
        if storage not in ("zookeeper", "kafka"):
            raise ClientConfigError(f"offsets.storage must be zookeeper or kafka, not {storage!r}")
        self._kafka_storage = storage == "kafka"
        # dual commit (default on) applies to Kafka storage, as in Kafka; with ZooKeeper storage
        # only when set explicitly: the seeds' roll-back (Kafka -> ZooKeeper) then reads both too
        self._dual_commit = _bool(cfg["dual.commit.enabled"]) and (self._kafka_storage or "dual.commit.enabled" in given)
        self._auto_commit = _bool(cfg["auto.commit.enable"])
        self._exclude_internal = _bool(cfg["exclude.internal.topics"])
        # Kafka's: "<group>_<consumer.id>", or "<group>_<host>-<ms>-<8 hex digits>" without one
        given_id = str(cfg["consumer.id"] or "")
        suffix = given_id or f"{platform.node()}-{int(time.time() * 1000)}-{uuid.uuid4().hex[:8]}"
        self.consumer_id = f"{self.group}_{suffix}"
        self._dir = f"/consumers/{self.group}"
        self.zk = KazooClient(hosts=str(cfg["zookeeper.connect"]), timeout=int(cfg["zookeeper.session.timeout.ms"]) / 1000)
        self.zk.start(timeout=int(cfg["zookeeper.connection.timeout.ms"]) / 1000 + 5)
        self.zk.add_listener(self._on_zk_state)
        self._lock = threading.RLock()  # owned partitions, positions, generation
        self._rebalance_lock = threading.RLock()  # one rebalance or commit at a time
        self._wakeup = threading.Condition()
        self._rebalance_needed = False
        self._reregister_needed = False
        self._closed = False
        self._session_lost = False
        self._registered = False
        self._subscription: dict[str, int] = {}
        self._filter: Whitelist | Blacklist | None = None
        self._filter_count = 0
        self._topics: list[str] = []  # the topics this consumer consumes now
        self.streams: dict[str, KafkaStream] = {}  # thread id -> stream
        self._streams_by_topic: dict[str, list[KafkaStream]] = {}
        self._owned: dict[TopicPartition, str] = {}  # partition -> owning thread
        self._positions: dict[TopicPartition, int] = {}  # consumed: the next offset to hand out
        self._fetch_positions: dict[TopicPartition, int] = {}
        self._committed: dict[TopicPartition, int] = {}
        self._generation = 0
        self._fetcher: threading.Thread | None = None
        self._fetching = threading.Event()
        self._simple: SimpleConsumer | None = None
        self._admin: Admin | None = None
        self._bootstrap = ""
        self._threads: list[threading.Thread] = []
        self._topic_watches: set[str] = set()
        self._topics_with_partitions: set[str] = set()  # the topics of the last assignment
        self._stored: set[TopicPartition] = set()  # partitions whose offsets were read from storage
        self._registration: dict[str, Any] = {}
        self._stop = threading.Event()

    # -- the seeds' API --------------------------------------------------------------------------
    def create_message_streams(self, topic_counts: Mapping[str, int]) -> dict[str, list[KafkaStream]]:
        """``{topic: n}`` -> ``{topic: [n streams]}``; registers and joins the group."""
        if self._registered:
            raise RuntimeError("create_message_streams can be called once per consumer")
        self._subscription = {t: int(n) for t, n in topic_counts.items()}
        out: dict[str, list[KafkaStream]] = {}
        for topic, n in self._subscription.items():
            out[topic] = [self._stream(f"{self.consumer_id}-{i}") for i in range(n)]
            self._streams_by_topic[topic] = out[topic]
        self._start({"version": 1, "subscription": self._subscription, "pattern": "static"})
        return out

    def create_message_streams_by_filter(self, topic_filter: Whitelist | Blacklist, n: int = 1) -> list[KafkaStream]:
        """``n`` streams over every topic the filter matches, now or created later."""
        if self._registered:
            raise RuntimeError("create_message_streams can be called once per consumer")
        self._filter, self._filter_count = topic_filter, int(n)
        streams = [self._stream(f"{self.consumer_id}-{i}") for i in range(n)]
        pattern = "white_list" if isinstance(topic_filter, Whitelist) else "black_list"
        self._start({"version": 1, "subscription": {topic_filter.regex: int(n)}, "pattern": pattern})
        return streams

    def commit_offsets(self) -> None:
        """Commit the consumed positions of the partitions owned now (those changed since the
        last commit) to ZooKeeper and/or Kafka, as ``offsets.storage`` and dual commit say."""
        with self._rebalance_lock:
            with self._lock:
                changed = {
                    tp: pos for tp, pos in self._positions.items() if tp in self._owned and self._committed.get(tp) != pos
                }
            if not changed:
                return
            if not self._kafka_storage or self._dual_commit:
                for (topic, partition), offset in changed.items():
                    self._zk_write_offset(topic, partition, offset)
            if self._kafka_storage or self._dual_commit:
                self._kafka_admin().alter_group_offsets(self.group, changed)
            self._committed.update(changed)

    def shutdown(self) -> None:
        """Stop fetching, commit (with auto commit), end every stream and leave the group (the
        session closes: registration and ownership nodes go at once)."""
        if self._closed:
            return
        self._closed = True
        self._stop.set()
        with self._wakeup:
            self._wakeup.notify_all()
        for t in self._threads:
            t.join(30)
        with self._rebalance_lock:
            self._stop_fetcher()
            self._fence()
            if self._auto_commit:
                try:
                    self.commit_offsets()
                except Exception:
                    log.warning("commit at shutdown failed", exc_info=True)
            for s in self.streams.values():
                s.clear()
                with contextlib.suppress(queue.Full):
                    s.queue.put_nowait(_SHUTDOWN)
            self._release_all()
        with contextlib.suppress(Exception):
            self.zk.stop()
            self.zk.close()
        for client in (self._simple, self._admin):
            if client is not None:
                with contextlib.suppress(Exception):
                    client.close()

    close = shutdown

    def __enter__(self) -> ZookeeperConsumer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()

    def owned_partitions(self) -> dict[TopicPartition, str]:
        """The partitions this consumer owns now (registered under ``/consumers/<group>/owners``), each with
        the consumer thread id that holds it."""
        with self._lock:
            return dict(self._owned)

    # -- registration -----------------------------------------------------------------------------
    def _stream(self, thread_id: str) -> KafkaStream:
        s = KafkaStream(self, thread_id, int(self.config["consumer.timeout.ms"]), int(self.config["queued.max.message.chunks"]))
        self.streams[thread_id] = s
        return s

    def _start(self, registration: dict[str, Any]) -> None:
        self._registration = registration
        self._registered = True
        for path in (f"{self._dir}/ids", f"{self._dir}/owners", f"{self._dir}/offsets"):
            self.zk.ensure_path(path)
        self._register()
        ChildrenWatch(self.zk, f"{self._dir}/ids", self._on_change)
        self.zk.ensure_path("/brokers/ids")
        self.zk.ensure_path("/brokers/topics")
        ChildrenWatch(self.zk, "/brokers/ids", self._on_change)
        ChildrenWatch(self.zk, "/brokers/topics", self._on_topics)
        worker = threading.Thread(target=self._rebalance_loop, name=f"zk-consumer-rebalance-{self.consumer_id}", daemon=True)
        self._threads.append(worker)
        if self._auto_commit:
            committer = threading.Thread(target=self._commit_loop, name=f"zk-consumer-commit-{self.consumer_id}", daemon=True)
            self._threads.append(committer)
        # the seeds' step 5: take part in the group's rebalance now (done before returning, as
        # Kafka's consumer does), then keep rebalancing on every change; it reads the registries
        # after the watches were set, so what they reported so far is in it
        with self._wakeup:
            self._rebalance_needed = False
        self._synced_rebalance()
        for t in self._threads:
            t.start()

    def _register(self) -> None:
        data = dict(self._registration, timestamp=str(int(time.time() * 1000)))
        path = f"{self._dir}/ids/{self.consumer_id}"
        raw = json.dumps(data, separators=(",", ":")).encode()
        try:
            self.zk.create(path, raw, ephemeral=True, makepath=True)
        except NodeExistsError:
            # our own node from a session that is still expiring: wait for it to go (Kafka's
            # createEphemeralPathExpectConflictHandleZKBug)
            deadline = time.monotonic() + int(self.config["zookeeper.session.timeout.ms"]) / 1000 + 10
            while True:
                try:
                    self.zk.create(path, raw, ephemeral=True, makepath=True)
                    return
                except NodeExistsError:
                    stat = self.zk.exists(path)
                    if stat is not None and stat.ephemeralOwner == self.zk.client_id[0]:
                        return
                    if time.monotonic() > deadline:
                        raise
                    self._stop.wait(0.5)

    def _on_zk_state(self, state: str) -> None:
        # kazoo's thread: never block here
        if state == KazooState.LOST:
            # the session's ownership nodes are gone: hand out nothing more, commit none of them
            self._session_lost = True
            with self._lock:
                self._generation += 1
                self._owned = {}
        elif state == KazooState.CONNECTED and self._session_lost:
            self._session_lost = False
            with self._wakeup:
                self._reregister_needed = True
                self._rebalance_needed = True
                self._wakeup.notify_all()

    def _on_change(self, _children: list[str]) -> bool | None:
        if self._closed:
            return False
        self._trigger()
        return None

    def _on_topics(self, children: list[str]) -> bool | None:
        if self._closed:
            return False
        if self._filter is not None:
            if sorted(self._matching(children)) != sorted(self._topics):
                self._trigger()
        else:
            for t in self._subscription:
                if t in children and t not in self._topic_watches:
                    self._topic_watches.add(t)
                    self._watch_topic(t)
        return None

    def _watch_topic(self, topic: str) -> None:
        seen: list[bytes | None] = []

        def changed(data: bytes | None, _stat: Any) -> bool | None:
            if self._closed:
                return False
            if seen and seen[-1] == data:
                return None
            first = not seen
            seen.append(data)
            if not first or topic not in self._topics_with_partitions:
                self._trigger()
            return None

        DataWatch(self.zk, f"/brokers/topics/{topic}", changed)

    def _trigger(self) -> None:
        with self._wakeup:
            self._rebalance_needed = True
            self._wakeup.notify_all()

    # -- rebalancing ----------------------------------------------------------------------------
    def _rebalance_loop(self) -> None:
        while not self._stop.is_set():
            with self._wakeup:
                while not (self._rebalance_needed or self._stop.is_set()):
                    self._wakeup.wait()
                if self._stop.is_set():
                    return
                self._rebalance_needed = False
                reregister, self._reregister_needed = self._reregister_needed, False
            try:
                if reregister:
                    # a new session: the old one's nodes are gone (Kafka's ZKSessionExpireListener)
                    with self._rebalance_lock:
                        self._stop_fetcher()
                        with self._lock:
                            self._owned.clear()
                    self._register()
                self._synced_rebalance()
            except Exception:
                log.exception("consumer %s: rebalance failed", self.consumer_id)

    def _synced_rebalance(self) -> None:
        retries = int(self.config["rebalance.max.retries"])
        backoff = int(self.config["rebalance.backoff.ms"]) / 1000
        with self._rebalance_lock:
            for attempt in range(retries):
                if self._stop.is_set():
                    return
                log.info("consumer %s: rebalance attempt %d", self.consumer_id, attempt + 1)
                try:
                    done = self._rebalance()
                except Exception:
                    log.warning("consumer %s: rebalance attempt %d failed", self.consumer_id, attempt + 1, exc_info=True)
                    done = False
                if done:
                    return
                # Kafka: release what was claimed, wait, try again
                self._stop_fetcher()
                self._release_all()
                with self._wakeup:
                    self._rebalance_needed = False
                self._stop.wait(backoff)
        if not self._stop.is_set():
            raise RuntimeError(f"consumer {self.consumer_id} could not rebalance after {retries} attempts")

    def _rebalance(self) -> bool:
        brokers = self.zk.get_children("/brokers/ids")
        if not brokers:
            log.warning("consumer %s: no broker registered; waiting for one", self.consumer_id)
            return True  # the /brokers/ids watch triggers the next rebalance
        # 1. stop the fetcher, drop what was fetched and not consumed, commit, release ownership
        self._stop_fetcher()
        self._fence()
        for s in self.streams.values():
            s.clear()
        if self._auto_commit:
            self.commit_offsets()
        self._release_all()
        # 2. the assignment, from the sorted consumer threads and partitions
        all_topics = self.zk.get_children("/brokers/topics")
        if self._filter is not None:
            self._topics = sorted(self._matching(all_topics))
        else:
            self._topics = sorted(self._subscription)
        subscriptions = self._group_subscriptions(all_topics)
        partitions = self._partitions(sorted({t for s in subscriptions.values() for t in s} & set(all_topics)))
        self._topics_with_partitions = set(partitions)
        mine = {tp: th for tp, th in self._assign(subscriptions, partitions).items() if th in self.streams}
        # 3. claim every partition assigned to us; a partition still owned elsewhere fails the attempt
        claimed: dict[TopicPartition, str] = {}
        for (topic, partition), thread in sorted(mine.items()):
            path = f"{self._dir}/owners/{topic}/{partition}"
            try:
                self.zk.create(path, thread.encode(), ephemeral=True, makepath=True)
            except NodeExistsError:
                try:
                    value, _ = self.zk.get(path)
                except NoNodeError:
                    value = b""
                if value.decode() != thread:
                    log.info("consumer %s: %s-%d is still owned by %s", self.consumer_id, topic, partition, value.decode())
                    with self._lock:
                        self._owned = claimed
                    return False
            claimed[(topic, partition)] = thread
            with self._lock:
                self._owned = dict(claimed)
        # 4. the offsets to start from, then the fetcher
        offsets = self._fetch_offsets(list(claimed))
        with self._lock:
            self._generation += 1
            self._owned = claimed
            self._positions = dict(offsets)
            self._committed = {tp: o for tp, o in offsets.items() if tp in self._stored}
            self._fetch_positions = dict(offsets)
        log.info("consumer %s owns %s", self.consumer_id, sorted(claimed))
        if claimed:
            self._start_fetcher()
        return True

    def _group_subscriptions(self, all_topics: list[str]) -> dict[str, dict[str, int]]:
        """Every registered consumer's {topic: streams}, wildcard subscriptions expanded over the
        topics that exist (Kafka's TopicCount.constructTopicCount)."""
        out: dict[str, dict[str, int]] = {}
        for cid in self.zk.get_children(f"{self._dir}/ids"):
            try:
                raw, _ = self.zk.get(f"{self._dir}/ids/{cid}")
                reg = json.loads(raw)
            except (NoNodeError, ValueError):
                continue
            sub = {str(k): int(v) for k, v in (reg.get("subscription") or {}).items()}
            pattern = reg.get("pattern", "static")
            if pattern == "static":
                out[cid] = sub
            elif sub:
                regex, count = next(iter(sub.items()))
                f: Whitelist | Blacklist = Whitelist(regex) if pattern == "white_list" else Blacklist(regex)
                out[cid] = {t: count for t in _filter_topics(f, all_topics, self._exclude_internal)}
        return out

    def _matching(self, topics: list[str]) -> list[str]:
        assert self._filter is not None
        return _filter_topics(self._filter, topics, self._exclude_internal)

    def _partitions(self, topics: list[str]) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        for t in topics:
            try:
                raw, _ = self.zk.get(f"/brokers/topics/{t}")
                data = json.loads(raw)
            except (NoNodeError, ValueError):
                continue
            parts = sorted(int(p) for p in (data.get("partitions") or {}))
            if parts:
                out[t] = parts
        return out

    def _fence(self) -> None:
        """From now on no record fetched so far is handed out: what is committed next is exactly
        what the streams gave the application."""
        with self._lock:
            self._generation += 1

    def _release_all(self) -> None:
        with self._lock:
            owned, self._owned = dict(self._owned), {}
        for (topic, partition), thread in owned.items():
            path = f"{self._dir}/owners/{topic}/{partition}"
            try:
                value, stat = self.zk.get(path)
                if value.decode() == thread:
                    self.zk.delete(path, version=stat.version)
            except NoNodeError:
                pass
            except Exception:  # the session ends anyway; the node goes with it
                log.debug("releasing %s failed", path, exc_info=True)

    # -- offsets ------------------------------------------------------------------------------
    def _zk_write_offset(self, topic: str, partition: int, offset: int) -> None:
        write_zk_offset(self.zk, self.group, topic, partition, offset)

    def _zk_read_offset(self, topic: str, partition: int) -> int | None:
        try:
            raw, _ = self.zk.get(f"{self._dir}/offsets/{topic}/{partition}")
            return int(raw.decode().strip())
        except (NoNodeError, ValueError):
            return None

    def _fetch_offsets(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        stored: dict[TopicPartition, int] = {}
        if partitions:
            if not self._kafka_storage or self._dual_commit:
                for t, p in partitions:
                    o = self._zk_read_offset(t, p)
                    if o is not None:
                        stored[(t, p)] = o
            if self._kafka_storage or self._dual_commit:
                for tp, om in self._kafka_admin().list_group_offsets(self.group, partitions).items():
                    if om.offset >= 0:
                        stored[tp] = max(stored.get(tp, -1), om.offset)
        self._stored = set(stored)
        out = dict(stored)
        missing = [tp for tp in partitions if tp not in stored]
        if missing:
            simple = self._simple_consumer()
            for t, p in missing:
                out[(t, p)] = simple.earliest_offset(t, p) if self._reset_earliest else simple.latest_offset(t, p)
        return out

    # -- fetching -------------------------------------------------------------------------------
    def _brokers_bootstrap(self) -> str:
        """The registered brokers' endpoints that speak ``security.protocol``."""
        wanted = str(self.config["security.protocol"]).upper()
        addresses = []
        for bid in sorted(self.zk.get_children("/brokers/ids"), key=lambda b: int(b) if b.isdigit() else 0):
            try:
                raw, _ = self.zk.get(f"/brokers/ids/{bid}")
                data = json.loads(raw)
            except (NoNodeError, ValueError):
                continue
            protocols = data.get("listener_security_protocol_map") or {}
            for ep in data.get("endpoints") or []:
                name, _, rest = str(ep).partition("://")
                if str(protocols.get(name, name)).upper() == wanted:
                    addresses.append(rest)
                    break
            else:
                if wanted == "PLAINTEXT" and data.get("host") and int(data.get("port", -1)) > 0:
                    addresses.append(f"{data['host']}:{data['port']}")
        if not addresses:
            raise RuntimeError(f"no broker with a {wanted} endpoint is registered in ZooKeeper")
        return ",".join(addresses)

    def _client_config(self) -> dict[str, Any]:
        if not self._bootstrap:
            self._bootstrap = str(self.config["bootstrap.servers"] or "") or self._brokers_bootstrap()
        cfg: dict[str, Any] = {
            "bootstrap.servers": self._bootstrap,
            "request.timeout.ms": int(self.config["socket.timeout.ms"]),
        }
        for key in _CLIENT_KEYS:
            if self.config[key] != ZK_CONSUMER_DEFAULTS[key]:
                cfg[key] = self.config[key]
        if self.config["client.id"]:
            cfg["client.id"] = self.config["client.id"]
        return cfg

    def _simple_consumer(self) -> SimpleConsumer:
        if self._simple is None:
            self._simple = SimpleConsumer(
                self._client_config(),
                fetch_max_wait_ms=int(self.config["fetch.wait.max.ms"]),
                fetch_min_bytes=int(self.config["fetch.min.bytes"]),
                max_partition_fetch_bytes=int(self.config["fetch.message.max.bytes"]),
            )
            self._simple.fetch_ahead = False
        return self._simple

    def _kafka_admin(self) -> Admin:
        if self._admin is None:
            self._admin = Admin(self._client_config())
        return self._admin

    def _start_fetcher(self) -> None:
        self._fetching.set()
        t = threading.Thread(target=self._fetch_loop, args=(self._generation,), name=f"zk-consumer-fetcher-{self.consumer_id}", daemon=True)
        self._fetcher = t
        t.start()

    def _stop_fetcher(self) -> None:
        self._fetching.clear()
        t, self._fetcher = self._fetcher, None
        if t is not None and t is not threading.current_thread():
            t.join(int(self.config["socket.timeout.ms"]) / 1000 + 30)

    def _fetch_loop(self, generation: int) -> None:
        simple = self._simple_consumer()
        while self._fetching.is_set() and not self._stop.is_set():
            with self._lock:
                if generation != self._generation:
                    return
                wanted = {tp: self._fetch_positions[tp] for tp in self._owned if tp in self._fetch_positions}
            if not wanted:
                return
            try:
                results = simple.multi_fetch(wanted)
            except OffsetOutOfRangeError as exc:
                self._reset_out_of_range(simple, wanted, exc)
                continue
            except Exception:
                if self._fetching.is_set():
                    log.warning("consumer %s: fetch failed; retrying", self.consumer_id, exc_info=True)
                    self._stop.wait(1.0)
                continue
            for tp, records in results.items():
                with self._lock:
                    if generation != self._generation or tp not in self._owned:
                        return
                    self._fetch_positions[tp] = max(records.next_offset, self._fetch_positions.get(tp, 0))
                    thread = self._owned[tp]
                if not records:
                    continue
                stream = self.streams[thread]
                item = (generation, list(records))
                while self._fetching.is_set() and not self._stop.is_set():
                    try:
                        stream.queue.put(item, timeout=0.5)
                        break
                    except queue.Full:
                        continue

    def _reset_out_of_range(self, simple: SimpleConsumer, wanted: Mapping[TopicPartition, int], exc: BaseException) -> None:
        for (t, p), offset in wanted.items():
            try:
                simple.fetch(t, p, offset, 1)
            except OffsetOutOfRangeError:
                new = simple.earliest_offset(t, p) if self._reset_earliest else simple.latest_offset(t, p)
                log.warning("consumer %s: offset %d of %s-%d is out of range; reset to %d", self.consumer_id, offset, t, p, new)
                with self._lock:
                    self._fetch_positions[(t, p)] = new
                    self._positions[(t, p)] = new

    def _consumed(self, thread_id: str, generation: int, record: Any) -> MessageAndMetadata | None:
        """A record taken from a stream: handed out (and its position moved) only when its
        partition is still this thread's in the generation that fetched it."""
        tp = (record.topic, record.partition)
        with self._lock:
            if generation != self._generation or self._owned.get(tp) != thread_id:
                return None
            if record.offset < self._positions.get(tp, 0):
                return None
            self._positions[tp] = record.offset + 1
        return MessageAndMetadata(record.topic, record.partition, record.offset, record.key, record.value, record.timestamp)

    def _commit_loop(self) -> None:
        interval = int(self.config["auto.commit.interval.ms"]) / 1000
        while not self._stop.wait(interval):
            try:
                self.commit_offsets()
            except Exception:
                log.warning("consumer %s: auto commit failed", self.consumer_id, exc_info=True)


def write_zk_offset(zk: KazooClient, group: str, topic: str, partition: int, offset: int) -> None:
    """Store a group's offset in ``/consumers/<group>/offsets/<topic>/<partition>`` (decimal, as
    Kafka 0.8-0.10 did), creating the node if needed."""
    path = f"/consumers/{group}/offsets/{topic}/{partition}"
    data = str(offset).encode()
    try:
        zk.set(path, data)
    except NoNodeError:
        try:
            zk.create(path, data, makepath=True)
        except NodeExistsError:
            zk.set(path, data)


def _bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return bool(value)


def _filter_topics(f: Whitelist | Blacklist, topics: list[str], exclude_internal: bool) -> list[str]:
    # 0.8's filters: a comma separates alternatives; the whole name must match
    regex = re.compile(f.regex.replace(",", "|").strip())
    out = []
    for t in topics:
        if exclude_internal and t in _INTERNAL_TOPICS:
            continue
        matched = regex.fullmatch(t) is not None
        if matched == isinstance(f, Whitelist):
            out.append(t)
    return out
