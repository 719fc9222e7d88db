"""Answers outside testing found different from Kafka's, on the wire:

- InitProducerId without a transactional id always hands out a new producer id at epoch 0, as
  Kafka's TransactionCoordinator does, whatever producer id and epoch it is given (it used to
  echo any producer id back with its epoch bumped: a client could take over another producer's
  id); a producer id without an epoch, or an epoch without an id, is INVALID_REQUEST.
"""

from __future__ import annotations

from pathlib import Path

from odradek.errors import ErrorCode
from odradek.protocol.messages.init_producer_id import InitProducerIdRequest
from odradek.testing import BrokerProcess, WireClient

T = 30.0


def test_init_producer_id_without_a_transactional_id_always_gives_a_new_id(tmp_path: Path) -> None:
    with BrokerProcess(tmp_path / "data") as broker:
        w = WireClient(broker.host, broker.port)
        try:

            def init(version: int, pid: int = -1, epoch: int = -1) -> tuple[int, int, int]:
                r = w.request(InitProducerIdRequest(
                    transactional_id=None, transaction_timeout_ms=60000, producer_id=pid, producer_epoch=epoch
                ), version)
                return int(r.error_code), int(r.producer_id), int(r.producer_epoch)

            code, first, epoch = init(4)
            assert (code, epoch) == (0, 0) and first >= 0
            seen = {first}
            # KIP-360's fields given (v3+): still a new id at epoch 0, never the one given
            for version, pid, given_epoch in ((4, first, 0), (3, first, 5), (4, first + 1000, 7), (4, 1 << 40, 0)):
                code, pid_back, epoch_back = init(version, pid, given_epoch)
                assert (code, epoch_back) == (0, 0), (version, pid, given_epoch)
                assert pid_back not in seen and pid_back != pid, (version, pid, given_epoch, pid_back)
                seen.add(pid_back)
            # one of the two without the other
            assert init(4, first, -1) == (ErrorCode.INVALID_REQUEST, -1, -1)
            assert init(3, -1, 0) == (ErrorCode.INVALID_REQUEST, -1, -1)
            r = w.request(InitProducerIdRequest(
                transactional_id="t", transaction_timeout_ms=60000, producer_id=-1, producer_epoch=3
            ), 4)
            assert r.error_code == ErrorCode.INVALID_REQUEST
            # before v3 the fields do not exist
            code, pid_back, epoch_back = init(2)
            assert (code, epoch_back) == (0, 0) and pid_back not in seen
        finally:
            w.close()
