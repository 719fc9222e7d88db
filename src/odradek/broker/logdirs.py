"""One failure path for I/O errors on a log dir (Kafka's ``LogDirFailureChannel``).

Every place that touches a log dir's files on behalf of the broker (appends, flushes, rolls,
checkpoints, segment operations, the clean shutdown) hands an ``OSError`` — or a storage error
wrapping one — to :meth:`LogDirFailureChannel.fail`, which decides what the dir becomes and logs
it once at ERROR, naming the dir and the cause:

- ``ENOSPC`` / ``EDQUOT`` make the dir **full**: produce to its partitions answers
  KAFKA_STORAGE_ERROR (retriable: clients retry), reads keep working, and the dir comes back by
  itself, without a restart, once space is freed: while it is full a write is attempted again
  only when ``statvfs`` shows room for it (the failed write was rolled back by the segment, so
  nothing half-written stays in the log), and the first write that succeeds brings the dir back
  online (logged at INFO).
- any other errno (EIO, EROFS, ...) — and any failure of ``fsync``, after which the kernel may
  have dropped the unwritten pages — takes the dir **offline** as Kafka does: produce and fetch
  of its partitions answer KAFKA_STORAGE_ERROR until the broker is restarted (and recovers the
  dir's logs from their segments, since a clean-shutdown marker is never written for it).

Other dirs, and the reads of a full dir, are not affected.  A broker of a cluster tells the
controller when a dir goes offline (Kafka's ``/log_dir_event_notification``), which moves the
leadership of that dir's partitions to other in-sync replicas and takes the lost replicas out of
their ISRs, as for a dead broker but only for those partitions.  DescribeLogDirs reports
KAFKA_STORAGE_ERROR on the result of a dir that is full or offline.
"""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Callable, Iterable
from enum import Enum
from pathlib import Path

from odradek.errors import ErrorCode, KafkaError
from odradek.storage import StorageError

__all__ = ["DirState", "LogDirFailureChannel", "is_io_error"]

log = logging.getLogger(__name__)

#: errors that free space cures
_SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})
#: resources that run out for a while and come back (descriptors, memory): treated like a full
#: dir — writes answer KAFKA_STORAGE_ERROR and are tried again — not as a failed disk
_TRANSIENT_ERRNOS = _SPACE_ERRNOS | {errno.EMFILE, errno.ENFILE, errno.ENOMEM}
#: room a write needs beyond its own bytes before a full dir is tried again (index entries,
#: a new segment's files, a producer snapshot)
PROBE_MARGIN_BYTES = 64 * 1024
#: free space at which a full dir counts as online again (so that a small write squeezed into
#: the last bytes does not make the state, and the log, flap between full and online)
RECOVERED_FREE_BYTES = 1 << 20


class DirState(Enum):
    ONLINE = "online"
    FULL = "full"
    OFFLINE = "offline"


def is_io_error(exc: BaseException) -> bool:
    """Whether ``exc`` is an I/O error of the disk: an ``OSError``, or a storage error caused by
    one (a short write).  Validation errors of the storage layer are not."""
    if isinstance(exc, OSError):
        return True
    if type(exc) is StorageError and exc.code == ErrorCode.KAFKA_STORAGE_ERROR:
        return isinstance(exc.__cause__, OSError) or "short write" in (exc.message or "")
    return False


