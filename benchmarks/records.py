"""Benchmark of ``odradek.records`` against kafka-python's pure-Python record codec.

Run: ``python benchmarks/records.py`` (or ``python -m benchmarks.records``). Prints
one JSON object. Every figure is measured in the same run as its reference:

* ``v2_encode`` - build a 1000-record v2 batch (100-byte values, keys
  ``key-<i>``, timestamps 1 ms apart, no headers, uncompressed): Odradek's
  ``BatchBuilder`` vs kafka-python's ``DefaultRecordBatchBuilder``. Window: first
  ``append`` to the finished ``bytes`` (CRC included).
* ``v2_decode`` - decode that batch, building every field of every record
  (offset, timestamp, key, value, headers; no lazy views), CRC checked by both:
  ``read_batches(...).records`` vs ``DefaultRecordBatch`` + ``validate_crc`` +
  iteration. ``v2_decode_touch`` additionally reads the five fields of every
  record in both.
* ``v2_validate`` - header parse + CRC-32C of every batch in a buffer of 64 such
  batches (and ``v2_validate_small``: 4096 one-record batches), in batches/s:
  ``iter_batch_headers(verify=True)`` vs ``MemoryRecords`` + ``validate_crc``.
  The raw ``crc32c`` throughput over the same bytes is the machine limit.

``info`` holds the same measurements on other workloads (random key/value
lengths, records with headers, compressed batches) without targets.
Each figure is the best of several repeats of a ~30 ms loop.
"""

from __future__ import annotations

import json
import platform
import random
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

try:
    import odradek.records as odr
except ImportError:  # running from a checkout without an install
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    import odradek.records as odr

import crc32c
import kafka
from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

TARGET_RATIO = 3.0
TS0 = 1_700_000_000_000
Rec = tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]


def best_time(fn: Callable[[], object], *, repeats: int = 7, window: float = 0.03) -> float:
    """Seconds per call: best over ``repeats`` loops of about ``window`` seconds each."""
    fn()
    t0 = time.perf_counter()
    fn()
    once = max(time.perf_counter() - t0, 1e-7)
    loops = max(1, int(window / once))
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(loops):
            fn()
        best = min(best, (time.perf_counter() - t0) / loops)
    return best


def workload(kind: str, n: int = 1000, seed: int = 1) -> list[Rec]:
    rnd = random.Random(seed)
    out: list[Rec] = []
    for i in range(n):
        if kind == "random":
            key: bytes | None = rnd.randbytes(rnd.randint(0, 40))
            value = rnd.randbytes(rnd.randint(20, 300))
        else:
            key = b"key-%d" % i
            value = rnd.randbytes(100)
        headers: list[tuple[str, bytes | None]] = []
        if kind == "headers":
            headers = [("trace-id", rnd.randbytes(16)), ("source", b"bench")]
        out.append((TS0 + i, key, value, headers))
    return out


def kp_encode(recs: list[Rec], codec: int = 0) -> bytes:
    b = DefaultRecordBatchBuilder(2, codec, False, -1, -1, -1, 1 << 30)
    for i, (ts, key, value, headers) in enumerate(recs):
        b.append(i, ts, key, value, headers)
    return bytes(b.build())


def odr_encode(recs: list[Rec], codec: int = 0) -> bytes:
    b = odr.BatchBuilder(compression=codec)
    for ts, key, value, headers in recs:
        b.append(ts, key, value, headers)
    return b.build()


def kp_decode(data: bytes) -> list[Any]:
    batch = DefaultRecordBatch(data)
    if not batch.validate_crc():
        raise RuntimeError("crc")
    return list(batch)


def odr_decode(data: bytes) -> list[odr.Record]:
    out: list[odr.Record] = []
    for batch in odr.read_batches(data):
        out.extend(batch.records)
    return out


def kp_decode_touch(data: bytes) -> int:
    n = 0
    for r in kp_decode(data):
        _ = (r.offset, r.timestamp, r.key, r.value, r.headers)
        n += 1
    return n


def odr_decode_touch(data: bytes) -> int:
    n = 0
    for r in odr_decode(data):
        _ = (r.offset, r.timestamp, r.key, r.value, r.headers)
        n += 1
    return n


