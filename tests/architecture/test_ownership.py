"""The log owns its high watermark and log start offset: nothing outside storage writes them
(the replica manager, the replica fetcher and the log manager go through the log's methods, which
keep one clamping rule: log start <= high watermark <= log end, the high watermark moving back
only on truncation)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import odradek
from odradek.storage import Log, LogConfig
from tests.source_trees import parse

SRC = Path(odradek.__file__).parent
OWNED = ("high_watermark", "log_start_offset")
#: where other objects (protocol messages, the client's results) have fields of the same names
MESSAGES = ("protocol/", "client/", "broker/handlers/")
#: an expression naming a log (``p.log``, ``lg``, ``self.log``, ``part.log``...)
LOG_LIKE = re.compile(r"(^|[._])(log|lg)$")


def _writes(tree: ast.AST) -> list[tuple[int, str, str]]:
    """(line, object, attribute) of every write of an owned attribute: assignments, augmented
    assignments, deletions and ``setattr(obj, "name", ...)``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
            if node.attr.lstrip("_") in OWNED:
                found.append((node.lineno, ast.unparse(node.value), node.attr))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr"
              and len(node.args) >= 2 and isinstance(node.args[1], ast.Constant)
              and str(node.args[1].value).lstrip("_") in OWNED):
            found.append((node.lineno, ast.unparse(node.args[0]), str(node.args[1].value)))
    return found


def test_nothing_outside_storage_writes_a_logs_high_watermark_or_log_start_offset() -> None:
    outside: list[str] = []
    inside = 0
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        writes = _writes(parse(path.read_text(), str(path)))
        if rel.startswith("storage/"):
            inside += len(writes)
            continue
        for line, obj, attr in writes:
            if attr.startswith("_") or LOG_LIKE.search(obj) or not rel.startswith(MESSAGES):
                outside.append(f"{rel}:{line} {obj}.{attr}")
    assert inside >= 4  # the scan sees the log's own writes (a broken scan would pass vacuously)
    assert not outside, f"a log's high watermark or log start offset written outside storage at {outside}"


def test_the_scan_finds_the_writes_it_forbids() -> None:
    tree = parse(
        "p.log.high_watermark = 3\nlg.log_start_offset += 1\nsetattr(self.log, 'high_watermark', 0)\n"
        "resp.high_watermark = 1\n"
    )
    writes = _writes(tree)
    assert [(obj, attr) for _line, obj, attr in writes] == [
        ("p.log", "high_watermark"), ("lg", "log_start_offset"), ("self.log", "high_watermark"),
        ("resp", "high_watermark"),
    ]
    assert [bool(LOG_LIKE.search(obj)) for _line, obj, _attr in writes] == [True, True, True, False]


def test_the_attributes_are_read_only_and_the_log_keeps_them_in_order(tmp_path: Path) -> None:
    from odradek.records import BatchBuilder

    log = Log(tmp_path / "t-0", LogConfig.from_dict({}))
    for i in range(10):
        b = BatchBuilder()
        b.append(1_000 + i, None, b"v")
        log.append(bytearray(b.build()))
    with pytest.raises(AttributeError):
        log.high_watermark = 5  # type: ignore[misc]
    with pytest.raises(AttributeError):
        log.log_start_offset = 5  # type: ignore[misc]
    assert log.advance_high_watermark(50)  # clamped to the log end
    assert log.high_watermark == 10
    assert not log.advance_high_watermark(4)  # never backwards
    assert log.high_watermark == 10
    log.truncate_to(6)  # truncation is the one way down
    assert (log.high_watermark, log.log_end_offset) == (6, 6)
    assert log.maybe_increment_log_start_offset(3)
    assert log.log_start_offset == 3 and log.high_watermark == 6
    log.close()

    fresh = Log(tmp_path / "u-0", LogConfig.from_dict({}))
    for i in range(10):
        b = BatchBuilder()
        b.append(1_000 + i, None, b"v")
        fresh.append(bytearray(b.build()))
    assert fresh.high_watermark == 0
    assert fresh.maybe_increment_log_start_offset(4)  # the log start passes the HW: the HW follows
    assert (fresh.log_start_offset, fresh.high_watermark) == (4, 4)
    assert not fresh.advance_high_watermark(2)  # never below the log start
    assert fresh.high_watermark == 4
    fresh.close()


