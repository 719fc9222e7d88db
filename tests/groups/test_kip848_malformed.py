"""Malformed ConsumerGroupHeartbeat requests against ``odradek serve`` (hypothesis).

* Well-framed requests with hostile field values (empty or blank ids, epochs below -2, a missing
  rebalance timeout or subscription on joining, owned partitions on joining, unknown assignors,
  regular expressions RE2 refuses or that match nothing, topic ids that do not exist, members and
  epochs the group does not know) get Kafka's error codes; a refused request stores nothing (the
  consumer groups listed are the same after it).
* Request bodies with bytes changed, cut or added after a valid header get an error answer or
  have their connection closed, never anything else.

After each, a member of another group heartbeats as usual and is answered: nothing stalled.
"""

from __future__ import annotations

import socket
import struct
import uuid
from collections.abc import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from odradek.errors import ErrorCode
from odradek.protocol.messages.consumer_group_heartbeat import ConsumerGroupHeartbeatRequest as Q
from odradek.protocol.messages.list_groups import ListGroupsRequest
from odradek.testing import BrokerProcess, WireClient
from tests.groups.group_helpers import create_topic, wait_until
from tests.groups.kip848_helpers import KIP848_OVERRIDES
from tests.groups.wire_group import find_coordinator

TOPIC = "kip848-fuzz"
#: what a hostile but well-framed heartbeat may be answered
ANSWERS = {
    ErrorCode.NONE, ErrorCode.INVALID_REQUEST, ErrorCode.UNSUPPORTED_ASSIGNOR, ErrorCode.INVALID_REGULAR_EXPRESSION,
    ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.GROUP_ID_NOT_FOUND,
    ErrorCode.UNRELEASED_INSTANCE_ID, ErrorCode.FENCED_INSTANCE_ID, ErrorCode.INVALID_GROUP_ID,
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("odradek-kip848-fuzz"), overrides=KIP848_OVERRIDES)
    proc.start()
    try:
        create_topic(proc.bootstrap, TOPIC, 3)
        yield proc
    finally:
        code = proc.stop()
        assert code == 0, f"broker exited with {code}:\n{''.join(proc.stderr_lines[-40:])}"


class Control:
    """A well-behaved member of its own group, heartbeating after every hostile request."""

    def __init__(self, broker: BrokerProcess) -> None:
        self.wire = WireClient(broker.host, broker.port)
        self.member_id = str(uuid.uuid4())
        self.epoch = 0
        self.group = f"control-{uuid.uuid4().hex[:8]}"
        find_coordinator(self.wire, self.group)  # creates __consumer_offsets, as clients' first step

        def joined() -> bool:
            resp = self.wire.request(Q(group_id=self.group, member_id=self.member_id, member_epoch=0,
                                       rebalance_timeout_ms=30000, subscribed_topic_names=[TOPIC],
                                       topic_partitions=[]), 1)
            self.epoch = resp.member_epoch
            return resp.error_code == 0

        wait_until(joined, what="the control member joined")

    def heartbeat(self) -> None:
        resp = self.wire.request(Q(group_id=self.group, member_id=self.member_id, member_epoch=self.epoch), 1)
        assert resp.error_code == 0, resp
        self.epoch = resp.member_epoch


@pytest.fixture(scope="module")
def control(broker: BrokerProcess) -> Iterator[Control]:
    c = Control(broker)
    yield c
    c.wire.close()


def _consumer_groups(w: WireClient) -> set[str]:
    resp = w.request(ListGroupsRequest(types_filter=["consumer"]), 5)
    assert resp.error_code == 0
    return {g.group_id for g in resp.groups}


texts = st.one_of(st.just(""), st.just("   "), st.text(max_size=12), st.sampled_from(["g", "m", "\x00", "é" * 3]))
epochs = st.one_of(st.sampled_from([-3, -2, -1, 0, 1, 2, 2**31 - 1]), st.integers(-(2**31), 2**31 - 1))
topic_ids = st.one_of(st.uuids(), st.just(uuid.UUID(int=0)))
owned = st.one_of(st.none(), st.lists(st.builds(
    lambda t, ps: Q.TopicPartitions(topic_id=t, partitions=ps),
    topic_ids, st.lists(st.integers(-(2**31), 2**31 - 1), max_size=4)), max_size=3))
regexes = st.one_of(st.none(), st.sampled_from(["", "(", "a{1000}{1000}", "(a)\\1", "(?=x)", "kip848-.*", ".*"]),
                    st.text(max_size=8))


