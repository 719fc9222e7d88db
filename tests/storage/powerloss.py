"""A file layer for tests that knows what a power cut would keep.

:class:`PowerLossFiles` is a :class:`~odradek.storage.files.FileOps` that performs every operation
on the real files and also records, per file, the content that reached a *completed*
``datasync`` and the writes made since.  It also models directory entries: a name created or
renamed (or removed) after the last ``sync_dir`` of its directory is not durable.

:meth:`PowerLossFiles.power_cut` then turns the real files into what a machine would find after
losing power: every file goes back to its synced content, except that the last unsynced write
survives torn at a random byte (a random prefix of it is kept; earlier unsynced writes are lost,
so a hole of zeros can appear before it); names that were not made durable disappear (a rename
is undone, a removal is undone).  Files the model never saw (index files, which are rebuilt from
the log, and checkpoints, which are fsynced by their own code) stay as they are.

The broken variants prove that the durability check of the tests can fail:
:class:`NoDatasyncFiles` (``datasync`` does nothing) and :class:`NoDirSyncFiles` (``sync_dir``
does nothing).
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass, field
from pathlib import Path

from odradek.storage.files import FileOps

__all__ = ["NoDatasyncFiles", "NoDirSyncFiles", "PowerLossFiles"]


@dataclass
class _File:
    """One file (an inode): its durable content and the operations made since."""

    synced: bytearray
    ops: list[tuple[int, bytes] | int] = field(default_factory=list)  # (position, data) or new size

    def apply(self) -> None:
        """The operations reached the disk: they become the synced content."""
        for op in self.ops:
            if isinstance(op, int):
                del self.synced[op:]
            else:
                position, data = op
                if position > len(self.synced):
                    self.synced += bytes(position - len(self.synced))
                self.synced[position : position + len(data)] = data
        self.ops.clear()

    def after_power_cut(self, rng: random.Random) -> tuple[bytes, int]:
        """Synced content plus a random prefix of the last unsynced write; and bytes lost."""
        content = bytearray(self.synced)
        writes = [op for op in self.ops if not isinstance(op, int)]
        lost = sum(len(w[1]) for w in writes)
        if writes:
            position, data = writes[-1]
            kept = data[: rng.randrange(len(data) + 1)]
            lost -= len(kept)
            if position > len(content):
                content += bytes(position - len(content))
            content[position : position + len(kept)] = kept
        return bytes(content), lost


class PowerLossFiles(FileOps):
    """Real file operations, recorded so that :meth:`power_cut` can undo what was not durable."""

    def __init__(self, *, real_sync: bool = False) -> None:
        self.real_sync = real_sync  # also call fdatasync/fsync (slow; the model does not need it)
        self._by_fd: dict[int, _File] = {}
        self._names: dict[Path, _File] = {}  # the directory entries now
        self._durable: dict[Path, _File] = {}  # the entries as of the last sync_dir of each dir
        self.datasyncs = 0
        self.dir_syncs = 0

    # -- bookkeeping ---------------------------------------------------------------------------
    @staticmethod
    def _key(path: Path | str) -> Path:
        return Path(os.path.abspath(path))

    def track(self, path: Path | str) -> None:
        """Take an existing file as durable (it was written before the recording started)."""
        key = self._key(path)
        if key not in self._names and key.exists():
            f = _File(bytearray(key.read_bytes()))
            self._names[key] = f
            self._durable[key] = f

    # -- FileOps -------------------------------------------------------------------------------
    def open(self, path: Path) -> int:
        key = self._key(path)
        self.track(key)
        fd = super().open(path)
        if key not in self._names:  # created now: empty and not durable until its dir is synced
            self._names[key] = _File(bytearray())
        self._by_fd[fd] = self._names[key]
        return fd

    def close(self, fd: int) -> None:
        super().close(fd)
        self._by_fd.pop(fd, None)

    def write_at(self, fd: int, data: bytes | bytearray | memoryview, position: int) -> None:
        super().write_at(fd, data, position)
        self._by_fd[fd].ops.append((position, bytes(data)))

    def truncate(self, fd: int, size: int) -> None:
        super().truncate(fd, size)
        self._by_fd[fd].ops.append(size)

    def datasync(self, fd: int) -> None:
        if self.real_sync:
            super().datasync(fd)
        self._by_fd[fd].apply()
        self.datasyncs += 1

    def sync_dir(self, path: Path) -> None:
        if self.real_sync:
            super().sync_dir(path)
        directory = self._key(path)
        for key in [k for k in self._durable if k.parent == directory]:
            del self._durable[key]
        for key, f in self._names.items():
            if key.parent == directory:
                self._durable[key] = f
        self.dir_syncs += 1

    def rename(self, src: Path, dst: Path) -> None:
        self.track(src)
        super().rename(src, dst)
        self._names[self._key(dst)] = self._names.pop(self._key(src))

    def remove(self, path: Path) -> None:
        self.track(path)
        super().remove(path)
        self._names.pop(self._key(path), None)

    # -- the power cut -----------------------------------------------------------------------------
    def power_cut(self, rng: random.Random) -> dict[str, int]:
        """Turn the real files into what survives a power cut now; returns what was lost.

        The process that used this object is considered dead: its file descriptors are closed
        here and nothing may use them (or this object) afterwards.
        """
        for fd in list(self._by_fd):
            os.close(fd)
        self._by_fd.clear()
        summary = {"files_gone": 0, "files_back": 0, "bytes_lost": 0}
        for key in set(self._names) | set(self._durable):
            f = self._durable.get(key)
            if f is None:
                if key.exists():
                    key.unlink()
                    summary["files_gone"] += 1
                continue
            summary["files_back"] += not key.exists()
            content, lost = f.after_power_cut(rng)
            summary["bytes_lost"] += lost
            key.write_bytes(content)
        self._names.clear()
        self._durable.clear()
        return summary


class NoDatasyncFiles(PowerLossFiles):
    """A broken flush: ``datasync`` returns without making anything durable."""

    def datasync(self, fd: int) -> None:
        self.datasyncs += 1


class NoDirSyncFiles(PowerLossFiles):
    """A broken directory sync: new segment files never become durable names."""

    def sync_dir(self, path: Path) -> None:
        self.dir_syncs += 1
