"""The schema registry: lookups of a cached schema id per second, and register latency.

Run: ``python benchmarks/registry.py [--seconds 5] [--connections 4] [--registrations 200]``
(or ``python -m benchmarks.registry``).  Prints one JSON object.

One ``odradek serve`` with its registry.  Measured in the same run:

* ``lookups_per_s``: ``GET /schemas/ids/{id}`` of one registered schema (what a deserializer
  asks once per new id, and what a registry in front of many clients answers most), from
  ``connections`` client threads on keep-alive connections for ``seconds``; the reference is
  ``GET /`` on the same listener (the HTTP floor of the listener: parsing, routing, writing an
  answer, nothing of the registry), as ``ratio_to_http_floor``;
* ``register_ms``: the latency of registering a new schema (a new version of one subject each time:
  parse, compatibility check against the previous version, an acks=all append to ``_schemas`` and
  its replay), p50/p99/max over ``registrations``; the reference is a lookup's latency on the same
  connection, as ``register_p99_to_lookup_p99``.

Figures on the shared 2-core development machine are provisional; the window of each figure is
the first request to the last answer.
"""

from __future__ import annotations

import argparse
import http.client
import json
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

try:
    from odradek.testing import BrokerProcess
except ImportError:  # running from a checkout without an install
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from odradek.testing import BrokerProcess

MEDIA = "application/vnd.schemaregistry.v1+json"


def _rate(host: str, port: int, path: str, seconds: float, connections: int, depth: int) -> float:
    """Answered GETs of ``path`` per second from ``connections`` keep-alive connections, each
    with ``depth`` requests in flight (pipelined: the client is not what is measured)."""
    request = f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept: {MEDIA}\r\n\r\n".encode()
    with socket.create_connection((host, port), timeout=30) as probe:
        probe.sendall(request.replace(b"\r\n\r\n", b"\r\nConnection: close\r\n\r\n"))
        one = b""
        while chunk := probe.recv(65536):
            one += chunk
    size = len(one) - len(b"Connection: close\r\n")
    assert one.startswith(b"HTTP/1.1 200"), one[:100]
    counts = [0] * connections
    stop = time.monotonic() + seconds

    def worker(i: int) -> None:
        with socket.create_connection((host, port), timeout=30) as s:
            burst = request * depth
            while time.monotonic() < stop:
                s.sendall(burst)
                want = size * depth
                got = 0
                while got < want:
                    chunk = s.recv(min(1 << 20, want - got))
                    if not chunk:
                        raise ConnectionError("the registry closed the connection")
                    got += len(chunk)
                counts[i] += depth

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(connections)]
    started = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts) / (time.monotonic() - started)


def _latencies(conn: http.client.HTTPConnection, method: str, paths_bodies: list[tuple[str, bytes | None]]) -> list[float]:
    out = []
    for path, body in paths_bodies:
        headers = {"Accept": MEDIA, "Content-Type": MEDIA}
        t0 = time.perf_counter()
        conn.request(method, path, body=body, headers=headers)
        resp = conn.getresponse()
        resp.read()
        out.append((time.perf_counter() - t0) * 1000)
        assert resp.status == 200, (resp.status, path)
    return out


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=5.0)
    ap.add_argument("--connections", type=int, default=4)
    ap.add_argument("--registrations", type=int, default=200)
    ap.add_argument("--depth", type=int, default=32, help="requests in flight on each connection")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp) / "data", overrides={"schema.registry.listeners": "http://127.0.0.1:0",
                                                               "metrics.port": -1})
        broker.start()
        try:
            assert broker.registry_url is not None
            host, port_text = broker.registry_url.removeprefix("http://").rsplit(":", 1)
            port = int(port_text)
            conn = http.client.HTTPConnection(host, port, timeout=60)
            subject = "bench-value"
            fields = [{"name": "id", "type": "string"}]
            bodies = []
            for i in range(args.registrations):
                fields = [*fields, {"name": f"f{i}", "type": "int", "default": 0}]
                schema = json.dumps({"type": "record", "name": "Bench", "fields": fields})
                bodies.append((f"/subjects/{subject}/versions", json.dumps({"schema": schema}).encode()))
            register_ms = _latencies(conn, "POST", bodies)
            lookup_ms = _latencies(conn, "GET", [("/schemas/ids/1", None)] * args.registrations)
            conn.close()
            floor = _rate(host, port, "/", args.seconds, args.connections, args.depth)
            lookups = _rate(host, port, "/schemas/ids/1", args.seconds, args.connections, args.depth)
        finally:
            broker.stop()
    result = {
        "benchmark": "registry",
        "lookups_per_s": round(lookups),
        "http_floor_per_s": round(floor),
        "ratio_to_http_floor": round(lookups / floor, 3) if floor else None,
        "register_ms": {
            "p50": round(statistics.median(register_ms), 2),
            "p99": round(_pct(register_ms, 0.99), 2),
            "max": round(max(register_ms), 2),
            "count": len(register_ms),
        },
        "lookup_ms": {"p50": round(statistics.median(lookup_ms), 3), "p99": round(_pct(lookup_ms, 0.99), 3)},
        "register_p99_to_lookup_p99": round(_pct(register_ms, 0.99) / _pct(lookup_ms, 0.99), 1),
        "window": f"first request to last answer; lookups from {args.connections} keep-alive connections, "
        f"{args.depth} pipelined, for {args.seconds:g} s",
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
