"""Every exception Odradek defines derives from ``OdradekError``, so ``except OdradekError`` catches
whatever Odradek raises on purpose (private control-flow exceptions, named with a leading ``_``,
stay inside their module and are left out)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import odradek
from odradek.errors import OdradekError


def _defined_exceptions() -> list[type[BaseException]]:
    found = []
    for info in pkgutil.walk_packages(odradek.__path__, "odradek."):
        if info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if (inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == info.name
                    and not name.startswith("_")):
                found.append(obj)
    return found


def test_every_exception_odradek_defines_has_the_one_root() -> None:
    found = _defined_exceptions()
    # the walk reaches every layer (a broken walk would pass vacuously)
    modules = {cls.__module__.split(".")[1] for cls in found}
    assert {"errors", "storage", "client", "coordination", "spark", "cli", "broker"} <= modules, modules
    outside = sorted(f"{cls.__module__}.{cls.__qualname__}" for cls in found if not issubclass(cls, OdradekError))
    assert not outside, f"exceptions outside OdradekError: {outside}"