def kp_validate(data: bytes) -> int:
    n = 0
    for batch in MemoryRecords(data):
        if not batch.validate_crc():
            raise RuntimeError("crc")
        n += 1
    return n


def odr_validate(data: bytes) -> int:
    n = 0
    for _ in odr.iter_batch_headers(data, verify=True):
        n += 1
    return n


def compare(
    name_ours: Callable[[], object], name_kp: Callable[[], object], units: float, unit: str
) -> dict[str, Any]:
    t_ours = best_time(name_ours)
    t_kp = best_time(name_kp)
    return {
        f"odradek_{unit}_per_s": round(units / t_ours),
        f"kafka_python_{unit}_per_s": round(units / t_kp),
        "ratio": round(t_kp / t_ours, 2),
    }


def check_equal(recs: list[Rec]) -> None:
    ours = odr_encode(recs)
    theirs = kp_encode(recs)
    # kafka-python writes partition leader epoch 0 where the Java client writes -1.
    if ours[:12] + ours[16:] != theirs[:12] + theirs[16:]:
        raise SystemExit("encoders disagree; benchmark would be meaningless")
    a = [(r.offset, r.timestamp, r.key, r.value, r.headers) for r in kp_decode(ours)]
    b = [tuple(r) for r in odr_decode(ours)]
    if a != b:
        raise SystemExit("decoders disagree; benchmark would be meaningless")


def main() -> None:
    main_recs = workload("fixed")
    check_equal(main_recs)
    check_equal(workload("random"))
    check_equal(workload("headers"))
    n = len(main_recs)
    data = odr_encode(main_recs)

    result: dict[str, Any] = {
        "benchmark": "records",
        "python": platform.python_version(),
        "kafka_python": kafka.__version__,
        "crc32c_hardware": bool(crc32c.hardware_based),
        "workload": {
            "records_per_batch": n,
            "value_bytes": 100,
            "keys": "key-<i>",
            "headers": 0,
            "batch_bytes": len(data),
            "compression": "none",
        },
        "target_ratio": TARGET_RATIO,
    }
    result["v2_encode"] = compare(lambda: odr_encode(main_recs), lambda: kp_encode(main_recs), n, "records")
    result["v2_decode"] = compare(lambda: odr_decode(data), lambda: kp_decode(data), n, "records")
    result["v2_decode_touch"] = compare(
        lambda: odr_decode_touch(data), lambda: kp_decode_touch(data), n, "records"
    )

    many = data * 64
    result["v2_validate"] = compare(lambda: odr_validate(many), lambda: kp_validate(many), 64, "batches")
    t_crc = best_time(lambda: crc32c.crc32c(many))
    result["v2_validate"]["odradek_gb_per_s"] = round(
        len(many) * result["v2_validate"]["odradek_batches_per_s"] / 64 / 1e9, 2
    )
    result["v2_validate"]["crc32c_limit_gb_per_s"] = round(len(many) / t_crc / 1e9, 2)
    small = odr_encode(main_recs[:1]) * 4096
    result["v2_validate_small"] = compare(
        lambda: odr_validate(small), lambda: kp_validate(small), 4096, "batches"
    )

    info: dict[str, Any] = {}
    for kind in ("random", "headers"):
        recs = workload(kind)
        d = odr_encode(recs)
        info[f"v2_encode_{kind}"] = compare(
            lambda r=recs: odr_encode(r), lambda r=recs: kp_encode(r), n, "records"
        )
        info[f"v2_decode_{kind}"] = compare(lambda d=d: odr_decode(d), lambda d=d: kp_decode(d), n, "records")
    for codec in (odr.Compression.GZIP, odr.Compression.LZ4, odr.Compression.ZSTD):
        d = odr_encode(main_recs, codec)
        info[f"v2_decode_{codec.name.lower()}"] = compare(
            lambda d=d: odr_decode(d), lambda d=d: kp_decode(d), n, "records"
        )
    result["info"] = info
    result["pass"] = all(result[k]["ratio"] >= TARGET_RATIO for k in ("v2_encode", "v2_decode"))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
