"""The source parser of the shape tests retries only CPython's thread race, nothing else."""

from __future__ import annotations

import ast

import pytest

from tests import source_trees


def _failing(times: int, message: str) -> object:
    real = ast.parse
    calls = {"n": 0}

    def parse(text: str, filename: str = "<unknown>") -> ast.Module:
        calls["n"] += 1
        if calls["n"] <= times:
            raise SystemError(message)
        return real(text, filename)

    parse.calls = calls  # type: ignore[attr-defined]
    return parse


def test_a_parse_hit_by_the_thread_race_is_done_again(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _failing(2, "AST constructor recursion depth mismatch (before=144, after=198)")
    monkeypatch.setattr(source_trees.ast, "parse", fake)
    tree = source_trees.parse("class A:\n    pass\n")
    assert isinstance(tree.body[0], ast.ClassDef)
    assert fake.calls["n"] == 3  # type: ignore[attr-defined]


def test_a_race_three_times_in_a_row_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(source_trees.ast, "parse", _failing(3, "AST constructor recursion depth mismatch"))
    with pytest.raises(SystemError):
        source_trees.parse("x = 1\n")


def test_other_errors_are_not_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = _failing(1, "something else")
    monkeypatch.setattr(source_trees.ast, "parse", fake)
    with pytest.raises(SystemError, match="something else"):
        source_trees.parse("x = 1\n")
    assert fake.calls["n"] == 1  # type: ignore[attr-defined]
    with pytest.raises(SyntaxError):
        source_trees.parse("def (:\n")
