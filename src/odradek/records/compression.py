"""Compression codecs for record data: none, gzip, snappy, lz4 and zstd.

The codec id sits in bits 0-2 of the attributes of a v0/v1 wrapper message or a v2
batch: 0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd (zstd only with magic 2). In a v2
batch everything after the 61-byte header is compressed as one payload; in v0/v1
the value of a wrapper message is the compressed inner message set.

Formats, as written by the Java client and read by Kafka:

* **gzip** — an RFC 1952 gzip stream (several concatenated members are accepted).
* **snappy** — the *xerial* block framing of the ``snappy-java`` library: the
  8-byte magic ``\\x82SNAPPY\\x00``, two big-endian int32s (version 1 and minimum
  compatible version 1), then blocks of a big-endian int32 length followed by that
  many bytes of raw snappy, each block holding at most 32 KiB of input. Readers
  also accept plain raw snappy (what some non-Java clients send).
* **lz4** — the LZ4 frame format with independent 64 KiB blocks, no content size
  and no checksums. Kafka 0.8/0.9 computed the frame-descriptor checksum byte over
  the 4-byte frame magic as well as the descriptor; messages with magic 0 are
  still written that way and read whichever way the byte was computed (KIP-57).
  Magic 1 and 2 use the standard checksum.
* **zstd** — a zstd frame (several concatenated frames are accepted).

Decompression is bounded: :func:`decompress` never produces more than
``max_size`` bytes (default :data:`DEFAULT_MAX_DECOMPRESSED_SIZE`) and raises
:class:`~odradek.records.errors.DecompressionLimitExceeded` instead, working in
bounded steps so a small "bomb" cannot allocate the huge output first.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Callable
from enum import IntEnum
from types import ModuleType
from typing import TYPE_CHECKING, Any

from odradek._varint import VarintError, decode_uvarint

from ._xxh32 import xxh32
from .errors import (
    DecompressionError,
    DecompressionLimitExceeded,
    RecordsError,
    UnsupportedCodecError,
)

if TYPE_CHECKING:
    import zstandard

__all__ = [
    "DEFAULT_MAX_DECOMPRESSED_SIZE",
    "XERIAL_HEADER",
    "Compression",
    "compress",
    "decompress",
    "decompress_scratch",
    "give_scratch",
    "lz4_compress",
    "lz4_decompress",
    "snappy_compress_xerial",
    "snappy_decompress",
    "take_scratch",
]

#: Default cap on the size of one decompressed payload (64 MiB).
DEFAULT_MAX_DECOMPRESSED_SIZE = 64 * 1024 * 1024

Buffer = bytes | bytearray | memoryview


class Compression(IntEnum):
    """Codec id stored in bits 0-2 of the attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


CODEC_MASK = 0x07


def codec_from_attributes(attributes: int, magic: int) -> Compression:
    """Return the codec named by ``attributes``, or raise ``UnsupportedCodecError``."""
    codec = attributes & CODEC_MASK
    if codec > 4 or (codec == 4 and magic < 2):
        raise UnsupportedCodecError(f"compression codec {codec} is not valid with magic {magic}")
    return Compression(codec)


# --------------------------------------------------------------------------- gzip


def _gzip_compress(data: Buffer, level: int | None) -> bytes:
    co = zlib.compressobj(zlib.Z_DEFAULT_COMPRESSION if level is None else level, zlib.DEFLATED, 31)
    return co.compress(data) + co.flush()


def _gzip_decompress(data: Buffer, max_size: int) -> bytes:
    out: list[bytes] = []
    total = 0
    rest: Buffer = data
    try:
        while True:
            d = zlib.decompressobj(31)
            chunk = d.decompress(rest, max_size + 1 - total)
            total += len(chunk)
            if total > max_size:
                raise DecompressionLimitExceeded(
                    f"gzip payload decompresses to more than {max_size} bytes", limit=max_size
                )
            out.append(chunk)
            if not d.eof:
                raise DecompressionError("gzip stream is truncated")
            rest = d.unused_data
            # Another member may follow; anything else after a member is ignored.
            if len(rest) < 2 or rest[:2] != b"\x1f\x8b":
                break
    except zlib.error as exc:
        raise DecompressionError(f"invalid gzip data: {exc}") from None
    return b"".join(out)


# ------------------------------------------------------------------- the libraries

def _cramjam() -> ModuleType:
    """cramjam (snappy; lz4 and zstd into a buffer), imported when a batch first needs it: a broker
    that never sees a compressed batch does not load the codec libraries (about 4 MB of memory
    and 5 ms of start-up for cramjam, lz4 and zstandard together)."""
    import cramjam

    return cramjam


