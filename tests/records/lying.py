"""Lying v2 batches for the record-validation tests: a valid batch with one aspect of its records
corrupted, its CRC (and compression) made again, so that only a check of the records against
the batch header can tell (imported by name by the tests of the records, the storage, dump-log,
the broker and the consumer).

Every lie here is one that any reader going through the records must find, whatever the records
(see each kind): the tests assert that the broker, ``dump-log --verify`` and Odradek's consumer
all refuse every one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import strategies as st

from odradek.records import Compression, encode_varint, encode_varlong
from odradek.records.v2 import assemble_batch

TS0 = 1_700_000_000_000
INT64_MAX = (1 << 63) - 1

#: every kind of lie (see :func:`lie`)
KINDS = (
    "count_more",  # the header declares more records than the batch holds
    "count_fewer",  # ... fewer (bytes are left after the last declared record)
    "trailing",  # bytes after the last record
    "truncated",  # the last record cut short
    "record_length",  # a record's length says more or less than its fields hold
    "header_count",  # a record's header count says more or fewer headers than it holds
    "offset_delta",  # a record's offset delta is not its index (two records at one offset, ...)
    "key_length",  # a key length below -1
    "value_length",  # a value length below -1
    "header_key_length",  # a negative header key length
    "header_value_length",  # a header value length below -1
    "varint_off_record",  # the last varint of a record runs past the record's end
    "varint_off_end",  # a record length varint runs off the end of the records
    "varint_too_long",  # a timestamp delta of 11 bytes
    "timestamp_overflow",  # base timestamp + delta beyond int64
)


@dataclass
class Rec:
    """One record's fields, with the lies to write instead of the true values (None: the truth)."""

    tsd: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[bytes, bytes | None]] = field(default_factory=list)
    od: int | None = None  # offset delta to write (None: the record's index)
    length_delta: int = 0
    key_length: int | None = None
    value_length: int | None = None
    header_count: int | None = None
    header_key_length: int | None = None  # for the first header
    header_value_length: int | None = None  # for the first header
    raw_tsd: bytes | None = None  # the timestamp delta's bytes as written
    last_byte: int | None = None  # replaces the record's last byte


def _bytes_field(data: bytes | None, lie: int | None) -> bytes:
    if lie is not None:
        return encode_varint(lie) + (b"" if data is None or lie < 0 else data)
    return b"\x01" if data is None else encode_varint(len(data)) + data


def encode(rec: Rec, index: int) -> bytes:
    parts = [b"\x00", rec.raw_tsd if rec.raw_tsd is not None else encode_varlong(rec.tsd)]
    parts.append(encode_varint(index if rec.od is None else rec.od))
    parts.append(_bytes_field(rec.key, rec.key_length))
    parts.append(_bytes_field(rec.value, rec.value_length))
    parts.append(encode_varint(len(rec.headers) if rec.header_count is None else rec.header_count))
    for j, (hk, hv) in enumerate(rec.headers):
        parts.append(_bytes_field(hk, rec.header_key_length if j == 0 else None))
        parts.append(_bytes_field(hv, rec.header_value_length if j == 0 else None))
    body = bytearray(b"".join(parts))
    if rec.last_byte is not None:
        body[-1] = rec.last_byte
    return encode_varint(len(body) + rec.length_delta) + bytes(body)


def batch(
    recs: list[Rec],
    *,
    count: int | None = None,
    codec: int = 0,
    base_offset: int = 0,
    tail: bytes = b"",
    cut: int = 0,
    producer_id: int = -1,
    base_sequence: int = -1,
) -> bytes:
    """A v2 batch of ``recs`` (offset deltas 0..n-1 unless a record lies), ``count`` declared
    (last offset delta count - 1), ``tail`` after the records, the last ``cut`` bytes cut off."""
    records = b"".join(encode(r, i) for i, r in enumerate(recs)) + tail
    if cut:
        records = records[:-cut]
    n = len(recs) if count is None else count
    stamps = [TS0 + r.tsd for r in recs if r.raw_tsd is None and TS0 + r.tsd <= INT64_MAX]
    return assemble_batch(
        records, n, max(n - 1, 0), TS0, max(stamps, default=TS0), attributes=codec,
        base_offset=base_offset, producer_id=producer_id, producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=base_sequence,
    )


keys = st.none() | st.binary(min_size=0, max_size=40)
header_st = st.tuples(st.binary(min_size=1, max_size=8), st.none() | st.binary(max_size=20))
rec_st = st.builds(
    Rec,
    tsd=st.integers(0, 5000),
    key=keys,
    value=keys,
    headers=st.lists(header_st, max_size=2),
)
codecs = st.sampled_from([Compression.NONE, Compression.NONE, Compression.GZIP, Compression.SNAPPY,
                          Compression.LZ4, Compression.ZSTD])


@st.composite
def lies(draw: st.DrawFn, kinds: tuple[str, ...] = KINDS, codec: st.SearchStrategy[int] = codecs) -> tuple[str, bytes]:
    """``(kind, batch)``: a lying batch of one of ``kinds``."""
    kind = draw(st.sampled_from(kinds))
    recs = draw(st.lists(rec_st, min_size=1, max_size=12))
    n = len(recs)
    z = int(draw(codec))
    i = draw(st.integers(0, n - 1))
    r = recs[i]
    kw: dict = {"codec": z}
    if kind == "count_more":
        kw["count"] = n + draw(st.integers(1, 3))
    elif kind == "count_fewer":
        if n == 1:
            recs.append(draw(rec_st))
            n = 2
        kw["count"] = draw(st.integers(1, n - 1))
    elif kind == "trailing":
        kw["tail"] = draw(st.binary(min_size=1, max_size=8))
    elif kind == "truncated":
        kw["cut"] = draw(st.integers(1, len(encode(recs[-1], n - 1))))
    elif kind == "record_length":
        r.length_delta = draw(st.integers(-5, 5).filter(bool))
    elif kind == "header_count":
        true = len(r.headers)
        r.header_count = draw(st.integers(-3, true + 3).filter(lambda c: c != true))
    elif kind == "offset_delta":
        r.od = draw(st.integers(-3, n + 3).filter(lambda d: d != i))
    elif kind == "key_length":
        r.key_length = draw(st.integers(-100, -2))
    elif kind == "value_length":
        r.value_length = draw(st.integers(-100, -2))
    elif kind == "header_key_length":
        r.headers = r.headers or [(b"h", b"v")]
        r.header_key_length = draw(st.integers(-100, -1))
    elif kind == "header_value_length":
        r.headers = r.headers or [(b"h", b"v")]
        r.header_value_length = draw(st.integers(-100, -2))
    elif kind == "varint_off_record":
        last = recs[-1]
        last.headers = []  # its last byte is the header count, 0: made a varint that goes on
        last.last_byte = 0x80 | draw(st.integers(0, 0x7F))
    elif kind == "varint_off_end":
        kw["count"] = n + 1
        kw["tail"] = bytes([0x80 | draw(st.integers(0, 0x7F))]) * draw(st.integers(1, 4))
    elif kind == "varint_too_long":
        r.raw_tsd = b"\xff" * 10 + b"\x01"
    elif kind == "timestamp_overflow":
        r.tsd = INT64_MAX - TS0 + draw(st.integers(1, 1 << 20))
    return kind, batch(recs, **kw)
