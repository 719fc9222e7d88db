"""The lower layers and the transport are type-checked as with ``mypy --strict``.

pyproject.toml lists --strict's flags one by one for those packages (a ``strict = true`` in a
per-module section turns --strict on for every module), so this test keeps the list equal to what
the installed mypy's --strict enables."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
STRICT_PACKAGES = ("protocol", "records", "storage", "cluster", "security", "transport")


def _mypy_config() -> dict[str, Any]:
    config: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    return config


def _strict_override() -> dict[str, Any]:
    wanted = {f"odradek.{p}" for p in STRICT_PACKAGES} | {f"odradek.{p}.*" for p in STRICT_PACKAGES}
    for override in _mypy_config().get("overrides", []):
        modules = override["module"]
        modules = {modules} if isinstance(modules, str) else set(modules)
        if wanted <= modules:
            return dict(override)
    raise AssertionError(f"no mypy override names all of {sorted(wanted)}")


def _strict_flags() -> list[str]:
    """The config keys of the flags the installed mypy's --strict enables (from its --help)."""
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("mypy is not installed (the dev extra)")
    out = subprocess.run([sys.executable, "-m", "mypy", "--help"], capture_output=True, text=True, check=True,
                         env={**os.environ, "COLUMNS": "10000"}).stdout
    line = next(line for line in out.splitlines() if "--strict " in line and "enables the following" in line)
    flags = [f.strip() for f in line.split("enables the following flags:")[1].split(",")]
    assert flags and all(f.startswith("--") for f in flags), flags
    return [f[2:].replace("-", "_") for f in flags]


def test_the_strict_packages_have_every_flag_of_mypy_strict() -> None:
    override = _strict_override()
    assert "strict" not in override, "`strict = true` in an override turns --strict on for every module"
    globals_ = _mypy_config()
    flags = _strict_flags()
    assert "disallow_untyped_defs" in flags  # the --help parse found the list
    missing = [f for f in flags if override.get(f) is not True and globals_.get(f) is not True]
    assert not missing, f"the strict packages' mypy override lacks {missing}"


def test_no_module_section_turns_strict_on_for_everything() -> None:
    """mypy reads ``strict`` in any section as the global --strict."""
    for override in _mypy_config().get("overrides", []):
        assert "strict" not in override, override["module"]
