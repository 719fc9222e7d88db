"""A minimal blocking Kafka client over the sans-I/O ClientConnection, for broker tests."""

from __future__ import annotations

import socket
from typing import Any

from odradek.protocol import NEED_DATA, ClientConnection, Message, ResponseReceived


class WireClient:
    def __init__(self, host: str, port: int, client_id: str = "wire-test") -> None:
        self.sock = socket.create_connection((host, port), timeout=10)
        self.conn = ClientConnection(client_id=client_id)

    def request(self, message: Message, version: int) -> Any:
        _cid, data = self.conn.send_request(message, version)
        self.sock.sendall(data)
        while True:
            ev = self.conn.next_event()
            if isinstance(ev, ResponseReceived):
                return ev.response
            if ev is not NEED_DATA:
                raise ConnectionError(f"unexpected event {ev!r}")
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("broker closed the connection")
            self.conn.receive_data(chunk)

    def close(self) -> None:
        self.sock.close()
