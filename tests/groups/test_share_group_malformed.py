"""Malformed ShareGroupHeartbeat and ShareGroupDescribe requests against ``odradek serve``
(hypothesis).

* Well-framed heartbeats with hostile field values (empty or blank ids, epochs below -1, no
  subscription on joining, topics that do not exist, members and epochs the group does not know)
  get Kafka's error codes, with Kafka's message for the checks made before any group is looked
  at; a refused heartbeat stores nothing (the share groups listed are the same after it).
* Request bodies with bytes changed, cut or added after a valid header get an error answer or
  have their connection closed, never anything else.

After each, a member of another share group heartbeats as usual and is answered: nothing stalled.
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
from odradek.protocol.messages.list_groups import ListGroupsRequest
from odradek.protocol.messages.share_group_describe import ShareGroupDescribeRequest
from odradek.protocol.messages.share_group_heartbeat import ShareGroupHeartbeatRequest as Q
from odradek.testing import BrokerProcess, WireClient
from tests.groups.group_helpers import BROKER_OVERRIDES, create_topic, wait_until
from tests.groups.wire_group import find_coordinator

TOPIC = "share-fuzz"
ANSWERS = {
    ErrorCode.NONE, ErrorCode.INVALID_REQUEST, ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_MEMBER_EPOCH,
    ErrorCode.GROUP_ID_NOT_FOUND, ErrorCode.INVALID_GROUP_ID,
}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    proc = BrokerProcess(tmp_path_factory.mktemp("odradek-share-fuzz"), overrides=BROKER_OVERRIDES)
    proc.start()
    try:
        create_topic(proc.bootstrap, TOPIC, 2)
        yield proc
    finally:
        code = proc.stop()
        assert code == 0, f"broker exited with {code}:\n{''.join(proc.stderr_lines[-40:])}"


class Control:
    """A well-behaved member of its own share group, heartbeating after every hostile request."""

    def __init__(self, broker: BrokerProcess) -> None:
        self.wire = WireClient(broker.host, broker.port)
        self.member_id = str(uuid.uuid4())
        self.epoch = 0
        self.group = f"control-{uuid.uuid4().hex[:8]}"
        find_coordinator(self.wire, self.group)

        def joined() -> bool:
            resp = self.wire.request(Q(group_id=self.group, member_id=self.member_id, member_epoch=0,
                                       subscribed_topic_names=[TOPIC]), 1)
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


def _share_groups(w: WireClient) -> set[str]:
    resp = w.request(ListGroupsRequest(types_filter=["share"]), 5)
    assert resp.error_code == 0
    return {g.group_id for g in resp.groups}


texts = st.one_of(st.just(""), st.just("   "), st.just("\x00\x1f"), st.text(max_size=12),
                  st.sampled_from(["g", "m", "é" * 3, "\u3000"]))
epochs = st.one_of(st.sampled_from([-3, -2, -1, 0, 1, 2, 2**31 - 1]), st.integers(-(2**31), 2**31 - 1))


@settings(max_examples=60)
@given(group_id=texts, member_id=texts, epoch=epochs, rack_id=st.one_of(st.none(), texts),
       names=st.one_of(st.none(), st.lists(st.one_of(st.just(TOPIC), texts), max_size=4)))
def test_hostile_fields_get_kafkas_errors_and_store_nothing(
    broker: BrokerProcess, control: Control, group_id: str, member_id: str, epoch: int, rack_id: str | None,
    names: list[str] | None,
) -> None:
    w = WireClient(broker.host, broker.port)
    try:
        before = _share_groups(w)
        resp = w.request(Q(group_id=group_id, member_id=member_id, member_epoch=epoch, rack_id=rack_id,
                           subscribed_topic_names=names), 1)
        code = ErrorCode.of(resp.error_code)
        assert code in ANSWERS, (code, resp.error_message)
        refusal = _kafkas_refusal(group_id, member_id, epoch, rack_id, names)
        if refusal is not None:
            assert (code, resp.error_message) == refusal
        if code is not ErrorCode.NONE:
            assert _share_groups(w) == before, "a refused heartbeat stored a group"
        elif epoch == 0:
            assert group_id in _share_groups(w)
            left = w.request(Q(group_id=group_id, member_id=member_id, member_epoch=-1), 1)
            assert left.error_code == 0
        d = w.request(ShareGroupDescribeRequest(group_ids=[group_id]), 1).groups[0]
        assert ErrorCode.of(d.error_code) in {ErrorCode.NONE, ErrorCode.GROUP_ID_NOT_FOUND, ErrorCode.INVALID_GROUP_ID}
    finally:
        w.close()
    control.heartbeat()


def _kafkas_refusal(group_id: str, member_id: str, epoch: int, rack_id: str | None,
                    names: list[str] | None) -> tuple[ErrorCode, str] | None:
    """What Kafka 4's GroupCoordinatorService refuses before looking at any group, in its order."""

    def blank(v: str | None) -> bool:
        return v is not None and v.strip("".join(map(chr, range(0x21)))) == ""

    bad = ErrorCode.INVALID_REQUEST
    if blank(member_id):
        return bad, "MemberId can't be empty."
    if blank(group_id):
        return bad, "GroupId can't be empty."
    if blank(rack_id):
        return bad, "RackId can't be empty."
    if epoch == 0 and not names:
        return bad, "SubscribedTopicNames must be set in first request."
    if epoch < -1:
        return bad, "MemberEpoch is invalid."
    return None


def _frame() -> tuple[bytes, int]:
    """A valid ShareGroupHeartbeat frame and the offset of its body (after the header)."""
    from odradek.protocol import ClientConnection

    request = Q(group_id="fuzz", member_id=str(uuid.uuid4()), member_epoch=0, subscribed_topic_names=[TOPIC])
    _cid, data = ClientConnection(client_id="fuzz").send_request(request, 1)
    header = 4 + 2 + 2 + 4 + 2 + len("fuzz") + 1  # size, key, version, correlation id, client id, no tags
    return data, header


@settings(max_examples=60)
@given(cut=st.integers(0, 200), noise=st.binary(max_size=16),
       flips=st.lists(st.tuples(st.integers(0, 200), st.integers(1, 255)), max_size=6))
def test_damaged_bodies_are_answered_with_an_error_or_closed(
    broker: BrokerProcess, control: Control, cut: int, noise: bytes, flips: list[tuple[int, int]]
) -> None:
    data, start = _frame()
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
        assert ErrorCode.of(code) in ANSWERS | {ErrorCode.UNSUPPORTED_VERSION, ErrorCode.GROUP_AUTHORIZATION_FAILED,
                                                ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.NOT_COORDINATOR}, (
            ErrorCode.of(code))
    control.heartbeat()
