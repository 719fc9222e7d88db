"""Offset planning and option rules, as Spark's Kafka source documents them (no Spark needed).

Expected values of the range splitting come from Spark's ``KafkaOffsetRangeCalculatorSuite``
and ``KafkaMicroBatchStream.rateLimit``; messages from ``KafkaSourceProvider``.
"""

from __future__ import annotations

import logging

import pytest

pytest.importorskip("pyarrow")

from odradek.spark._fetch import DataLossError
from odradek.spark._offsets import (
    OffsetRange,
    from_json_offsets,
    plan_ranges,
    rate_limit,
    split_ranges,
    to_json_offsets,
)
from odradek.spark._options import parse_sink_options, parse_source_options

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "t"}


def _opts(streaming: bool = True, **extra: str):
    return parse_source_options({**BASE, **extra}, streaming=streaming)


def R(tp: str, start: int, end: int) -> OffsetRange:
    topic, _, p = tp.partition("-")
    return OffsetRange(topic, int(p), start, end)


# -- minPartitions / maxRecordsPerPartition ------------------------------------------------------


def test_one_range_per_partition_and_empty_ranges_dropped() -> None:
    assert split_ranges([R("t-1", 1, 2), R("t-2", 5, 5)]) == [R("t-1", 1, 2)]
    assert split_ranges([R("t-1", 1, 2)], min_partitions=1) == [R("t-1", 1, 2)]


def test_min_partitions_splits_one_partition() -> None:
    assert split_ranges([R("t-1", 1, 5)], min_partitions=4) == [R("t-1", 1, 2), R("t-1", 2, 3), R("t-1", 3, 4), R("t-1", 4, 5)]
    assert split_ranges([R("t-1", 1, 5)], min_partitions=3) == [R("t-1", 1, 2), R("t-1", 2, 3), R("t-1", 3, 5)]


def test_min_partitions_splits_skewed_partitions_in_proportion() -> None:
    got = split_ranges([R("t-1", 1, 500), R("t-2", 1, 21)], min_partitions=4)
    assert got == [R("t-1", 1, 125), R("t-1", 125, 250), R("t-1", 250, 375), R("t-1", 375, 500), R("t-2", 1, 21)]


def test_min_partitions_below_the_partition_count_changes_nothing() -> None:
    ranges = [R("t-1", 1, 5), R("t-2", 1, 5), R("t-3", 1, 5)]
    assert split_ranges(ranges, min_partitions=3) == ranges


def test_max_records_per_partition() -> None:
    got = split_ranges([R("t-1", 0, 10), R("t-2", 0, 3)], max_records_per_partition=4)
    assert got == [R("t-1", 0, 3), R("t-1", 3, 6), R("t-1", 6, 10), R("t-2", 0, 3)]


# -- maxOffsetsPerTrigger --------------------------------------------------------------------------


def test_rate_limit_is_proportional_and_never_starves_small_partitions() -> None:
    a, b, c = ("t", 0), ("t", 1), ("t", 2)
    assert rate_limit(10, {a: 0, b: 0}, {a: 100, b: 0}) == {a: 10, b: 0}
    assert rate_limit(10, {a: 0, b: 0}, {a: 1000, b: 1}) == {a: 9, b: 1}
    assert rate_limit(100, {a: 10, b: 0, c: 7}, {a: 20, b: 30, c: 7}) == {a: 20, b: 30, c: 7}  # less than the limit
    got = rate_limit(90, {a: 0, b: 0, c: 0}, {a: 300, b: 300, c: 300})
    assert got == {a: 30, b: 30, c: 30}


# -- micro-batch planning ----------------------------------------------------------------------------


def test_plan_is_a_pure_function_of_the_offsets() -> None:
    opts = _opts()
    start = {("t", 0): 5, ("t", 1): -1}
    end = {("t", 0): 10, ("t", 1): 40, ("t", 2): 3}  # t-2 is new: read from its beginning
    plan = plan_ranges(start, end, opts)
    assert plan == [R("t-0", 5, 10), R("t-2", 0, 3)]  # t-1 started at "latest": nothing before the end
    assert plan_ranges(start, end, opts) == plan


def test_plan_reports_gone_partitions_and_offsets_that_went_back(caplog: pytest.LogCaptureFixture) -> None:
    with pytest.raises(DataLossError, match="t-1 are gone"):
        plan_ranges({("t", 0): 1, ("t", 1): 1}, {("t", 0): 2}, _opts())
    with pytest.raises(DataLossError, match="offset was changed from 9 to 4"):
        plan_ranges({("t", 0): 9}, {("t", 0): 4}, _opts())
    lenient = _opts(failOnDataLoss="false")
    with caplog.at_level(logging.WARNING):
        assert plan_ranges({("t", 0): 9, ("t", 1): 1}, {("t", 0): 4}, lenient) == []
    assert "failOnDataLoss" in caplog.text


