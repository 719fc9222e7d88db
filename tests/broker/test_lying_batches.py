"""Batches whose records lie under a valid CRC (``tests/records/lying.py``: a valid batch with one
aspect of its records corrupted and its CRC made again) are refused by every reader of Odradek:

- the broker answers a real Produce with INVALID_RECORD (87) or CORRUPT_MESSAGE (2), stores
  nothing (the next good batch of that partition gets the offset the lie would have had) and
  goes on serving a good producer on another partition, on another connection;
- ``dump-log --verify`` finds the batch in a segment (file, position, base offset; exit status 1);
- Odradek's consumer raises CORRUPT_MESSAGE instead of handing out the batch's records, after
  the good records before it.

One broker serves the whole module; the property runs under the ``ci`` hypothesis profile.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from odradek.cli.dump_log import verify_paths
from odradek.client.consumer_simple import AsyncSimpleConsumer
from odradek.errors import ErrorCode, KafkaError
from odradek.protocol.messages.fetch import FetchResponse
from odradek.protocol.messages.list_offsets import ListOffsetsRequest
from odradek.records import BatchBuilder, iter_batch_headers, patch_base_offset
from odradek.testing import BrokerProcess, WireClient, produce_request

from ..records import lying

TOPIC = "lies"
PRODUCE_VERSION = 9


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path_factory.mktemp("lies"), log_level="INFO") as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic(TOPIC, 2, 1)], operation_timeout=10)[TOPIC].result(timeout=30)
        yield b


@pytest.fixture(scope="module")
def clients(broker: BrokerProcess) -> Iterator[tuple[WireClient, WireClient]]:
    liar, good = WireClient(broker.host, broker.port, "liar"), WireClient(broker.host, broker.port, "good")
    try:
        yield liar, good
    finally:
        liar.close()
        good.close()


def _good(n: int = 2, tag: bytes = b"g") -> bytes:
    b = BatchBuilder()
    for i in range(n):
        b.append(lying.TS0 + i, b"k%d" % i, tag + b"-%d" % i, [("h", b"x")])
    return b.build()


def _produce(client: WireClient, partition: int, batch: bytes) -> Any:
    resp = client.request(produce_request(TOPIC, {partition: batch}), PRODUCE_VERSION)
    return resp.responses[0].partition_responses[0]


def _end_offset(client: WireClient, partition: int) -> int:
    req = ListOffsetsRequest(
        replica_id=-1,
        topics=[ListOffsetsRequest.ListOffsetsTopic(
            name=TOPIC, partitions=[ListOffsetsRequest.ListOffsetsPartition(partition_index=partition, timestamp=-1)]
        )],
    )
    part = client.request(req, 5).topics[0].partitions[0]
    assert part.error_code == 0
    return int(part.offset)


def _stored(batch: bytes, base: int) -> bytes:
    buf = bytearray(batch)
    patch_base_offset(buf, 0, base)
    return bytes(buf)


def _consume(data: bytes, offset: int) -> list[Any]:
    consumer = AsyncSimpleConsumer(bootstrap_servers="127.0.0.1:1")
    pd = FetchResponse.PartitionData(partition_index=0, high_watermark=1 << 30, records=data)
    fetched = consumer._decode(TOPIC, 0, offset, pd)
    return [*fetched, fetched.next_offset]


@pytest.mark.parametrize("lie_kind", lying.KINDS)
@given(data=st.data())
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow], deadline=None)
def test_every_reader_refuses_a_lying_batch(
    clients: tuple[WireClient, WireClient], tmp_path_factory: pytest.TempPathFactory, lie_kind: str, data: st.DataObject
) -> None:
    kind, lie = data.draw(lying.lies(kinds=(lie_kind,)))
    liar, good = clients
    # the broker: Kafka's code, nothing stored, the next good batch gets the offset the lie would have had
    end = _end_offset(liar, 0)
    part = _produce(liar, 0, lie)
    assert part.error_code in (ErrorCode.INVALID_RECORD, ErrorCode.CORRUPT_MESSAGE), (kind, part)
    assert part.base_offset == -1
    assert _end_offset(liar, 0) == end
    assert _produce(liar, 0, _good()).base_offset == end
    # a good producer on another partition, on its own connection, is served all along
    other_end = _end_offset(good, 1)
    ok = _produce(good, 1, _good(3))
    assert (ok.error_code, ok.base_offset) == (0, other_end)

    # dump-log --verify: the lie written into a segment between good batches
    part_dir = tmp_path_factory.mktemp("segment") / "lies-0"
    part_dir.mkdir()
    segment = part_dir / "00000000000000000000.log"
    first = _stored(_good(), 0)
    after = 2 + next(iter(iter_batch_headers(lie))).last_offset_delta + 1
    segment.write_bytes(first + _stored(lie, 2) + _stored(_good(), after))
    out = io.StringIO()
    assert verify_paths([str(part_dir)], out=out) == 1, (kind, out.getvalue())
    assert f"{segment}: position {len(first)} offset 2 (after offset 1)" in out.getvalue(), out.getvalue()

    # Odradek's consumer: the good records before the lie, then CORRUPT_MESSAGE, never the lie's records
    fetched = first + _stored(lie, 2)
    before = _consume(fetched, 0)
    assert [r.offset for r in before[:-1]] == [0, 1] and before[-1] == 2
    with pytest.raises(KafkaError) as err:
        _consume(fetched, 2)
    assert err.value.code == ErrorCode.CORRUPT_MESSAGE, kind


def test_a_lie_on_disk_reaches_odradeks_consumer_as_an_error(tmp_path: Path) -> None:
    """A log holding a lie (written before the broker read records, or by hand): the broker serves
    the batch (its CRC is right), and Odradek's consumer hands out the good records before it and
    then raises CORRUPT_MESSAGE, instead of two records at one offset or a silent stop."""
    from odradek.client.consumer_simple import SimpleConsumer

    data_dir = tmp_path
    with BrokerProcess(data_dir) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})  # kept while its future is pending
        admin.create_topics([NewTopic("disk", 1, 1)])["disk"].result(30)
        w = WireClient(b.host, b.port)
        assert _produce_to(w, "disk", _good(3)).error_code == 0
        w.close()
    segment = next((data_dir / "disk-0").glob("*.log"))
    # two records, both with offset delta 0: a consumer reading it blindly hands out two records at offset 3
    lie = lying.batch([lying.Rec(0, b"a", b"x"), lying.Rec(1, b"b", b"y", od=0)])
    segment.write_bytes(segment.read_bytes() + _stored(lie, 3))
    with BrokerProcess(data_dir) as b, SimpleConsumer(bootstrap_servers=b.bootstrap) as consumer:
        got = consumer.fetch("disk", 0, 0)
        assert [r.offset for r in got] == [0, 1, 2] and got.next_offset == 3
        with pytest.raises(KafkaError) as err:
            consumer.fetch("disk", 0, 3)
        assert err.value.code == ErrorCode.CORRUPT_MESSAGE
        assert "offsets do not increase" in str(err.value)


def _produce_to(client: WireClient, topic: str, batch: bytes) -> Any:
    return client.request(produce_request(topic, batch), PRODUCE_VERSION).responses[0].partition_responses[0]
