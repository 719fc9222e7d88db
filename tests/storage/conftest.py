"""Fixtures of the storage tests."""

from __future__ import annotations

import pytest

from odradek.records import speedups
from odradek.storage import validator


@pytest.fixture(params=["compiled", "python"])
def check_pass(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The append's record check: the compiled one (when built) and the pure-Python one."""
    if request.param == "python":
        monkeypatch.setattr(validator, "_check", validator._check_python)
    elif speedups.compiled is None:
        pytest.skip("the compiled module is turned off")
    return str(request.param)
