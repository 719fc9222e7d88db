"""Executor side of the sink: produce the rows of Arrow record batches with the odradek Producer.

Columns as in Spark's Kafka sink: ``value`` (required; string or binary, may be null),
``key`` (string or binary), ``topic`` (string; the ``topic`` option overrides it),
``headers`` (``array<struct<key: string, value: binary>>``) and ``partition`` (int; null or
absent lets the producer's partitioner choose).  The producer is idempotent (its default) and
acks=all; a task fails if any record fails: everything is flushed and every delivery checked
before the task reports success.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["check_sink_schema", "write_batches"]

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
    try:
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
                    add(send(default_topic, v, k))  # type: ignore[arg-type]
            else:
                for i in range(n):
                    hs = headers[i] if headers is not None else None
                    add(
                        send(
                            default_topic if topics is None else topics[i],  # type: ignore[arg-type]
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
    finally:
        producer.close()
    return written
