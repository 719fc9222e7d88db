"""The file operations the log performs, behind one object so that tests can replace them.

The log writes segment data only through :class:`FileOps`: appends, truncation, ``fdatasync``
and directory ``fsync``.  The default implementation calls the operating system; a test can pass
a recording implementation that knows which bytes reached a completed sync and can simulate a
power cut (see ``tests/storage/powerloss.py``).
"""

from __future__ import annotations

import os
from pathlib import Path

from odradek.storage.errors import StorageError

__all__ = ["OS_FILES", "FileOps"]


class FileOps:
    """Operating-system file operations (the default)."""

    def open(self, path: Path) -> int:
        return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)

    def close(self, fd: int) -> None:
        os.close(fd)

    def size(self, fd: int) -> int:
        return os.fstat(fd).st_size

    def write_at(self, fd: int, data: bytes | bytearray | memoryview, position: int) -> None:
        """Write all of ``data`` at ``position``."""
        view = memoryview(data)
        while view:
            n = os.pwrite(fd, view, position)
            if n <= 0:
                raise StorageError(f"short write at position {position}")
            view = view[n:]
            position += n

    def read_at(self, fd: int, size: int, position: int) -> bytes:
        return os.pread(fd, size, position)

    def truncate(self, fd: int, size: int) -> None:
        os.ftruncate(fd, size)

    def datasync(self, fd: int) -> None:
        """Data of ``fd`` is durable when this returns."""
        os.fdatasync(fd)

    def sync_dir(self, path: Path) -> None:
        """Entries created in or renamed into ``path`` are durable when this returns."""
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    def rename(self, src: Path, dst: Path) -> None:
        os.replace(src, dst)

    def remove(self, path: Path) -> None:
        path.unlink(missing_ok=True)


OS_FILES = FileOps()
