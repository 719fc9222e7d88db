"""Helpers shared by the ``odradek.records`` tests (imported by name, not a conftest)."""

from __future__ import annotations

import os
from typing import Any

from hypothesis import settings
from hypothesis import strategies as st
from kafka.record import MemoryRecords, MemoryRecordsBuilder

import odradek.records as odr

#: Bounded Hypothesis settings for this directory (see conftest.py).
PROFILE = settings.get_profile(os.environ.get("ODRADEK_TEST_RECORDS_HYPOTHESIS", "records-ci"))

TS0 = 1_700_000_000_000

RecordInput = tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]


def kafka_build(
    magic: int,
    codec: int,
    records: list[RecordInput],
    *,
    offset: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    transactional: bool = False,
) -> bytes:
    """Build a batch with kafka-python's MemoryRecordsBuilder."""
    builder = MemoryRecordsBuilder(
        magic,
        codec,
        1 << 30,
        offset=offset,
        transactional=transactional,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
    )
    for ts, key, value, headers in records:
        assert builder.append(ts, key, value, headers if magic == 2 else None) is not None
    builder.close()
    return bytes(builder.buffer())


def kafka_read(data: bytes) -> list[tuple[Any, ...]]:
    """``(offset, timestamp, key, value, headers)`` of every record, read by kafka-python."""
    out = []
    for batch in MemoryRecords(data):
        assert batch.validate_crc()
        for r in batch:
            out.append((r.offset, r.timestamp, r.key, r.value, list(r.headers)))
    return out


def odr_read(data: bytes, **kwargs: Any) -> list[tuple[Any, ...]]:
    """The same, read by Odradek."""
    return [tuple(r) for batch in odr.read_batches(data, **kwargs) for r in batch.records]


def odr_build_v2(records: list[RecordInput], **kwargs: Any) -> bytes:
    builder = odr.BatchBuilder(**kwargs)
    for ts, key, value, headers in records:
        builder.append(ts, key, value, headers)
    return builder.build()


def odr_build_legacy(magic: int, records: list[RecordInput], **kwargs: Any) -> bytes:
    builder = odr.LegacyBatchBuilder(magic, **kwargs)
    for ts, key, value, _headers in records:
        builder.append(ts, key, value)
    return builder.build()


# Strategies ---------------------------------------------------------------------

blobs = st.one_of(st.none(), st.binary(max_size=300))
header_lists = st.lists(
    st.tuples(st.text(max_size=12), st.one_of(st.none(), st.binary(max_size=40))), max_size=3
)


@st.composite
def record_lists(draw: st.DrawFn, *, headers: bool = True, max_size: int = 40) -> list[RecordInput]:
    n = draw(st.integers(min_value=1, max_value=max_size))
    base = draw(st.integers(min_value=0, max_value=2**41))
    deltas = draw(
        st.lists(st.one_of(st.integers(-100, 100), st.integers(-(2**33), 2**33)), min_size=n, max_size=n)
    )
    out: list[RecordInput] = []
    for delta in deltas:
        out.append(
            (
                max(0, base + delta),
                draw(blobs),
                draw(blobs),
                draw(header_lists) if headers else [],
            )
        )
    return out
