"""``odradek tables compact``: a table's small files rewritten into fewer, with the same rows and
the same record of offsets, while the broker's writers keep committing (and after a restart)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import confluent_kafka as ck
import pytest

from odradek.testing import BrokerProcess
from tests.tables.conftest import (
    FAST,
    OVERRIDES,
    create_topic,
    duckdb_rows,
    open_catalog,
    wait_rows,
    wait_until,
)
from tests.tables.test_restart import _Log, _log_offsets


def _produce(bootstrap: str, topic: str, values: list[tuple[int, bytes]]) -> dict[tuple[int, int], tuple[bytes, bytes]]:
    """(partition, offset) -> (key, value) of each record produced."""
    placed: dict[tuple[int, int], tuple[bytes, bytes]] = {}
    p = ck.Producer({"bootstrap.servers": bootstrap, "linger.ms": 5})

    def done(err: Any, msg: Any) -> None:
        assert err is None, err
        placed[(msg.partition(), msg.offset())] = (msg.key(), msg.value())

    for partition, value in values:
        p.produce(topic, value, key=b"k" + value, partition=partition, on_delivery=done)
    assert p.flush(30) == 0
    return placed


def _compact(data_dir: Path, capsys: pytest.CaptureFixture[str], *args: str) -> list[dict[str, Any]]:
    from odradek.cli.__main__ import main

    capsys.readouterr()
    assert main(["tables", "compact", *args, "--data-dir", str(data_dir), "--output", "json"]) == 0
    out: list[dict[str, Any]] = json.loads(capsys.readouterr().out)
    return out


def _pyiceberg_rows(data_dir: Path, topic: str) -> list[tuple[int, int, bytes, bytes]]:
    t = open_catalog(data_dir).load_table(("odradek", topic)).scan().to_arrow()
    return sorted(zip(t["partition"].to_pylist(), t["offset"].to_pylist(), t["key"].to_pylist(), t["value"].to_pylist()))


def _summary_offsets(data_dir: Path, topic: str) -> dict[str, str]:
    snap = open_catalog(data_dir).load_table(("odradek", topic)).current_snapshot()
    return {k: v for k, v in snap.summary.additional_properties.items() if k.startswith("odradek.next-offset.")}


def _data_files(data_dir: Path, topic: str) -> int:
    return len(list(open_catalog(data_dir).load_table(("odradek", topic)).scan().plan_files()))


def test_compaction_leaves_fewer_files_with_the_same_rows_and_offsets(broker: BrokerProcess,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    topic = "kv-compacted"
    create_topic(broker.bootstrap, topic, 2, {"odradek.iceberg.mode": "key_value", **FAST})
    placed: dict[tuple[int, int], tuple[bytes, bytes]] = {}
    for round_ in range(6):  # a commit (a file per partition) each
        placed |= _produce(broker.bootstrap, topic, [(i % 2, f"r{round_}-{i}".encode()) for i in range(10)])
        wait_rows(broker.data_dir, topic, len(placed))
    expected = sorted((p, o, k, v) for (p, o), (k, v) in placed.items())
    before_files = _data_files(broker.data_dir, topic)
    assert before_files >= 12
    offsets = _summary_offsets(broker.data_dir, topic)
    assert offsets == {"odradek.next-offset.0": "30", "odradek.next-offset.1": "30"}

    [done] = _compact(broker.data_dir, capsys, topic)
    assert done["files_before"] == before_files and done["files_rewritten"] >= 5
    after_files = _data_files(broker.data_dir, topic)
    assert after_files == done["files_after"] < before_files
    assert done["rows"] == done["rows_rewritten"] == 60 and done["offsets"] == {"0": 30, "1": 30}
    # the same rows, read by PyIceberg and by DuckDB; the same record of offsets
    assert _pyiceberg_rows(broker.data_dir, topic) == expected
    assert duckdb_rows(broker.data_dir, topic, "partition, \"offset\", key, value") == expected
    assert _summary_offsets(broker.data_dir, topic) == offsets
    # nothing left to compact: a second run changes nothing
    [again] = _compact(broker.data_dir, capsys, topic)
    assert again["files_rewritten"] == 0 and again["files_after"] == after_files
    from odradek.cli.__main__ import main

    assert main(["tables", "compact", topic, "--data-dir", str(broker.data_dir)]) == 0
    assert f"odradek.{topic}: {after_files} data files, nothing to compact" in capsys.readouterr().out
    # the writer goes on from the same record: the next records once each
    placed |= _produce(broker.bootstrap, topic, [(i % 2, f"after-{i}".encode()) for i in range(6)])
    wait_rows(broker.data_dir, topic, len(placed))
    assert _pyiceberg_rows(broker.data_dir, topic) == sorted((p, o, k, v) for (p, o), (k, v) in placed.items())


def test_compaction_while_producers_and_the_writer_run(broker: BrokerProcess, capsys: pytest.CaptureFixture[str]) -> None:
    topic = "kv-compacted-live"
    # commits often enough that they land while a compaction runs, not so often that one loses every race:
    # a compaction's commit has to fit between the two writers' commits, and on a slow, loaded machine
    # it did not fit between commits 300 ms apart 20 times in a row
    create_topic(broker.bootstrap, topic, 2, {"odradek.iceberg.mode": "key_value",
                                              "odradek.iceberg.commit.interval.ms": "1000"})
    stop = threading.Event()
    failures: list[Any] = []
    producer = ck.Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 2, "enable.idempotence": True})

    def produce() -> None:
        i = 0
        while not stop.is_set():
            producer.produce(topic, f"v{i}".encode(), partition=i % 2,
                             on_delivery=lambda err, _m: failures.append(err) if err is not None else None)
            producer.poll(0)
            i += 1
            time.sleep(0.002)

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    rewritten = 0
    try:
        for _ in range(3):  # compactions while new commits land between them (and during them)
            seen = _data_files(broker.data_dir, topic) if rewritten else 0
            wait_until(lambda s=seen: _data_files(broker.data_dir, topic) >= s + 6, "more small files committed")
            [done] = _compact(broker.data_dir, capsys, topic, "--min-input-files", "2")
            rewritten += done["files_rewritten"]
    finally:
        stop.set()
        thread.join(10)
    assert producer.flush(60) == 0 and not failures
    assert rewritten > 0
    in_log = _log_offsets(broker.bootstrap, topic, 2)
    table = wait_rows(broker.data_dir, topic, len(in_log))
    pairs = list(zip(table["partition"].to_pylist(), table["offset"].to_pylist()))
    assert len(pairs) == len(set(pairs))  # nothing twice
    assert set(pairs) == in_log  # nothing missing
    assert _summary_offsets(broker.data_dir, topic) == {
        f"odradek.next-offset.{p}": str(max(o for q, o in in_log if q == p) + 1) for p in range(2)}


def test_the_writer_resumes_after_a_restart_following_a_compaction(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    topic = "kv-compacted-offline"
    b = BrokerProcess(tmp_path / "data", overrides=OVERRIDES)
    b.start()
    try:
        create_topic(b.bootstrap, topic, 1, {"odradek.iceberg.mode": "key_value", **FAST})
        placed: dict[tuple[int, int], tuple[bytes, bytes]] = {}
        for round_ in range(5):
            placed |= _produce(b.bootstrap, topic, [(0, f"r{round_}-{i}".encode()) for i in range(4)])
            wait_rows(b.data_dir, topic, len(placed))
        b.stop()
        before_files = _data_files(b.data_dir, topic)
        [done] = _compact(b.data_dir, capsys, topic, "--min-input-files", "2")  # offline: the broker is stopped
        # one file per Iceberg partition (an hour's records; two if the test ran across an hour)
        assert done["files_before"] == before_files >= 5 and done["files_after"] <= 2
        assert done["offsets"] == {"0": 20}
        b.start()
        placed |= _produce(b.bootstrap, topic, [(0, f"after-{i}".encode()) for i in range(3)])
        wait_rows(b.data_dir, topic, len(placed))
        rows = _pyiceberg_rows(b.data_dir, topic)
    finally:
        b.stop()
    assert rows == sorted((p, o, k, v) for (p, o), (k, v) in placed.items())
    assert _summary_offsets(b.data_dir, topic) == {"odradek.next-offset.0": "23"}


def _writers(tmp_path: Path, n: int) -> tuple[Any, list[_Log], list[Any]]:
    from odradek.config import BrokerConfig
    from odradek.settings import settings_from
    from odradek.tables.catalog import open_catalog as broker_catalog
    from odradek.tables.writer import PartitionWriter

    settings = settings_from(BrokerConfig.load(None, [], {"log.dirs": str(tmp_path)}, env={})).tables
    catalog = broker_catalog(settings, tmp_path)
    logs = [_Log() for _ in range(n)]
    writers = [PartitionWriter(catalog, "odradek", "t", p, "key_value", "none", logs[p]) for p in range(n)]
    return catalog, logs, writers


def _count_live_file_reads(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Calls of the compaction's full read of the table's manifests, counted."""
    from odradek.tables import compact as compaction

    calls: list[int] = []
    real = compaction._live_files

    def counted(table: Any) -> Any:
        calls.append(1)
        return real(table)

    monkeypatch.setattr(compaction, "_live_files", counted)
    return calls


