"""The test tree mirrors the package: a test lives beside the tests of the region it tests.

``tests/<region>`` is a package of ``src/odradek`` (``tests/storage`` for ``odradek.storage``...)
or one of the few directories for tests that cross regions, named below with what they hold;
tests of a top-level module (``odradek/_scheduler.py``, ``odradek/config.py``) are at the top of
``tests/``. A unit test of one of the lower regions (it imports that region and no other package
of ours, and no broker harness) is in that region's directory: the assignors' tests were under
``tests/client`` and ``tests/groups``, the schema parsers' under ``tests/registry``, where a
reader of ``odradek/cluster`` or ``odradek/schemas`` did not look for them."""

from __future__ import annotations

import ast
from pathlib import Path

import odradek
from tests.source_trees import parse_file

SRC = Path(odradek.__file__).parent
TESTS = Path(__file__).resolve().parent.parent

#: directories of tests that are not one region's, and what they hold
CROSS_CUTTING = {
    "architecture": "the package's shape: layers, class sizes, documented surface, this rule",
    "interop": "real Kafka clients (confluent-kafka, kafka-python, aiokafka, kcat) against Odradek",
    "groups": "consumer and share groups through the wire, across brokers and client libraries",
    "upgrade": "data directories and records written by older versions",
    "docs": "the documentation's code blocks",
    "benchmarks": "the helpers of the repository's benchmarks/ scripts",
    "fixtures": "files the tests read (no tests)",
}

#: regions whose modules have no sockets and no broker: their unit tests import them alone
LOWER = ("protocol", "records", "storage", "cluster", "schemas", "settings", "security")

#: modules that start brokers for tests: a test importing one tests the broker, not a region alone
HARNESS = ("testing", "pytest_plugin", "testcluster")


def _regions() -> set[str]:
    return {p.name for p in SRC.iterdir() if p.is_dir() and (p / "__init__.py").exists()}


def _imported(path: Path) -> set[str]:
    """The first component under ``odradek`` of every ``odradek.x...`` this file imports."""
    found: set[str] = set()
    for node in ast.walk(parse_file(path)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            parts = node.module.split(".")
            if parts[0] != "odradek":
                continue
            if len(parts) > 1:
                found.add(parts[1])
            else:  # ``from odradek import testing``
                found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "odradek" and len(parts) > 1:
                    found.add(parts[1])
    return found


def test_each_test_directory_is_a_region_or_a_named_cross_cutting_one() -> None:
    regions = _regions()
    assert {"storage", "broker", "client"} <= regions  # the scan finds the package's regions
    dirs = {p.name for p in TESTS.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))}
    stray = sorted(dirs - regions - set(CROSS_CUTTING))
    assert not stray, f"tests/ directories that are no package of src/odradek (put their tests in the region's): {stray}"
    stale = sorted(set(CROSS_CUTTING) - dirs)
    assert not stale, f"CROSS_CUTTING names directories that are gone: {stale}"


def misplaced_unit_tests(tests: Path, regions: set[str]) -> list[str]:
    """Test files that import one lower region alone (no other package of ours, no harness)
    but are not in that region's directory."""
    found = []
    for path in sorted(tests.rglob("test_*.py")):
        rel = path.relative_to(tests)
        home = rel.parts[0] if len(rel.parts) > 1 else ""
        if home == "architecture":  # reads the whole package's shape
            continue
        imported = _imported(path)
        used = imported & regions
        if len(used) != 1 or imported & set(HARNESS):
            continue
        (region,) = used
        if region in LOWER and home != region:
            found.append(f"tests/{rel.as_posix()} -> tests/{region}/")
    return found


def test_unit_tests_of_a_lower_region_are_in_its_directory() -> None:
    misplaced = misplaced_unit_tests(TESTS, _regions())
    assert not misplaced, "unit tests of one region outside its directory (git mv them):\n" + "\n".join(misplaced)


def test_the_rule_finds_a_misplaced_unit_test(tmp_path: Path) -> None:
    (tmp_path / "client").mkdir()
    (tmp_path / "cluster").mkdir()
    (tmp_path / "client" / "test_a.py").write_text("from odradek.cluster.assignors import x\nimport odradek.errors\n")
    (tmp_path / "client" / "test_b.py").write_text("from odradek.cluster import y\nfrom odradek.client import z\n")
    (tmp_path / "client" / "test_c.py").write_text("from odradek import testing\nfrom odradek.cluster import y\n")
    (tmp_path / "cluster" / "test_d.py").write_text("from odradek.cluster.group import g\n")
    assert misplaced_unit_tests(tmp_path, {"client", "cluster"}) == ["tests/client/test_a.py -> tests/cluster/"]
