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
        writes = _writes(ast.parse(path.read_text(), str(path)))
        if rel.startswith("storage/"):
            inside += len(writes)
            continue
        for line, obj, attr in writes:
            if attr.startswith("_") or LOG_LIKE.search(obj) or not rel.startswith(MESSAGES):
                outside.append(f"{rel}:{line} {obj}.{attr}")
    assert inside >= 4  # the scan sees the log's own writes (a broken scan would pass vacuously)
    assert not outside, f"a log's high watermark or log start offset written outside storage at {outside}"


def test_the_scan_finds_the_writes_it_forbids() -> None:
    tree = ast.parse(
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
