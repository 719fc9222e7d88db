"""Zero set-up: ``format("odradek")`` in a new SparkSession of a fresh virtual environment.

A fresh venv gets only ``pip install -e '.[spark]'``; a script in it builds a plain SparkSession
(no ``register`` call, no ``PYSPARK_*`` variables) and reads, writes and streams through the
source, as a user of an activated venv does.  A venv run without activation uses
:func:`odradek.spark.session`.  A worker interpreter without Odradek gets a message naming
both interpreters and the setting to change, not a bare ``ModuleNotFoundError``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from odradek.testing import BrokerProcess

from .spark_helpers import consume_all, create_topic, produce

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]

_SESSION = """
from pyspark.sql import SparkSession

spark = (
    SparkSession.builder.master("local[2]")
    .config("spark.ui.enabled", "false")
    .config("spark.driver.host", "127.0.0.1")
    .config("spark.driver.bindAddress", "127.0.0.1")
    .getOrCreate()
)
"""

_HELPER_SESSION = """
import odradek.spark

spark = odradek.spark.session(
    "local[2]", **{"spark.ui.enabled": "false", "spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"}
)
"""

# reads `source`, writes a batch to `out_batch`, streams `source` to `out_stream` (AvailableNow)
_JOB = """
import sys

bootstrap, source, out_batch, out_stream, checkpoint = sys.argv[1:6]
spark.sparkContext.setLogLevel("ERROR")
df = spark.read.format("odradek").option("kafka.bootstrap.servers", bootstrap).option("subscribe", source).load()
rows = df.selectExpr("CAST(value AS STRING) AS v").collect()
print("READ", len(rows), sorted(r.v for r in rows)[:2], flush=True)
(
    df.selectExpr("key", "value")
    .write.format("odradek")
    .option("kafka.bootstrap.servers", bootstrap)
    .option("topic", out_batch)
    .mode("append")
    .save()
)
query = (
    spark.readStream.format("odradek")
    .option("kafka.bootstrap.servers", bootstrap)
    .option("subscribe", source)
    .option("startingOffsets", "earliest")
    .load()
    .selectExpr("key", "value")
    .writeStream.format("odradek")
    .option("kafka.bootstrap.servers", bootstrap)
    .option("topic", out_stream)
    .option("checkpointLocation", checkpoint)
    .trigger(availableNow=True)
    .start()
)
query.awaitTermination(120)
print("STREAMED", query.lastProgress and query.lastProgress["sources"][0]["endOffset"], flush=True)
spark.stop()
"""


def _clean_env(extra_path: str | None = None) -> dict[str, str]:
    """This process's environment without any PYSPARK_* or virtual-environment settings."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYSPARK_") and k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    path = [p for p in env.get("PATH", "").split(os.pathsep) if not p.startswith(sys.prefix)]
    if extra_path:
        path.insert(0, extra_path)
    env["PATH"] = os.pathsep.join(path)
    env.pop("SPARK_LOCAL_IP", None)
    return env


@pytest.fixture(scope="module")
def fresh_venv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A new virtual environment with only ``pip install -e '.[spark]'`` (from pip's cache)."""
    root = tmp_path_factory.mktemp("fresh")
    # a checkout of its own: an editable install builds the C extension in place, which must not
    # rewrite the one this test process has loaded
    checkout = root / "odradek"
    shutil.copytree(
        REPO,
        checkout,
        ignore=shutil.ignore_patterns(".venv", ".git", "__pycache__", "*.so", "build", "*.egg-info", ".*_cache"),
    )
    venv = root / "venv"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", str(venv)], check=True, timeout=120)
    subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", "-e", f"{checkout}[spark]"],
        check=True,
        timeout=900,
        env=_clean_env(),
    )
    yield venv
    shutil.rmtree(root, ignore_errors=True)  # ~700 MB (pyspark): not kept until the session ends


