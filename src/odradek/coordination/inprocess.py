"""An in-process ZooKeeper for test clusters — FOR TESTS ONLY, never a production store.

Brokers running in one process (see :class:`odradek.testcluster.FastCluster`) share one
:class:`InProcessZooKeeper`: a znode tree in memory with sessions, ephemeral nodes, sequential
nodes, versions and zxids, one-shot data / exists / child watches and multi-op transactions.
Each broker's :class:`~odradek.coordination.zookeeper.ZooKeeperBackend` talks to it through an
:class:`InProcessClient`, which has the part of kazoo's ``KazooClient`` interface Odradek uses (the
same calls, the same exceptions, the same stat tuples, the same session states).  So the brokers'
controller election, registration, ISR changes, configs, ACLs and notifications run the very code
they run on ZooKeeper, without a JVM and without sockets, and a cluster is up in well under a second.

A broker selects it with ``zookeeper.connect=inprocess:NAME[/chroot]``, where ``NAME`` is an
ensemble registered in this process by :func:`register` (test code does that).  Nothing else
creates one: in a broker started from a config file, ``inprocess:`` names no ensemble and the
broker refuses to start.  Nothing is persisted; the tree is gone with the process.

What it does not model: ACLs on znodes, connection loss short of a session expiry (a session is
connected until it is closed or :meth:`InProcessZooKeeper.expire`\\ d), quotas, observers.  The
shared contract suite (tests/coordination/test_backend_contract.py) checks that the behaviour the
brokers rely on is the same here and on Debian's ZooKeeper.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kazoo.client import KazooState
from kazoo.exceptions import (
    BadArgumentsError,
    BadVersionError,
    NoChildrenForEphemeralsError,
    NodeExistsError,
    NoNodeError,
    NotEmptyError,
    RolledBackError,
    RuntimeInconsistency,
    SessionExpiredError,
)
from kazoo.protocol.states import EventType, KeeperState, WatchedEvent, ZnodeStat

from odradek._clock import Clock, SystemClock

__all__ = [
    "SCHEME",
    "InProcessClient",
    "InProcessZooKeeper",
    "client_for",
    "ensemble",
    "register",
    "unregister",
]

#: the ``zookeeper.connect`` prefix that selects an in-process ensemble
SCHEME = "inprocess:"

Watcher = Callable[[WatchedEvent], Any]

_registry: dict[str, InProcessZooKeeper] = {}
_registry_lock = threading.Lock()


@dataclass
class _Node:
    data: bytes
    czxid: int
    mzxid: int
    ctime: int
    mtime: int
    owner: int = 0  # the session of an ephemeral node
    version: int = 0
    cversion: int = 0
    pzxid: int = 0
    children: set[str] = field(default_factory=set)
    #: children created so far: the next sequential child's number (ZooKeeper's cversion counts
    #: deletions too, its sequence numbers do not)
    created: int = 0


@dataclass
class _Session:
    sid: int
    client: InProcessClient
    ephemerals: set[str] = field(default_factory=set)


class InProcessZooKeeper:
    """One znode tree shared by the sessions of this process (thread-safe: kazoo's callers run
    each call on a worker thread)."""

    def __init__(self, name: str = "", clock: Clock | None = None) -> None:
        """``clock``: what the znodes' ctime and mtime are read from."""
        self.name = name or f"zk-{os.getpid()}-{id(self):x}"
        self.clock: Clock = clock or SystemClock()
        self._lock = threading.RLock()
        self._zxid = 0
        now = self.clock.now_ms()
        self._nodes: dict[str, _Node] = {"/": _Node(b"", 0, 0, now, now)}
        self._sessions: dict[int, _Session] = {}
        self._next_sid = itertools.count(0x100_0000_0000 + 1)
        # one-shot watches: path -> {(session, watcher)}
        self._data_watches: dict[str, list[tuple[int, Watcher]]] = {}
        self._child_watches: dict[str, list[tuple[int, Watcher]]] = {}

    @property
    def connect(self) -> str:
        """The ``zookeeper.connect`` of this ensemble (it must be registered: :func:`register`)."""
        return SCHEME + self.name

    # -- sessions --------------------------------------------------------------------------------
    def _open(self, client: InProcessClient) -> int:
        with self._lock:
            sid = next(self._next_sid)
            self._sessions[sid] = _Session(sid, client)
            return sid

    def sessions(self) -> list[int]:
        with self._lock:
            return sorted(self._sessions)

    def session_of(self, path: str) -> int:
        """The session owning ephemeral node ``path`` (0: persistent); NoNodeError when absent."""
        with self._lock:
            return self._node(path).owner

    def expire(self, sid: int) -> None:
        """Expire session ``sid`` as ZooKeeper does when a client is silent past its timeout: its
        ephemeral nodes go (others' watches of them fire), and its client sees LOST, then its own
        pending watches fire with a NONE event (as kazoo's do when it resets a lost session), then
        CONNECTED on a new session (kazoo reconnects on its own)."""
        ended = self._end(sid)
        if ended is not None:
            ended[0]._expired(ended[1])

    def _end(self, sid: int) -> tuple[InProcessClient, list[Watcher]] | None:
        """End session ``sid``: its client and the watches it had set (not fired)."""
        fire: list[tuple[Watcher, WatchedEvent]] = []
        dropped: list[Watcher] = []
        with self._lock:
            session = self._sessions.pop(sid, None)
            if session is None:
                return None
            for table in (self._data_watches, self._child_watches):
                for path in list(table):
                    kept = []
                    for entry in table[path]:
                        if entry[0] == sid:
                            dropped.append(entry[1])
                        else:
                            kept.append(entry)
                    if kept:
                        table[path] = kept
                    else:
                        del table[path]
            for path in sorted(session.ephemerals, reverse=True):
                if path in self._nodes:
                    self._zxid += 1
                    self._remove(path, fire)
        _deliver(fire)
        return session.client, dropped

    # -- the tree (callers hold the lock) ------------------------------------------------------
    def _node(self, path: str) -> _Node:
        node = self._nodes.get(path)
        if node is None:
            raise NoNodeError()
        return node

    @staticmethod
    def _stat(node: _Node) -> ZnodeStat:
        return ZnodeStat(
            node.czxid, node.mzxid, node.ctime, node.mtime, node.version, node.cversion, 0, node.owner,
            len(node.data), len(node.children), node.pzxid,
        )

    def _watch(self, table: dict[str, list[tuple[int, Watcher]]], path: str, sid: int, watch: Watcher | None) -> None:
        if watch is not None:
            entries = table.setdefault(path, [])
            if (sid, watch) not in entries:
                entries.append((sid, watch))

    def _trigger(
        self, table: dict[str, list[tuple[int, Watcher]]], path: str, kind: EventType, fire: list[tuple[Watcher, WatchedEvent]]
    ) -> None:
        for _sid, w in table.pop(path, []):
            fire.append((w, WatchedEvent(kind, KeeperState.CONNECTED, path)))

    def _check_create(self, path: str, makepath: bool, sequence: bool) -> str:
        _check_path(path, sequence)
        parent = _parent(path)
        pnode = self._nodes.get(parent)
        if pnode is None and not makepath:
            raise NoNodeError()
        if pnode is not None and pnode.owner:
            raise NoChildrenForEphemeralsError()
        if sequence:
            path = f"{path}{(pnode.created if pnode is not None else 0):010d}"
        if path in self._nodes:
            raise NodeExistsError()
        return path

    def _create(
        self, sid: int, path: str, data: bytes, ephemeral: bool, sequence: bool, makepath: bool,
        fire: list[tuple[Watcher, WatchedEvent]],
    ) -> str:
        path = self._check_create(path, makepath, sequence)
        parent = _parent(path)
        if parent not in self._nodes:
            self._create(0, parent, b"", False, False, True, fire)
        self._zxid += 1
        now = self.clock.now_ms()
        owner = sid if ephemeral else 0
        self._nodes[path] = _Node(bytes(data), self._zxid, self._zxid, now, now, owner, pzxid=self._zxid)
        if owner:
            self._sessions[sid].ephemerals.add(path)
        pnode = self._nodes[parent]
        pnode.children.add(path.rsplit("/", 1)[1])
        pnode.cversion += 1
        pnode.created += 1
        pnode.pzxid = self._zxid
        self._trigger(self._data_watches, path, EventType.CREATED, fire)
        self._trigger(self._child_watches, parent, EventType.CHILD, fire)
        return path

    def _check_set(self, path: str, version: int) -> _Node:
        node = self._node(path)
        if version != -1 and version != node.version:
            raise BadVersionError()
        return node

    def _set(self, path: str, data: bytes, version: int, fire: list[tuple[Watcher, WatchedEvent]]) -> ZnodeStat:
        node = self._check_set(path, version)
        self._zxid += 1
        node.data = bytes(data)
        node.version += 1
        node.mzxid = self._zxid
        node.mtime = self.clock.now_ms()
        self._trigger(self._data_watches, path, EventType.CHANGED, fire)
        return self._stat(node)

    def _check_delete(self, path: str, version: int) -> _Node:
        if path == "/":
            raise BadArgumentsError()
        node = self._node(path)
        if version != -1 and version != node.version:
            raise BadVersionError()
        if node.children:
            raise NotEmptyError()
        return node

    def _remove(self, path: str, fire: list[tuple[Watcher, WatchedEvent]]) -> None:
        node = self._nodes.pop(path)
        if node.owner and node.owner in self._sessions:
            self._sessions[node.owner].ephemerals.discard(path)
        parent = _parent(path)
        pnode = self._nodes[parent]
        pnode.children.discard(path.rsplit("/", 1)[1])
        pnode.cversion += 1
        pnode.pzxid = self._zxid
        self._trigger(self._data_watches, path, EventType.DELETED, fire)
        self._trigger(self._child_watches, path, EventType.DELETED, fire)
        self._trigger(self._child_watches, parent, EventType.CHILD, fire)

    # -- operations (what InProcessClient calls) ----------------------------------------------
    def create(self, sid: int, path: str, data: bytes, ephemeral: bool, sequence: bool, makepath: bool) -> str:
        fire: list[tuple[Watcher, WatchedEvent]] = []
        with self._lock:
            self._alive(sid)
            out = self._create(sid, path, data, ephemeral, sequence, makepath, fire)
        _deliver(fire)
        return out

    def get(self, sid: int, path: str, watch: Watcher | None) -> tuple[bytes, ZnodeStat]:
        with self._lock:
            self._alive(sid)
            node = self._node(path)
            self._watch(self._data_watches, path, sid, watch)
            return node.data, self._stat(node)

    def exists(self, sid: int, path: str, watch: Watcher | None) -> ZnodeStat | None:
        with self._lock:
            self._alive(sid)
            self._watch(self._data_watches, path, sid, watch)
            node = self._nodes.get(path)
            return None if node is None else self._stat(node)

    def get_children(self, sid: int, path: str, watch: Watcher | None) -> list[str]:
        with self._lock:
            self._alive(sid)
            node = self._node(path)
            self._watch(self._child_watches, path, sid, watch)
            return list(node.children)

    def set(self, sid: int, path: str, data: bytes, version: int) -> ZnodeStat:
        fire: list[tuple[Watcher, WatchedEvent]] = []
        with self._lock:
            self._alive(sid)
            out = self._set(path, data, version, fire)
        _deliver(fire)
        return out

    def delete(self, sid: int, path: str, version: int, recursive: bool) -> bool:
        fire: list[tuple[Watcher, WatchedEvent]] = []
        with self._lock:
            self._alive(sid)
            if recursive:
                self._node(path)
                for p in sorted((p for p in self._nodes if p.startswith(path + "/")), key=len, reverse=True):
                    self._zxid += 1
                    self._remove(p, fire)
            self._check_delete(path, version)
            self._zxid += 1
            self._remove(path, fire)
        _deliver(fire)
        return True

    def multi(self, sid: int, ops: list[tuple[str, tuple[Any, ...]]]) -> list[Any]:
        """kazoo's ``transaction().commit()``: all or nothing; on failure the op at fault gets its
        error, those before it RolledBackError, those after it RuntimeInconsistency."""
        fire: list[tuple[Watcher, WatchedEvent]] = []
        with self._lock:
            self._alive(sid)
            # check every op against the tree as the earlier ones would leave it: a trial run on a copy
            saved = (self._zxid, _copy_nodes(self._nodes), {s: set(x.ephemerals) for s, x in self._sessions.items()})
            watches = (dict(self._data_watches), dict(self._child_watches))
            results: list[Any] = []
            failed = -1
            for i, (kind, args) in enumerate(ops):
                try:
                    results.append(self._apply(sid, kind, args, fire))
                except (NoNodeError, NodeExistsError, BadVersionError, NotEmptyError, NoChildrenForEphemeralsError,
                        BadArgumentsError) as exc:
                    failed = i
                    results.append(exc)
                    break
            if failed < 0:
                pass
            else:
                self._zxid, self._nodes = saved[0], saved[1]
                for s, eph in saved[2].items():
                    self._sessions[s].ephemerals = eph
                self._data_watches, self._child_watches = watches
                fire = []
                out: list[Any] = [RolledBackError() for _ in range(failed)]
                out.append(results[failed])
                out.extend(RuntimeInconsistency() for _ in range(failed + 1, len(ops)))
                return out
        _deliver(fire)
        return results

    def _apply(self, sid: int, kind: str, args: tuple[Any, ...], fire: list[tuple[Watcher, WatchedEvent]]) -> Any:
        if kind == "create":
            path, data, ephemeral, sequence = args
            return self._create(sid, path, data, ephemeral, sequence, False, fire)
        if kind == "set":
            path, data, version = args
            return self._set(path, data, version, fire)
        if kind == "delete":
            path, version = args
            self._check_delete(path, version)
            self._zxid += 1
            self._remove(path, fire)
            return True
        path, version = args  # check
        node = self._node(path)
        if version != -1 and node.version != version:
            raise BadVersionError()
        return True

    def _alive(self, sid: int) -> None:
        if sid not in self._sessions:
            raise SessionExpiredError()


