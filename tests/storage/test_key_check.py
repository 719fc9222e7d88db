"""Compacted topics refuse keyless records. One uncompressed v2 batch is checked from its record
headers alone (the coordinators' writes, keyed produce); whatever that reading cannot vouch for
is decoded record by record, so the verdict and its per-record errors are the same either way."""

from __future__ import annotations

import pytest

from odradek.records import BatchBuilder, Compression
from odradek.storage.errors import CorruptRecordError, InvalidRecordError
from odradek.storage.validator import _all_keyed_v2, check_keys

TS0 = 1_700_000_000_000


def _batch(keys: list[bytes | None], *, compression: Compression = Compression.NONE, spread_ms: int = 1) -> bytes:
    b = BatchBuilder(compression=compression)
    for i, key in enumerate(keys):
        # timestamps far apart make multi-byte varlong deltas; long keys multi-byte lengths
        b.append(TS0 + i * spread_ms, key, b"v" * (i * 70))
    return b.build()


@pytest.mark.parametrize("spread_ms", [1, 10**12])
def test_every_record_keyed_passes(spread_ms: int) -> None:
    data = _batch([b"k", b"x" * 300, b"", b"y" * 70_000], spread_ms=spread_ms)
    assert _all_keyed_v2(data)  # read from the headers, no decoding
    check_keys(data, "t", 0)


@pytest.mark.parametrize("compression", [Compression.NONE, Compression.GZIP])
@pytest.mark.parametrize("spread_ms", [1, 10**12])
def test_the_keyless_records_are_named(compression: Compression, spread_ms: int) -> None:
    data = _batch([b"a", b"b" * 200, None, b"d", None], compression=compression, spread_ms=spread_ms)
    assert not _all_keyed_v2(data)
    with pytest.raises(InvalidRecordError) as err:
        check_keys(data, "t", 3)
    assert [i for i, _ in err.value.record_errors] == [2, 4]


def test_a_record_length_past_the_batch_is_corrupt_not_keyed() -> None:
    data = bytearray(_batch([b"a", b"b"]))
    data[61] = 0x7E  # the first record's length varint: 63 bytes, beyond the batch
    assert not _all_keyed_v2(bytes(data))
    with pytest.raises(CorruptRecordError):
        check_keys(bytes(data), "t", 0)
