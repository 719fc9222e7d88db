"""The pytest plugin (``odradek.pytest_plugin``, entry point ``pytest11``).

``test_a_project_with_only_odradek_installed`` is the issue's done-when: a project that has nothing
but its own test file runs ``pytest`` with the ``odradek_broker`` fixture, Odradek having only been
``pip install``ed.  The suite must not download anything, so "pip install odradek" is reproduced
offline, as closely as that allows:

* a wheel is built from this checkout (a copy of ``pyproject.toml``, ``setup.py``, ``README.md`` and
  ``src/`` in a temporary directory: ``pip wheel --no-deps``), i.e. what PyPI would serve.  pip
  builds it as it builds any source tree, in an isolated environment with the build backend
  (setuptools) from pip's configured index: the one that installed the development venv a moment
  before (``pip install -e .`` needs the same);
* a fresh virtual environment (``python -m venv --without-pip``: empty) gets that wheel installed by
  pip (``pip --python NEWVENV install --no-deps WHEEL``), so the ``odradek`` package, its console
  script and its ``pytest11`` entry point exist in that venv only — not this checkout's ``src/``,
  not the editable install of the development venv;
* the third-party packages are those pip would have installed: the closure of Odradek's declared
  dependencies (``Requires-Dist`` without extras), plus the test project's own two (pytest and
  confluent-kafka) and theirs, taken from the development venv, each package and its
  ``.dist-info`` symlinked into one directory that the new venv sees through a ``.pth`` file.
  Nothing else is visible: no hypothesis, kafka-python, kazoo, no ``tests/`` or ``conftest.py``.

The project has two test files: the example of docs/testing.md, as written there, and one that asserts
that ``odradek`` was imported from the new venv and uses the helpers.  Building the wheel
compiles the optional C extension; the whole test takes about 20-40 s.

The other tests use the fixtures in this suite directly (the plugin is loaded here too, being
installed in the development venv).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from packaging.requirements import Requirement

from odradek.pytest_plugin import OdradekBroker, OdradekCluster

REPO = Path(__file__).resolve().parents[1]

PROJECT_TEST = '''
import os
import sys

import odradek
from confluent_kafka import Consumer, Producer


def test_odradek_comes_from_this_venv():
    assert odradek.__file__.startswith(sys.prefix), (odradek.__file__, sys.prefix)
    assert "site-packages" in odradek.__file__


def test_produce_and_consume(odradek_broker):
    topic = odradek_broker.create_topic("payments", partitions=2)
    producer = Producer({"bootstrap.servers": odradek_broker.bootstrap_servers})
    for i in range(10):
        producer.produce(topic, key=str(i).encode(), value=f"order {i}".encode())
    assert producer.flush(10) == 0

    consumer = Consumer({
        "bootstrap.servers": odradek_broker.bootstrap_servers,
        "group.id": "accounts",
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
    })
    consumer.subscribe([topic])
    values = []
    while len(values) < 10:
        msg = consumer.poll(10)
        assert msg is not None and msg.error() is None, msg and msg.error()
        values.append(msg.value())
    consumer.commit(asynchronous=False)
    odradek_broker.wait_for_group_lag("accounts", topic, 0, timeout=30)
    consumer.close()
    assert sorted(values) == sorted(f"order {i}".encode() for i in range(10))


def test_the_broker_is_shared_by_the_session(odradek_broker):
    assert "payments" in odradek_broker.admin().list_topics()
    assert os.path.isdir(odradek_broker.data_dir)
'''


def _closure(roots: list[str]) -> list[str]:
    """Distribution names: ``roots`` and everything they require (no extras), as installed here."""
    seen: dict[str, None] = {}
    todo = list(roots)
    while todo:
        name = todo.pop()
        key = name.lower().replace("_", "-")
        if key in seen:
            continue
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            continue  # e.g. a requirement for another platform
        seen[key] = None
        for spec in dist.requires or []:
            req = Requirement(spec)
            if req.marker is None or req.marker.evaluate({"extra": ""}):
                todo.append(req.name)
    return list(seen)


def readme_example() -> str:
    """The first example of the "Testing your app" page (docs/testing.md), as written there."""
    text = (REPO / "docs" / "testing.md").read_text()
    after = text.split("<!-- runs in tests/test_pytest_plugin.py", 1)[1]
    return after.split("```python\n", 1)[1].split("```", 1)[0]


def _link_packages(names: list[str], into: Path) -> None:
    """Symlink each distribution's top-level files and dirs (package, .dist-info, .libs) into ``into``."""
    into.mkdir()
    for name in names:
        dist = distribution(name)
        site = Path(str(dist.locate_file("")))
        for top in sorted({f.parts[0] for f in dist.files or []}):
            if top in ("..", "__pycache__") or top.endswith(".pth"):
                continue
            target = into / top
            if not target.exists() and (site / top).exists():
                target.symlink_to(site / top)


