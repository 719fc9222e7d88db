"""Compaction: latest value per key at its original offset, tombstones expire, crash safety."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek._clock import FakeClock
from odradek.records import BatchBuilder, read_batches
from odradek.storage import Log, LogConfig, LogManager
from odradek.storage import cleaner as cleaner_mod

RETENTION = 10_000


def _config(**extra: object) -> dict[str, object]:
    cfg: dict[str, object] = {
        "cleanup.policy": "compact",
        "segment.bytes": 1500,
        "min.cleanable.dirty.ratio": 0.01,
        "delete.retention.ms": RETENTION,
    }
    cfg.update(extra)
    return cfg


def _append(log: Log, clock: FakeClock, key: bytes, value: bytes | None) -> int:
    b = BatchBuilder()
    b.append(clock.now_ms(), key, value, [("h", b"x")])
    return log.append(b.build()).first_offset


def _contents(log: Log) -> list[tuple[int, bytes | None, bytes | None]]:
    out = []
    for seg in log.segments:
        for batch in read_batches(seg.read_bytes(0, seg.size)):
            out += [(r.offset, r.key, r.value) for r in batch.records]
    return out


writes = st.lists(
    st.tuples(st.integers(0, 7), st.one_of(st.none(), st.binary(min_size=1, max_size=40))),
    min_size=1,
    max_size=120,
)


@settings(max_examples=25)
@given(writes)
def test_compaction_keeps_latest_value_per_key_at_its_offset(ops: list[tuple[int, bytes | None]]) -> None:
    clock = FakeClock()
    with tempfile.TemporaryDirectory() as d:
        manager = LogManager([d], _config(), clock=clock)
        log = manager.get_or_create("compacted", 0)
        appended: dict[int, tuple[bytes, bytes | None]] = {}
        latest: dict[bytes, int] = {}
        for k, v in ops:
            key = f"key-{k}".encode()
            off = _append(log, clock, key, v)
            appended[off] = (key, v)
            latest[key] = off
            clock.advance(1)
        log.roll()
        manager.clean()
        got = _contents(log)
        offsets = [o for o, _, _ in got]
        assert offsets == sorted(set(offsets)), "offsets must stay unique and ordered"
        for off, key, value in got:
            assert appended[off] == (key, value), "records keep their original offsets"
            assert latest[key] == off, f"superseded record {off} of {key!r} survived"
        present = {o for o, _, _ in got}
        for key, off in latest.items():
            assert off in present, f"latest record of {key!r} (offset {off}) is missing"
        # tombstones disappear once delete.retention.ms has passed
        clock.advance(RETENTION + 1)
        _append(log, clock, b"other", b"x")
        log.roll()
        manager.clean()
        got2 = _contents(log)
        for off, key, value in got2:
            if key != b"other":
                assert value is not None, f"tombstone at {off} outlived delete.retention.ms"
                assert latest[key] == off
        live = {k for k, off in latest.items() if appended[off][1] is not None}
        assert {k for _, k, _ in got2} - {b"other"} == live
        manager.shutdown()


def test_active_segment_and_compaction_lag_are_respected(tmp_path: Path) -> None:
    clock = FakeClock()
    manager = LogManager([tmp_path], _config(**{"min.compaction.lag.ms": 5000}), clock=clock)
    log = manager.get_or_create("lag", 0)
    for i in range(40):
        _append(log, clock, b"k", f"v{i}".encode())
    before = _contents(log)
    assert len(log.segments) > 2
    manager.clean()
    assert _contents(log) == before  # everything is younger than the lag
    clock.advance(6000)
    manager.clean()
    after = _contents(log)
    active_base = log.active.base_offset
    assert [r for r in after if r[0] >= active_base] == [r for r in before if r[0] >= active_base]
    cleaned = [r for r in after if r[0] < active_base]
    # the offset map covers only the cleanable range: its latest record of "k" survives
    assert cleaned == [max(r for r in before if r[0] < active_base)]
    manager.shutdown()


def _fill(tmp_path: Path, clock: FakeClock) -> tuple[LogManager, Log, list[tuple[int, bytes | None, bytes | None]]]:
    manager = LogManager([tmp_path], _config(), clock=clock)
    log = manager.get_or_create("crash", 0)
    for i in range(60):
        _append(log, clock, f"k{i % 5}".encode(), f"v{i}".encode())
    log.roll()
    return manager, log, _contents(log)


def test_crash_after_commit_completes_the_swap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock = FakeClock()
    _manager, log, before = _fill(tmp_path, clock)

    def crash(self: Log, old: object, new: object) -> None:
        raise KeyboardInterrupt("simulated crash after the .swap rename")

    monkeypatch.setattr(Log, "replace_segments", crash)
    with pytest.raises(KeyboardInterrupt):
        cleaner_mod.clean(log, 0, clock.now_ms())
    monkeypatch.undo()
    swaps = list((tmp_path / "crash-0").glob("*.log.swap"))
    assert swaps, "the committed pass left a .log.swap behind"
    # reopen without a clean shutdown: the swap is completed, old segments replaced
    reopened = Log(tmp_path / "crash-0", LogConfig.from_dict(_config()), clock=clock)
    got = _contents(reopened)
    assert not list((tmp_path / "crash-0").glob("*.swap"))
    latest = {}
    for off, key, _v in before:
        latest[key] = off
    # the first group was swapped in: only latest-per-key records remain below its end;
    # the groups after it were never cleaned and are unchanged
    boundary = reopened.segments[1].base_offset
    assert [r for r in got if r[0] >= boundary] == [r for r in before if r[0] >= boundary]
    swapped = [r for r in got if r[0] < boundary]
    assert swapped == [r for r in before if r[0] < boundary and latest[r[1]] == r[0]]
    assert len(swapped) < len([r for r in before if r[0] < boundary])


def test_crash_before_commit_discards_the_cleaned_files(tmp_path: Path) -> None:
    clock = FakeClock()
    _manager, _log, before = _fill(tmp_path, clock)
    junk = tmp_path / "crash-0" / "00000000000000000000.log.cleaned"
    junk.write_bytes(b"partial cleaner output")
    (tmp_path / "crash-0" / "00000000000000000000.index.swap").write_bytes(b"\x00" * 8)
    reopened = Log(tmp_path / "crash-0", LogConfig.from_dict(_config()), clock=clock)
    assert _contents(reopened) == before
    assert not junk.exists()
    assert not list((tmp_path / "crash-0").glob("*.swap"))