def _cause(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.errno is not None:
        name = errno.errorcode.get(exc.errno, str(exc.errno))
        where = f" ({exc.filename})" if exc.filename else ""
        return f"{name}: {exc.strerror}{where}"
    return str(exc)


class LogDirFailureChannel:
    """The state of every log dir, and the one place its I/O errors go."""

    def __init__(self, dirs: Iterable[Path]) -> None:
        self.dirs = [Path(d) for d in dirs]
        self._roots = [(str(d.resolve()), d) for d in self.dirs]
        self._state: dict[Path, DirState] = {d: DirState.ONLINE for d in self.dirs}
        self._cause: dict[Path, str] = {}
        #: a dir is full or offline (the hot paths test this one attribute)
        self.any_failed = False
        #: failures that named no known dir, by (what, errno), logged once each
        self._unattributed: set[tuple[str, int | None]] = set()
        #: called with a dir when it goes offline (a cluster broker tells the controller)
        self.offline_listeners: list[Callable[[Path], None]] = []

    # -- state ---------------------------------------------------------------------------------
    def state(self, d: Path) -> DirState:
        return self._state.get(d, DirState.ONLINE)

    def cause(self, d: Path) -> str | None:
        return self._cause.get(d)

    def offline(self, d: Path) -> bool:
        # per request on the coordinators' paths: no Path hash while every dir is online
        return self.any_failed and self._state.get(d) is DirState.OFFLINE

    def error_code(self, d: Path) -> ErrorCode:
        """DescribeLogDirs' error for the dir: KAFKA_STORAGE_ERROR while full or offline; a full
        dir that has room again is brought back first."""
        if self.state(d) is DirState.FULL and self._has_room(d, RECOVERED_FREE_BYTES):
            self._set(d, DirState.ONLINE)
            log.info("log dir %s has free space again: writes resume", d)
        return ErrorCode.NONE if self.state(d) is DirState.ONLINE else ErrorCode.KAFKA_STORAGE_ERROR

    def dir_of(self, path: Path) -> Path | None:
        """The log dir that holds ``path`` (a partition directory or a file in one)."""
        parent = path.parent
        if parent in self._state:
            return parent
        text = str(path.resolve())
        for root, d in self._roots:
            if text == root or text.startswith(root + os.sep):
                return d
        return None

    # -- checks before work --------------------------------------------------------------------
    def check_write(self, d: Path, size: int) -> None:
        """Raise KAFKA_STORAGE_ERROR unless a write of ``size`` bytes may be attempted on ``d``:
        never on an offline dir; on a full one only when ``statvfs`` shows room for it."""
        state = self._state.get(d)
        if state is None or state is DirState.ONLINE:
            return
        if state is DirState.FULL and self._has_room(d, size):
            return  # try: success brings the dir back (wrote()), ENOSPC again leaves it full
        raise self._error(d)

    def check_read(self, d: Path) -> None:
        """Raise KAFKA_STORAGE_ERROR when ``d`` is offline (a full dir still serves reads)."""
        if self._state.get(d) is DirState.OFFLINE:
            raise self._error(d)

    def wrote(self, d: Path) -> None:
        """A write to ``d`` succeeded: a full dir with room again is online."""
        if self._state.get(d) is DirState.FULL and self._has_room(d, RECOVERED_FREE_BYTES):
            self._set(d, DirState.ONLINE)
            log.info("log dir %s accepts writes again", d)

    # -- the funnel ----------------------------------------------------------------------------
    def fail(self, d: Path | None, exc: BaseException, what: str, *, sync: bool = False) -> KafkaError:
        """Record an I/O error of ``d`` (found from the error's file name when None) while doing
        ``what``; returns the KAFKA_STORAGE_ERROR to answer with.  ``sync``: the error came from
        fsync/fdatasync, whose failure leaves durability unknown — the dir goes offline."""
        if d is None:
            d = self._attribute(exc)
        code = exc.errno if isinstance(exc, OSError) else None
        if d is None:
            key = (what, code)
            if key not in self._unattributed:
                self._unattributed.add(key)
                log.error("I/O error while %s: %s (repeats of this error are not logged)", what, _cause(exc))
            return KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"I/O error while {what}: {_cause(exc)}")
        current = self.state(d)
        if code in _TRANSIENT_ERRNOS and not sync:
            if current is DirState.ONLINE:
                self._set(d, DirState.FULL, _cause(exc))
                log.error(
                    "log dir %s %s (%s while %s): produce to its partitions answers KAFKA_STORAGE_ERROR "
                    "until %s is freed; reads continue, and writes resume by themselves once there is room",
                    d,
                    "is full" if code in _SPACE_ERRNOS else "cannot be written",
                    _cause(exc),
                    what,
                    "space" if code in _SPACE_ERRNOS else "the resource",
                )
        elif current is not DirState.OFFLINE:
            self._set(d, DirState.OFFLINE, _cause(exc))
            log.error(
                "log dir %s is offline after an I/O error while %s: %s; produce and fetch of its partitions "
                "answer KAFKA_STORAGE_ERROR until the broker is restarted (its logs are recovered at the next start)",
                d,
                what,
                _cause(exc),
            )
            for listener in list(self.offline_listeners):
                try:
                    listener(d)
                except Exception:
                    log.exception("a log-dir failure listener failed")
        return self._error(d)

    # -- helpers -------------------------------------------------------------------------------
    def _set(self, d: Path, state: DirState, cause: str | None = None) -> None:
        self._state[d] = state
        if cause is None:
            self._cause.pop(d, None)
        else:
            self._cause[d] = cause
        self.any_failed = any(s is not DirState.ONLINE for s in self._state.values())

    def _error(self, d: Path) -> KafkaError:
        state = self.state(d)
        detail = "is full" if state is DirState.FULL else "is offline"
        return KafkaError(ErrorCode.KAFKA_STORAGE_ERROR, f"log dir {d} {detail} ({self._cause.get(d, 'I/O error')})")

    def _attribute(self, exc: BaseException) -> Path | None:
        if isinstance(exc, OSError):
            for name in (exc.filename, exc.filename2):
                if name:
                    found = self.dir_of(Path(os.fsdecode(name)))
                    if found is not None:
                        return found
        return self.dirs[0] if len(self.dirs) == 1 else None

    @staticmethod
    def _has_room(d: Path, size: int) -> bool:
        try:
            st = os.statvfs(d)
        except OSError:
            return False
        return st.f_bavail * st.f_frsize >= size + PROBE_MARGIN_BYTES
