"""A leader's append reads every record against its batch header (Kafka's LogValidator): batches
whose records lie under a valid CRC are refused with Kafka's codes and nothing is written; what
producers send is accepted, and the batch's max timestamp is taken from its records."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek._clock import FakeClock
from odradek.errors import ErrorCode
from odradek.records import (
    BatchBuilder,
    Compression,
    LegacyBatchBuilder,
    compress,
    iter_batch_headers,
    legacy,
    speedups,
)
from odradek.records.v2 import assemble_batch
from odradek.storage import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    Log,
    LogConfig,
    RecordBatchTooLargeError,
    validator,
)
from odradek.storage import log as log_module

from ..records import lying
from .storage_helpers import TS0, legacy_batch, read_all, v2_batch


def _log(tmp_path: Path, clock: FakeClock | None = None, **config: object) -> Log:
    return Log(tmp_path / "t-0", LogConfig.from_dict(config), clock=clock or FakeClock(TS0), clean_shutdown=True)


@pytest.fixture(scope="module")
def shared_log(tmp_path_factory: pytest.TempPathFactory) -> Log:
    log = _log(tmp_path_factory.mktemp("lies"))
    log.append(v2_batch(3))
    return log


@pytest.fixture(params=["compiled", "python"])
def check_pass(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The append's record check: the compiled one (when built) and the pure-Python one."""
    if request.param == "python":
        monkeypatch.setattr(validator, "_check", validator._check_python)
        monkeypatch.setattr(validator, "check_produced", validator._check_produced_python)
        monkeypatch.setattr(log_module, "check_produced", validator._check_produced_python)
    elif speedups.compiled is None:
        pytest.skip("the compiled module is turned off")
    return str(request.param)


@pytest.mark.parametrize("lie_kind", lying.KINDS)
@given(drawn=st.data())
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_lying_batches_are_refused_and_nothing_is_written(
    shared_log: Log, check_pass: str, lie_kind: str, drawn: st.DataObject
) -> None:
    kind, data = drawn.draw(lying.lies(kinds=(lie_kind,)))
    end, size = shared_log.log_end_offset, shared_log.active.size
    for buf in (data, bytearray(data)):  # read-only, and the writable buffer appended in place
        with pytest.raises((InvalidRecordError, CorruptRecordError, RecordBatchTooLargeError)) as err:
            shared_log.append(buf)
        assert err.value.code == ErrorCode.INVALID_RECORD, (kind, str(err.value))
        assert "in topic partition t-0" in str(err.value)
    assert (shared_log.log_end_offset, shared_log.active.size) == (end, size)
    # a good batch still goes in after it
    info = shared_log.append(v2_batch(2))
    assert info.first_offset == end


def test_the_count_is_checked_against_the_offsets_with_kafkas_answer(tmp_path: Path) -> None:
    log = _log(tmp_path)
    recs = [lying.Rec(i, b"k", b"v") for i in range(3)]
    records = b"".join(lying.encode(r, i) for i, r in enumerate(recs))
    cases = {
        "count 3, last offset delta 5": (assemble_batch(records, 3, 5, TS0, TS0 + 2), "Inconsistent batch offset range [0, 5]"),
        "count 0": (assemble_batch(b"", 0, 0, TS0, TS0), "Invalid reported count for record batch: 0"),
        "negative range": (assemble_batch(records, 3, -2, TS0, TS0 + 2), "Batch has an invalid offset range: [0, -2]"),
    }
    for _name, (data, message) in cases.items():
        for buf in (data, data + v2_batch(1)):  # the fast path of one batch, and the general one
            with pytest.raises(InvalidRecordError, match=message.replace("[", r"\[").replace("]", r"\]")):
                log.append(buf)
    assert log.log_end_offset == 0


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.LZ4])
def test_a_batchs_max_timestamp_comes_from_its_records(tmp_path: Path, codec: int) -> None:
    """Kafka's LogValidator sets a batch's max timestamp from its records (and recomputes the CRC);
    a producer's header that says otherwise does not put the time index or retention wrong."""
    recs = [lying.Rec(0, b"a", b"x"), lying.Rec(90_000, b"b", b"y"), lying.Rec(5, b"c", b"z")]
    records = b"".join(lying.encode(r, i) for i, r in enumerate(recs))
    lies_low = assemble_batch(records, 3, 2, TS0, TS0 + 7, attributes=codec)  # says TS0 + 7
    log = _log(tmp_path)
    for data in (lies_low, lies_low + v2_batch(1, ts=TS0)):  # fast path and general path
        before = log.log_end_offset
        info = log.append(data)
        (batch, *_rest) = read_all(log, before)  # every CRC validates
        assert batch.max_timestamp == TS0 + 90_000
        assert info.max_timestamp == TS0 + 90_000
    assert log.offset_for_timestamp(TS0 + 50_000) == (1, TS0 + 90_000)
    # a header already right is written as it came
    good = v2_batch(3, ts=TS0)
    log.append(good)
    assert read_all(log, log.log_end_offset - 3)[0].crc == next(iter(iter_batch_headers(good))).crc


def test_every_records_timestamp_is_checked_against_the_limits(tmp_path: Path) -> None:
    """With ``message.timestamp.before.max.ms`` a record far in the past is refused even when the
    batch's max timestamp is in range: INVALID_TIMESTAMP naming the record (Kafka's per-record
    check), not just the header's max."""
    clock = FakeClock(TS0)
    log = _log(tmp_path, clock, **{"message.timestamp.before.max.ms": 60_000})
    b = BatchBuilder()
    b.append(TS0, b"k", b"now")
    b.append(TS0 - 3_600_000, b"k", b"an hour ago")
    b.append(TS0 - 10, b"k", b"just now")
    with pytest.raises(InvalidTimestampError) as err:
        log.append(b.build())
    assert err.value.code == ErrorCode.INVALID_TIMESTAMP
    assert str(err.value).endswith("One or more records have been rejected due to invalid timestamp")
    assert err.value.record_errors == [
        (1, f"Timestamp {TS0 - 3_600_000} of message with offset 1 is out of range. "
            f"The timestamp should be within [{TS0 - 60_000}, {TS0 + (1 << 63) - 1}]")
    ]
    assert log.log_end_offset == 0


