"""Micro-benchmark of the protocol codec: encode and decode of the requests and responses the
data path and clients exchange most, and the import time of the protocol package.

Run: ``python benchmarks/protocol.py [--compare SRC ...]``. Prints one JSON object. Without
``--compare`` it measures the ``odradek`` it imports. With ``--compare SRC_A SRC_B ...`` it
measures each source tree (a directory holding the ``odradek`` package, e.g. a worktree's
``src``) in its own long-lived subprocess, the trees taking turns loop by loop (``--rounds``
timed loops of ~20 ms per case and tree) so that both see the same machine load, and reports the
best loop of each case per tree and the ratio of every tree to the first (``> 1``: slower).

Cases (CPU ns per call, the best of the timed loops):

* ``produce_req_v{7,9}``: a ProduceRequest with one topic of 3 partitions of 512-byte records;
  ``decode`` is the broker's ``decode_request`` (records are views), ``encode`` the client's
  ``encode_request``.  (With larger records the encode figure is the copy of the records into a
  growing ``bytearray``, whose cost depends on where the allocator can grow it: it moves by
  +-30 % with what else the process allocated, whatever the codec.)
* ``produce_resp_v9``: the answer to it, ``encode`` as the broker does
  (``encode_response_parts``), ``decode`` as a client does (``decode_response``).
* ``fetch_req_v12`` / ``fetch_req_v15_follower``: a consumer's Fetch of 3 partitions and a
  follower's of 200 partitions over 20 topics.
* ``fetch_resp_v12``: 3 partitions with 64 KiB of records each (``encode`` with file regions
  left as holes, as the broker sends them).
* ``metadata_req_v12`` (5 topics) and ``metadata_resp_v12`` (3 brokers, 20 topics of 6
  partitions with 3 replicas).
* ``import_ms``: ``python -X importtime -c "import odradek.protocol"``, the cumulative time of
  ``odradek.protocol`` (median of 7 fresh interpreters); ``import_all_messages_ms``: the wall
  time of importing every request and response module (what a broker loads at start-up);
  ``first_fetch_ms``: the first decode of a Fetch request and encode of its answer in a fresh
  interpreter (loading, or building, that API's codec).  With byte-code cached (as an installed
  package, or a checkout after ``scripts/test.sh``'s compileall) and, ``*_nopyc``, compiled from
  source (a checkout run with PYTHONDONTWRITEBYTECODE).
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()


def loop_time(fn: Callable[[], object], loops: int) -> float:
    """CPU nanoseconds per call over ``loops`` calls (CPU time: on a shared machine, the time
    the process was not running does not count)."""
    t0 = time.thread_time_ns()
    for _ in range(loops):
        fn()
    return (time.thread_time_ns() - t0) / loops


def loops_for(fn: Callable[[], object], window: float = 0.02) -> int:
    fn()
    t0 = time.perf_counter()
    fn()
    return max(1, int(window / max(time.perf_counter() - t0, 1e-7)))


class _Region:
    """A file region stand-in: what ``encode_response_parts`` leaves as a hole."""

    def __init__(self, n: int) -> None:
        self.length = n

    def to_bytes(self) -> bytes:
        return bytes(self.length)


def cases() -> dict[str, Callable[[], object]]:
    import uuid

    from odradek.protocol import RequestHeader, decode_request, decode_response, encode_request
    from odradek.protocol._api import encode_response_parts
    from odradek.protocol.messages.fetch import FetchRequest, FetchResponse
    from odradek.protocol.messages.metadata import MetadataRequest, MetadataResponse
    from odradek.protocol.messages.produce import ProduceRequest, ProduceResponse

    out: dict[str, Callable[[], object]] = {}

    def header(key: int, version: int) -> RequestHeader:
        return RequestHeader(api_key=key, api_version=version, correlation_id=42, client_id="rdkafka")

    def request_pair(name: str, msg: Any, key: int, version: int) -> None:
        h = header(key, version)
        data = encode_request(h, msg)
        out[f"{name}.encode"] = lambda: encode_request(h, msg)
        out[f"{name}.decode"] = lambda: decode_request(data)

    def response_pair(name: str, msg: Any, key: int, version: int) -> None:
        h = header(key, version)
        data = bytes(encode_response_parts(h, msg))
        out[f"{name}.encode"] = lambda: encode_response_parts(h, msg)
        out[f"{name}.decode"] = lambda: decode_response(h, data)

    records = bytes(512)
    P = ProduceRequest
    for v in (7, 9):
        produce = P(
            transactional_id=None,
            acks=-1,
            timeout_ms=30000,
            topic_data=[
                P.TopicProduceData(
                    name="events", partition_data=[P.PartitionProduceData(index=i, records=records) for i in range(3)]
                )
            ],
        )
        request_pair(f"produce_req_v{v}", produce, 0, v)
    PR = ProduceResponse
    produce_resp = PR(
        responses=[
            PR.TopicProduceResponse(
                name="events",
                partition_responses=[
                    PR.PartitionProduceResponse(index=i, error_code=0, base_offset=1000 * i, log_start_offset=0)
                    for i in range(3)
                ],
            )
        ]
    )
    response_pair("produce_resp_v9", produce_resp, 0, 9)

    F = FetchRequest
    fetch = F(
        replica_id=-1,
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=52428800,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            F.FetchTopic(
                topic="events",
                partitions=[F.FetchPartition(partition=i, fetch_offset=1000, partition_max_bytes=1048576) for i in range(3)],
            )
        ],
        rack_id="",
    )
    request_pair("fetch_req_v12", fetch, 1, 12)
    follower = F(
        replica_state=F.ReplicaState(replica_id=2, replica_epoch=5),
        max_wait_ms=500,
        min_bytes=1,
        max_bytes=10485760,
        topics=[
            F.FetchTopic(
                topic_id=uuid.UUID(int=t + 1),
                partitions=[
                    F.FetchPartition(partition=i, current_leader_epoch=3, fetch_offset=5000, partition_max_bytes=1048576)
                    for i in range(10)
                ],
            )
            for t in range(20)
        ],
    )
    request_pair("fetch_req_v15_follower", follower, 1, 15)
    FR = FetchResponse
    fetch_resp = FR(
        responses=[
            FR.FetchableTopicResponse(
                topic="events",
                partitions=[
                    FR.PartitionData(
                        partition_index=i, high_watermark=100000, last_stable_offset=100000, records=_Region(65536)
                    )
                    for i in range(3)
                ],
            )
        ]
    )
    h12 = header(1, 12)
    out["fetch_resp_v12.encode"] = lambda: encode_response_parts(h12, fetch_resp)
    fetch_resp_bytes = FR(
        responses=[
            FR.FetchableTopicResponse(
                topic="events",
                partitions=[
                    FR.PartitionData(
                        partition_index=i, high_watermark=100000, last_stable_offset=100000, records=bytes(65536)
                    )
                    for i in range(3)
                ],
            )
        ]
    )
    data12 = bytes(encode_response_parts(h12, fetch_resp_bytes))
    out["fetch_resp_v12.decode"] = lambda: decode_response(h12, data12)

    M = MetadataRequest
    request_pair("metadata_req_v12", M(topics=[M.MetadataRequestTopic(name=f"topic-{i}") for i in range(5)]), 3, 12)
    MR = MetadataResponse
    meta = MR(
        brokers=[MR.MetadataResponseBroker(node_id=i, host="127.0.0.1", port=9092 + i) for i in range(3)],
        cluster_id="abc",
        controller_id=0,
        topics=[
            MR.MetadataResponseTopic(
                name=f"topic-{t}",
                topic_id=uuid.UUID(int=t + 1),
                partitions=[
                    MR.MetadataResponsePartition(
                        partition_index=p, leader_id=p % 3, leader_epoch=1, replica_nodes=[0, 1, 2], isr_nodes=[0, 1, 2]
                    )
                    for p in range(6)
                ],
            )
            for t in range(20)
        ],
    )
    response_pair("metadata_resp_v12", meta, 3, 12)
    return out


def _python(statement: str, tree: str, *flags: str) -> subprocess.CompletedProcess[str]:
    """Run ``statement`` in a fresh interpreter importing ``odradek`` from ``tree``."""
    env = {**os.environ, "PYTHONPATH": tree, "PYTHONDONTWRITEBYTECODE": "1"}
    env.pop("PYTHONPYCACHEPREFIX", None)
    return subprocess.run([sys.executable, *flags, "-c", statement], env=env, capture_output=True, text=True, check=True)


def import_ms(statement: str, module: str, tree: str, runs: int = 7) -> float:
    """Median over fresh interpreters of ``module``'s cumulative import time (ms)."""
    times = []
    for _ in range(runs):
        r = _python(statement, tree, "-X", "importtime")
        for line in r.stderr.splitlines():
            m = re.match(r"import time:\s+\d+ \|\s+(\d+) \|\s*(\S+)$", line)
            if m and m.group(2) == module:
                times.append(int(m.group(1)) / 1000)
    return round(statistics.median(times), 2)