@settings(max_examples=60)
@given(
    version=st.sampled_from([0, 1]),
    group_id=texts,
    member_id=texts,
    epoch=epochs,
    instance_id=st.one_of(st.none(), texts),
    rack_id=st.one_of(st.none(), texts),
    rebalance_timeout=st.one_of(st.just(-1), st.integers(-(2**31), 2**31 - 1)),
    names=st.one_of(st.none(), st.lists(st.one_of(st.just(TOPIC), texts), max_size=4)),
    regex=regexes,
    assignor=st.one_of(st.none(), st.sampled_from(["uniform", "range", "sticky", ""])),
    partitions=owned,
)
def test_hostile_fields_get_kafkas_errors_and_store_nothing(
    broker: BrokerProcess, control: Control, version: int, group_id: str, member_id: str, epoch: int,
    instance_id: str | None, rack_id: str | None, rebalance_timeout: int, names: list[str] | None,
    regex: str | None, assignor: str | None, partitions: list[Q.TopicPartitions] | None,
) -> None:
    w = WireClient(broker.host, broker.port)
    try:
        before = _consumer_groups(w)
        request = Q(group_id=group_id, member_id=member_id, member_epoch=epoch, instance_id=instance_id,
                    rack_id=rack_id, rebalance_timeout_ms=rebalance_timeout, subscribed_topic_names=names,
                    server_assignor=assignor, topic_partitions=partitions)
        if version >= 1:
            request.subscribed_topic_regex = regex
        resp = w.request(request, version)
        code = ErrorCode.of(resp.error_code)
        assert code in ANSWERS, (code, resp.error_message)
        refusal = _kafkas_refusal(version, group_id, member_id, epoch, instance_id, rack_id, rebalance_timeout,
                                  names, regex if version >= 1 else None, assignor, partitions)
        if refusal is not None:
            assert (code, resp.error_message) == refusal
        if code is not ErrorCode.NONE:
            assert _consumer_groups(w) == before, "a refused heartbeat stored a group"
        elif group_id not in before:
            # a join: the member is there, and leaves again
            assert group_id in _consumer_groups(w)
    finally:
        w.close()
    control.heartbeat()


def _kafkas_refusal(
    version: int, group_id: str, member_id: str, epoch: int, instance_id: str | None, rack_id: str | None,
    rebalance_timeout: int, names: list[str] | None, regex: str | None, assignor: str | None,
    partitions: list[Q.TopicPartitions] | None,
) -> tuple[ErrorCode, str] | None:
    """What Kafka 4's GroupCoordinatorService refuses before looking at any group (its checks in
    their order; Java's trim drops every character up to U+0020)."""

    def blank(v: str | None) -> bool:
        return v is not None and v.strip("".join(map(chr, range(0x21)))) == ""

    bad = ErrorCode.INVALID_REQUEST
    if (version >= 1 or epoch > 0 or epoch == -1) and blank(member_id):
        return bad, "MemberId can't be empty."
    if blank(group_id):
        return bad, "GroupId can't be empty."
    if blank(instance_id):
        return bad, "InstanceId can't be empty."
    if blank(rack_id):
        return bad, "RackId can't be empty."
    if epoch == 0:
        if rebalance_timeout == -1:
            return bad, "RebalanceTimeoutMs must be provided in first request."
        if partitions is None or partitions:
            return bad, "TopicPartitions must be empty when (re-)joining."
        if not names and not regex:
            return bad, "SubscribedTopicNames or SubscribedTopicRegex must be set in first request."
    elif epoch == -2:
        if instance_id is None:
            return bad, "InstanceId can't be null."
    elif epoch < -2:
        return bad, "MemberEpoch is invalid."
    if assignor is not None and assignor not in ("uniform", "range"):
        return ErrorCode.UNSUPPORTED_ASSIGNOR, (f"ServerAssignor {assignor} is not supported. "
                                                "Supported assignors: uniform, range.")
    return None


def _frame(version: int) -> tuple[bytes, int]:
    """A valid ConsumerGroupHeartbeat frame and the offset of its body (after the header)."""
    request = Q(group_id="fuzz", member_id=str(uuid.uuid4()), member_epoch=0, rebalance_timeout_ms=1000,
                subscribed_topic_names=[TOPIC], topic_partitions=[], server_assignor="uniform")
    if version >= 1:
        request.subscribed_topic_regex = "kip848-.*"
    from odradek.protocol import ClientConnection

    _cid, data = ClientConnection(client_id="fuzz").send_request(request, version)
    header = 4 + 2 + 2 + 4 + 2 + len("fuzz") + 1  # size, key, version, correlation id, client id, no tags
    return data, header


@settings(max_examples=60)
@given(version=st.sampled_from([0, 1]), cut=st.integers(0, 200), noise=st.binary(max_size=16),
       flips=st.lists(st.tuples(st.integers(0, 200), st.integers(1, 255)), max_size=6))
def test_damaged_bodies_are_answered_with_an_error_or_closed(
    broker: BrokerProcess, control: Control, version: int, cut: int, noise: bytes, flips: list[tuple[int, int]]
) -> None:
    data, start = _frame(version)
    body = bytearray(data[start:])
    for at, xor in flips:
        body[at % len(body)] ^= xor
    body = body[: len(body) - (cut % (len(body) + 1))] + noise
    payload = data[4:start] + bytes(body)
    s = socket.create_connection((broker.host, broker.port), timeout=10)
    try:
        s.sendall(struct.pack(">i", len(payload)) + payload)
        answer = b""
        while len(answer) < 4 or len(answer) < 4 + struct.unpack(">i", answer[:4])[0]:
            chunk = s.recv(65536)
            if not chunk:
                break  # closed: Kafka's answer to a request it cannot read
            answer += chunk
    finally:
        s.close()
    if len(answer) >= 4 + 4 + 1 + 4 + 2:
        # correlation id, header tags, throttle time, then the error code
        (code,) = struct.unpack_from(">h", answer, 4 + 4 + 1 + 4)
        assert ErrorCode.of(code) in ANSWERS | {ErrorCode.UNSUPPORTED_VERSION}, ErrorCode.of(code)
    control.heartbeat()
