"""Child process of ``test_scale.py``: creates or opens many empty partitions, measures itself.

Usage: ``python scale_child.py create|open|crash|fill <log dir> <count>``.  ``create`` makes
``count`` partitions, ``open`` opens what is there; both end with a clean shutdown and print one
JSON object: seconds taken, peak RSS (``VmHWM``) and RSS before the storage was touched, open
file descriptors and memory maps.  ``crash`` opens and exits at once without a shutdown (the
active segments' indexes stay preallocated, and the next start is unclean).  ``fill`` appends
``count`` batches of 1.5 MiB to one partition and exits without a shutdown (the next start recovers it all).
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from pathlib import Path


def status(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(field)


def main() -> None:
    mode, directory, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 6 * count + 100  # per partition: the .log fd, and per index its fd and mmap's own dup
    if soft != resource.RLIM_INFINITY and soft < want:
        resource.setrlimit(
            resource.RLIMIT_NOFILE, (want if hard == resource.RLIM_INFINITY else min(want, hard), hard)
        )
    from odradek.records import BatchBuilder  # imported before measuring the baseline
    from odradek.storage import LogManager

    baseline = status("VmRSS")
    start = time.perf_counter()
    manager = LogManager([directory], {})
    if mode == "crash":
        os._exit(0)
    if mode == "fill":
        log = manager.get_or_create("big", 0, {"max.message.bytes": 4 << 20})
        batch = BatchBuilder()  # 1.5 MiB: larger than recovery's 1 MiB read chunk
        for i in range(24):
            batch.append(1_700_000_000_000, b"%d" % i, os.urandom(1 << 16))
        data = batch.build()
        for _ in range(count):
            log.append(data)
        os._exit(0)
    if mode == "create":
        for p in range(count):
            manager.get_or_create(f"scale-{p // 100}", p % 100)
    elapsed = time.perf_counter() - start
    result = {
        "mode": mode,
        "partitions": len(manager),
        "seconds": elapsed,
        "rss_baseline": baseline,
        "rss_peak": status("VmHWM"),
        "fds": len(os.listdir("/proc/self/fd")),
        "maps": Path("/proc/self/maps").read_text().count("\n"),
        "nofile_limit": resource.getrlimit(resource.RLIMIT_NOFILE)[0],
    }
    start = time.perf_counter()
    manager.shutdown()
    result["shutdown_seconds"] = time.perf_counter() - start
    print(json.dumps(result))


if __name__ == "__main__":
    main()
