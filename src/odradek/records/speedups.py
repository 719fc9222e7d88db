"""Which record decoder runs: the compiled one, or the pure-Python one.

:mod:`odradek.records._speedups` is a C extension built at install when a compiler is there
(``setup.py``; optional).  When it is importable, :func:`~odradek.records.decode_records` (the
clients' consumers) and the Spark source's column decoder use it for the records of each v2
batch; data it finds anything wrong with is decoded again by the pure-Python decoder, which
raises the precise error.  The producer's open batches (:mod:`odradek.records.appender`) and the
broker's check of every record on append (:mod:`odradek.records.check`; a produced batch's
whole check, its CRC too, in ``check_produced``) are compiled too.  ``ODRADEK_PURE_PYTHON=1`` in the environment (read at import) turns
it off, for comparison or when in doubt.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Protocol, TypeVar, overload

__all__ = ["PURE_PYTHON_ENV", "Compiled", "compiled", "implementation"]

PURE_PYTHON_ENV = "ODRADEK_PURE_PYTHON"

Buffer = bytes | bytearray | memoryview
_T = TypeVar("_T", bound=tuple[object, ...])
_B = TypeVar("_B")
#: a batch for ``decode_columns``: (buf, start, stop, count, base offset, base timestamp,
#: log-append time or None)
BatchSpec = tuple[Buffer, int, int, int, int, int, int | None]
#: a binary column of ``decode_columns``: (int32 offsets[n + 1], data, validity or None, nulls)
BinaryColumn = tuple[_B, _B, _B | None, int]
#: its headers column: (list offsets, list validity or None, null lists, header count, keys, values)
HeaderColumns = tuple[_B, _B | None, int, int, BinaryColumn[_B], BinaryColumn[_B]]


class Compiled(Protocol):
    """The functions of the compiled module used here (``_speedups.pyi`` types the whole module;
    mypy checks that it has these)."""

    @overload
    def decode_records(
        self, buf: Buffer, start: int, stop: int | None, count: int, base_offset: int, base_timestamp: int,
        log_append_time: int | None, record_type: type[_T], /,
    ) -> list[_T]: ...
    @overload
    def decode_records(
        self, buf: Buffer, start: int, stop: int | None, count: int, base_offset: int, base_timestamp: int,
        log_append_time: int | None, record_type: type[_T], topic: str, partition: int, timestamp_type: int, /,
    ) -> list[_T]: ...

    def check_records(
        self, buf: Buffer, start: int, stop: int, count: int, base_timestamp: int, last_offset_delta: int,
        sequential: bool, /,
    ) -> tuple[int, int, int, int, int, int, int, int]: ...

    def check_produced(
        self, buf: Buffer, max_size: int, refuse_keyless: bool, create_time: bool, now: int, before: int | None,
        after: int | None, /,
    ) -> int | None: ...

    @overload
    def decode_columns(
        self, batches: list[BatchSpec], with_headers: bool, /,
    ) -> tuple[int, bytes, bytes, BinaryColumn[bytes], BinaryColumn[bytes], HeaderColumns[bytes] | None]: ...
    @overload
    def decode_columns(
        self, batches: list[BatchSpec], with_headers: bool, alloc: Callable[[int], _B], /,
    ) -> tuple[int, _B, _B, BinaryColumn[_B], BinaryColumn[_B], HeaderColumns[_B] | None]: ...

    def encode_record_body(self, timestamp_delta: int, offset_delta: int, key: bytes | None, value: bytes | None, /) -> bytes: ...


def _load() -> Compiled | None:
    if os.environ.get(PURE_PYTHON_ENV, "").strip().lower() not in ("", "0", "false", "no"):
        return None
    try:
        from odradek.records import _speedups
    except ImportError:
        return None
    return _speedups


#: the compiled module, or None (not built, or turned off)
compiled: Compiled | None = _load()


def implementation() -> str:
    """``"compiled"`` or ``"pure-python"``: the decoder in use."""
    return "compiled" if compiled is not None else "pure-python"
