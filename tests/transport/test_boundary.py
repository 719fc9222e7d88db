"""The transport layer is the only client-side code that opens connections.

The import contracts in pyproject.toml say which packages may import ``socket``; they cannot see
``loop.create_connection`` (asyncio is imported everywhere), so this scans the source for the calls
that open an outgoing connection."""

from __future__ import annotations

import ast
from pathlib import Path

import odradek
from tests.source_trees import parse

SRC = Path(odradek.__file__).parent
#: calls that open an outgoing connection (asyncio's and the socket module's)
_OPENERS = {"create_connection", "open_connection", "create_unix_connection", "open_unix_connection", "sock_connect"}
#: where they may appear: the transport, and ZooKeeper's liveness probe (not a Kafka connection)
_ALLOWED = {"transport/connect.py", "transport/http.py", "coordination/zkserver.py"}


def _openers(path: Path) -> list[int]:
    tree = parse(path.read_text(), str(path))
    return [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute | ast.Name)
        and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id) in _OPENERS
    ]


def test_only_the_transport_opens_connections() -> None:
    found = {
        str(path.relative_to(SRC)): lines
        for path in sorted(SRC.rglob("*.py"))
        if (lines := _openers(path))
    }
    outside = {p: lines for p, lines in found.items() if p not in _ALLOWED}
    assert not outside, f"connections opened outside the transport layer: {outside}"
    assert "transport/connect.py" in found  # the scan sees the transport's own (a broken scan would pass)
