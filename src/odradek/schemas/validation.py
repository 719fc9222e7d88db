"""Broker-side schema validation as pure logic: subject names and the framing of records.

A topic with ``confluent.key.schema.validation`` / ``confluent.value.schema.validation`` (Confluent
Server's topic configs) takes only records whose key / value is framed the Confluent way (magic
byte 0, then a 4-byte big-endian schema id, then the payload) with an id registered under the
subject its ``confluent.{key,value}.subject.name.strategy`` names:

* ``TopicNameStrategy`` (the default): ``<topic>-key`` / ``<topic>-value``;
* ``RecordNameStrategy``: the record name of the schema the id names (an Avro named type's full
  name, a Protobuf schema's first message with its package, a JSON Schema's ``title``);
* ``TopicRecordNameStrategy``: ``<topic>-<record name>``.

The strategies are given by Confluent's class names (``io.confluent.kafka.serializers.subject.
TopicNameStrategy``...) or their last part.  A null key or value (a tombstone) is not checked, as
Confluent's serializers write null as null.  Only live (not soft-deleted) versions count.

:func:`allowed_ids` answers, from the registry's state, which ids a topic's keys or values may
carry; :func:`check_framing` reads every record of a produced batch against those ids, with no
registry at hand, so that a worker process can run it for a large batch.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from typing import Any

from odradek.records import DEFAULT_MAX_DECOMPRESSED_SIZE, iter_batch_headers, read_batches
from odradek.schemas._common import AVRO, JSON, PROTOBUF
from odradek.schemas.framing import schema_id as framed_id
from odradek.schemas.store import RegistryState, SchemaVersion

__all__ = [
    "MAX_RECORD_ERRORS",
    "TOPIC_NAME_STRATEGY",
    "allowed_ids",
    "check_framing",
    "record_count",
    "record_name",
    "strategy_of",
    "topic_subject",
]

_PREFIX = "io.confluent.kafka.serializers.subject."
#: the default strategy, as Confluent Server's topic configs name it
TOPIC_NAME_STRATEGY = _PREFIX + "TopicNameStrategy"
_SHORT = ("TopicNameStrategy", "RecordNameStrategy", "TopicRecordNameStrategy")
#: the record errors named in one refusal (the rest are counted in its message)
MAX_RECORD_ERRORS = 1000
#: a v0/v1 compressed wrapper does not say how many records it holds: its bytes bound them
_LEGACY_RECORD_BYTES = 16

_PROTO_PACKAGE = re.compile(r"^\s*package\s+([A-Za-z_][\w.]*)\s*;", re.MULTILINE)
_PROTO_MESSAGE = re.compile(r"^message\s+([A-Za-z_]\w*)", re.MULTILINE)


def strategy_of(value: str) -> str:
    """The short name (``TopicNameStrategy``...) of a strategy config value."""
    short = value.rsplit(".", 1)[-1]
    return short if short in _SHORT else "TopicNameStrategy"


def topic_subject(topic: str, is_key: bool) -> str:
    """The TopicNameStrategy subject of a topic's keys or values."""
    return f"{topic}-{'key' if is_key else 'value'}"


def record_name(schema_type: str, text: str) -> str | None:
    """The record name RecordNameStrategy takes from a schema (None: it has none)."""
    if schema_type == PROTOBUF:
        message = _PROTO_MESSAGE.search(text)
        if message is None:
            return None
        package = _PROTO_PACKAGE.search(text)
        return f"{package.group(1)}.{message.group(1)}" if package else message.group(1)
    try:
        node: Any = json.loads(text)
    except ValueError:
        return None
    if schema_type == JSON:
        title = node.get("title") if isinstance(node, dict) else None
        return title if isinstance(title, str) else None
    if schema_type != AVRO:
        return None
    if isinstance(node, str):
        return node  # a primitive (or a named type referenced): Avro's full name of it
    if not isinstance(node, dict):
        return None  # a union has no name
    kind, name = node.get("type"), node.get("name")
    if kind not in ("record", "error", "enum", "fixed"):
        return kind if isinstance(kind, str) else None
    if not isinstance(name, str):
        return None
    namespace = node.get("namespace")
    if "." in name or not isinstance(namespace, str) or not namespace:
        return name
    return f"{namespace}.{name}"


def _named(sv: SchemaVersion, topic: str | None, names: dict[tuple[str, str], str | None]) -> bool:
    key = (sv.schema_type, sv.schema)
    if key not in names:
        names[key] = record_name(sv.schema_type, sv.schema)
    name = names[key]
    if name is None:
        return False
    return sv.subject == (name if topic is None else f"{topic}-{name}")


def allowed_ids(
    state: RegistryState, strategy: str, topic: str, is_key: bool,
    names: dict[tuple[str, str], str | None] | None = None,
) -> frozenset[int]:
    """The schema ids a topic's keys (``is_key``) or values may carry under ``strategy``;
    ``names`` caches record names by (type, schema text) across calls."""
    short = strategy_of(strategy)
    if short == "TopicNameStrategy":
        return frozenset(sv.id for sv in state.versions(topic_subject(topic, is_key)))
    cache = names if names is not None else {}
    prefix = None if short == "RecordNameStrategy" else topic
    return frozenset(sv.id for sv in state.iter_versions() if not sv.deleted and _named(sv, prefix, cache))


def record_count(records: bytes | bytearray | memoryview) -> int:
    """How many records a produced buffer holds (a bound for v0/v1 compressed wrappers)."""
    count = 0
    for h in iter_batch_headers(records):
        count += h.record_count if h.record_count >= 0 else h.size // _LEGACY_RECORD_BYTES
    return count


def _problem(data: bytes | None, allowed: frozenset[int], what: str, subject: str) -> str | None:
    if data is None:
        return None
    schema_id = framed_id(data)
    if schema_id is None:
        return f"the record's {what} is not framed for the schema registry (magic byte 0 and a 4-byte schema id)"
    if schema_id in allowed:
        return None
    return f"the record's {what} has schema id {schema_id}, which is not registered under {subject}"


def check_framing(
    records: bytes | bytearray | memoryview,
    key_ids: frozenset[int] | None,
    value_ids: frozenset[int] | None,
    key_subject: str = "the key subject",
    value_subject: str = "the value subject",
    *,
    max_decompressed: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> tuple[list[tuple[int, str]], int]:
    """Every record's key (unless ``key_ids`` is None) and value (unless ``value_ids`` is None)
    read against the ids it may carry: the record errors (index of the record among the
    buffer's records, message), at most :data:`MAX_RECORD_ERRORS` of them, and how many there
    are in all.  A :class:`~odradek.records.RecordsError` for a buffer that cannot be read
    (DecompressionLimitExceeded for a batch that decompresses to more than ``max_decompressed``)."""
    errors: list[tuple[int, str]] = []
    total = 0
    index = 0
    for batch in read_batches(records, strict=True, max_decompressed_size=max_decompressed):
        if batch.is_control:
            continue
        for columns in batch.record_columns():
            keys: Iterable[bytes | None] = columns.keys
            values: Iterable[bytes | None] = columns.values
            for key, value in zip(keys, values, strict=True):
                problem = None
                if key_ids is not None:
                    problem = _problem(key, key_ids, "key", key_subject)
                if problem is None and value_ids is not None:
                    problem = _problem(value, value_ids, "value", value_subject)
                if problem is not None:
                    total += 1
                    if len(errors) < MAX_RECORD_ERRORS:
                        errors.append((index, problem))
                index += 1
    return errors, total
