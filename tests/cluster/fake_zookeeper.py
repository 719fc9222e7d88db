"""An in-memory ZooKeeper for unit tests of the controller's logic: the subset of
``odradek.coordination.zookeeper.ZkStore`` the controller uses (JSON nodes with versions, czxids
and ephemeral owners; one-shot data, exists and child watches; version-checked multi-op
transactions that fail as kazoo's do), one shared tree with a store per session.

This is a fake for one layer's unit tests; the cluster's behaviour is proven against Debian's
ZooKeeper in the other tests of this directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kazoo.exceptions import (
    BadVersionError,
    NodeExistsError,
    NoNodeError,
    RolledBackError,
    RuntimeInconsistency,
)

Watch = Callable[[], None]


@dataclass
class Stat:
    version: int
    czxid: int
    mzxid: int
    ephemeralOwner: int


@dataclass
class _Node:
    data: bytes
    version: int
    czxid: int
    mzxid: int
    owner: int
    sequence: int = 0


@dataclass
class FakeTree:
    nodes: dict[str, _Node] = field(default_factory=lambda: {"/": _Node(b"", 0, 0, 0, 0)})
    zxid: int = 0
    data_watches: dict[str, list[Watch]] = field(default_factory=dict)
    child_watches: dict[str, list[Watch]] = field(default_factory=dict)
    sessions: itertools.count = field(default_factory=lambda: itertools.count(1000))

    # -- the tree ------------------------------------------------------------------------------------
    def _fire(self, table: dict[str, list[Watch]], path: str) -> None:
        loop = asyncio.get_running_loop()
        for w in table.pop(path, []):
            loop.call_soon(w)

    @staticmethod
    def _parent(path: str) -> str:
        return path.rsplit("/", 1)[0] or "/"

    def stat(self, path: str) -> Stat:
        n = self.nodes[path]
        return Stat(n.version, n.czxid, n.mzxid, n.owner)

    def create(self, path: str, data: bytes, owner: int = 0, sequence: bool = False, makepath: bool = True) -> str:
        parent = self._parent(path)
        if parent not in self.nodes:
            if not makepath:
                raise NoNodeError()
            self.create(parent, b"")
        if sequence:
            p = self.nodes[parent]
            p.sequence += 1
            path = f"{path}{p.sequence:010d}"
        if path in self.nodes:
            raise NodeExistsError()
        self.zxid += 1
        self.nodes[path] = _Node(data, 0, self.zxid, self.zxid, owner)
        self._fire(self.data_watches, path)
        self._fire(self.child_watches, parent)
        return path

    def set(self, path: str, data: bytes, version: int = -1) -> Stat:
        n = self.nodes.get(path)
        if n is None:
            raise NoNodeError()
        if version not in (-1, n.version):
            raise BadVersionError()
        self.zxid += 1
        n.data, n.version, n.mzxid = data, n.version + 1, self.zxid
        self._fire(self.data_watches, path)
        return self.stat(path)

    def delete(self, path: str, version: int = -1, recursive: bool = False) -> None:
        n = self.nodes.get(path)
        if n is None:
            raise NoNodeError()
        if version not in (-1, n.version):
            raise BadVersionError()
        kids = [p for p in self.nodes if self._parent(p) == path and p != path]
        if kids and not recursive:
            raise RuntimeError(f"{path} has children")
        for k in kids:
            self.delete(k, recursive=True)
        self.zxid += 1
        del self.nodes[path]
        self._fire(self.data_watches, path)
        self._fire(self.child_watches, path)
        self._fire(self.child_watches, self._parent(path))

    def children(self, path: str) -> list[str]:
        if path not in self.nodes:
            raise NoNodeError()
        prefix = path.rstrip("/") + "/"
        return sorted(p[len(prefix):] for p in self.nodes if p.startswith(prefix) and "/" not in p[len(prefix):])

    def expire(self, session: int) -> None:
        """A session ends: its ephemeral nodes go."""
        for path in sorted((p for p, n in self.nodes.items() if n.owner == session), reverse=True):
            if path in self.nodes:
                self.delete(path, recursive=True)

    def json(self, path: str) -> Any:
        n = self.nodes.get(path)
        return None if n is None or not n.data else json.loads(n.data)


class _Transaction:
    def __init__(self, tree: FakeTree) -> None:
        self.tree = tree
        self.ops: list[tuple[str, str, Any, int]] = []

    def check(self, path: str, version: int) -> None:
        self.ops.append(("check", path, None, version))

    def set_data(self, path: str, data: bytes, version: int = -1) -> None:
        self.ops.append(("set", path, data, version))

    def create(self, path: str, data: bytes = b"") -> None:
        self.ops.append(("create", path, data, -1))

    def commit(self) -> list[Any]:
        # all or nothing: check every op against the tree first
        fault = None
        for i, (kind, path, _data, version) in enumerate(self.ops):
            n = self.tree.nodes.get(path)
            if kind == "create":
                err: Exception | None = NodeExistsError() if n is not None else (
                    NoNodeError() if self.tree._parent(path) not in self.tree.nodes else None)
            else:
                err = NoNodeError() if n is None else (
                    BadVersionError() if version not in (-1, n.version) else None)
            if err is not None:
                fault = (i, err)
                break
        if fault is not None:
            i, err = fault
            return [RolledBackError() if j < i else err if j == i else RuntimeInconsistency() for j in range(len(self.ops))]
        out: list[Any] = []
        for kind, path, data, version in self.ops:
            if kind == "check":
                out.append(True)
            elif kind == "set":
                out.append(self.tree.set(path, data, version))
            else:
                out.append(self.tree.create(path, data))
        return out


class FakeZkStore:
    """One session's view of the tree, with ZkStore's coroutine API."""

    def __init__(self, tree: FakeTree) -> None:
        self.tree = tree
        self.session_id = next(tree.sessions)
        self.zk = self  # the controller builds transactions on ``store.zk``

    def transaction(self) -> _Transaction:
        return _Transaction(self.tree)

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        await asyncio.sleep(0)  # a round trip: other events may run meanwhile
        return fn(*args)

    def new_session(self) -> None:
        self.tree.expire(self.session_id)
        self.session_id = next(self.tree.sessions)

    async def get(self, path: str, watch: Watch | None = None) -> tuple[Any, Stat]:
        await asyncio.sleep(0)
        if path not in self.tree.nodes:
            raise NoNodeError()
        if watch is not None:
            self.tree.data_watches.setdefault(path, []).append(watch)
        return self.tree.json(path), self.tree.stat(path)

    async def get_or_none(self, path: str, watch: Watch | None = None) -> tuple[Any, Any]:
        try:
            return await self.get(path, watch)
        except NoNodeError:
            if watch is not None:
                self.tree.data_watches.setdefault(path, []).append(watch)
            return None, None

    async def exists(self, path: str, watch: Watch | None = None) -> Stat | None:
        await asyncio.sleep(0)
        if watch is not None:
            self.tree.data_watches.setdefault(path, []).append(watch)
        return self.tree.stat(path) if path in self.tree.nodes else None

    async def children(self, path: str, watch: Watch | None = None) -> list[str]:
        await asyncio.sleep(0)
        if watch is not None:
            self.tree.child_watches.setdefault(path, []).append(watch)
        try:
            return self.tree.children(path)
        except NoNodeError:
            return []

    async def create(self, path: str, value: Any = None, *, ephemeral: bool = False, sequence: bool = False,
                     makepath: bool = True) -> str:
        await asyncio.sleep(0)
        data = b"" if value is None else json.dumps(value).encode()
        return self.tree.create(path, data, self.session_id if ephemeral else 0, sequence, makepath)

    async def set(self, path: str, value: Any, version: int = -1) -> Stat:
        await asyncio.sleep(0)
        return self.tree.set(path, json.dumps(value).encode(), version)

    async def upsert(self, path: str, value: Any) -> int:
        await asyncio.sleep(0)
        if path in self.tree.nodes:
            return self.tree.set(path, json.dumps(value).encode()).mzxid
        self.tree.create(path, json.dumps(value).encode())
        return self.tree.stat(path).mzxid

    async def delete(self, path: str, *, recursive: bool = False, version: int = -1) -> None:
        await asyncio.sleep(0)
        with contextlib.suppress(NoNodeError):
            self.tree.delete(path, version, recursive)

    async def ensure_path(self, path: str) -> None:
        await asyncio.sleep(0)
        if path not in self.tree.nodes:
            self.tree.create(path, b"")