def _copy_nodes(nodes: dict[str, _Node]) -> dict[str, _Node]:
    return {
        p: _Node(n.data, n.czxid, n.mzxid, n.ctime, n.mtime, n.owner, n.version, n.cversion, n.pzxid, set(n.children),
                 n.created)
        for p, n in nodes.items()
    }


def _deliver(fire: list[tuple[Watcher, WatchedEvent]]) -> None:
    """Watches run after the change, outside the tree's lock (kazoo runs them on its own thread;
    Odradek's only hand them to an event loop)."""
    for w, ev in fire:
        w(ev)


def _reset_watches(watches: list[Watcher], state: str) -> None:
    event = WatchedEvent(EventType.NONE, state, None)
    for w in dict.fromkeys(watches):  # one call per watcher, as kazoo's sets of them
        w(event)


def _parent(path: str) -> str:
    return path.rsplit("/", 1)[0] or "/"


def _check_path(path: str, sequence: bool = False) -> None:
    if not path.startswith("/") or (path.endswith("/") and not sequence) or "//" in path:
        raise BadArgumentsError(f"invalid path {path!r}")


class _Transaction:
    """kazoo's TransactionRequest: ops recorded, applied at once by :meth:`commit`."""

    def __init__(self, client: InProcessClient) -> None:
        self.client = client
        self.ops: list[tuple[str, tuple[Any, ...]]] = []

    def create(self, path: str, value: bytes = b"", acl: Any = None, ephemeral: bool = False, sequence: bool = False) -> None:
        self.ops.append(("create", (self.client._full(path), value, ephemeral, sequence)))

    def set_data(self, path: str, value: bytes, version: int = -1) -> None:
        self.ops.append(("set", (self.client._full(path), value, version)))

    def delete(self, path: str, version: int = -1) -> None:
        self.ops.append(("delete", (self.client._full(path), version)))

    def check(self, path: str, version: int) -> None:
        self.ops.append(("check", (self.client._full(path), version)))

    def commit(self) -> list[Any]:
        out = self.client._tree.multi(self.client._sid(), self.ops)
        return [self.client._short(r) if isinstance(r, str) else r for r in out]


