"""Password guessing against a SASL/PLAIN listener, as fast as one client thread can.

Run: ``python benchmarks/auth_guessing.py [--seconds 10] [--pipeline 64]`` (or
``python -m benchmarks.auth_guessing``).  Prints one JSON object.

One ``odradek serve`` with a SASL_PLAINTEXT listener (PLAIN, user ``alice``) and the default
``connection.failed.authentication.delay.ms`` (100).  One client thread, for ``seconds``: open a
connection, send ``pipeline`` SaslHandshake v1 + SaslAuthenticate pairs with wrong passwords in
one write, read until the broker closes the connection, count the SaslAuthenticate answers (the
guesses the broker evaluated and answered), reconnect.  Reported: guesses answered per second,
the most answered on one connection, connections made, and the broker's "Failed authentication"
log lines (rate-limited) against the failures.  Before issue 39: ~14,000 guesses/s and 87,000
log lines in 10 s.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import socket
import sys
import tempfile
import time
from pathlib import Path

try:
    from odradek.testing import BrokerProcess
except ImportError:  # running from a checkout without an install
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from odradek.testing import BrokerProcess

from odradek.protocol import ClientConnection
from odradek.protocol.messages.sasl_authenticate import SaslAuthenticateRequest, SaslAuthenticateResponse
from odradek.protocol.messages.sasl_handshake import SaslHandshakeRequest

JAAS = 'org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";'


def _one_connection(host: str, port: int, pipeline: int, first: int) -> int:
    """Answered guesses on one connection."""
    client = ClientConnection("guesser")
    stream = b"".join(
        client.send_request(SaslHandshakeRequest(mechanism="PLAIN"), 1)[1]
        + client.send_request(SaslAuthenticateRequest(auth_bytes=b"\x00alice\x00guess-%d" % (first + i)), 2)[1]
        for i in range(pipeline)
    )
    with socket.create_connection((host, port), timeout=30) as s:
        with contextlib.suppress(OSError):  # the broker may close before it has all of it
            s.sendall(stream)
        while True:
            try:
                chunk = s.recv(1 << 16)
            except OSError:
                break
            if not chunk:
                break
            client.receive_data(chunk)
    answered = 0
    while hasattr(ev := client.next_event(), "response"):
        if isinstance(ev.response, SaslAuthenticateResponse):  # type: ignore[union-attr]
            answered += 1
    return answered


def run(seconds: float, pipeline: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as d:
        broker = BrokerProcess(
            Path(d) / "data",
            listeners="PLAINTEXT://127.0.0.1:0,SASL_PLAINTEXT://127.0.0.1:0",
            overrides={"sasl.enabled.mechanisms": "PLAIN", "listener.name.sasl_plaintext.plain.sasl.jaas.config": JAAS},
            log_level="INFO",
        ).start()
        try:
            host, port = broker.endpoints["SASL_PLAINTEXT"]
            answered = connections = most = 0
            t0 = time.monotonic()
            while time.monotonic() - t0 < seconds:
                n = _one_connection(host, port, pipeline, answered)
                answered += n
                most = max(most, n)
                connections += 1
            elapsed = time.monotonic() - t0
            time.sleep(0.5)
            lines = [ln for ln in list(broker.stderr_lines) if "Failed authentication" in ln]
            summaries = [ln for ln in list(broker.stderr_lines) if "more failed authentications" in ln]
        finally:
            broker.stop()
    return {
        "seconds": round(elapsed, 2),
        "pipelined_pairs_per_connection": pipeline,
        "connections": connections,
        "guesses_answered": answered,
        "guesses_per_second": round(answered / elapsed, 1),
        "most_answered_on_one_connection": most,
        "failed_authentication_log_lines": len(lines),
        "suppressed_count_lines": len(summaries),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--pipeline", type=int, default=64)
    args = ap.parse_args()
    print(json.dumps(run(args.seconds, args.pipeline), indent=2))


if __name__ == "__main__":
    main()
