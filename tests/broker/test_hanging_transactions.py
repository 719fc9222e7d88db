"""Hanging transactions (kafka-transactions.sh's find-hanging and abort): a transaction a
partition holds open while no coordinator knows it keeps the last stable offset - and every
read_committed consumer - where it is, until an operator aborts it."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path

import pytest

from odradek.cli.__main__ import main
from odradek.client import Admin, NewTopic, Producer
from odradek.records import BatchBuilder
from tests.broker.inprocess import hosted, running_broker

TOPIC = "ledger"


def _cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["transactions", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_find_hanging_and_abort_free_the_last_stable_offset(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    async def scenario() -> None:
        async with running_broker(tmp_path / "data") as broker:
            bootstrap = f"127.0.0.1:{broker.bound['PLAINTEXT'][1]}"
            conn = ["--bootstrap-server", bootstrap, "--timeout", "20"]

            def setup() -> None:
                with Admin({"bootstrap.servers": bootstrap}) as admin:
                    admin.create_topics([NewTopic(TOPIC, 1, 1)])

            await asyncio.to_thread(setup)
            p = await hosted(broker, TOPIC)
            # a plain record, then a transactional batch of a producer no coordinator knows
            # (its marker was lost): it hangs at offset 1
            plain = BatchBuilder()
            plain.append(int(time.time() * 1000), None, b"before")
            broker.replicas.append(p, bytearray(plain.build()), 1)
            hanging = BatchBuilder(producer_id=4242, producer_epoch=3, base_sequence=0, is_transactional=True)
            hanging.append(int(time.time() * 1000) - 60_000, None, b"lost")
            broker.replicas.append(p, bytearray(hanging.build()), 1)

            # a live transaction on the same partition: its coordinator knows it, so it does not hang
            live = Producer({"bootstrap.servers": bootstrap, "transactional.id": "live-1"})

            def open_live() -> None:
                live.init_transactions(20)
                live.begin_transaction()
                live.send(TOPIC, b"pending", partition=0)
                live.flush(20)

            await asyncio.to_thread(open_live)
            assert p.log.high_watermark == 3 and p.log.last_stable_offset == 1

            code, out, err = await asyncio.to_thread(
                _cli, capsys, "describe-producers", *conn, "--topic", TOPIC, "--partition", "0", "--output", "json")
            assert code == 0, err
            producers = {d["producer_id"]: d for d in json.loads(out)}
            assert producers[4242]["current_txn_start_offset"] == 1 and producers[4242]["producer_epoch"] == 3
            assert [d["current_txn_start_offset"] for pid, d in producers.items() if pid != 4242] == [2]

            code, out, err = await asyncio.to_thread(
                _cli, capsys, "find-hanging", *conn, "--topic", TOPIC, "--max-transaction-timeout", "0", "--output", "json")
            assert code == 0, err
            assert [(d["producer_id"], d["current_txn_start_offset"]) for d in json.loads(out)] == [(4242, 1)]

            code, out, err = await asyncio.to_thread(
                _cli, capsys, "abort", *conn, "--topic", TOPIC, "--partition", "0", "--start-offset", "7")
            assert code == 1 and "no transaction open at offset 7" in err
            code, out, err = await asyncio.to_thread(
                _cli, capsys, "abort", *conn, "--topic", TOPIC, "--partition", "0", "--start-offset", "1")
            assert code == 0, err
            assert "producer 4242" in out
            # the lost transaction is aborted: the LSO moves on to the live transaction
            assert p.log.last_stable_offset == 2
            assert [a.producer_id for a in p.log.aborted_transactions(0, 10)] == [4242]
            code, out, err = await asyncio.to_thread(
                _cli, capsys, "find-hanging", *conn, "--topic", TOPIC, "--max-transaction-timeout", "0", "--output", "json")
            assert code == 0 and json.loads(out) == []

            def finish_live() -> None:
                live.commit_transaction(20)
                live.close()

            await asyncio.to_thread(finish_live)
            for _ in range(200):  # the coordinator writes the marker right after answering
                if p.log.last_stable_offset == p.log.high_watermark:
                    break
                await asyncio.sleep(0.05)
            assert p.log.last_stable_offset == p.log.high_watermark == 5

    asyncio.run(scenario())
