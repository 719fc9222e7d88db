"""Compacted topics refuse keyless records.  The keys are counted by the one pass that reads every
record against its batch header (``odradek.records.check``, no object per record); only a batch
being refused is decoded, to name its keyless records, so the verdict and its per-record errors
are the same for every batch layout and codec."""

from __future__ import annotations

import pytest

from odradek.records import BatchBuilder, Compression
from odradek.records.v2 import assemble_batch
from odradek.storage.errors import InvalidRecordError
from odradek.storage.validator import check_keys

from ..records import lying

TS0 = 1_700_000_000_000


def _batch(keys: list[bytes | None], *, compression: Compression = Compression.NONE, spread_ms: int = 1) -> bytes:
    b = BatchBuilder(compression=compression)
    for i, key in enumerate(keys):
        # timestamps far apart make multi-byte varlong deltas; long keys multi-byte lengths
        b.append(TS0 + i * spread_ms, key, b"v" * (i * 70))
    return b.build()


@pytest.mark.parametrize("spread_ms", [1, 10**12])
def test_every_record_keyed_passes(spread_ms: int) -> None:
    check_keys(_batch([b"k", b"x" * 300, b"", b"y" * 70_000], spread_ms=spread_ms), "t", 0)


@pytest.mark.parametrize("compression", [Compression.NONE, Compression.GZIP])
@pytest.mark.parametrize("spread_ms", [1, 10**12])
def test_the_keyless_records_are_named(compression: Compression, spread_ms: int) -> None:
    data = _batch([b"a", b"b" * 200, None, b"d", None], compression=compression, spread_ms=spread_ms)
    with pytest.raises(InvalidRecordError) as err:
        check_keys(data, "t", 3)
    assert [i for i, _ in err.value.record_errors] == [2, 4]


def test_a_record_length_past_the_batch_is_invalid_not_keyed() -> None:
    """A valid CRC over a record whose length runs past the batch: INVALID_RECORD (Kafka's
    DefaultRecord.readFrom), not a verdict on its keys."""
    recs = [lying.Rec(0, b"a", b"x"), lying.Rec(1, b"b", b"y", length_delta=60)]
    records = b"".join(lying.encode(r, i) for i, r in enumerate(recs))
    data = assemble_batch(records, 2, 1, TS0, TS0 + 1)
    with pytest.raises(InvalidRecordError, match="Invalid record size") as err:
        check_keys(data, "t", 0)
    assert err.value.record_errors == []
