"""The produce fast path's one-call check of a batch (``validator.check_produced``): the compiled
one (its CRC-32C too) and the pure-Python one give the same answer for any batch, damaged or not,
and any config; and whatever they accept, the general checks accept with the same max timestamp
(what they do not accept, the general checks refuse or take another way: compressed batches)."""

from __future__ import annotations

import os

import crc32c
import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from odradek.records import Compression, speedups
from odradek.records.v2 import BatchBuilder, assemble_batch
from odradek.storage import (
    CorruptRecordError,
    InvalidRecordError,
    InvalidTimestampError,
    LogConfig,
    RecordBatchTooLargeError,
    validator,
)

from ..records import lying

PROFILE = settings(max_examples=300, deadline=None)
needs_compiled = pytest.mark.skipif(speedups.compiled is None, reason="the compiled module is turned off")
_I64 = (1 << 63) - 1

_LIMIT = st.sampled_from([0, 1, 1000, 10**6, 10**10, 10**10, _I64, _I64, _I64 - 5]) | st.integers(0, _I64)
limits_st = st.none() | st.tuples(_LIMIT, _LIMIT)
now_st = st.sampled_from([lying.TS0, lying.TS0, lying.TS0 + 2500, lying.TS0 - 10**7, 0, -1, _I64, -_I64 - 1]) | st.integers(
    -_I64 - 1, _I64
)


def _records(draw: st.DrawFn) -> bytes:
    """A batch a producer could write (any codec, attributes, producer), or one of lying.py's."""
    if draw(st.integers(0, 3)) == 0:
        return draw(lying.lies())[1]
    b = BatchBuilder(
        compression=draw(st.sampled_from([Compression.NONE] * 5 + [Compression.GZIP])),
        producer_id=draw(st.sampled_from([-1, 7])),
        producer_epoch=0,
        base_sequence=draw(st.sampled_from([-1, 0])),
        log_append_time=draw(st.sampled_from([None, None, lying.TS0 + 7])),
    )
    for tsd, k, v in draw(
        st.lists(st.tuples(st.sampled_from([0, 1, -1, 5000, -(10**8)]) | st.integers(-(10**4), 10**4) | st.integers(-(10**9), 10**9),
                           lying.keys, lying.keys), min_size=1, max_size=6)
    ):
        b.append(-1 if tsd == -1 and draw(st.booleans()) else lying.TS0 + tsd, k, v)
    return b.build()


@st.composite
def cases(draw: st.DrawFn) -> tuple[bytes, tuple[int, bool, bool, int, int | None, int | None]]:
    data = bytearray(_records(draw))
    damage = draw(st.sampled_from(["none", "none", "none", "bytes", "header", "crc-fixed"]))
    if damage in ("bytes", "crc-fixed"):
        for _ in range(draw(st.integers(1, 3))):
            at = draw(st.integers(16, len(data) - 1))
            data[at] = draw(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFF, data[at] ^ 0x01, data[at] ^ 0x20]))
    elif damage == "header":  # attributes, last offset delta, count, timestamps: then a valid CRC
        field = draw(st.sampled_from([(21, 2), (23, 4), (27, 8), (35, 8), (57, 4), (8, 4)]))
        at, size = field
        data[at : at + size] = draw(st.binary(min_size=size, max_size=size))
        damage = "crc-fixed"
    if damage == "crc-fixed":
        data[17:21] = crc32c.crc32c(bytes(data[21:])).to_bytes(4, "big")
    if draw(st.integers(0, 7)) == 0:
        data = data[: draw(st.integers(0, len(data)))] if draw(st.booleans()) else data + b"\x00"
    limits = draw(limits_st)
    before, after = limits if limits is not None else (None, None)
    args = (
        draw(st.sampled_from([len(data), len(data) - 1, 1 << 20, 1 << 20, 0])),
        draw(st.booleans()),
        draw(st.booleans()),
        draw(now_st),
        before,
        after,
    )
    return bytes(data), args