@pytest.mark.slow
def test_a_project_with_only_odradek_installed(tmp_path: Path) -> None:
    t0 = time.monotonic()
    # 1. a wheel of this checkout, built from a copy (no build/ or egg-info in the working tree)
    source = tmp_path / "odradek-source"
    source.mkdir()
    for name in ("pyproject.toml", "setup.py", "README.md"):
        shutil.copy2(REPO / name, source / name)
    shutil.copytree(
        REPO / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.so", "*.egg-info")
    )
    wheels = tmp_path / "wheels"
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", "-q"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PYTEST", "VIRTUAL_ENV", "PIP_"))}
    subprocess.run(
        [*pip, "wheel", "--no-deps", "-w", str(wheels), str(source)],
        check=True, env=env, timeout=300,
    )  # fmt: skip
    (wheel,) = wheels.glob("odradek-*.whl")

    # 2. an empty venv; the wheel installed into it by pip
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, env=env, timeout=120)
    python = venv / "bin" / "python"
    subprocess.run(
        [*pip, "--python", str(python), "install", "--no-deps", "--no-index", str(wheel)],
        check=True, env=env, timeout=300,
    )  # fmt: skip

    # 3. what pip would have installed beside it: Odradek's dependencies, and the project's own
    deps = _closure([Requirement(r).name for r in distribution("odradek").requires or []
                     if Requirement(r).marker is None] + ["pytest", "confluent-kafka"])
    assert "odradek" not in deps and "hypothesis" not in deps and "kafka-python" not in deps
    _link_packages(deps, tmp_path / "deps")
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "_deps.pth").write_text(str(tmp_path / "deps") + "\n")
    t_setup = time.monotonic() - t0

    # 4. the project: one test file, nothing else
    project = tmp_path / "project"
    project.mkdir()
    (project / "test_app.py").write_text(textwrap.dedent(PROJECT_TEST))
    (project / "test_readme.py").write_text(readme_example())
    result = subprocess.run(
        [str(python), "-m", "pytest", "-p", "no:cacheprovider", "-v"],
        cwd=project, env=env, capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    assert "4 passed" in result.stdout, result.stdout[-4000:]
    assert "odradek" in subprocess.run(
        [str(python), "-c", "from importlib.metadata import entry_points; print(entry_points(group='pytest11'))"],
        env=env, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    print(f"venv and wheel: {t_setup:.1f} s; project's pytest: {time.monotonic() - t0 - t_setup:.1f} s")


SCOPED_PROJECT_TEST = '''
import os

PIDS = os.path.join(os.path.dirname(__file__), "pids.txt")


def test_one(odradek_broker):
    topic = odradek_broker.create_topic(partitions=-1)
    assert len(odradek_broker.end_offsets(topic)) == 2  # num.partitions from the ini file
    with open(PIDS, "a") as f:
        f.write(f"{odradek_broker.pid}\\n")


def test_two(odradek_broker):
    test_one(odradek_broker)
'''


def test_scope_and_settings_from_the_ini_file(tmp_path: Path) -> None:
    """``odradek_broker_scope = function``: a broker per test; ``odradek_broker_overrides`` applied."""
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nodradek_broker_scope = function\nodradek_broker_overrides =\n    num.partitions = 2\n"
    )
    (tmp_path / "test_scoped.py").write_text(SCOPED_PROJECT_TEST)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    pids = (tmp_path / "pids.txt").read_text().split()
    assert len(pids) == 2 and pids[0] != pids[1]


def _consume(broker: OdradekBroker | OdradekCluster, topic: str, group: str, count: int) -> list[bytes]:
    consumer = Consumer(broker.config(group_id=group, auto_offset_reset="earliest", enable_auto_commit=False))
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < count and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got.append(msg.value())
    consumer.commit(asynchronous=False)
    consumer.close()
    return got


@pytest.mark.odradek(overrides={"num.partitions": 4})
def test_per_test_broker_and_helpers(odradek_broker_per_test: OdradekBroker, tmp_path: Path) -> None:
    broker = odradek_broker_per_test
    assert broker.data_dir.is_relative_to(tmp_path)
    assert broker.bootstrap_servers == f"127.0.0.1:{broker.port}"
    topic = broker.create_topic(partitions=-1)  # a unique name; the marker's num.partitions
    assert topic.startswith("test-") and len(broker.end_offsets(topic)) == 4

    producer = Producer(broker.config())
    for i in range(20):
        producer.produce(topic, value=b"v%d" % i, key=b"k%d" % i)
    assert producer.flush(10) == 0
    assert sum(broker.end_offsets(topic).values()) == 20
    assert sum(broker.group_lag("g1", topic).values()) == 20  # nothing committed: all of it

    with pytest.raises(TimeoutError, match=r"waiting for group 'g1' to reach lag 0"):
        broker.wait_for_group_lag("g1", topic, 0, timeout=0.5)
    assert len(_consume(broker, topic, "g1", 20)) == 20
    assert broker.wait_for_group_lag("g1", topic, 0, timeout=10) == {(topic, p): 0 for p in range(4)}
    assert broker.wait_for_group_lag("g1", timeout=10) == {(topic, p): 0 for p in range(4)}

    pid = broker.pid
    broker.restart()  # same port, same data
    assert broker.pid != pid and sum(broker.end_offsets(topic).values()) == 20


def test_factory_starts_several_brokers(odradek_broker_factory) -> None:  # type: ignore[no-untyped-def]
    a = odradek_broker_factory()
    b = odradek_broker_factory({"auto.create.topics.enable": "false"})
    assert a.port != b.port and a.data_dir != b.data_dir
    assert a.running() and b.running()
    a.stop()
    assert not a.running() and b.running()


@pytest.mark.slow
def test_cluster_fixture(odradek_cluster: OdradekCluster) -> None:
    cluster = odradek_cluster
    assert len(cluster.bootstrap_servers.split(",")) == cluster.size == 3
    assert len(cluster.admin().describe_cluster().brokers) == 3
    topic = cluster.create_topic("replicated", partitions=2, replication_factor=3)
    desc = cluster.admin().describe_topics([topic])[topic]
    assert all(len(p.isr) == 3 for p in desc.partitions)
    producer = Producer(cluster.config(acks="all"))
    for i in range(10):
        producer.produce(topic, value=b"%d" % i)
    assert producer.flush(15) == 0
    assert len(_consume(cluster, topic, "g", 10)) == 10
    cluster.wait_for_group_lag("g", topic, 0, timeout=20)
