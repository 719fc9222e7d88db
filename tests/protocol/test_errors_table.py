"""Odradek's error-code table against kafka-python's broker errors (``kafka.errors``).

For every code both know: the same name (kafka-python's ``message``) and the same
``retriable`` flag.  One case per code, so a failure names the code.
"""

from __future__ import annotations

import kafka.errors as kp_errors
import pytest

from odradek.errors import ErrorCode

#: errno -> kafka-python class, through kafka-python's own lookup (``for_code``), for the codes
#: it knows (``kafka_errors`` also holds the errno-less ``AuthorizationError`` base under None).
KP_CODES: dict[int, type] = {
    code: kp_errors.for_code(code) for code in sorted(c for c in kp_errors.kafka_errors if c is not None)
}

#: Where kafka-python departs from Kafka's current Errors.java, the (name, retriable) Kafka uses.
#: Odradek follows Kafka; each entry is kafka-python's old or abbreviated spelling.
KAFKA_DIFFERS_FROM_KAFKA_PYTHON: dict[int, tuple[str, bool]] = {
    -1: ("UNKNOWN_SERVER_ERROR", False),  # kafka-python: UNKNOWN
    0: ("NONE", False),  # kafka-python: NO_ERROR
    2: ("CORRUPT_MESSAGE", True),  # CorruptRecordException extends RetriableException
    6: ("NOT_LEADER_OR_FOLLOWER", True),  # renamed from NOT_LEADER_FOR_PARTITION in Kafka 2.7
    10: ("MESSAGE_TOO_LARGE", False),  # kafka-python: MESSAGE_SIZE_TOO_LARGE
    17: ("INVALID_TOPIC_EXCEPTION", False),  # kafka-python: INVALID_TOPIC
    39: ("INVALID_REPLICA_ASSIGNMENT", False),  # kafka-python: INVALID_REPLICATION_ASSIGNMENT
}

SHARED = [
    pytest.param(code, id=f"{code}-{ErrorCode(code).name}") for code in KP_CODES if code in set(ErrorCode)
]


def test_odradek_knows_every_code_kafka_python_knows() -> None:
    assert sorted(set(KP_CODES) - {int(c) for c in ErrorCode}) == []


def test_many_codes_are_compared() -> None:
    assert len(SHARED) >= 120


@pytest.mark.parametrize("code", SHARED)
def test_name_and_retriable_match_kafka_python(code: int) -> None:
    ours = ErrorCode(code)
    theirs = KP_CODES[code]
    if code in KAFKA_DIFFERS_FROM_KAFKA_PYTHON:
        assert (ours.name, ours.retriable) == KAFKA_DIFFERS_FROM_KAFKA_PYTHON[code]
        return
    assert (ours.value, ours.name, ours.retriable) == (
        theirs.errno,
        theirs.message,
        bool(theirs.retriable),
    ), (
        f"code {code}: Odradek {ours.name} retriable={ours.retriable}, "
        f"kafka-python {theirs.__name__} ({theirs.message}) retriable={theirs.retriable}"
    )