def test_keys_and_timestamps_are_refused_per_record_in_kafkas_order(tmp_path: Path) -> None:
    log = _log(tmp_path, FakeClock(TS0), **{"cleanup.policy": "compact", "message.timestamp.after.max.ms": 1000})
    b = BatchBuilder()
    b.append(TS0, None, b"keyless")
    b.append(TS0 + 10**7, b"k", b"future")
    b.append(TS0 + 10**7, None, b"keyless and future: the key error")
    with pytest.raises(InvalidTimestampError) as err:
        log.append(b.build())
    assert [(i, m.split(" ")[0]) for i, m in err.value.record_errors] == [(0, "Compacted"), (1, "Timestamp"), (2, "Compacted")]


def test_batches_of_different_magic_in_one_append_are_refused(tmp_path: Path) -> None:
    log = _log(tmp_path)
    with pytest.raises(InvalidRecordError, match="is not the same as the first batch's magic byte 2"):
        log.append(v2_batch(1) + legacy_batch(1, 1))
    assert log.log_end_offset == 0


def _legacy_message(magic: int, key: bytes | None, value: bytes | None, *, key_length: int | None = None,
                    attributes: int = 0, offset: int = 0) -> bytes:
    """One message-set entry whose key length may lie (its CRC made over the lie)."""
    entry = bytearray(legacy.encode_message(offset, magic, attributes, TS0 if magic else -1, key, value))
    if key_length is not None:
        at = 12 + 4 + 2 + (8 if magic else 0)
        entry[at : at + 4] = key_length.to_bytes(4, "big", signed=True)
        entry[12:16] = legacy.crc32(bytes(entry[16:])).to_bytes(4, "big")
    return bytes(entry)


@pytest.mark.parametrize("magic", [0, 1])
def test_legacy_messages_are_read_through(tmp_path: Path, magic: int) -> None:
    log = _log(tmp_path)
    # a key length that runs into the value, under a valid CRC
    with pytest.raises(InvalidRecordError):
        log.append(_legacy_message(magic, b"key", b"value", key_length=6))
    # a compressed wrapper whose inner message is compressed again: a record error
    inner = _legacy_message(magic, b"k", b"v", attributes=1) + _legacy_message(magic, b"k", b"v", offset=1)
    wrapper = legacy.encode_message(1, magic, 1, TS0 if magic else -1, None, compress(1, inner, magic=magic))
    with pytest.raises(InvalidRecordError) as err:
        log.append(wrapper)
    assert [i for i, _ in err.value.record_errors] == [0]
    # an inner message whose CRC is wrong: CORRUPT_MESSAGE
    bad = bytearray(_legacy_message(magic, b"k", b"v"))
    bad[-1] ^= 1
    wrapper = legacy.encode_message(0, magic, 1, TS0 if magic else -1, None, compress(1, bytes(bad), magic=magic))
    with pytest.raises(CorruptRecordError):
        log.append(wrapper)
    assert log.log_end_offset == 0
    # what a producer writes goes in, compressed or not, keyless or not
    log.append(legacy_batch(magic, 3, compression=Compression.GZIP))
    b = LegacyBatchBuilder(magic)
    b.append(TS0, None, None)
    b.append(TS0, b"", b"")
    log.append(b.build())
    assert log.log_end_offset == 5


@pytest.mark.parametrize("codec", list(Compression))
def test_what_producers_write_is_accepted(tmp_path: Path, codec: Compression) -> None:
    log = _log(tmp_path, **{"cleanup.policy": "compact,delete"})
    b = BatchBuilder(compression=codec, producer_id=7, producer_epoch=0, base_sequence=0)
    b.append(TS0, b"k", None)  # a tombstone
    b.append(TS0 - 5, b"", b"", [("h", None), ("h2", b"")])
    b.append(TS0 + 5, b"k" * 300, b"v" * 70_000, [("\u00e9", b"x" * 200)])
    log.append(b.build())
    log.append_marker(7, 0, True, 0)  # a control batch written by the broker itself
    assert log.log_end_offset == 4
    assert [len(x.records) for x in read_all(log)] == [3, 1]


def test_a_follower_takes_a_compacted_leaders_batches(tmp_path: Path) -> None:
    """Offset deltas with gaps (what compaction leaves) are a leader's data, not a producer's."""
    b = BatchBuilder(base_offset=10)
    b.append(TS0, b"a", b"x", offset_delta=0)
    b.append(TS0, b"b", b"y", offset_delta=4)
    data = b.build()
    log = _log(tmp_path)
    with pytest.raises(InvalidRecordError, match="Inconsistent batch offset range"):
        log.append(data)
    follower = _log(tmp_path / "f")
    follower.append_as_follower(data)
    assert [r.offset for r in read_all(follower)[0].records] == [10, 14]


def test_the_compiled_and_the_python_pass_are_both_used(tmp_path: Path) -> None:
    from odradek.records import check, speedups

    expected = "pure-python" if os.environ.get(speedups.PURE_PYTHON_ENV) else "compiled"
    assert speedups.implementation() == expected
    assert (check._compiled_check is not None) == (expected == "compiled")
