"""Exceptions of the client that carry more than a Kafka error code."""

from __future__ import annotations

from odradek.errors import ErrorCode, KafkaError

__all__ = ["OffsetOutOfRangeError"]


class OffsetOutOfRangeError(KafkaError):
    """A fetch asked for an offset outside the partition's log.

    ``earliest`` is the log start offset and ``latest`` the high watermark (the last stable
    offset for ``read_committed``): the offsets a consumer may fetch from are
    ``earliest <= offset <= latest`` (fetching at ``latest`` returns nothing yet).  Either is -1
    when it could not be looked up.
    """

    def __init__(self, topic: str, partition: int, offset: int, earliest: int = -1, latest: int = -1) -> None:
        self.topic = topic
        self.partition = partition
        self.offset = offset
        self.earliest = earliest
        self.latest = latest
        if earliest >= 0 and latest >= 0:
            detail = f"valid offsets are {earliest}..{latest}"
        else:
            detail = "the valid range could not be determined"
        super().__init__(ErrorCode.OFFSET_OUT_OF_RANGE, f"offset {offset} is out of range for {topic}-{partition}: {detail}")

    def __reduce__(self) -> tuple[type[OffsetOutOfRangeError], tuple[str, int, int, int, int]]:
        return (type(self), (self.topic, self.partition, self.offset, self.earliest, self.latest))


def worse_error(last: BaseException | None, new: BaseException) -> BaseException:
    """The error to report of a retried operation: running out of time (``new`` a
    ``TimeoutError``, often the bare one of a deadline) does not hide the error that was retried."""
    if isinstance(new, TimeoutError) and last is not None:
        return last
    return new