@needs_compiled
@given(cases())
@PROFILE
def test_the_compiled_and_the_python_check_agree(case: tuple) -> None:
    data, args = case
    assert speedups.compiled is not None
    with pytest.MonkeyPatch.context() as mp:  # the Python check's record pass pure Python too
        mp.setattr(validator, "_check", validator._check_python)
        py = validator._check_produced_python(data, *args)
    event("passes" if py is not None else "declines")
    assert validator._check_produced_python(data, *args) == py  # with the compiled record pass
    for buf in (data, bytearray(data), memoryview(data)):
        assert speedups.compiled.check_produced(buf, *args) == py


@given(cases())
@PROFILE
def test_what_the_check_accepts_the_general_checks_accept_alike(case: tuple) -> None:
    data, (max_size, compact, create_time, now, before, after) = case
    if len(data) < 61:
        return
    config = LogConfig.from_dict({
        "max.message.bytes": max(max_size, 0), "cleanup.policy": "compact" if compact else "delete",
        "message.timestamp.type": "CreateTime" if create_time else "LogAppendTime",
        **({} if before is None else {
            "message.timestamp.before.max.ms": before, "message.timestamp.after.max.ms": after,
        }),
    })
    if not -(1 << 63) <= now <= _I64:
        return
    fields = validator.V2_HEADER.unpack_from(data, 0)
    limits = validator.timestamp_limits(config)
    quick = validator.check_produced(
        data, max(max_size, 0), compact, create_time, now, *(limits if limits is not None else (None, None))
    )
    try:
        given_header = validator.check_one_v2(data, fields, config, "t", 0)
        general = validator.validate_records(data, given_header, config, "t", 0, now)
    except (CorruptRecordError, InvalidRecordError, InvalidTimestampError, RecordBatchTooLargeError):
        general = None
    except Exception:
        if quick is None:  # bytes the general checks cannot even read as the batch its header says
            return
        raise
    event(f"fast check {'passes' if quick is not None else 'declines'}, general {'passes' if general is not None else 'refuses'}")
    if quick is not None:
        assert general == quick
    elif general is not None:  # only what the fast check does not take: compressed, or not one v2 batch
        assert data[22] & 0x07 or data[16] != 2 or len(data) != int.from_bytes(data[8:12], "big", signed=True) + 12


@needs_compiled
def test_the_compiled_crc32c_is_the_crc32c_packages() -> None:
    assert speedups.compiled is not None
    crc = speedups.compiled.crc32c  # type: ignore[attr-defined]
    # around the three-stream blocks (3 x 512 bytes) and their ends, and long runs of them
    for n in [*range(70), 255, 1000, 1533, 1535, 1536, 1537, 3072, 3075, 4097, 4608, 65536, 100_003]:
        data = os.urandom(n + 3)
        for off in range(4):
            assert crc(data[off:]) == crc32c.crc32c(data[off:]), (n, off)
            assert crc(data[off:], 0xDEADBEEF) == crc32c.crc32c(data[off:], 0xDEADBEEF), (n, off)


def test_a_batch_a_producer_writes_passes_with_its_records_max_timestamp() -> None:
    b = BatchBuilder()
    b.append(lying.TS0 + 5, None, b"v" * 100)
    b.append(lying.TS0 + 2, b"k", b"v")
    data = b.build()
    for check in (validator._check_produced_python, validator.check_produced):
        assert check(data, 1 << 20, False, True, lying.TS0, None, None) == lying.TS0 + 5
        assert check(data, 1 << 20, False, True, lying.TS0, 10, 10) == lying.TS0 + 5
        assert check(data, 1 << 20, False, True, lying.TS0, 10, 4) is None  # one record is 5 ms ahead
        assert check(data, 1 << 20, True, True, lying.TS0, None, None) is None  # compacted: a keyless record
        assert check(data, len(data) - 1, False, True, lying.TS0, None, None) is None
        assert check(data, 1 << 20, False, False, lying.TS0, 10, 4) == validator.V2_HEADER.unpack_from(data, 0)[8]
        assert check(bytes(data[:-1]), 1 << 20, False, True, lying.TS0, None, None) is None
        assert check(data, 1 << 20, False, True, 1 << 70, None, None) is None  # beyond int64: the general checks
    raw = assemble_batch(b"", 0, 0, lying.TS0, lying.TS0)
    assert validator.check_produced(raw, 1 << 20, False, True, lying.TS0, None, None) is None
