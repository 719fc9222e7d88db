"""The log's flush rules (``flush.messages``, ``flush.ms``) and inline flushing on or off."""

from __future__ import annotations

from pathlib import Path

from odradek._clock import FakeClock
from odradek.storage import Log, LogConfig, LogManager
from tests.storage.storage_helpers import v2_batch


def _log(tmp_path: Path, clock: FakeClock, inline: bool, **cfg: str) -> Log:
    return Log(tmp_path / "t-0", LogConfig.from_dict(cfg), clock=clock, clean_shutdown=True, flush_inline=inline)


def test_flush_messages_flushes_inline_at_the_limit(tmp_path: Path) -> None:
    lg = _log(tmp_path, FakeClock(), True, **{"flush.messages": "3"})
    lg.append(v2_batch(2), leader_epoch=0)
    assert (lg.recovery_point, lg.flush_messages_due()) == (0, False)
    lg.append(v2_batch(1), leader_epoch=0)
    assert lg.recovery_point == 3 and not lg.flush_messages_due()


def test_without_inline_flushing_the_rule_is_only_reported(tmp_path: Path) -> None:
    lg = _log(tmp_path, FakeClock(), False, **{"flush.messages": "3"})
    lg.append(v2_batch(3), leader_epoch=0)
    assert lg.recovery_point == 0 and lg.flush_messages_due()
    lg.flush()
    assert lg.recovery_point == 3 and not lg.flush_messages_due()


def test_flush_ms_is_due_once_unflushed_records_waited_that_long(tmp_path: Path) -> None:
    clock = FakeClock()
    lg = _log(tmp_path, clock, True, **{"flush.ms": "1000"})
    clock.advance(5000)
    assert not lg.flush_time_due(clock.monotonic_ms()), "nothing unflushed: nothing due"
    lg.append(v2_batch(1), leader_epoch=0)
    assert lg.flush_time_due(clock.monotonic_ms())
    lg.flush()
    assert not lg.flush_time_due(clock.monotonic_ms())
    lg.append(v2_batch(1), leader_epoch=0)
    clock.advance(999)
    assert not lg.flush_time_due(clock.monotonic_ms())
    clock.advance(1)
    assert lg.flush_time_due(clock.monotonic_ms())


def test_the_manager_passes_inline_flushing_to_created_and_loaded_logs(tmp_path: Path) -> None:
    m = LogManager([tmp_path], {"flush.messages": 1}, flush_inline=False)
    lg = m.get_or_create("t", 0)
    lg.append(v2_batch(1), leader_epoch=0)
    assert not lg.auto_flush and lg.recovery_point == 0
    m.shutdown()
    m = LogManager([tmp_path], {"flush.messages": 1}, flush_inline=False)
    loaded = m.get("t", 0)
    assert loaded is not None and not loaded.auto_flush
    m.shutdown()
    m = LogManager([tmp_path], {"flush.messages": 1})
    inline = m.get("t", 0)
    assert inline is not None and inline.auto_flush
    m.shutdown()
