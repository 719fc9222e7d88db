"""Executor side of the sink: produce the rows of Arrow record batches with the odradek Producer.

Columns as in Spark's Kafka sink: ``value`` (required; string or binary, may be null),
``key`` (string or binary), ``topic`` (string; the ``topic`` option overrides it),
``headers`` (``array<struct<key: string, value: binary>>``) and ``partition`` (int; null or
absent lets the producer's partitioner choose).  The producer is idempotent (its default) and
acks=all; a task fails if any record fails: everything is flushed and every delivery checked
before the task reports success.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["check_sink_schema", "transaction_marker_group", "write_batches", "write_batches_exactly_once"]

log = logging.getLogger(__name__)

_TEXT = ("string", "binary")


def _kind(dtype: Any) -> str:
    """Spark type name as Spark's Kafka sink checks it (``simpleString``)."""
    return str(dtype.simpleString())


def check_sink_schema(schema: Any, default_topic: str | None) -> None:
    """Spark's ``KafkaWriter.validateQuery`` for a ``StructType``: raises ``ValueError``."""
    fields = {f.name: f.dataType for f in schema.fields}
    if "topic" not in fields:
        if default_topic is None:
            raise ValueError(
                "topic option required when no 'topic' attribute is present. Use the topic option for setting a topic."
            )
    elif _kind(fields["topic"]) != "string":
        raise ValueError(f"topic attribute unsupported type {_kind(fields['topic'])}. topic must be a string")
    if "value" not in fields:
        raise ValueError("Required attribute 'value' not found")
    for name in ("key", "value"):
        if name in fields and _kind(fields[name]) not in _TEXT:
            raise ValueError(
                f"{name} attribute unsupported type {_kind(fields[name])}. {name} must be a string or binary"
            )
    if "headers" in fields and _kind(fields["headers"]) != "array<struct<key:string,value:binary>>":
        raise ValueError(
            f"headers attribute unsupported type {_kind(fields['headers'])}. headers must be a "
            "array<struct<key:string,value:binary>>"
        )
    if "partition" in fields and _kind(fields["partition"]) != "int":
        raise ValueError(
            f"partition attribute unsupported type {_kind(fields['partition'])}. partition must be a int"
        )


def _as_bytes(column: pa.Array | pa.ChunkedArray) -> list[Any]:
    t = column.type
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        column = pc.cast(column, pa.binary())
    return column.to_pylist()


def write_batches(
    batches: Iterable[pa.RecordBatch], config: Mapping[str, Any], default_topic: str | None
) -> int:
    """Produce every row; returns the number of records written.  Raises the first delivery
    error after flushing (so the task fails and Spark retries it)."""
    from odradek.client import Producer

    producer = Producer(dict(config))
    try:
        return _send_all(producer, batches, default_topic)
    finally:
        producer.close()


def write_batches_exactly_once(
    batches: Iterable[pa.RecordBatch],
    config: Mapping[str, Any],
    topic: str,
    prefix: str,
    batch_id: int,
    partition_id: int,
) -> int | None:
    """Produce the rows of one Spark partition of micro-batch ``batch_id`` in one transaction;
    the number of records written, or None when an earlier attempt already committed them.

    The transaction also commits a marker, the offset ``batch_id + 1`` of ``topic``-0 for the
    group ``<prefix>-<partition_id>`` (``send_offsets_to_transaction``), so the records and the
    marker become visible together or not at all.  A task (a retry, or the re-run of a batch
    after the query restarted from its checkpoint) first registers the transactional id
    ``<prefix>-<partition_id>``, which fences an older attempt and ends its transaction
    (committed if it had asked to commit, else aborted), then reads the marker with
    ``require_stable``: if it is past this batch, the rows are there already and are not
    written again.  Exactly once holds when a re-run batch gives each partition the same rows,
    as the odradek source does for the offsets in the checkpoint."""
    from odradek.client import ADMIN_DEFAULTS, Admin, Producer

    group = transaction_marker_group(prefix, partition_id)
    producer = Producer({**config, "transactional.id": group})
    try:
        producer.init_transactions()
        admin_config = {k: v for k, v in config.items() if k in ADMIN_DEFAULTS}
        with Admin(admin_config) as admin:
            marker = admin.list_group_offsets(group, [(topic, 0)], require_stable=True).get((topic, 0))
        if marker is not None and marker.offset > batch_id:
            log.info(
                "odradek sink: batch %d partition %d was committed by an earlier attempt (marker %d): not written again",
                batch_id,
                partition_id,
                marker.offset,
            )
            return None
        producer.begin_transaction()
        try:
            written = _send_all(producer, batches, topic)
            producer.send_offsets_to_transaction({(topic, 0): batch_id + 1}, group)
            producer.commit_transaction()
        except BaseException:
            with contextlib.suppress(Exception):  # fenced or timed out: the coordinator aborts it
                producer.abort_transaction()
            raise
        return written
    finally:
        producer.close()


def transaction_marker_group(prefix: str, partition_id: int) -> str:
    """The transactional id, and the group of the batch marker, of one Spark partition."""
    return f"{prefix}-{partition_id}"


def _send_all(producer: Any, batches: Iterable[pa.RecordBatch], default_topic: str | None) -> int:
    """Send every row, flush, and raise the first delivery error."""
    pending: list[Any] = []  # futures not known to be delivered yet

    def check(done_only: bool) -> None:
        keep = []
        for fut in pending:
            if done_only and not fut.done():
                keep.append(fut)
                continue
            error = fut.exception(0)
            if error is not None:
                raise error
        pending[:] = keep

    written = 0
    send = producer.send
    add = pending.append
    for batch in batches:
        n = batch.num_rows
        if n == 0:
            continue
        column = {name: batch.column(i) for i, name in enumerate(batch.schema.names)}
        values = _as_bytes(column["value"])
        keys = _as_bytes(column["key"]) if "key" in column else [None] * n
        topics: list[Any] | None = None
        if default_topic is None:
            topics = column["topic"].to_pylist()
            if None in topics:
                raise ValueError(
                    "Null topic present in the data. Use the topic option for setting a topic."
                )
        partitions = column["partition"].to_pylist() if "partition" in column else None
        headers = column["headers"].to_pylist() if "headers" in column else None
        if topics is None and partitions is None and headers is None:
            for k, v in zip(keys, values):
                add(send(default_topic, v, k))
        else:
            for i in range(n):
                hs = headers[i] if headers is not None else None
                add(
                    send(
                        default_topic if topics is None else topics[i],
                        values[i],
                        keys[i],
                        partition=None if partitions is None else partitions[i],
                        headers=None if not hs else [(h["key"], h["value"]) for h in hs],
                    )
                )
        written += n
        check(done_only=True)
    producer.flush()
    check(done_only=False)
    return written