def _lz4() -> Any:  # lz4 has no type information
    import lz4.frame

    return lz4.frame


def _zstandard() -> ModuleType:
    import zstandard

    return zstandard


# ------------------------------------------------------------------------- snappy

XERIAL_HEADER = b"\x82SNAPPY\x00"
_XERIAL_PREAMBLE = XERIAL_HEADER + struct.pack(">ii", 1, 1)
_XERIAL_BLOCK = 32 * 1024
_INT32 = struct.Struct(">i")


def snappy_compress_raw(data: Buffer) -> bytes:
    """Compress ``data`` as one raw snappy block."""
    return bytes(_cramjam().snappy.compress_raw(bytes(data)))


def snappy_compress_xerial(data: Buffer, block_size: int = _XERIAL_BLOCK) -> bytes:
    """Compress ``data`` with the xerial block framing (what Java producers write)."""
    view = memoryview(data)
    parts = [_XERIAL_PREAMBLE]
    for start in range(0, len(view), block_size):
        block = bytes(_cramjam().snappy.compress_raw(view[start : start + block_size].tobytes()))
        parts.append(_INT32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_declared_length(block: Buffer) -> int:
    """Uncompressed length stored as an unsigned varint at the start of a raw block."""
    try:
        return decode_uvarint(block, 0)[0]
    except (IndexError, VarintError):
        raise DecompressionError("raw snappy block has no valid length preamble") from None


def _snappy_raw_block(block: Buffer, budget: int, max_size: int) -> bytes:
    declared = _snappy_declared_length(block)
    if declared > budget:
        raise DecompressionLimitExceeded(
            f"snappy payload decompresses to more than {max_size} bytes", limit=max_size
        )
    try:
        out = bytes(_cramjam().snappy.decompress_raw(bytes(block)))
    except Exception as exc:  # cramjam raises its own error types
        raise DecompressionError(f"invalid snappy data: {exc}") from None
    if len(out) != declared:
        raise DecompressionError("snappy block length does not match its preamble")
    return out


def snappy_decompress(data: Buffer, max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE) -> bytes:
    """Decompress xerial-framed or raw snappy, whichever ``data`` holds."""
    view = memoryview(data)
    if len(view) >= 16 and view[:8] == XERIAL_HEADER:
        # Version and compatibility ints are not checked: some producers write them
        # in little-endian order, and there has only ever been one framing version.
        out: list[bytes] = []
        total = 0
        pos = 16
        end = len(view)
        while pos < end:
            if pos + 4 > end:
                raise DecompressionError("xerial snappy stream ends inside a block length")
            (size,) = _INT32.unpack_from(view, pos)
            pos += 4
            if size < 0 or pos + size > end:
                raise DecompressionError("xerial snappy block length is out of bounds")
            chunk = _snappy_raw_block(view[pos : pos + size], max_size - total, max_size)
            total += len(chunk)
            out.append(chunk)
            pos += size
        return b"".join(out)
    return _snappy_raw_block(view, max_size, max_size)


# ---------------------------------------------------------------------------- lz4

_LZ4_MAGIC = b"\x04\x22\x4d\x18"
_LZ4_MAX_RATIO = 256  # an lz4 byte yields at most ~255
_LZ4_MIN_STEP = 64
_LZ4_MAX_STEP = 1 << 16


def _lz4_header_checksum_pos(frame: Buffer) -> int:
    """Position of the header-checksum byte of an LZ4 frame."""
    if len(frame) < 7 or frame[:4] != _LZ4_MAGIC:
        raise DecompressionError("not an LZ4 frame")
    flg = frame[4]
    pos = 6
    if flg & 0x08:  # content size present
        pos += 8
    if flg & 0x01:  # dictionary id present
        pos += 4
    if len(frame) <= pos:
        raise DecompressionError("LZ4 frame header is truncated")
    return pos


def _lz4_hc(data: Buffer) -> int:
    return (xxh32(data) >> 8) & 0xFF


def lz4_compress(data: Buffer, *, legacy_checksum: bool = False, level: int | None = None) -> bytes:
    """LZ4 frame as Kafka's Java client writes it; ``legacy_checksum`` for magic 0."""
    frame = _lz4().compress(
        bytes(data),
        compression_level=0 if level is None else level,
        block_size=_lz4().BLOCKSIZE_MAX64KB,
        block_linked=False,
        content_checksum=False,
        block_checksum=False,
        store_size=False,
    )
    if not legacy_checksum:
        return bytes(frame)
    hc_pos = _lz4_header_checksum_pos(frame)
    fixed = bytearray(frame)
    fixed[hc_pos] = _lz4_hc(fixed[:hc_pos])
    return bytes(fixed)


def lz4_decompress(
    data: Buffer, max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE, *, legacy_checksum: bool = False
) -> bytes:
    """Decompress one LZ4 frame.

    With ``legacy_checksum`` (magic 0) the header-checksum byte is not trusted, as
    Kafka does for that format: both the standard and the Kafka 0.8 form pass.
    """
    hc_pos = _lz4_header_checksum_pos(data)
    frame: Buffer = data
    if legacy_checksum:
        good = _lz4_hc(memoryview(data)[4:hc_pos])
        if data[hc_pos] != good:
            patched = bytearray(data)
            patched[hc_pos] = good
            frame = patched
    if data[4] & 0x08:
        (declared,) = struct.unpack_from("<Q", data, 6)
        if declared > max_size:
            raise DecompressionLimitExceeded(
                f"lz4 payload declares {declared} bytes, more than {max_size}", limit=max_size
            )
    # Fed in steps small enough that one cannot yield much beyond what is left of the budget (an
    # lz4 byte expands to ~255 at most); no max_length: with it the decompressor sets up an output
    # of that size for every call, which took twice the time of the decompression itself.
    d = _lz4().LZ4FrameDecompressor()
    view = memoryview(frame)
    parts: list[bytes] = []
    total = pos = 0
    end = len(view)
    try:
        while pos < end and not d.eof:
            step = max(_LZ4_MIN_STEP, min(_LZ4_MAX_STEP, (max_size - total) // _LZ4_MAX_RATIO))
            part = d.decompress(view[pos : pos + step])
            pos += step
            total += len(part)
            if total > max_size:
                raise DecompressionLimitExceeded(
                    f"lz4 payload decompresses to more than {max_size} bytes", limit=max_size
                )
            parts.append(part)
    except RuntimeError as exc:
        raise DecompressionError(f"invalid lz4 data: {exc}") from None
    if not d.eof:
        raise DecompressionError("lz4 frame is truncated")
    return parts[0] if len(parts) == 1 else b"".join(parts)


# --------------------------------------------------------------------------- zstd

# A zstd block of at most 128 KiB can be stored as RLE in 4 bytes, so one input
# byte never yields more than ~32 KiB of output; input is fed in steps sized so
# that a step cannot overshoot the remaining budget by more than about its size.
_ZSTD_MAX_RATIO = 1 << 16
_ZSTD_MIN_STEP = 16
_ZSTD_MAX_STEP = 1 << 20
_zstd_dctx: list[zstandard.ZstdDecompressor] = []


def _zstd_decompressor() -> zstandard.ZstdDecompressor:
    """The one decompression context (made on first use; its decompressobj()s are independent)."""
    if not _zstd_dctx:
        _zstd_dctx.append(_zstandard().ZstdDecompressor())
    return _zstd_dctx[0]


def _zstd_decompress(data: Buffer, max_size: int) -> bytes:
    view = memoryview(data)
    out: list[bytes] = []
    total = 0
    pos = 0
    end = len(view)
    if end == 0:
        raise DecompressionError("empty zstd payload")
    zstd = _zstandard()
    dctx = _zstd_decompressor()
    try:
        while pos < end:
            dobj = dctx.decompressobj()
            while not dobj.eof:
                if pos >= end:
                    raise DecompressionError("zstd frame is truncated")
                step = min(_ZSTD_MAX_STEP, max(_ZSTD_MIN_STEP, (max_size - total) // _ZSTD_MAX_RATIO))
                piece = view[pos : pos + step].tobytes()
                pos += len(piece)
                chunk = dobj.decompress(piece)
                total += len(chunk)
                if total > max_size:
                    raise DecompressionLimitExceeded(
                        f"zstd payload decompresses to more than {max_size} bytes", limit=max_size
                    )
                out.append(chunk)
            pos -= len(dobj.unused_data)
    except zstd.ZstdError as exc:
        raise DecompressionError(f"invalid zstd data: {exc}") from None
    return b"".join(out)


def _zstd_compress(data: Buffer, level: int | None) -> bytes:
    return bytes(_zstandard().ZstdCompressor(level=3 if level is None else level).compress(bytes(data)))


# ------------------------------------------------------------------------ dispatch


def compress(codec: int, data: Buffer, *, magic: int = 2, level: int | None = None) -> bytes:
    """Compress ``data`` with ``codec`` the way a Kafka producer of ``magic`` does."""
    if codec == Compression.GZIP:
        return _gzip_compress(data, level)
    if codec == Compression.SNAPPY:
        return snappy_compress_xerial(data)
    if codec == Compression.LZ4:
        return lz4_compress(data, legacy_checksum=magic == 0, level=level)
    if codec == Compression.ZSTD and magic >= 2:
        return _zstd_compress(data, level)
    if codec == Compression.NONE:
        return bytes(data)
    raise UnsupportedCodecError(f"compression codec {codec} is not valid with magic {magic}")


def decompress(
    codec: int, data: Buffer, *, magic: int = 2, max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE
) -> bytes:
    """Decompress ``data``; raise a :class:`RecordsError` subclass on any failure."""
    try:
        if codec == Compression.GZIP:
            return _gzip_decompress(data, max_size)
        if codec == Compression.SNAPPY:
            return snappy_decompress(data, max_size)
        if codec == Compression.LZ4:
            return lz4_decompress(data, max_size, legacy_checksum=magic == 0)
        if codec == Compression.ZSTD and magic >= 2:
            return _zstd_decompress(data, max_size)
        if codec == Compression.NONE:
            if len(data) > max_size:
                raise DecompressionLimitExceeded("payload is larger than the limit", limit=max_size)
            return bytes(data)
    except RecordsError:
        raise
    except Exception as exc:  # any codec library failure is a property of the data
        raise DecompressionError(f"cannot decompress codec {codec} payload: {exc}") from None
    raise UnsupportedCodecError(f"compression codec {codec} is not valid with magic {magic}")



#: the largest buffer :func:`take_scratch` keeps for reuse
SCRATCH_MAX = 8 << 20
_SCRATCH_KEPT = 4
#: buffers given back, for the next taker (list.pop and list.append are atomic: no lock needed)
_free_scratch: list[bytearray] = []


def take_scratch() -> bytearray:
    """A buffer for :func:`decompress_scratch`, to be given back with :func:`give_scratch` once
    its content is no longer needed (each is used by one caller at a time)."""
    try:
        return _free_scratch.pop()
    except IndexError:
        return bytearray(1 << 20)


def give_scratch(buf: bytearray) -> None:
    if len(buf) <= SCRATCH_MAX and len(_free_scratch) < _SCRATCH_KEPT:
        _free_scratch.append(buf)


#: the codecs :func:`decompress_scratch` decompresses into its buffer, with the lowest magic each
#: takes there (whole frames, concatenated frames too; an output larger than the buffer, or bad
#: data, raises)
_INTO_MAGIC: dict[int, int] = {Compression.LZ4: 1, Compression.ZSTD: 2}
#: their functions, once cramjam is loaded
_into: dict[int, Callable[[Buffer, bytearray], int]] = {}


def _decompress_into(codec: int) -> Callable[[Buffer, bytearray], int]:
    fn = _into.get(codec)
    if fn is None:
        cramjam = _cramjam()
        _into.update({Compression.LZ4: cramjam.lz4.decompress_into, Compression.ZSTD: cramjam.zstd.decompress_into})
        fn = _into[codec]
    return fn


def decompress_scratch(
    codec: int, data: Buffer, scratch: bytearray, *, magic: int = 2, max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE
) -> Buffer:
    """:func:`decompress` for a reader that looks at the result once and drops it (a broker
    validating a produced batch): lz4 (magic 1 and 2) and zstd are decompressed into ``scratch``
    (see :func:`take_scratch`), so that a batch costs no fresh memory from the kernel (the page
    faults of a new megabyte each time cost more than the decompression; zstd's 800 kB of small
    records: 0.27 ms through :func:`decompress`, 0.12 ms into ``scratch``).  The result may be a view of
    ``scratch``.  Anything the fast path does not take (another codec, a frame that does not fit
    ``scratch``, any error) goes to :func:`decompress`, which says what is wrong; what it takes,
    :func:`decompress` gives alike.  A result that did not fit grows ``scratch`` for the next
    time (up to :data:`SCRATCH_MAX`)."""
    low = _INTO_MAGIC.get(codec)
    if low is not None and magic >= low and len(scratch) <= max_size:
        try:
            n = _decompress_into(codec)(data, scratch)
        except Exception:  # too large for the buffer, or bad: the general path says which
            pass
        else:
            return memoryview(scratch)[:n]
        out = decompress(codec, data, magic=magic, max_size=max_size)
        if len(scratch) < len(out) <= SCRATCH_MAX:
            scratch.extend(bytes(len(out) - len(scratch)))  # larger batches come: the next one fits
        return out
    return decompress(codec, data, magic=magic, max_size=max_size)