def _check_after_race(catalog: Any, logs: list[Any], writers: list[Any], ends: tuple[int, int]) -> None:
    """Two files left (the compacted one, the writer's), every row once, and both writers pass their
    fence on the compaction's snapshot."""
    table = catalog.load_table(("odradek", "t"))
    assert len(list(table.scan().plan_files())) == 2
    rows = table.scan().to_arrow()
    pairs = sorted(zip(rows["partition"].to_pylist(), rows["offset"].to_pylist(), rows["value"].to_pylist()))
    assert pairs == [(p, o, f"v{o}".encode()) for p in range(2) for o in range(ends[p])]
    for lg, w in zip(logs, writers):
        lg.add(2)
        assert w.step().written == 2
    offsets = sorted(zip(*(table.refresh().scan().to_arrow()[c].to_pylist() for c in ("partition", "offset"))))
    assert offsets == [(p, o) for p in range(2) for o in range(ends[p] + 2)]


def test_a_writers_commit_during_the_rewrite_is_seen_before_the_compaction_commits(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from odradek.tables import compact as compaction

    catalog, logs, writers = _writers(tmp_path, 2)
    for _ in range(4):
        for lg, w in zip(logs, writers):
            lg.add(5)
            assert w.step().written == 5
    real_rewrite = compaction._rewrite

    def rewrite_then_a_writer_commits(*args: Any) -> Any:
        out = real_rewrite(*args)
        logs[1].add(7)  # partition 1's writer commits after the files were read and rewritten
        assert writers[1].step().written == 7
        return out

    monkeypatch.setattr(compaction, "_rewrite", rewrite_then_a_writer_commits)
    reads = _count_live_file_reads(monkeypatch)
    done = compaction.compact(catalog.load_table(("odradek", "t")), min_input_files=2)
    # no commit lost: the table was read again before committing, on the writer's snapshot
    assert done.races == 0 and done.files_rewritten == 8
    assert done.offsets == {0: 20, 1: 27}  # the writer's commit's record, carried forward
    # the plan and the count afterwards read the manifests; the check before the commit did not
    # (only an append came between), which keeps the window a writer's commit can fall in short
    assert len(reads) == 2
    _check_after_race(catalog, logs, writers, (20, 27))


def test_a_compaction_that_loses_a_race_to_a_writer_commits_on_the_writers_snapshot(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from odradek.tables import compact as compaction

    catalog, logs, writers = _writers(tmp_path, 2)
    for _ in range(4):
        for lg, w in zip(logs, writers):
            lg.add(5)
            assert w.step().written == 5
    real_carried = compaction._carried
    calls: list[int] = []

    def a_writer_commits_in_the_window(snap: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:  # after the check, before the commit: the commit loses the race
            logs[1].add(7)
            assert writers[1].step().written == 7
        return real_carried(snap)

    monkeypatch.setattr(compaction, "_carried", a_writer_commits_in_the_window)
    reads = _count_live_file_reads(monkeypatch)
    done = compaction.compact(catalog.load_table(("odradek", "t")), min_input_files=2)
    assert done.races == 1 and done.files_rewritten == 8 and len(calls) == 2
    assert done.offsets == {0: 20, 1: 27}  # the winner's record, carried forward
    assert len(reads) == 2  # the lost race cost no read of every manifest
    _check_after_race(catalog, logs, writers, (20, 27))


def test_a_compaction_whose_files_were_compacted_meanwhile_plans_again(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from odradek.tables import compact as compaction

    catalog, logs, writers = _writers(tmp_path, 1)
    for _ in range(6):
        logs[0].add(3)
        writers[0].step()
    real_rewrite = compaction._rewrite
    calls = []

    def rewrite_while_another_compacts(*args: Any) -> Any:
        out = real_rewrite(*args)
        calls.append(1)
        if len(calls) == 1:  # another compaction commits first: the files this one read are gone
            monkeypatch.setattr(compaction, "_rewrite", real_rewrite)
            other = compaction.compact(catalog.load_table(("odradek", "t")), min_input_files=2)
            assert other.files_rewritten == 6
            monkeypatch.setattr(compaction, "_rewrite", rewrite_while_another_compacts)
        return out

    monkeypatch.setattr(compaction, "_rewrite", rewrite_while_another_compacts)
    done = compaction.compact(catalog.load_table(("odradek", "t")), min_input_files=2)
    assert done.races == 1 and done.files_rewritten == 0  # planned again: one file, nothing to do
    table = catalog.load_table(("odradek", "t"))
    assert sorted(table.scan().to_arrow()["offset"].to_pylist()) == list(range(18))
    assert len(list(table.scan().plan_files())) == 1
    # what the losing compaction wrote was deleted, not left in the warehouse
    data = list((tmp_path / "iceberg" / "warehouse").rglob("*.parquet"))
    assert len(data) == 6 + 1  # the writer's six (in older snapshots), the winner's one; nothing of the loser's
