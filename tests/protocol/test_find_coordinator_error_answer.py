"""FindCoordinator's error answer names no node, as Kafka's (``Node.noNode()``: id -1, port -1), not
node 0 at host "" port 0, which a client could take for broker 0's address (seen while scripting
COORDINATOR_NOT_AVAILABLE for issue 44)."""

from __future__ import annotations

import pytest

from odradek.errors import ErrorCode
from odradek.protocol import error_response
from odradek.protocol.messages import RequestHeader
from odradek.protocol.messages.find_coordinator import FindCoordinatorRequest


@pytest.mark.parametrize("version", range(0, 7))
def test_the_error_answer_names_no_node(version: int) -> None:
    request = FindCoordinatorRequest(key="g", key_type=0, coordinator_keys=["g", "h"])
    header = RequestHeader(api_key=10, api_version=version, correlation_id=1, client_id="c")
    answer = error_response(header, request, ErrorCode.COORDINATOR_NOT_AVAILABLE)
    assert answer is not None
    answer.encode(version)  # fields of other versions keep their defaults
    if version < 4:
        assert (answer.error_code, answer.node_id, answer.port) == (ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, -1)
    else:
        assert [(c.key, c.error_code, c.node_id, c.port) for c in answer.coordinators] == [
            ("g", ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, -1), ("h", ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, -1)
        ]