def wall_ms(statement: str, tree: str, runs: int = 7) -> float:
    """Median over fresh interpreters of the wall time of ``statement`` (ms)."""
    timed = f"import time; t0 = time.perf_counter(); {statement}; print((time.perf_counter() - t0) * 1000)"
    return round(statistics.median(float(_python(timed, tree).stdout) for _ in range(runs)), 2)


def first_use_ms(tree: str, runs: int = 7) -> float:
    """Median over fresh interpreters of the first decode of a consumer's Fetch v12 request and
    encode of its answer, the protocol package already imported (ms): what the first request of
    an API costs a broker (loading the codec, or building it)."""
    from odradek.protocol import RequestHeader, encode_request
    from odradek.protocol.messages.fetch import FetchRequest as F

    h = RequestHeader(api_key=1, api_version=12, correlation_id=1, client_id="c")
    data = encode_request(h, F(topics=[F.FetchTopic(topic="t", partitions=[F.FetchPartition()])]))
    statement = (
        "import time; from odradek.protocol import decode_request, encode_response; "
        "from odradek.protocol.messages.fetch import FetchResponse; "
        f"data = bytes.fromhex('{data.hex()}'); t0 = time.perf_counter(); "
        "header, _ = decode_request(data); encode_response(header, FetchResponse()); "
        "print((time.perf_counter() - t0) * 1000)"
    )
    return round(statistics.median(float(_python(statement, tree).stdout) for _ in range(runs)), 2)