def _run_job(python: Path, session: str, env: dict[str, str], args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    script = cwd / "job.py"
    script.write_text(textwrap.dedent(session) + textwrap.dedent(_JOB))
    return subprocess.run(
        [str(python), str(script), *args], capture_output=True, text=True, timeout=600, env=env, cwd=cwd, stdin=subprocess.DEVNULL
    )


def _check_outputs(broker: BrokerProcess, sent: list[dict[str, Any]], out_batch: str, out_stream: str) -> None:
    want = sorted(r["value"] for r in sent)
    assert sorted(m.value() for m in consume_all(broker.bootstrap, out_batch, len(sent))) == want
    assert sorted(m.value() for m in consume_all(broker.bootstrap, out_stream, len(sent))) == want


@pytest.mark.parametrize("activated", [True, False], ids=["activated-venv", "session-helper"])
def test_a_fresh_venv_reads_writes_and_streams_with_no_setup(
    fresh_venv: Path, broker: BrokerProcess, topic: str, tmp_path: Path, activated: bool
) -> None:
    create_topic(broker.bootstrap, topic, 3)
    sent = produce(broker.bootstrap, topic, [{"key": b"k%d" % i, "value": b"v%03d" % i} for i in range(150)])
    # activated: `python3` on the PATH is the venv's, which Spark's workers and its discovery of
    # Python data sources run; not activated, odradek.spark.session() points them at it
    env = _clean_env(str(fresh_venv / "bin") if activated else None)
    args = [broker.bootstrap, topic, f"{topic}-batch", f"{topic}-stream", str(tmp_path / "ckpt")]
    result = _run_job(fresh_venv / "bin" / "python", _SESSION if activated else _HELPER_SESSION, env, args, tmp_path)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "READ 150 ['v000', 'v001']" in result.stdout, result.stdout
    assert "STREAMED" in result.stdout
    _check_outputs(broker, sent, f"{topic}-batch", f"{topic}-stream")


def test_a_worker_interpreter_without_odradek_gets_a_clear_error(broker: BrokerProcess, topic: str, tmp_path: Path) -> None:
    bare = tmp_path / "bare"
    base = getattr(sys, "_base_executable", sys.executable)
    subprocess.run([base, "-m", "venv", "--without-pip", str(bare)], check=True, timeout=120)
    worker = bare / "bin" / "python"
    env = _clean_env()
    env["PYSPARK_PYTHON"] = str(worker)  # the mistake: workers on an interpreter without odradek
    session = _SESSION + "import odradek.spark\nodradek.spark.register(spark)\n"
    args = [broker.bootstrap, topic, f"{topic}-batch", f"{topic}-stream", str(tmp_path / "ckpt")]
    result = _run_job(Path(sys.executable), session, env, args, tmp_path)
    assert result.returncode != 0
    text = result.stderr
    assert "the odradek data source cannot run" in text, text[-4000:]
    assert f"runs {worker}, which cannot import odradek" in text
    assert f"{sys.executable} has it: set the PYSPARK_PYTHON environment variable" in text
    assert "odradek.spark.session()" in text


def _readme_spark_section() -> tuple[str, str]:
    """The Spark page (docs/spark.md): its text before the offline-read section, and that one."""
    text = (REPO / "docs" / "spark.md").read_text()
    network, _, offline = text.partition("\n## Reading segment files offline\n")
    return network, offline.split("\n## ", 1)[0]  # the sections after it (typed columns) aside


def _blocks(text: str, lang: str) -> list[str]:
    return [b.split("```", 1)[0] for b in text.split(f"```{lang}\n")[1:]]


def _readme_spark_blocks() -> list[str]:
    blocks = _blocks(_readme_spark_section()[0], "python")
    assert len(blocks) == 2, "the Spark page has a batch and a streaming example"
    return blocks


def test_the_readme_spark_examples_run_as_written(fresh_venv: Path, broker: BrokerProcess, tmp_path: Path) -> None:
    """The Spark page's two examples, in the fresh venv activated, against a broker holding the
    quickstart's greetings (only the broker address and the checkpoint directory substituted)."""
    batch, stream = _readme_spark_blocks()
    # one partition, as the quickstart's single broker makes it (this broker's default is two)
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    for f in admin.create_topics([NewTopic("greetings", 1, 1)]).values():
        f.result(30)
    produce(broker.bootstrap, "greetings", [{"key": b"k1", "value": b"Hello", "partition": 0},
                                           {"key": b"k2", "value": b"World", "partition": 0}])
    env = _clean_env(str(fresh_venv / "bin"))
    env["VIRTUAL_ENV"] = str(fresh_venv)
    env["SPARK_LOCAL_IP"] = "127.0.0.1"  # tests bind to loopback only
    for name, code in (("batch", batch), ("stream", stream)):
        code = code.replace("127.0.0.1:9092", broker.bootstrap).replace("/tmp/greetings-lower", str(tmp_path / "ckpt"))
        (tmp_path / f"{name}.py").write_text(code)
        result = subprocess.run(
            ["python", f"{name}.py"], capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path, stdin=subprocess.DEVNULL
        )
        assert result.returncode == 0, result.stderr[-4000:]
        if name == "batch":
            assert "| k1|Hello|" in result.stdout and "| k2|World|" in result.stdout, result.stdout
    # the offline read: the shell line copies the partition, the Python block reads the copy and
    # the broker's data dir (the quickstart's odradek-data is this broker's data dir here)
    offline = _readme_spark_section()[1]
    [copy] = _blocks(offline, "sh")
    [read] = _blocks(offline, "python")
    backup = tmp_path / "backup"
    copy = copy.replace("odradek-data", str(broker.data_dir)).replace("/tmp/backup", str(backup))
    subprocess.run(["bash", "-c", copy], check=True, timeout=60, cwd=tmp_path)
    read = read.replace("odradek-data", str(broker.data_dir)).replace("/tmp/backup", str(backup))
    (tmp_path / "offline.py").write_text(read)
    result = subprocess.run(
        ["python", "offline.py"], capture_output=True, text=True, timeout=600, env=env, cwd=tmp_path, stdin=subprocess.DEVNULL
    )
    assert result.returncode == 0, result.stderr[-4000:]
    assert "| k1|Hello|     0|" in result.stdout and "| k2|World|     1|" in result.stdout, result.stdout
    upper = consume_all(broker.bootstrap, "greetings-upper", 2)
    assert sorted((m.key(), m.value()) for m in upper) == [(b"k1", b"HELLO"), (b"k2", b"WORLD")]
    lower = consume_all(broker.bootstrap, "greetings-lower", 2)
    assert sorted((m.key(), m.value()) for m in lower) == [(b"k1", b"hello"), (b"k2", b"world")]
