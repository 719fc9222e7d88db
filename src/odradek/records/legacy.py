"""Message sets with magic 0 and 1 (Kafka before 0.11).

A message set is a plain sequence of entries, with no count in front::

    offset        int64
    message_size  int32     bytes of the message that follows
    message:
      crc         uint32    CRC-32 (IEEE) of every following byte of the message
      magic       int8      0 or 1
      attributes  int8      bits 0-2 codec (0 none, 1 gzip, 2 snappy, 3 lz4);
                            bit 3 timestamp type (magic 1: 0 create, 1 log append)
      timestamp   int64     magic 1 only
      key         int32 length (-1 for null) + bytes
      value       int32 length (-1 for null) + bytes

The smallest message is 14 bytes with magic 0 and 22 with magic 1.

Compression wraps a whole message set: the *wrapper* (outer) message carries the
codec in its attributes, usually a null key, and as its value the compressed
bytes of the inner message set; inner messages are never compressed again. The
wrapper's offset is that of the last inner message. With magic 0 inner messages
carry absolute offsets. With magic 1 they carry offsets relative to the batch,
normally 0..n-1, and the absolute offset of inner message *i* is
``wrapper_offset - last_inner_offset + inner_offset_i``; if that base would be
negative (a producer's batch that a broker has not yet assigned offsets to) the
inner offsets are reported as written, as Kafka does. For a log-append-time
wrapper (magic 1, bit 3 set) the wrapper's timestamp applies to every inner
message.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from ._crc import crc32
from ._types import NO_TIMESTAMP, Record
from .compression import (
    DEFAULT_MAX_DECOMPRESSED_SIZE,
    Compression,
    codec_from_attributes,
    compress,
    decompress,
)
from .errors import CorruptRecordError, CrcMismatchError, TruncatedBatchError, UnsupportedMagicError

__all__ = [
    "MESSAGE_OVERHEAD_V0",
    "MESSAGE_OVERHEAD_V1",
    "LegacyBatchBuilder",
    "LegacyMessage",
    "decode_wrapper",
    "encode_message",
    "parse_message_set",
    "unwrap",
]

ENTRY_V0 = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
ENTRY_V1 = struct.Struct(">qiIbbq")  # ... timestamp
LOG_OVERHEAD = 12
CRC_OFFSET = 12  # within an entry
MAGIC_OFFSET = 16
ATTRIBUTES_OFFSET = 17
TIMESTAMP_OFFSET = 18
MESSAGE_OVERHEAD_V0 = 14  # crc, magic, attributes, key length, value length
MESSAGE_OVERHEAD_V1 = 22  # ... timestamp
ATTR_TIMESTAMP_TYPE = 0x08
_INT32 = struct.Struct(">i")
_OFFSET_SIZE_CRC = struct.Struct(">qiI")


#: ``(offset, magic, attributes, timestamp, key, value)`` of one parsed message.
LegacyMessage = tuple[int, int, int, int, bytes | None, bytes | None]


def _parse_one(
    buf: bytes | bytearray | memoryview, pos: int, end: int, verify_crc: bool
) -> tuple[int, int, int, int, bytes | None, bytes | None, int]:
    """Parse the complete entry at ``pos``; return its fields and the next position."""
    if end - pos < LOG_OVERHEAD + MESSAGE_OVERHEAD_V0:
        raise TruncatedBatchError("message set ends inside a message header")
    offset, size, crc, magic, attributes = ENTRY_V0.unpack_from(buf, pos)
    if magic not in (0, 1):
        raise UnsupportedMagicError(f"message magic {magic} inside a v0/v1 message set")
    overhead = MESSAGE_OVERHEAD_V0 if magic == 0 else MESSAGE_OVERHEAD_V1
    if size < overhead:
        raise CorruptRecordError(f"message size {size} is below the minimum {overhead}")
    msg_end = pos + LOG_OVERHEAD + size
    if msg_end > end:
        raise TruncatedBatchError("message set ends inside a message")
    if verify_crc:
        computed = crc32(buf[pos + MAGIC_OFFSET : msg_end])
        if computed != crc:
            raise CrcMismatchError(
                f"message CRC mismatch at offset {offset}: stored {crc:#010x}, computed {computed:#010x}",
                stored=crc,
                computed=computed,
            )
    if magic == 1:
        (timestamp,) = struct.unpack_from(">q", buf, pos + TIMESTAMP_OFFSET)
        p = pos + 26
    else:
        timestamp = NO_TIMESTAMP
        p = pos + 18
    (kl,) = _INT32.unpack_from(buf, p)
    p += 4
    key: bytes | None = None
    if kl >= 0:
        if p + kl + 4 > msg_end:
            raise CorruptRecordError("message key runs past the end of the message")
        key = bytes(buf[p : p + kl])
        p += kl
    elif kl != -1:
        raise CorruptRecordError(f"invalid message key length {kl}")
    (vl,) = _INT32.unpack_from(buf, p)
    p += 4
    value: bytes | None = None
    if vl >= 0:
        value = bytes(buf[p : p + vl])
        p += vl
    elif vl != -1:
        raise CorruptRecordError(f"invalid message value length {vl}")
    if p != msg_end:
        raise CorruptRecordError("message key and value sizes do not match the message size")
    return offset, magic, attributes, timestamp, key, value, msg_end


def parse_message_set(data: bytes, *, verify_crc: bool = True) -> list[LegacyMessage]:
    """Parse every message of a complete (e.g. decompressed inner) message set."""
    out: list[LegacyMessage] = []
    pos = 0
    end = len(data)
    while pos < end:
        offset, magic, attributes, timestamp, key, value, pos = _parse_one(data, pos, end, verify_crc)
        out.append((offset, magic, attributes, timestamp, key, value))
    return out


def unwrap(
    buf: bytes | bytearray | memoryview,
    pos: int,
    end: int,
    *,
    verify_crc: bool = True,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> tuple[LegacyMessage, list[LegacyMessage]]:
    """The top-level message at ``buf[pos:end]`` and its inner messages.

    For an uncompressed message the inner list is empty. The top-level CRC is
    left to the caller; inner CRCs are checked when ``verify_crc`` is set.
    """
    offset, magic, attributes, timestamp, key, value, _ = _parse_one(buf, pos, end, False)
    wrapper = (offset, magic, attributes, timestamp, key, value)
    codec = codec_from_attributes(attributes, magic)
    if codec == Compression.NONE:
        return wrapper, []
    if value is None:
        raise CorruptRecordError("compressed wrapper message has a null value")
    inner = parse_message_set(
        decompress(codec, value, magic=magic, max_size=max_decompressed_size), verify_crc=verify_crc
    )
    if not inner:
        raise CorruptRecordError("compressed wrapper message holds no messages")
    for i_offset, i_magic, i_attributes, *_ in inner:
        if i_magic != magic:
            raise CorruptRecordError(f"inner message magic {i_magic} differs from wrapper magic {magic}")
        if i_attributes & 0x07:
            raise CorruptRecordError(f"inner message at offset {i_offset} is compressed again")
    return wrapper, inner


def decode_wrapper(
    buf: bytes | bytearray | memoryview,
    pos: int,
    end: int,
    *,
    verify_crc: bool = True,
    max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> list[Record]:
    """Records of the top-level entry ``buf[pos:end]`` (a message or a wrapper).

    The entry's own CRC is checked by the caller; inner messages are checked here
    when ``verify_crc`` is set.
    """
    wrapper, inner = unwrap(buf, pos, end, verify_crc=verify_crc, max_decompressed_size=max_decompressed_size)
    offset, magic, attributes, timestamp, key, value = wrapper
    if not inner:
        return [Record(offset, timestamp, key, value, [])]
    log_append = magic == 1 and attributes & ATTR_TIMESTAMP_TYPE
    base = offset - inner[-1][0] if magic >= 1 else -1
    return [
        Record(
            base + i_offset if base >= 0 else i_offset,
            timestamp if log_append else i_timestamp,
            i_key,
            i_value,
            [],
        )
        for i_offset, _m, _a, i_timestamp, i_key, i_value in inner
    ]


def encode_message(
    offset: int,
    magic: int,
    attributes: int,
    timestamp: int,
    key: bytes | None,
    value: bytes | None,
) -> bytes:
    """Encode one message-set entry (offset, size, and the message with its CRC)."""
    parts = [
        struct.pack(">bbq", magic, attributes, timestamp)
        if magic == 1
        else struct.pack(">bb", magic, attributes)
    ]
    if key is None:
        parts.append(b"\xff\xff\xff\xff")
    else:
        parts.append(_INT32.pack(len(key)))
        parts.append(bytes(key))
    if value is None:
        parts.append(b"\xff\xff\xff\xff")
    else:
        parts.append(_INT32.pack(len(value)))
        parts.append(bytes(value))
    body = b"".join(parts)
    return _OFFSET_SIZE_CRC.pack(offset, len(body) + 4, crc32(body)) + body


class LegacyBatchBuilder:
    """Build a magic 0 or 1 message set, optionally as one compressed wrapper.

    Messages get offsets ``base_offset, base_offset + 1, ...``. Uncompressed, the
    result is those messages one after another. Compressed, it is a single wrapper
    message whose offset is the last inner offset; inner offsets are absolute with
    magic 0 and relative (0..n-1) with magic 1. The magic 1 wrapper's timestamp is
    the largest inner timestamp, or ``log_append_time`` when given (which also
    sets the timestamp-type bit). Magic 0 has no timestamps; they are ignored.
    """

    __slots__ = ("_base_offset", "_codec", "_level", "_log_append_time", "_magic", "_messages")

    def __init__(
        self,
        magic: int,
        *,
        compression: Compression | int = Compression.NONE,
        base_offset: int = 0,
        log_append_time: int | None = None,
        compression_level: int | None = None,
    ) -> None:
        if magic not in (0, 1):
            raise ValueError(f"legacy message sets have magic 0 or 1, not {magic}")
        codec = int(compression)
        if not 0 <= codec <= 3:
            raise ValueError(f"compression codec {codec} is not valid with magic {magic}")
        if log_append_time is not None and magic == 0:
            raise ValueError("magic 0 messages have no timestamp")
        self._magic = magic
        self._codec = codec
        self._level = compression_level
        self._base_offset = base_offset
        self._log_append_time = log_append_time
        self._messages: list[tuple[int, bytes | None, bytes | None]] = []

    @property
    def record_count(self) -> int:
        """Number of messages appended so far."""
        return len(self._messages)

    def append(self, timestamp: int, key: bytes | None, value: bytes | None) -> int:
        """Append one message; return its offset."""
        if self._magic == 0:
            timestamp = NO_TIMESTAMP
        elif type(timestamp) is not int:
            raise TypeError(f"timestamp must be an int, not {type(timestamp).__name__}")
        for field in (key, value):
            if field is not None and not isinstance(field, bytes | bytearray | memoryview):
                raise TypeError(f"key and value must be bytes or None, not {type(field).__name__}")
        self._messages.append((timestamp, key, value))
        return self._base_offset + len(self._messages) - 1

    def extend(self, messages: Iterable[tuple[int, bytes | None, bytes | None]]) -> None:
        """Append ``(timestamp, key, value)`` triples."""
        for timestamp, key, value in messages:
            self.append(timestamp, key, value)

    def build(self) -> bytes:
        """Return the message set bytes."""
        magic = self._magic
        base = self._base_offset
        lat = self._log_append_time
        try:
            if self._codec == Compression.NONE:
                attributes = ATTR_TIMESTAMP_TYPE if lat is not None else 0
                return b"".join(
                    encode_message(base + i, magic, attributes, lat if lat is not None else ts, key, value)
                    for i, (ts, key, value) in enumerate(self._messages)
                )
            if not self._messages:
                return b""
            inner = b"".join(
                encode_message(i if magic == 1 else base + i, magic, 0, ts, key, value)
                for i, (ts, key, value) in enumerate(self._messages)
            )
            payload = compress(self._codec, inner, magic=magic, level=self._level)
            if lat is not None:
                attributes = self._codec | ATTR_TIMESTAMP_TYPE
                wrapper_ts = lat
            else:
                attributes = self._codec
                wrapper_ts = max(ts for ts, _, _ in self._messages)
            last = base + len(self._messages) - 1
            return encode_message(last, magic, attributes, wrapper_ts, None, payload)
        except struct.error as exc:
            raise ValueError(f"message field out of range: {exc}") from None