ALL_MESSAGES = (
    "import importlib; import odradek.protocol.messages as m; "
    "[importlib.import_module('odradek.protocol.messages.' + v[0]) for v in m.API_MODULES.values()]"
)


def imports() -> dict[str, float]:
    """Import and first-use times, with byte-code compiled beforehand (as an installed package
    has it, or a checkout after ``scripts/test.sh``'s compileall) and compiled from source at
    import (``_nopyc``: a checkout run with PYTHONDONTWRITEBYTECODE), each in a copy of the tree."""
    import odradek

    source = Path(odradek.__path__[0])
    trees = {}
    for label in ("", "_nopyc"):  # copies of this tree's odradek, with and without byte-code
        tree = tempfile.mkdtemp(prefix="bench-tree-")
        shutil.copytree(source, Path(tree) / "odradek", ignore=shutil.ignore_patterns("__pycache__"))
        trees[label] = tree
    compileall.compile_dir(str(Path(trees[""]) / "odradek"), quiet=1)
    result: dict[str, float] = {}
    try:
        for label, tree in trees.items():
            result["import_ms" + label] = import_ms("import odradek.protocol", "odradek.protocol", tree)
            result["import_all_messages_ms" + label] = wall_ms(ALL_MESSAGES, tree)
            result["first_fetch_ms" + label] = first_use_ms(tree)
    finally:
        for tree in trees.values():
            shutil.rmtree(tree, ignore_errors=True)
    return result


def child() -> None:
    """Serve ``--compare``: for each case name read from stdin, one timed loop (its loop count
    fixed the first time), the ns per call written back."""
    table = cases()
    loops: dict[str, int] = {}
    for line in sys.stdin:
        name = line.strip()
        if name == "?":
            print(json.dumps(sorted(table)), flush=True)
            continue
        if name == "imports":
            print(json.dumps(imports()), flush=True)
            continue
        fn = table[name]
        if name not in loops:
            loops[name] = loops_for(fn)
        print(loop_time(fn, loops[name]), flush=True)


def measure(repeats: int = 7) -> dict[str, float]:
    result = {}
    for name, fn in sorted(cases().items()):
        n = loops_for(fn)
        result[name] = round(min(loop_time(fn, n) for _ in range(repeats)))
    return {**result, **imports()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--compare", nargs="+", metavar="SRC", help="source trees to measure, alternating")
    p.add_argument("--rounds", type=int, default=15, help="timed loops per case and tree (best kept)")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child()
        return
    if not args.compare:
        print(json.dumps(measure(), indent=1))
        return
    children = {}
    for src in args.compare:
        env = {**os.environ, "PYTHONPATH": str(Path(src).resolve())}
        children[src] = subprocess.Popen(
            [sys.executable, str(HERE), "--child"], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )

    def ask(src: str, what: str) -> Any:
        proc = children[src]
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(what + "\n")
        proc.stdin.flush()
        return json.loads(proc.stdout.readline())

    try:
        names = ask(args.compare[0], "?")
        best: dict[str, dict[str, float]] = {src: {} for src in args.compare}
        for name in names:
            for _ in range(args.rounds):  # the trees alternate, loop by loop
                for src in args.compare:
                    t = ask(src, name)
                    best[src][name] = min(best[src].get(name, t), t)
        for src in args.compare:
            best[src] = {k: round(v) for k, v in best[src].items()}
        for _ in range(3):  # import times: medians of 7 fresh interpreters, the trees taking turns
            for src in args.compare:
                for k, v in ask(src, "imports").items():
                    best[src][k] = min(best[src].get(k, v), v)
    finally:
        for proc in children.values():
            assert proc.stdin is not None
            proc.stdin.close()
            proc.wait()
    first = best[args.compare[0]]
    report: dict[str, Any] = {"rounds": args.rounds, "best": best, "ratio_to_first": {}}
    for src in args.compare[1:]:
        report["ratio_to_first"][src] = {k: round(v / first[k], 3) if first[k] else None for k, v in best[src].items()}
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
