"""Fixtures of the storage tests."""

from __future__ import annotations

import pytest

from odradek.records import speedups
from odradek.storage import log as log_module
from odradek.storage import validator


@pytest.fixture(params=["compiled", "python"])
def check_pass(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The append's record checks: the compiled ones (when built) and the pure-Python ones (the
    general record pass, and the produce fast path's whole check)."""
    if request.param == "python":
        monkeypatch.setattr(validator, "_check", validator._check_python)
        monkeypatch.setattr(validator, "check_produced", validator._check_produced_python)
        monkeypatch.setattr(log_module, "check_produced", validator._check_produced_python)
    elif speedups.compiled is None:
        pytest.skip("the compiled module is turned off")
    return str(request.param)