def test_plan_splits_micro_batches_with_min_partitions() -> None:
    plan = plan_ranges({("t", 0): 0}, {("t", 0): 100}, _opts(minPartitions="4"))
    assert [r.size for r in plan] == [25, 25, 25, 25]


def test_offsets_json_round_trip_is_canonical() -> None:
    offsets = {("b", 10): 1, ("a", 2): 7, ("b", 2): 3}
    assert to_json_offsets(offsets) == {"a": {"2": 7}, "b": {"2": 3, "10": 1}}
    assert list(to_json_offsets(offsets)["b"]) == ["2", "10"]
    assert from_json_offsets(to_json_offsets(offsets)) == offsets


# -- options -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "streaming", "message"),
    [
        ({"kafka.bootstrap.servers": "x"}, True, "One of the following options must be specified"),
        ({**BASE, "assign": '{"t":[0]}'}, True, "Only one of the following options"),
        ({"subscribe": "t"}, True, "kafka.bootstrap.servers' must be specified"),
        ({**BASE, "subscribe": " , "}, True, "No topics to subscribe to"),
        ({"kafka.bootstrap.servers": "x", "assign": "t"}, True, "No topicpartitions to assign"),
        ({"kafka.bootstrap.servers": "x", "assign": '{"t":"0"}'}, True, "Expected e.g."),
        ({**BASE, "startingOffsets": "latest"}, False, "starting offset can't be latest for batch queries"),
        ({**BASE, "startingOffsets": '{"t":{"0":-1}}'}, False, "startingOffsets for t-0 can't be latest"),
        ({**BASE, "endingOffsets": "earliest"}, False, "ending offset can't be earliest"),
        ({**BASE, "endingOffsets": '{"t":{"0":-2}}'}, False, "ending offset for t-0 can't be earliest"),
        ({**BASE, "endingOffsets": "latest"}, True, "ending offset not valid in streaming queries"),
        ({**BASE, "endingTimestamp": "5"}, True, "ending timestamp not valid in streaming queries"),
        ({**BASE, "startingOffsets": "{bad"}, True, "Expected e.g."),
        ({**BASE, "startingTimestamp": "soon"}, True, "Expected a single long value"),
        ({**BASE, "kafka.auto.offset.reset": "earliest"}, True, "'auto.offset.reset' is not supported"),
        ({**BASE, "kafka.value.deserializer": "x"}, True, "'value.deserializer' is not supported"),
        ({**BASE, "kafka.enable.auto.commit": "true"}, True, "'enable.auto.commit' is not supported"),
        ({**BASE, "minPartitions": "0"}, True, "minPartitions must be positive"),
        ({**BASE, "maxOffsetsPerTrigger": "-3"}, True, "maxOffsetsPerTrigger must be positive"),
        ({**BASE, "failOnDataLoss": "maybe"}, True, "failOnDataLoss"),
        (
            {**BASE, "startingOffsets": '{"t":{"0":9}}', "endingOffsets": '{"t":{"0":3}}'},
            False,
            "starting offset \\(9\\) is greater than the ending offset \\(3\\)",
        ),
    ],
)
def test_invalid_options_are_rejected_with_spark_messages(options: dict, streaming: bool, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_source_options(options, streaming=streaming)


def test_option_names_are_case_insensitive_and_kafka_prefix_goes_to_the_client() -> None:
    opts = parse_source_options(
        {
            "KAFKA.BOOTSTRAP.SERVERS": "h:1",
            "SubscribePattern": "a.*",
            "kafka.isolation.level": "read_committed",
            "kafka.max.partition.fetch.bytes": "65536",
            "includeHeaders": "TRUE",
            "maxOffsetsPerTrigger": "7",
        },
        streaming=True,
    )
    assert opts.strategy == "subscribepattern" and opts.matches("abc") and not opts.matches("xabc")
    assert opts.consumer_config == {"bootstrap.servers": "h:1", "isolation.level": "read_committed", "max.partition.fetch.bytes": 65536}
    assert opts.admin_config == {"bootstrap.servers": "h:1"}
    assert opts.include_headers and opts.max_offsets_per_trigger == 7 and opts.fetch_bytes == 65536
    assert opts.starting.kind == "latest"  # the streaming default
    assert parse_source_options({"bootstrap.servers": "h:1", "subscribe": "t"}, streaming=False).starting.kind == "earliest"


def test_sink_options() -> None:
    sink = parse_sink_options({"kafka.bootstrap.servers": "h:1", "topic": " out ", "kafka.linger.ms": "20"})
    assert sink.topic == "out" and sink.producer_config == {"bootstrap.servers": "h:1", "linger.ms": 20}
    with pytest.raises(ValueError, match=r"'key\.serializer' is not supported"):
        parse_sink_options({"kafka.bootstrap.servers": "h:1", "kafka.key.serializer": "x"})
    with pytest.raises(ValueError, match="must be specified for configuring Kafka producer"):
        parse_sink_options({"topic": "t"})
