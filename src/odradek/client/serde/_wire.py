"""Confluent's wire format (a 0 magic byte, the schema id as 4 big-endian bytes, the payload;
Protobuf's payload starts with its message-index array), the subject name strategies and the
exceptions of the serializers.  Pure: no HTTP here."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from odradek.errors import OdradekError

__all__ = [
    "MAGIC_BYTE",
    "SchemaRegistryError",
    "SerializationError",
    "SubjectNameStrategy",
    "decode_message_indexes",
    "encode_message_indexes",
    "frame_header",
    "read_header",
    "record_name_strategy",
    "topic_name_strategy",
    "topic_record_name_strategy",
]

MAGIC_BYTE = 0
_HEADER = 5
#: the longest message-index array read from a frame (a nesting deeper than any real .proto)
MAX_MESSAGE_INDEXES = 100


class SerializationError(OdradekError, ValueError):
    """A value could not be serialized, or bytes could not be deserialized: not framed the
    Confluent way (wrong magic byte, too short), framed with a schema id the registry does not
    know, a payload that does not decode with its writer schema, or a value its schema refuses.
    The underlying error, if any, is ``__cause__``."""


class SchemaRegistryError(OdradekError):
    """The schema registry answered with an error (Confluent's error body): ``http_status`` (404,
    409, 422, ...), ``error_code`` (40401, 40403, 409, 42201, ...; -1 when the body had none)."""

    def __init__(self, http_status: int, error_code: int, message: str) -> None:
        super().__init__(f"{message} (HTTP {http_status}, error code {error_code})")
        self.http_status = http_status
        self.error_code = error_code
        self.message = message

    def __reduce__(self) -> tuple[type[SchemaRegistryError], tuple[int, int, str]]:
        return (type(self), (self.http_status, self.error_code, self.message))


#: ``strategy(topic, is_key, record_name) -> subject``; ``record_name`` is the schema's full name
#: (Avro), message full name (Protobuf) or ``title`` (JSON Schema), None when it has none
SubjectNameStrategy = Callable[[str, bool, "str | None"], str]


def topic_name_strategy(topic: str, is_key: bool, record_name: str | None) -> str:
    """Confluent's default: ``<topic>-key`` / ``<topic>-value``."""
    return f"{topic}-key" if is_key else f"{topic}-value"


def record_name_strategy(topic: str, is_key: bool, record_name: str | None) -> str:
    """The record's full name, whatever the topic (one schema across topics)."""
    if not record_name:
        raise SerializationError("RecordNameStrategy needs a named schema (an Avro record, a Protobuf message, "
                                 "a JSON Schema with a title)")
    return record_name


def topic_record_name_strategy(topic: str, is_key: bool, record_name: str | None) -> str:
    """``<topic>-<record full name>`` (several record types in one topic)."""
    return f"{topic}-{record_name_strategy(topic, is_key, record_name)}"


STRATEGIES: dict[str, SubjectNameStrategy] = {
    "TopicNameStrategy": topic_name_strategy,
    "RecordNameStrategy": record_name_strategy,
    "TopicRecordNameStrategy": topic_record_name_strategy,
}


def frame_header(schema_id: int) -> bytes:
    """The 5 bytes before a payload written with schema ``schema_id``."""
    if not 0 <= schema_id < 2**31:
        raise SerializationError(f"schema id {schema_id} does not fit the wire format")
    return b"\x00" + schema_id.to_bytes(4, "big")


def read_header(data: bytes | bytearray | memoryview) -> int:
    """The schema id of framed bytes; SerializationError when they are not framed."""
    if len(data) < _HEADER:
        raise SerializationError(
            f"{len(data)} bytes are too short for Confluent's framing (a magic byte and a 4-byte schema id)")
    if data[0] != MAGIC_BYTE:
        raise SerializationError(f"unknown magic byte {data[0]} (expected {MAGIC_BYTE}): the bytes are not framed "
                                 "with a schema registry id")
    return int.from_bytes(data[1:5], "big")


def _zigzag(value: int) -> bytes:
    n = (value << 1) ^ (value >> 63)
    out = bytearray()
    while n & ~0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def encode_message_indexes(indexes: Sequence[int]) -> bytes:
    """Protobuf's message-index array as Confluent writes it: the count then each index, zigzag
    varints; the first message of the file (``[0]``) is the single byte 0."""
    if list(indexes) == [0]:
        return b"\x00"
    return _zigzag(len(indexes)) + b"".join(_zigzag(i) for i in indexes)


def _read_zigzag(data: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    shift = 0
    n = 0
    while True:
        if pos >= len(data):
            raise SerializationError("the Protobuf message-index array is truncated")
        b = data[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > 63:
            raise SerializationError("a varint of the Protobuf message-index array is longer than 10 bytes")
    return (n >> 1) ^ -(n & 1), pos


def decode_message_indexes(data: bytes | bytearray | memoryview, pos: int = _HEADER) -> tuple[list[int], int]:
    """The message-index array at ``pos`` and the position after it."""
    count, pos = _read_zigzag(data, pos)
    if count == 0:
        return [0], pos
    if count < 0 or count > MAX_MESSAGE_INDEXES:
        raise SerializationError(f"the Protobuf message-index array claims {count} indexes")
    out = []
    for _ in range(count):
        i, pos = _read_zigzag(data, pos)
        if i < 0:
            raise SerializationError(f"negative Protobuf message index {i}")
        out.append(i)
    return out, pos
