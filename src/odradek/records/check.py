"""Checking the records of a batch against its header, as Kafka's LogValidator does on append.

A batch's CRC says its bytes are what the producer wrote, not that they make sense: a buggy or
hostile client can declare two records and hold three, give a record a length its fields do not
fill, or repeat an offset, all under a valid CRC.  Kafka iterates every record of a produced
batch (``DefaultRecordBatch`` / ``DefaultRecord``) and refuses such batches; so does the broker
here, with :func:`check_records`: one pass over the records that reads every field's framing
and keeps only a few numbers (no object per record).  The compiled pass
(:mod:`odradek.records._speedups`) and the pure-Python one below give identical results for any
input; ``ODRADEK_PURE_PYTHON=1`` selects the latter (see :mod:`odradek.records.speedups`).

What is checked, in this order for each record (the first problem found is reported):

* its length varint is there (else the batch declared more records than it holds) and its
  length is not negative nor beyond the bytes left;
* attributes, timestamp delta (varlong), offset delta, key length, key, value length, value,
  header count and each header's key and value lie within the record; varints are at most 5
  bytes (10 for the timestamp delta); key and value lengths are ``-1`` (null) or more, header
  counts and header key lengths not negative, header value lengths ``-1`` or more;
* the fields fill the record's length exactly;
* offset deltas are ``0, 1, ..., count - 1`` (``sequential``: what a producer writes) or
  strictly increasing up to the batch's last offset delta (data a log holds after compaction);
* the base timestamp plus the timestamp delta fits an int64;

and after the last declared record, nothing is left.  :func:`check_records` returns the first
problem (``problem``, the index of the ``record``, its byte ``position``, the numbers ``value`` and
``extra``; without a problem, the record count and the end position) and, when there is none, what the broker needs next: the records' largest timestamp,
their smallest (records with timestamp -1 left out), and how many have a null key.
:func:`problem_text` words a problem as Kafka's exceptions do where Kafka has one.

Negative key and value lengths other than -1 are refused here although Kafka's reader takes
them for null: librdkafka's consumer fails on such a record and stops at its batch.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from . import speedups, v2
from .errors import RecordsError

__all__ = [
    "NO_MIN_TIMESTAMP",
    "PROBLEMS",
    "RecordsCheck",
    "check_records",
    "check_records_python",
    "problem_text",
]

Buffer = bytes | bytearray | memoryview

P_OK = 0
P_EOF = 1
P_VARINT = 2
P_RECORD_SIZE = 3
P_STRUCTURE = 4
P_KEY_LENGTH = 5
P_VALUE_LENGTH = 6
P_HEADER_COUNT = 7
P_HEADER_COUNT_LARGE = 8
P_HEADER_KEY_LENGTH = 9
P_HEADER_VALUE_LENGTH = 10
P_SIZE_MISMATCH = 11
P_OFFSET_DELTA = 12
P_TIMESTAMP = 13
P_TRAILING = 14

#: the problem codes by name (the same numbers as the compiled pass's)
PROBLEMS = {
    P_OK: "ok",
    P_EOF: "premature end",
    P_VARINT: "varint too long",
    P_RECORD_SIZE: "record size",
    P_STRUCTURE: "record structure",
    P_KEY_LENGTH: "key length",
    P_VALUE_LENGTH: "value length",
    P_HEADER_COUNT: "header count",
    P_HEADER_COUNT_LARGE: "header count too large",
    P_HEADER_KEY_LENGTH: "header key length",
    P_HEADER_VALUE_LENGTH: "header value length",
    P_SIZE_MISMATCH: "record size mismatch",
    P_OFFSET_DELTA: "offset delta",
    P_TIMESTAMP: "timestamp out of range",
    P_TRAILING: "bytes after the last record",
}

_INT64_MIN = -(1 << 63)
_INT64_MAX = (1 << 63) - 1
#: ``min_timestamp`` when no record has a timestamp other than -1
NO_MIN_TIMESTAMP = _INT64_MAX


class RecordsCheck(NamedTuple):
    """What :func:`check_records` found (see the module docstring)."""

    problem: int
    record: int
    position: int
    value: int
    extra: int
    max_timestamp: int
    min_timestamp: int
    keyless: int

    @property
    def ok(self) -> bool:
        return self.problem == P_OK


_compiled = speedups.compiled
_compiled_check = None if _compiled is None else getattr(_compiled, "check_records", None)


def check_records(
    buf: Buffer,
    start: int,
    stop: int,
    count: int,
    base_timestamp: int,
    last_offset_delta: int,
    *,
    sequential: bool,
) -> RecordsCheck:
    """Check the ``count`` records of ``buf[start:stop]`` (a v2 batch's uncompressed records)."""
    if _compiled_check is not None:
        return RecordsCheck._make(
            _compiled_check(buf, start, stop, count, base_timestamp, last_offset_delta, sequential)
        )
    return check_records_python(buf, start, stop, count, base_timestamp, last_offset_delta, sequential=sequential)


class _Problem(Exception):
    """Raised inside the pure-Python pass: (problem, value, extra)."""


def _varint(buf: Buffer, pos: int, end: int, max_bytes: int) -> tuple[int, int]:
    """A zig-zag varint at ``pos`` that must end before ``end``: ``(value, next position)``;
    ``(-1 sentinel)`` errors as ``_Problem`` codes: -1 the data ends, -2 longer than allowed."""
    if pos < end:
        b = buf[pos]
        if b < 0x80:
            return (b >> 1) ^ -(b & 1), pos + 1
    raw = 0
    shift = 0
    for _ in range(max_bytes):
        if pos >= end:
            raise _Problem(-1)
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if b < 0x80:
            raw &= 0xFFFFFFFF if max_bytes == 5 else 0xFFFFFFFFFFFFFFFF
            return (raw >> 1) ^ -(raw & 1), pos
        shift += 7
    raise _Problem(-2)


def check_records_python(
    buf: Buffer,
    start: int,
    stop: int,
    count: int,
    base_timestamp: int,
    last_offset_delta: int,
    *,
    sequential: bool,
) -> RecordsCheck:
    """:func:`check_records` in Python (what runs without the compiled module).

    Sound batches go through the decoder of :mod:`odradek.records.v2`, which reads runs of
    records of one layout column-wise with no Python code per record and checks as much as this
    pass does and more; whatever it does not take (or that breaks a rule checked here only) is
    read again record by record, which finds the problem."""
    if start < 0 or stop > len(buf) or start > stop:
        raise ValueError("bad range")
    sound = _summary(buf, start, stop, count, base_timestamp, last_offset_delta, sequential)
    if sound is not None:
        return sound
    return _check_each(buf, start, stop, count, base_timestamp, last_offset_delta, sequential)


def _summary(
    buf: Buffer, start: int, stop: int, count: int, base_ts: int, lod: int, sequential: bool
) -> RecordsCheck | None:
    """The result for records the decoder reads without complaint (None for anything else)."""
    try:
        segments = v2._decode_segments(buf, count, 0, base_ts, None, start, stop, lod)
    except (RecordsError, ValueError, IndexError):
        return None
    expect = 0
    high = -1
    low = NO_MIN_TIMESTAMP
    keyless = 0
    for s in segments:
        offsets: Iterable[int]
        if isinstance(s, list):
            n = len(s)
            offsets = [r[0] for r in s]
            stamps = [r[1] for r in s]
            keyless += sum(r[2] is None for r in s)
            in_order = offsets == list(range(expect, expect + n))
        else:
            n = s.num_records
            offsets = s.offsets
            stamps = list(s.timestamps)
            keyless += n if s.run is not None and s.run.key_length < 0 else 0
            in_order = offsets == range(expect, expect + n) if isinstance(offsets, range) else False
        if sequential and not in_order:
            return None
        expect += n
        if stamps:
            high = max(high, max(stamps))
            low = min(low, min(filter(_not_minus_one, stamps), default=NO_MIN_TIMESTAMP))
    if high > _INT64_MAX or low < _INT64_MIN:
        return None
    return RecordsCheck(P_OK, count, stop, 0, 0, high, low, keyless)


def _not_minus_one(ts: int) -> bool:
    return ts != -1


def _check_each(
    buf: Buffer, start: int, stop: int, count: int, base_timestamp: int, last_offset_delta: int, sequential: bool
) -> RecordsCheck:
    """The pass record by record: every problem found exactly where the compiled pass finds it."""
    pos = start
    max_ts = -1
    min_ts = NO_MIN_TIMESTAMP
    keyless = 0
    prev = -1
    i = 0
    at = start
    varint = _varint
    while i < count:
        at = pos
        # the length: in the records, or the batch declared more records than it holds
        try:
            length, body = varint(buf, pos, stop, 5)
        except _Problem as exc:
            return RecordsCheck(P_VARINT if exc.args[0] == -2 else P_EOF, i, at, 0, 0, max_ts, min_ts, keyless)
        if length < 0 or length > stop - body:
            return RecordsCheck(P_RECORD_SIZE, i, at, length, stop - body, max_ts, min_ts, keyless)
        end = body + length
        try:
            if body >= end:
                raise _Problem(P_STRUCTURE, 0, 0)
            p = body + 1  # attributes: unused
            try:
                tsd, p = varint(buf, p, end, 10)
                od, p = varint(buf, p, end, 5)
                kl, p = varint(buf, p, end, 5)
                if kl < -1:
                    raise _Problem(P_KEY_LENGTH, kl, 0)
                if kl >= 0:
                    if kl > end - p:
                        raise _Problem(P_STRUCTURE, 0, 0)
                    p += kl
                vl, p = varint(buf, p, end, 5)
                if vl < -1:
                    raise _Problem(P_VALUE_LENGTH, vl, 0)
                if vl >= 0:
                    if vl > end - p:
                        raise _Problem(P_STRUCTURE, 0, 0)
                    p += vl
                hc, p = varint(buf, p, end, 5)
                if hc < 0:
                    raise _Problem(P_HEADER_COUNT, hc, 0)
                if hc > end - p:
                    raise _Problem(P_HEADER_COUNT_LARGE, hc, end - p)
                for _ in range(hc):
                    hkl, p = varint(buf, p, end, 5)
                    if hkl < 0:
                        raise _Problem(P_HEADER_KEY_LENGTH, hkl, 0)
                    if hkl > end - p:
                        raise _Problem(P_STRUCTURE, 0, 0)
                    p += hkl
                    hvl, p = varint(buf, p, end, 5)
                    if hvl < -1:
                        raise _Problem(P_HEADER_VALUE_LENGTH, hvl, 0)
                    if hvl >= 0:
                        if hvl > end - p:
                            raise _Problem(P_STRUCTURE, 0, 0)
                        p += hvl
            except _Problem as exc:
                if len(exc.args) == 1:  # a varint inside the record
                    raise _Problem(P_VARINT if exc.args[0] == -2 else P_STRUCTURE, 0, 0) from None
                raise
            if p != end:
                raise _Problem(P_SIZE_MISMATCH, length, p - body)
            if od != i if sequential else (od <= prev or od > last_offset_delta):
                raise _Problem(P_OFFSET_DELTA, od, i if sequential else prev)
            ts = base_timestamp + tsd
            if not _INT64_MIN <= ts <= _INT64_MAX:
                raise _Problem(P_TIMESTAMP, tsd, 0)
        except _Problem as exc:
            problem, value, extra = exc.args
            return RecordsCheck(problem, i, at, value, extra, max_ts, min_ts, keyless)
        prev = od
        if ts > max_ts:
            max_ts = ts
        if ts != -1 and ts < min_ts:
            min_ts = ts
        if kl < 0:
            keyless += 1
        pos = end
        i += 1
    if pos != stop:
        return RecordsCheck(P_TRAILING, i, pos, stop - pos, 0, max_ts, min_ts, keyless)
    return RecordsCheck(P_OK, i, pos, 0, 0, max_ts, min_ts, keyless)


def problem_text(check: RecordsCheck, count: int) -> str:
    """``check``'s problem in words (Kafka's exception messages where Kafka has one)."""
    p, i, value, extra = check.problem, check.record, check.value, check.extra
    where = f"record {i} of {count}"
    if p == P_EOF:
        return (
            f"Incorrect declared batch size, premature EOF reached: the batch declares {count} "
            f"records and holds {i}"
        )
    if p == P_VARINT:
        return f"Found invalid record structure: a varint longer than its type allows in {where}"
    if p == P_RECORD_SIZE:
        return (
            f"Invalid record size: expected {value} bytes in record payload, but instead the buffer has "
            f"only {extra} remaining bytes ({where})"
        )
    if p == P_STRUCTURE:
        return f"Found invalid record structure: a field of {where} runs past the end of the record"
    if p == P_KEY_LENGTH:
        return f"Found invalid record structure: key length {value} in {where}"
    if p == P_VALUE_LENGTH:
        return f"Found invalid record structure: value length {value} in {where}"
    if p == P_HEADER_COUNT:
        return f"Found invalid number of record headers {value} ({where})"
    if p == P_HEADER_COUNT_LARGE:
        return (
            f"Found invalid number of record headers. {value} is larger than the remaining size of the "
            f"buffer ({extra} bytes, {where})"
        )
    if p == P_HEADER_KEY_LENGTH:
        return f"Invalid negative header key size {value} ({where})"
    if p == P_HEADER_VALUE_LENGTH:
        return f"Found invalid record structure: header value length {value} in {where}"
    if p == P_SIZE_MISMATCH:
        return (
            f"Invalid record size: expected to read {value} bytes in record payload, but instead read "
            f"{extra} ({where})"
        )
    if p == P_OFFSET_DELTA:
        return (
            f"Invalid offset delta {value} of {where}, after {extra}: a batch's record offsets must "
            f"increase from its base offset up to its last offset"
        )
    if p == P_TIMESTAMP:
        return f"Invalid timestamp delta {value} of {where}: the record's timestamp is beyond the int64 range"
    if p == P_TRAILING:
        return (
            f"Incorrect declared batch size, records still remaining in file: {value} bytes after the last "
            f"of {count} records"
        )
    return f"record problem {p} in {where}"