class InProcessClient:
    """A kazoo-like client of an :class:`InProcessZooKeeper` (the subset Odradek calls)."""

    def __init__(self, tree: InProcessZooKeeper, chroot: str = "") -> None:
        self._tree = tree
        self.chroot = chroot
        self._session = 0
        self._started = False
        self._listeners: list[Callable[[str], Any]] = []
        self._passwd = os.urandom(16)

    # -- lifecycle ---------------------------------------------------------------------------------
    def start(self, timeout: float = 15.0) -> None:
        if self._started:
            return
        self._started = True
        self._session = self._tree._open(self)
        self._state(KazooState.CONNECTED)

    def stop(self) -> None:
        """Close the session: its ephemeral nodes go at once; LOST, then its pending watches fire
        with a NONE event (kazoo's order)."""
        if not self._started:
            return
        self._started = False
        sid, self._session = self._session, 0
        ended = self._tree._end(sid)
        self._state(KazooState.LOST)
        if ended is not None:
            _reset_watches(ended[1], KeeperState.CLOSED)

    def close(self) -> None:
        return None

    def _expired(self, watches: list[Watcher]) -> None:
        """The tree expired this session: LOST, its watches reset, then a new session (kazoo
        reconnects)."""
        self._session = 0
        self._state(KazooState.LOST)
        _reset_watches(watches, KeeperState.EXPIRED_SESSION)
        if self._started:
            self._session = self._tree._open(self)
            self._state(KazooState.CONNECTED)

    def add_listener(self, listener: Callable[[str], Any]) -> None:
        self._listeners.append(listener)

    def remove_listener(self, listener: Callable[[str], Any]) -> None:
        if listener in self._listeners:
            self._listeners.remove(listener)

    def _state(self, state: str) -> None:
        for listener in list(self._listeners):
            listener(state)

    @property
    def connected(self) -> bool:
        return self._started and self._session != 0

    @property
    def client_id(self) -> tuple[int, bytes] | None:
        return (self._session, self._passwd) if self._session else None

    def _sid(self) -> int:
        if not self._session:
            raise SessionExpiredError()
        return self._session

    # -- paths -------------------------------------------------------------------------------------
    def _full(self, path: str) -> str:
        if not self.chroot:
            return path
        return self.chroot if path == "/" else self.chroot + path

    def _short(self, path: str) -> str:
        if self.chroot and path.startswith(self.chroot):
            return path[len(self.chroot) :] or "/"
        return path

    # -- operations --------------------------------------------------------------------------------
    def retry(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        return fn(*args, **kwargs)

    def create(
        self, path: str, value: bytes = b"", acl: Any = None, ephemeral: bool = False, sequence: bool = False,
        makepath: bool = False,
    ) -> str:
        return self._short(self._tree.create(self._sid(), self._full(path), value, ephemeral, sequence, makepath))

    def ensure_path(self, path: str, acl: Any = None) -> bool:
        full = self._full(path)
        parts = [p for p in full.split("/") if p]
        for i in range(1, len(parts) + 1):
            sub = "/" + "/".join(parts[:i])
            with contextlib.suppress(NodeExistsError):
                self._tree.create(self._sid(), sub, b"", False, False, False)
        return True

    def get(self, path: str, watch: Watcher | None = None) -> tuple[bytes, ZnodeStat]:
        return self._tree.get(self._sid(), self._full(path), self._wrap(watch))

    def exists(self, path: str, watch: Watcher | None = None) -> ZnodeStat | None:
        return self._tree.exists(self._sid(), self._full(path), self._wrap(watch))

    def get_children(self, path: str, watch: Watcher | None = None) -> list[str]:
        return self._tree.get_children(self._sid(), self._full(path), self._wrap(watch))

    def set(self, path: str, value: bytes, version: int = -1) -> ZnodeStat:
        return self._tree.set(self._sid(), self._full(path), value, version)

    def delete(self, path: str, version: int = -1, recursive: bool = False) -> bool:
        return self._tree.delete(self._sid(), self._full(path), version, recursive)

    def transaction(self) -> _Transaction:
        return _Transaction(self)

    def _wrap(self, watch: Watcher | None) -> Watcher | None:
        if watch is None or not self.chroot:
            return watch
        short = self._short
        return _ChrootWatch(watch, short)


@dataclass(frozen=True)
class _ChrootWatch:
    """A watch that reports paths without the client's chroot (equal for equal watches, so a
    watch set twice fires once, as in ZooKeeper)."""

    watch: Watcher
    short: Callable[[str], str]

    def __call__(self, event: WatchedEvent) -> Any:
        path = self.short(event.path) if event.path else event.path
        return self.watch(WatchedEvent(event.type, event.state, path))


# -- the registry of this process's ensembles ---------------------------------------------------


def register(tree: InProcessZooKeeper) -> str:
    """Make ``tree`` reachable as ``zookeeper.connect=inprocess:NAME``; returns that string."""
    with _registry_lock:
        if _registry.get(tree.name, tree) is not tree:
            raise ValueError(f"an in-process ZooKeeper named {tree.name!r} is already registered")
        _registry[tree.name] = tree
    return tree.connect


def unregister(tree: InProcessZooKeeper) -> None:
    with _registry_lock:
        if _registry.get(tree.name) is tree:
            del _registry[tree.name]


def ensemble(connect: str) -> InProcessZooKeeper:
    """The registered ensemble ``connect`` (``inprocess:NAME[/chroot]``) names; LookupError if none."""
    name = connect[len(SCHEME) :].lstrip("/").split("/", 1)[0]
    with _registry_lock:
        tree = _registry.get(name)
    if tree is None:
        raise LookupError(
            f"zookeeper.connect={connect}: no in-process ZooKeeper named {name!r} in this process "
            "(in-process coordination is for test clusters started by odradek.testcluster only)"
        )
    return tree


def client_for(connect: str) -> InProcessClient:
    """A client of the registered ensemble ``inprocess:NAME[/chroot]``."""
    tree = ensemble(connect)
    rest = connect[len(SCHEME) :].lstrip("/")
    _name, _, chroot = rest.partition("/")
    return InProcessClient(tree, f"/{chroot.strip('/')}" if chroot.strip("/") else "")
