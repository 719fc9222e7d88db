"""Parsing the package's own source in tests that read its shape (architecture, boundaries).

CPython 3.11's ``ast.parse`` is not thread-safe (gh-106905): while another thread of the same
pytest worker converts a tree (an import being assertion-rewritten, hypothesis describing a
lambda, a broker thread left over from the previous test finishing an import), a parse fails with
"SystemError: AST constructor recursion depth mismatch". The shared counter it trips on is reset
when a conversion ends, so the same parse done again succeeds; nothing about the source is wrong.
A parse that fails for any other reason, or three times in a row, fails the test."""

from __future__ import annotations

import ast
from pathlib import Path

_ATTEMPTS = 3


def parse(text: str, filename: str = "<unknown>") -> ast.Module:
    for attempt in range(1, _ATTEMPTS + 1):
        try:
            return ast.parse(text, filename)
        except SystemError as exc:
            if "recursion depth mismatch" not in str(exc) or attempt == _ATTEMPTS:
                raise
    raise AssertionError("unreachable")


def parse_file(path: Path, filename: str | None = None) -> ast.Module:
    return parse(path.read_text(encoding="utf-8"), filename if filename is not None else str(path))
