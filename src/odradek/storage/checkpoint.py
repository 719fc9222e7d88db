"""Checkpoint files in Kafka's text format, written atomically.

Partition checkpoints (``recovery-point-offset-checkpoint``, ``replication-offset-checkpoint``,
``log-start-offset-checkpoint``, ``cleaner-offset-checkpoint``)::

    0                      <- format version
    2                      <- number of entries
    orders 0 1234          <- topic, partition, offset
    orders 1 77

The per-partition ``leader-epoch-checkpoint`` has the same shape with ``<epoch> <start offset>``
lines.  Every checkpoint and metadata file of the storage layer is written by
:func:`write_atomic`: the data goes to a temporary file with a unique name in the same
directory, is fsynced, renamed over the file, and the directory is fsynced, so a crash leaves
either the old or the new file, never a torn or empty one, and concurrent writers of the same file
never share (and remove) each other's temporary file.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from odradek.storage.errors import StorageError, UnknownFormatError

__all__ = [
    "CLEANER_OFFSET",
    "LEADER_EPOCH",
    "LOG_START_OFFSET",
    "RECOVERY_POINT",
    "REPLICATION_OFFSET",
    "fsync_dir",
    "read_epochs",
    "read_offsets",
    "write_atomic",
    "write_epochs",
    "write_offsets",
]

RECOVERY_POINT = "recovery-point-offset-checkpoint"
REPLICATION_OFFSET = "replication-offset-checkpoint"
LOG_START_OFFSET = "log-start-offset-checkpoint"
CLEANER_OFFSET = "cleaner-offset-checkpoint"
LEADER_EPOCH = "leader-epoch-checkpoint"

_VERSION = 0


def fsync_dir(path: Path) -> None:
    """fsync a directory so that entries created or renamed in it are durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomic(path: Path, data: bytes | str) -> None:
    """Replace ``path`` with ``data``, atomically and durably.

    The data is written to a temporary file with a unique name (``<name>.<random>.tmp``) in the
    same directory, fsynced and renamed over ``path``; then the directory is fsynced.  Readers see
    the old or the new content, never an empty or partial file; writers running at the same time
    each rename their own complete file (the last rename wins).  On any failure the temporary
    file is removed and the old file is left as it was.
    """
    raw = data.encode() if isinstance(data, str) else bytes(data)
    fd, tmp_name = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    tmp = Path(tmp_name)
    try:
        try:
            view = memoryview(raw)
            while view:
                n = os.write(fd, view)
                view = view[n:]
            os.fchmod(fd, 0o644)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)


def _lines(entries: Iterable[tuple[object, ...]]) -> str:
    rows = [" ".join(str(x) for x in e) for e in entries]
    return f"{_VERSION}\n{len(rows)}\n" + "".join(r + "\n" for r in rows)


def _parse(path: Path, columns: int) -> list[list[str]]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    except UnicodeDecodeError as exc:
        raise StorageError(f"{path}: malformed checkpoint file (not text)") from exc
    lines = text.splitlines()
    try:
        version = int(lines[0])
    except (IndexError, ValueError) as exc:
        raise StorageError(f"{path}: malformed checkpoint file (no version line)") from exc
    if version != _VERSION:
        raise UnknownFormatError(path, "checkpoint format", version, str(_VERSION))
    try:
        count = int(lines[1])
        rows = [line.split() for line in lines[2 : 2 + count]]
    except (IndexError, ValueError) as exc:
        raise StorageError(f"{path}: malformed checkpoint file") from exc
    if len(rows) != count or any(len(r) != columns for r in rows):
        raise StorageError(f"{path}: malformed checkpoint file (expected {count} entries)")
    return rows


def write_offsets(path: Path, offsets: Mapping[tuple[str, int], int]) -> None:
    """Write ``{(topic, partition): offset}``."""
    write_atomic(path, _lines((t, p, o) for (t, p), o in sorted(offsets.items())))


def read_offsets(path: Path) -> dict[tuple[str, int], int]:
    """Read ``{(topic, partition): offset}``; a missing file is empty."""
    try:
        return {(r[0], int(r[1])): int(r[2]) for r in _parse(path, 3)}
    except ValueError as exc:
        raise StorageError(f"{path}: malformed checkpoint entry") from exc


def write_epochs(path: Path, epochs: Iterable[tuple[int, int]]) -> None:
    """Write ``[(leader epoch, start offset)]``."""
    write_atomic(path, _lines(epochs))


def read_epochs(path: Path) -> list[tuple[int, int]]:
    try:
        return [(int(r[0]), int(r[1])) for r in _parse(path, 2)]
    except ValueError as exc:
        raise StorageError(f"{path}: malformed checkpoint entry") from exc
