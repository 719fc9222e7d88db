"""A fast multi-broker test cluster: N brokers in this process on an in-process ZooKeeper.

FOR TESTS ONLY.  :class:`FastCluster` starts ``size`` real brokers (ids ``1..size``, each on
127.0.0.1 on its own port, its own log dir) on one event loop in a background thread, coordinated
through an :class:`~odradek.coordination.inprocess.InProcessZooKeeper` instead of a ZooKeeper
server: the brokers run the very controller, replication and coordinator code they run in a
ZooKeeper cluster, without a JVM and without starting processes, so a 3-broker cluster is ready in
well under two seconds.  Any client talks to it over TCP (``bootstrap_servers``)::

    with FastCluster(tmp_path) as cluster:
        topic = cluster.create_topic("orders", partitions=3, replication_factor=3)
        ...
        cluster.faults.move_leader(topic, 0, to=2)      # the controller elects broker 2
        cluster.faults.move_group_coordinator("billing") # the group's coordinator moves
        cluster.faults.kill_broker(3)                    # a crash: no controlled shutdown
        cluster.faults.restore()                         # everything back as it was

What it is not: the brokers share one process, one event loop and one GIL (a broker that blocks
its loop stalls all of them), and a "killed" broker's data is flushed (a crash that loses the page
cache is not modelled).  For that, use the ZooKeeper cluster of real processes
(``odradek_cluster``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
import uuid
from collections.abc import Callable, Coroutine, Mapping
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, TypeVar

from odradek.coordination.inprocess import InProcessZooKeeper, register, unregister

if TYPE_CHECKING:
    from odradek.broker.app import Broker
    from odradek.broker.controller import Controller

__all__ = ["ClusterFaults", "FastCluster"]

T = TypeVar("T")

#: what every broker of a fast cluster gets unless ``overrides`` say otherwise: quick to start and
#: to form groups, internal topics replicated to up to 3 brokers, leadership left where a test put it
FAST_DEFAULTS: dict[str, Any] = {
    "group.initial.rebalance.delay.ms": 0,
    "offsets.topic.num.partitions": 5,
    "transaction.state.log.num.partitions": 5,
    "auto.leader.rebalance.enable": False,
    "controlled.shutdown.retry.backoff.ms": 200,
    "zookeeper.session.timeout.ms": 6000,
}


class FastCluster:
    """Brokers ``1..size`` in this process on an in-process ZooKeeper (for tests only)."""

    def __init__(
        self, base_dir: str | Path, size: int = 3, *, overrides: Mapping[str, Any] | None = None,
        name: str | None = None, log_dirs: int = 1,
    ) -> None:
        """``log_dirs``: log dirs per broker (``broker-N/d1``, ``d2``, ... when more than one)."""
        if size < 1:
            raise ValueError(f"a cluster has at least one broker, not {size}")
        self.base_dir = Path(base_dir)
        self.size = size
        self.log_dirs = log_dirs
        rf = min(3, size)
        self.overrides: dict[str, Any] = {
            **FAST_DEFAULTS,
            "offsets.topic.replication.factor": rf,
            "transaction.state.log.replication.factor": rf,
            "transaction.state.log.min.isr": min(2, rf),
            "default.replication.factor": rf,
            **dict(overrides or {}),
        }
        self.zookeeper = InProcessZooKeeper(name or f"fast-cluster-{uuid.uuid4().hex[:12]}")
        self.brokers: dict[int, Broker] = {}
        self.ports: dict[int, int] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._registered = False
        self.faults = ClusterFaults(self)

    # -- addresses ---------------------------------------------------------------------------------
    @property
    def ids(self) -> list[int]:
        return list(range(1, self.size + 1))

    @property
    def bootstrap_servers(self) -> str:
        """Every broker's ``127.0.0.1:port`` (a stopped one's too: clients skip it)."""
        return ",".join(f"127.0.0.1:{self.ports[i]}" for i in self.ids if i in self.ports)

    @property
    def zookeeper_connect(self) -> str:
        return self.zookeeper.connect

    def running(self, i: int) -> bool:
        b = self.brokers.get(i)
        return b is not None and not b.stopping

    def live_ids(self) -> list[int]:
        return [i for i in self.ids if self.running(i)]

    # -- the loop ----------------------------------------------------------------------------------
    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            loop = asyncio.new_event_loop()
            ready = threading.Event()

            def run() -> None:
                asyncio.set_event_loop(loop)
                loop.call_soon(ready.set)
                loop.run_forever()

            self._thread = threading.Thread(target=run, name=f"odradek-{self.zookeeper.name}", daemon=True)
            self._thread.start()
            ready.wait(10)
            self._loop = loop
        return self._loop

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 60.0) -> T:
        """Run ``coro`` on the cluster's event loop (where the brokers live) and return its result."""
        fut = asyncio.run_coroutine_threadsafe(coro, self._ensure_loop())
        try:
            return fut.result(timeout)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise TimeoutError(f"the cluster's loop did not finish {coro!r} within {timeout:g} s") from None

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self, timeout: float = 60.0) -> FastCluster:
        """Start every broker that is not running; return once all are registered, a controller is
        elected and every broker knows every other (ready for topics of replication factor ``size``)."""
        if not self._registered:
            register(self.zookeeper)
            self._registered = True
        self.run(self._start_all([i for i in self.ids if not self.running(i)], timeout), timeout + 5)
        return self

    async def _start_all(self, ids: list[int], timeout: float) -> None:
        await asyncio.gather(*(self._start_one(i) for i in ids))
        await self._until(self._ready, timeout, "every broker to register and learn the controller")

    def _ready(self) -> bool:
        live = set(self.live_ids())
        if not live:
            return True
        ctl = self.controller()
        return ctl is not None and all(set(self.brokers[i].backend.image.brokers) >= live for i in live)

    async def _start_one(self, i: int) -> None:
        from odradek.broker.app import Broker
        from odradek.config import BrokerConfig

        data = self.base_dir / f"broker-{i}"
        data.mkdir(parents=True, exist_ok=True)
        settings = {
            **self.overrides,
            "broker.id": i,
            "listeners": f"PLAINTEXT://127.0.0.1:{self.ports.get(i, 0)}",
            "log.dirs": str(data) if self.log_dirs <= 1 else ",".join(
                str(data / f"d{k}") for k in range(1, self.log_dirs + 1)),
            "zookeeper.connect": self.zookeeper.connect,
        }
        broker = Broker(BrokerConfig.load(None, [], settings, env={}))
        await broker.start()
        self.brokers[i] = broker
        self.ports[i] = broker.bound["PLAINTEXT"][1]

    def stop_broker(self, i: int, timeout: float = 30.0) -> None:
        """Controlled shutdown of broker ``i`` (leadership moves away first), as SIGTERM does."""
        broker = self.brokers.get(i)
        if broker is not None and not broker.stopping:
            self.run(broker.stop(), timeout)
            self.run(self._until(lambda: self._gone(i), timeout, f"broker {i} to leave the cluster"), timeout + 5)

    def kill_broker(self, i: int, timeout: float = 30.0) -> None:
        """Broker ``i`` crashes: its ZooKeeper session ends at once (the controller moves its
        leaderships, as after ``zookeeper.session.timeout.ms``) and it stops without a controlled
        shutdown; its connections drop."""
        broker = self.brokers.get(i)
        if broker is None or broker.stopping:
            return
        self.run(self._kill(broker), timeout)
        self.run(self._until(lambda: self._gone(i), timeout, f"broker {i} to leave the cluster"), timeout + 5)

    async def _kill(self, broker: Broker) -> None:
        store = getattr(broker.backend, "store", None)
        if store is not None:
            await store.run(store.zk.stop)  # the session ends: its registration goes

        async def skip() -> None:
            return None

        broker.replication.controlled_shutdown = skip  # type: ignore[method-assign]
        await broker.stop()

    def _gone(self, i: int) -> bool:
        return all(i not in self.brokers[j].backend.image.brokers for j in self.live_ids())

    def start_broker(self, i: int, timeout: float = 60.0) -> None:
        """Start broker ``i`` again (same port, same data) and wait until the others see it."""
        if self.running(i):
            raise RuntimeError(f"broker {i} is already running")
        self.run(self._start_all([i], timeout), timeout + 5)

    def close(self) -> None:
        """Stop every broker, the controller last (the others' controlled shutdowns ask it to move
        leadership), then the loop."""
        if self._loop is not None:
            with contextlib.suppress(Exception):
                self.run(self._stop_all(), 120)
            loop = self._loop
            loop.call_soon_threadsafe(loop.stop)
            if self._thread is not None:
                self._thread.join(10)
            if not loop.is_running():
                loop.close()
            self._loop = None
        if self._registered:
            unregister(self.zookeeper)
            self._registered = False

    async def _stop_all(self) -> None:
        ctl = self.controller()
        others = [b for i, b in self.brokers.items() if i != ctl and not b.stopping]
        await asyncio.gather(*(b.stop() for b in others), return_exceptions=True)
        if ctl is not None and not self.brokers[ctl].stopping:
            with contextlib.suppress(Exception):
                await self.brokers[ctl].stop()
        for task in [t for t in asyncio.all_tasks() if t is not asyncio.current_task()]:
            task.cancel()

    def __enter__(self) -> FastCluster:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    # -- what the brokers know -----------------------------------------------------------------------
    def controller(self) -> int | None:
        """The id of the active controller, None while there is none."""
        for i in self.live_ids():
            ctl = self.brokers[i].controller
            if ctl is not None and ctl.active:
                return i
        return None

    def _controller(self) -> Controller:
        i = self.controller()
        if i is None:
            raise RuntimeError("no broker is the active controller now")
        ctl = self.brokers[i].controller
        assert ctl is not None
        return ctl

    def leader(self, topic: str, partition: int = 0) -> int:
        """The partition's leader as the controller recorded it (-1: none)."""
        st = self._controller().ctx.states.get((topic, partition))
        return -1 if st is None else st.leader

    def isr(self, topic: str, partition: int = 0) -> tuple[int, ...]:
        st = self._controller().ctx.states.get((topic, partition))
        return () if st is None else tuple(st.isr)

    def replicas(self, topic: str, partition: int = 0) -> tuple[int, ...]:
        return tuple(self._controller().ctx.replicas(topic, partition))

    def wait_until(self, predicate: Callable[[], Any], timeout: float = 30.0, what: str = "a condition") -> None:
        """Poll ``predicate`` (on the cluster's loop) until it is true; TimeoutError after ``timeout`` s."""
        self.run(self._until(predicate, timeout, what), timeout + 5)

    @staticmethod
    async def _until(predicate: Callable[[], Any], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        last: BaseException | None = None
        while True:
            try:
                if predicate():
                    return
                last = None
            except Exception as exc:  # not there yet (no controller yet...)
                last = exc
            if time.monotonic() >= deadline:
                raise TimeoutError(f"timed out after {timeout:g} s waiting for {what}" + (f": {last!r}" if last else ""))
            await asyncio.sleep(0.005)

    def __repr__(self) -> str:
        return f"<FastCluster {self.size} brokers {self.bootstrap_servers}, {self.zookeeper.connect}>"


class ClusterFaults:
    """Scripted moves on a :class:`FastCluster` (``cluster.faults``), each undone by :meth:`restore`
    (in the reverse order) or by the matching ``restore_*``/``start_broker``."""

    def __init__(self, cluster: FastCluster) -> None:
        self.cluster = cluster
        self._undo: list[tuple[str, Callable[[], None]]] = []

    @property
    def active(self) -> list[str]:
        """What was done and is not restored yet, oldest first."""
        return [what for what, _ in self._undo]

    # -- leadership --------------------------------------------------------------------------------
    def move_leader(self, topic: str, partition: int, to: int, *, timeout: float = 30.0) -> int:
        """Make broker ``to`` (an in-sync replica) the partition's leader, as the controller does when
        the leader fails: a new leader epoch, the old leader a follower, clients redirected by
        NOT_LEADER_OR_FOLLOWER.  Returns the previous leader."""
        c = self.cluster
        before = c.leader(topic, partition)
        self._elect(topic, partition, to, timeout)
        self._undo.append((f"leader of {topic}-{partition} moved {before} -> {to}",
                           lambda: self._elect(topic, partition, before, timeout) if before >= 0 else None))
        return before

    def restore_leader(self, topic: str, partition: int, *, timeout: float = 30.0) -> None:
        """The partition's preferred replica (its first) leads again."""
        self._elect(topic, partition, None, timeout)

    def _elect(self, topic: str, partition: int, to: int | None, timeout: float) -> None:
        from odradek.cluster.controller import Election
        from odradek.errors import ErrorCode

        c = self.cluster
        tp = (topic, partition)
        c.wait_until(lambda: c.controller() is not None, timeout, "a controller")
        if to is not None:
            c.wait_until(lambda: to in c.isr(topic, partition), timeout, f"broker {to} in the ISR of {topic}-{partition}")
        ctl = c._controller()

        async def elect() -> Any:
            if to is None:
                return await ctl.partitions.elect_preferred([tp])
            return await ctl.partitions.elect([tp], lambda _tp, cur: Election(to, cur.isr) if to in cur.isr else None)

        result = c.run(ctl.call(elect), timeout).get(tp)
        if result not in (ErrorCode.NONE, ErrorCode.ELECTION_NOT_NEEDED):
            raise RuntimeError(f"moving the leader of {topic}-{partition} to {to}: {result!r}")
        target = to if to is not None else c.replicas(topic, partition)[0]
        # every live broker has applied the new leader (what clients' metadata requests then see)
        c.wait_until(lambda: self._everyone_knows(tp, target), timeout, f"{topic}-{partition} led by {target}")

    def _everyone_knows(self, tp: tuple[str, int], leader: int) -> bool:
        c = self.cluster
        for i in c.live_ids():
            t = c.brokers[i].backend.image.topics.get(tp[0])
            st = None if t is None else t.partitions.get(tp[1])
            if st is None or st.leader != leader:
                return False
        lead = c.brokers[leader].replicas.get(*tp) if c.running(leader) else None
        return lead is not None and lead.is_leader

    # -- coordinators ------------------------------------------------------------------------------
    def group_coordinator_partition(self, group_id: str) -> int:
        """The ``__consumer_offsets`` partition holding ``group_id`` (its leader coordinates the group)."""
        from odradek.cluster.assignment import partition_for

        n = int(self.cluster.overrides["offsets.topic.num.partitions"])
        return int(partition_for(group_id, n))

    def transaction_coordinator_partition(self, transactional_id: str) -> int:
        """The ``__transaction_state`` partition holding ``transactional_id``."""
        from odradek.cluster.assignment import partition_for

        n = int(self.cluster.overrides["transaction.state.log.num.partitions"])
        return int(partition_for(transactional_id, n))

    def move_group_coordinator(self, group_id: str, to: int | None = None, *, timeout: float = 30.0) -> int:
        """Move the coordinator of ``group_id`` to broker ``to`` (default: the next live replica):
        the leadership of its ``__consumer_offsets`` partition moves, the old coordinator answers
        NOT_COORDINATOR, the new one loads the group's offsets.  Returns the new coordinator."""
        return self._move_internal("__consumer_offsets", self.group_coordinator_partition(group_id), to, timeout)

    def move_transaction_coordinator(self, transactional_id: str, to: int | None = None, *, timeout: float = 30.0) -> int:
        """Move the transaction coordinator of ``transactional_id`` (its ``__transaction_state``
        partition's leadership) to broker ``to`` (default: the next live replica)."""
        return self._move_internal("__transaction_state", self.transaction_coordinator_partition(transactional_id), to, timeout)

    def _move_internal(self, topic: str, partition: int, to: int | None, timeout: float) -> int:
        c = self.cluster
        c.wait_until(lambda: c.controller() is not None and c.leader(topic, partition) >= 0, timeout,
                     f"{topic}-{partition} to have a leader (is the topic created yet?)")
        if to is None:
            current = c.leader(topic, partition)
            candidates = [b for b in c.replicas(topic, partition) if b != current and b in c.live_ids()]
            if not candidates:
                raise RuntimeError(f"{topic}-{partition} has no other live replica to move to")
            to = candidates[0]
        self.move_leader(topic, partition, to, timeout=timeout)
        return to

    # -- brokers -----------------------------------------------------------------------------------
    def stop_broker(self, i: int, *, timeout: float = 30.0) -> None:
        """Controlled shutdown of broker ``i``; :meth:`restore` starts it again."""
        self.cluster.stop_broker(i, timeout)
        self._undo.append((f"broker {i} stopped", lambda: self._restart(i)))

    def kill_broker(self, i: int, *, timeout: float = 30.0) -> None:
        """Broker ``i`` crashes (see :meth:`FastCluster.kill_broker`); :meth:`restore` starts it again."""
        self.cluster.kill_broker(i, timeout)
        self._undo.append((f"broker {i} killed", lambda: self._restart(i)))

    def start_broker(self, i: int, *, timeout: float = 60.0) -> None:
        """Start a stopped or killed broker again (and forget its pending restore)."""
        self._undo = [(w, f) for w, f in self._undo if w not in (f"broker {i} stopped", f"broker {i} killed")]
        self._restart(i, timeout)

    def _restart(self, i: int, timeout: float = 60.0) -> None:
        if not self.cluster.running(i):
            self.cluster.start_broker(i, timeout)

    def expire_session(self, i: int) -> None:
        """Expire broker ``i``'s ZooKeeper session (as when it was silent past
        ``zookeeper.session.timeout.ms``): it loses its registration and, if it had it, the
        controllership; it registers again on a new session."""
        store = getattr(self.cluster.brokers[i].backend, "store", None)
        if store is None:
            raise RuntimeError(f"broker {i} has no ZooKeeper session")
        self.cluster.zookeeper.expire(store.session_id)

    # -- undo ----------------------------------------------------------------------------------------
    def restore(self) -> None:
        """Undo every move not yet undone, newest first: brokers started again, leaders back."""
        errors = []
        while self._undo:
            what, undo = self._undo.pop()
            try:
                undo()
            except Exception as exc:
                errors.append(f"{what}: {exc!r}")
        if errors:
            raise RuntimeError("could not restore: " + "; ".join(errors))
