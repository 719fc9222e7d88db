"""The broker's ``fetch.max.bytes`` caps what one consumer fetch returns, whatever the request
asks (Kafka: min(request max_bytes, fetch.max.bytes)), ``fetch.response.max.records`` caps
about how many records it holds, and past ``fetch.response.target.bytes`` it takes no further
partition; a follower's fetch is capped by none of them."""

from __future__ import annotations

import time
from pathlib import Path

import confluent_kafka as ck
from confluent_kafka.admin import AdminClient, NewTopic

from odradek.protocol.messages.fetch import FetchRequest
from odradek.records import BatchBuilder, read_batches
from odradek.testing import BrokerProcess, WireClient, produce_request


def _fetch(partitions: int, partition_max: int) -> FetchRequest:
    return FetchRequest(
        max_wait_ms=0, min_bytes=0, max_bytes=100 * 1024 * 1024,
        topics=[FetchRequest.FetchTopic(topic="big", partitions=[
            FetchRequest.FetchPartition(partition=p, fetch_offset=0, partition_max_bytes=partition_max)
            for p in range(partitions)
        ])],
    )


def test_fetch_max_bytes_caps_a_consumer_fetch(tmp_path: Path) -> None:
    cap = 300_000
    with BrokerProcess(tmp_path / "data", overrides={"fetch.max.bytes": cap}) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})  # kept while its future is pending
        admin.create_topics([NewTopic("big", 3, 1)])["big"].result(30)
        p = ck.Producer({"bootstrap.servers": b.bootstrap, "batch.size": 20_000, "linger.ms": 5})
        for i in range(6000):
            p.produce("big", b"v" * 100, partition=i % 3)
        assert p.flush(30) == 0
        w = WireClient(b.host, b.port, "fetch-cap")
        try:
            resp = w.request(_fetch(3, 10 * 1024 * 1024), 4)
        finally:
            w.close()
        sizes = [len(bytes(part.records or b"")) for t in resp.responses for part in t.partitions]
        # every partition holds ~200 kB: uncapped, the 100 MB request would get them all (~600 kB)
        assert sum(sizes) <= cap and sizes[0] > 0, sizes


# -- fetch.response.max.records: about how many records one answer to a consumer holds ---------------


def _records_in(resp: object) -> list[int]:
    """Records per partition of a Fetch response (``resp.responses``), decoded."""
    counts = []
    for t in resp.responses:  # type: ignore[attr-defined]
        for part in t.partitions:
            counts.append(sum(len(b.records) for b in read_batches(bytes(part.records or b""), verify_crc=False)))
    return counts


def _produce(bootstrap: str, partitions: int, records: int, batch_size: int) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic("big", partitions, 1)])["big"].result(30)
    p = ck.Producer({"bootstrap.servers": bootstrap, "batch.size": batch_size, "linger.ms": 50})
    for i in range(records):
        p.produce("big", b"v" * 100, partition=i % partitions)
    assert p.flush(30) == 0


def test_a_consumer_fetch_holds_about_fetch_response_max_records(tmp_path: Path) -> None:
    """40,000 records over 4 partitions, asked for with 100 MB: the answer stops near the cap
    (librdkafka backs off 1 s whenever its queue reaches 100,000 records)."""
    cap = 6000
    with BrokerProcess(tmp_path / "data", overrides={"fetch.response.max.records": cap}) as b:
        _produce(b.bootstrap, 4, 40_000, 50_000)
        w = WireClient(b.host, b.port, "fetch-records")
        try:
            counts = _records_in(w.request(_fetch(4, 50 * 1024 * 1024), 11))
            offsets = [0] * 4
            seen = 0
            for _ in range(40):  # and every record still arrives, cap by cap
                req = _fetch(4, 50 * 1024 * 1024)
                for fp in req.topics[0].partitions:
                    fp.fetch_offset = offsets[fp.partition]
                got = _records_in(w.request(req, 11))
                assert sum(got) <= cap, got
                offsets = [o + n for o, n in zip(offsets, got, strict=True)]
                seen += sum(got)
                if seen == 40_000:
                    break
        finally:
            w.close()
    # uncapped, the first answer would hold all 40,000
    assert 0 < sum(counts) <= cap and counts[0] > 0, counts
    assert seen == 40_000 and offsets == [10_000] * 4, (seen, offsets)


def _produce_batches(w: WireClient, sizes: list[int]) -> None:
    """One acks=1 Produce per batch of exactly ``sizes[i]`` records to partition 0 of ``big`` (a
    client's batching would depend on timing)."""
    for n in sizes:
        b = BatchBuilder()
        for _ in range(n):
            b.append(int(time.time() * 1000), None, b"v" * 100, [])
        resp = w.request(produce_request("big", bytes(b.build()), timeout_ms=10_000), 9)
        assert resp.responses[0].partition_responses[0].error_code == 0, resp


def test_a_batch_larger_than_the_record_cap_comes_whole(tmp_path: Path) -> None:
    """A cap below one batch's record count never stops a consumer: the first batch goes whole."""
    sizes = [300, 500, 1, 200, 400]
    with BrokerProcess(tmp_path / "data", overrides={"fetch.response.max.records": 10}) as b:
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        admin.create_topics([NewTopic("big", 1, 1)])["big"].result(30)
        w = WireClient(b.host, b.port, "fetch-records")
        try:
            _produce_batches(w, sizes)
            offset = 0
            answers = []
            while offset < sum(sizes) and len(answers) < 100:
                req = _fetch(1, 50 * 1024 * 1024)
                req.topics[0].partitions[0].fetch_offset = offset
                (got,) = _records_in(w.request(req, 11))
                answers.append(got)
                offset += got
        finally:
            w.close()
    # each answer is the whole batch at its offset: not cut at the cap, not empty
    assert answers == sizes, answers


def test_no_record_cap_when_it_is_zero(tmp_path: Path) -> None:
    overrides = {"fetch.response.max.records": 0, "fetch.response.target.bytes": 0}
    with BrokerProcess(tmp_path / "data", overrides=overrides) as b:
        _produce(b.bootstrap, 2, 20_000, 50_000)
        w = WireClient(b.host, b.port, "fetch-records")
        try:
            counts = _records_in(w.request(_fetch(2, 50 * 1024 * 1024), 11))
        finally:
            w.close()
    assert counts == [10_000, 10_000]


# -- fetch.response.target.bytes: past it, an answer to a consumer takes no further partition --------


def test_an_answer_past_the_target_takes_no_further_partition(tmp_path: Path) -> None:
    """Four partitions of ~2 MB asked for with 10 MB each and no record cap: the first partition
    comes whole (it crosses the 1 MiB target), the others wait for the next fetch; partitions of
    ~300 kB all fit below the target and come together."""
    with BrokerProcess(tmp_path / "data", overrides={"fetch.response.max.records": 0}) as b:
        _produce(b.bootstrap, 4, 80_000, 50_000)
        w = WireClient(b.host, b.port, "fetch-target")
        try:
            first = _records_in(w.request(_fetch(4, 10 * 1024 * 1024), 11))
            req = _fetch(4, 10 * 1024 * 1024)
            req.topics[0].partitions[0].fetch_offset = 20_000  # partition 0 read: the next one's turn
            second = _records_in(w.request(req, 11))
            small = _fetch(4, 300_000)
            third = _records_in(w.request(small, 11))
        finally:
            w.close()
    assert first == [20_000, 0, 0, 0], first
    assert second[0] == 0 and second[1] == 20_000 and second[2:] == [0, 0], second
    # four answers of at most 300 kB: 1.2 MB in all, each partition started below the target
    assert all(n > 2000 for n in third), third