# -- time --------------------------------------------------------------------------------------------

TIME_FUNCS = {"time", "monotonic", "time_ns", "monotonic_ns", "perf_counter", "perf_counter_ns"}
#: the reads of the system's clocks left in broker/ and coordination/, at most this many per module,
#: none of them a rule's time: the rules (timeouts, expiries, windows, intervals) read the broker's
#: Clock and wait on its Scheduler, so that tests can run them on fake time
REAL_TIME_READS = {
    # how long the start and the log loading took (log lines, ready_after)
    "broker/app.py": 4,
    # how long a leader election took (a metric)
    "broker/controller/partitions.py": 3,
    # the event loop's fairness budget per connection and the request-time metrics (time the
    # handlers really took; 5 calls and the module's ``_perf_counter`` reference)
    "broker/server.py": 6,
    # the request_percentage quota's charge: the time a connection's handler held the event loop
    "broker/throttling.py": 3,
    # the replica fetcher's retry delays and its follower-side replication throttle (being moved
    # onto the transport layer: left as it is here)
    "broker/fetcher.py": 9,
    # controlled shutdown waiting for ZooKeeper and for the controller's LeaderAndIsr (I/O)
    "broker/replication.py": 4,
    # a schema registry request on a follower waiting for _schemas' high watermark to reach its
    # log end (replication I/O, bounded by the HTTP request's timeout)
    "broker/schema_registry.py": 2,
    # ZooKeeper request timeouts and the wait for a dead session's registration to go (I/O)
    "coordination/zookeeper.py": 5,
    # starting and stopping a ZooKeeper JVM process
    "coordination/zkserver.py": 9,
}


def _time_reads(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    aliases = {a.asname or a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module == "time"
               for a in n.names if a.name in TIME_FUNCS}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Attribute):
                if isinstance(f.value, ast.Name) and f.value.id == "time" and f.attr in TIME_FUNCS:
                    found.append((node.lineno, f"time.{f.attr}"))
                elif f.attr == "time" and not node.args and "loop" in ast.unparse(f.value):
                    found.append((node.lineno, "loop.time"))
            elif isinstance(f, ast.Name) and f.id in aliases:
                found.append((node.lineno, f.id))
    return found


def test_broker_and_coordination_read_time_through_the_clock() -> None:
    """No new read of the system clock in the broker, the coordination layer or the registry: rules take the
    broker's Clock (``time.monotonic()`` in a timeout makes its test wait real time)."""
    over: list[str] = []
    seen = 0
    for sub in ("broker", "coordination", "registry"):
        for path in sorted((SRC / sub).rglob("*.py")):
            rel = path.relative_to(SRC).as_posix()
            text = path.read_text()
            reads = _time_reads(parse(text, str(path)))
            # a reference kept for later calls (``_perf_counter = time.perf_counter``) counts as one
            refs = len(re.findall(r"=\s*time\.(?:monotonic|time|perf_counter)\b(?!\()", text))
            seen += len(reads)
            if len(reads) + refs > REAL_TIME_READS.get(rel, 0):
                over.append(f"{rel}: {len(reads) + refs} > {REAL_TIME_READS.get(rel, 0)} ({reads})")
    assert seen >= 10  # the scan finds the reads that are left (a broken scan would pass vacuously)
    assert not over, f"system clock read outside the broker's Clock: {over}"


def test_the_time_scan_finds_each_kind_of_read() -> None:
    tree = parse(
        "import time\nfrom time import monotonic as mono\nt = time.monotonic()\nw = time.time()\n"
        "l = loop.time()\nm = mono()\nasyncio.get_running_loop().time()\nclock.now_ms()\n"
    )
    assert [kind for _line, kind in _time_reads(tree)] == ["time.monotonic", "time.time", "loop.time", "mono", "loop.time"]
