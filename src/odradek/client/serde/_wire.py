"""Confluent's wire format (a 0 magic byte, the schema id as 4 big-endian bytes, the payload;
Protobuf's payload starts with its message-index array: read and written by
:mod:`odradek.schemas.framing`, its errors raised here as SerializationError), the subject name
strategies and the exceptions of the serializers.  Pure: no HTTP here."""

from __future__ import annotations

from collections.abc import Callable

from odradek.errors import OdradekError
from odradek.schemas import framing
from odradek.schemas.framing import HEADER_BYTES, MAGIC_BYTE, FramingError, encode_message_indexes

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
    try:
        return framing.frame_header(schema_id)
    except FramingError as exc:
        raise SerializationError(str(exc)) from None


def read_header(data: bytes | bytearray | memoryview) -> int:
    """The schema id of framed bytes; SerializationError when they are not framed."""
    try:
        return framing.read_header(data)
    except FramingError as exc:
        raise SerializationError(str(exc)) from None


def decode_message_indexes(data: bytes | bytearray | memoryview, pos: int = HEADER_BYTES) -> tuple[list[int], int]:
    """The message-index array at ``pos`` and the position after it; SerializationError when it
    is truncated, too long or negative."""
    try:
        return framing.decode_message_indexes(data, pos)
    except FramingError as exc:
        raise SerializationError(str(exc)) from None
