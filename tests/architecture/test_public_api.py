"""The surface a user meets is declared and documented.

Each public package (the clients, their serializers and admin client, the Spark source, the test
tools, the command line) names what it exports in ``__all__``: every name there resolves, and
nothing public-looking its ``__init__`` defines or imports from its own modules is left out.

Every class and function those lists export, every class and function with a public name in
the public modules under ``odradek.client``, ``odradek.spark`` and ``odradek.cli``, and the public methods
and properties of those classes that our code defines (inherited ones included) have a
docstring of their own: an override of PySpark's or another library's method does not borrow
theirs, and a dataclass's generated ``Name(field: type, ...)`` does not count."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import pkgutil
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from tests.source_trees import parse_file

#: the packages a user imports from; each has an ``__all__``
PACKAGES = (
    "odradek.client",
    "odradek.client.admin",
    "odradek.client.serde",
    "odradek.spark",
    "odradek.testing",
    "odradek.cli",
    "odradek.cli.__main__",
)

#: the trees whose public modules (no ``_`` in their dotted name) are walked for docstrings
TREES = ("odradek.client", "odradek.spark", "odradek.cli")

#: a lazily exported name whose optional dependency (an extra: kazoo, pyspark) is not installed
_NEEDS_EXTRA = object()


def _optional(exc: ModuleNotFoundError) -> bool:
    """The import failed for a third-party module (an extra not installed), not for ours."""
    return not (exc.name or "").startswith("odradek")


def _import(name: str) -> ModuleType | None:
    """The module, or None when it needs an extra that is not installed."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if not _optional(exc):
            raise
        return None


def _get(module: ModuleType, attr: str) -> Any:
    try:
        return getattr(module, attr)
    except ModuleNotFoundError as exc:  # a lazy export (the ZooKeeper consumer, the data source)
        if not _optional(exc):
            raise
        return _NEEDS_EXTRA


def _public_modules() -> list[str]:
    names: list[str] = []
    for tree in TREES:
        package = importlib.import_module(tree)
        names.append(tree)
        for info in pkgutil.walk_packages(package.__path__, prefix=f"{tree}."):
            if not any(part.startswith("_") for part in info.name.split(".")):
                names.append(info.name)
    return names


def _ignorable_value(node: ast.expr | None) -> bool:
    """``T = TypeVar("T")`` and ``log = logging.getLogger(...)``: module plumbing, not exports."""
    if not isinstance(node, ast.Call):
        return False
    func = ast.unparse(node.func)
    return func in ("TypeVar", "typing.TypeVar", "logging.getLogger", "getLogger")


def _within(module: str | None, package: str) -> bool:
    return module is not None and (module == package or module.startswith(f"{package}."))


def _defined_in_init(module: ModuleType) -> set[str]:
    """Public-looking names the module's own source binds: definitions, assignments, and names
    imported from the package's own modules (re-exports)."""
    assert module.__file__ is not None
    tree = parse_file(Path(module.__file__))
    package = module.__name__
    names: set[str] = set()
    body = list(tree.body)
    for node in tree.body:
        if isinstance(node, ast.If):  # ``if TYPE_CHECKING:`` imports
            body.extend(node.body)
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign) and not _ignorable_value(node.value):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if not _ignorable_value(node.value):
                names.add(node.target.id)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and _within(node.module, package):
            names.update(alias.asname or alias.name for alias in node.names)
    return {n for n in names if not n.startswith("_")}


@pytest.mark.parametrize("name", PACKAGES)
def test_each_public_package_declares_exactly_what_it_exports(name: str) -> None:
    module = _import(name)
    if module is None:
        pytest.skip(f"{name} needs an extra that is not installed")
    exported = getattr(module, "__all__", None)
    assert isinstance(exported, list), f"{name} has no __all__ list"
    assert len(exported) == len(set(exported)), f"{name}.__all__ names something twice"
    unresolved = []
    for attr in exported:
        try:
            _get(module, attr)
        except AttributeError:
            unresolved.append(attr)
    assert not unresolved, f"{name}.__all__ names what it does not have: {unresolved}"
    missing = sorted(_defined_in_init(module) - set(exported))
    assert not missing, f"{name} defines public-looking names its __all__ leaves out: {missing}"


def _is_ours(obj: Any) -> bool:
    return str(getattr(obj, "__module__", "") or "").startswith("odradek")


def _has_doc(obj: Any) -> bool:
    doc = (obj.fget if isinstance(obj, property) else obj).__doc__  # its own, not a base class's
    if not doc or not doc.strip():
        return False
    # a dataclass or a NamedTuple without a docstring gets its signature as one
    generated = dataclasses.is_dataclass(obj) or hasattr(obj, "_fields")
    return not (inspect.isclass(obj) and generated and doc.startswith(f"{obj.__name__}("))


def _members(cls: type) -> Iterator[tuple[str, Any]]:
    """The public methods and properties of ``cls`` (inherited too) whose code is ours."""
    found: dict[str, Any] = {}
    for klass in cls.__mro__:  # not dir(): an Enum's dir() leaves its methods out
        for attr, raw in vars(klass).items():
            if not attr.startswith("_"):
                found.setdefault(attr, raw)
    for attr, raw in found.items():
        if isinstance(raw, (staticmethod, classmethod)):
            raw = raw.__func__
        if isinstance(raw, property):
            if raw.fget is not None and _is_ours(raw.fget):
                yield attr, raw
        elif inspect.isfunction(raw) and _is_ours(raw):
            yield attr, raw


def _surface() -> Iterator[tuple[str, Any]]:
    """(where, object) for every documented-API object: package exports and public modules."""
    for name in PACKAGES:
        module = _import(name)
        for attr in getattr(module, "__all__", ()):  # a missing list fails the test above
            yield f"{name}.{attr}", _get(module, attr)
    for name in _public_modules():
        if name in PACKAGES:
            continue
        module = _import(name)
        if module is None:
            continue
        # what the module exports, and every public-named class and function it defines
        declared = list(getattr(module, "__all__", ()))
        defined = [a for a, obj in vars(module).items()
                   if not a.startswith("_") and getattr(obj, "__module__", None) == name]
        for attr in dict.fromkeys(declared + defined):
            yield f"{name}.{attr}", _get(module, attr)


def _undocumented() -> tuple[list[str], int]:
    seen: set[int] = set()
    missing: list[str] = []
    total = 0

    def check(where: str, obj: Any) -> None:
        nonlocal total
        if id(obj) in seen:
            return
        seen.add(id(obj))
        total += 1
        if not _has_doc(obj):
            missing.append(where)

    for where, obj in _surface():
        if not (inspect.isclass(obj) or inspect.isfunction(obj)) or not _is_ours(obj):
            continue  # constants, type aliases, other libraries' classes
        check(where, obj)
        if inspect.isclass(obj):
            for attr, member in _members(obj):
                check(f"{where}.{attr}", member)
    return missing, total


def test_every_public_class_function_and_method_has_a_docstring() -> None:
    missing, total = _undocumented()
    assert total > 300  # the walk reaches the surface (a broken walk would pass vacuously)
    assert not missing, f"{len(missing)} of {total} public definitions have no docstring:\n" + "\n".join(missing)
