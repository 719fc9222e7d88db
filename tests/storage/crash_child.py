"""Child process of ``test_crash.py``: appends batches to one partition until it is killed.

Usage: ``python crash_child.py <log dir> <variant> <seed> <round>``.  Prints ``ready <log end>``
once the log is open, then for every append ``w`` (``W`` for a large one, about 1 MB, whose
write a kill can tear) just before it and ``<first> <last> <count> <tag>`` once it completed; the
records of that append have keys ``<tag>:<i>`` and values made of the tag repeated.
"""

from __future__ import annotations

import random
import sys

from odradek.records import BatchBuilder, Compression, LegacyBatchBuilder
from odradek.storage import LogManager

TS0 = 1_700_000_000_000

VARIANTS: dict[str, dict[str, object]] = {
    "flush-each": {"flush.messages": 1, "segment.bytes": 2 << 20, "index.interval.bytes": 4096},
    "defaults": {"segment.bytes": 2 << 20, "index.interval.bytes": 4096},
    "mixed-formats": {"segment.bytes": 2 << 20, "index.interval.bytes": 4096},
}


def build(rng: random.Random, variant: str, tag: str) -> tuple[bytes, int]:
    size = rng.choice((8, 100, 1000, 10_000, 1_000_000))
    n = rng.randint(1, max(1, min(12, 100_000 // size)))
    value = (tag.encode() * (size // len(tag) + 1))[:size]
    kind = rng.randrange(4) if variant == "mixed-formats" else 0
    if kind in (0, 1):
        b = BatchBuilder(compression=Compression.GZIP if kind == 1 and size < 5000 else Compression.NONE)
        for i in range(n):
            b.append(TS0 + i, f"{tag}:{i}".encode(), value)
        return b.build(), n
    # kind 2: magic 0 messages; kind 3: a magic 1 gzip wrapper
    legacy = LegacyBatchBuilder(kind - 2, compression=Compression.GZIP if kind == 3 else Compression.NONE)
    for i in range(n):
        legacy.append(TS0 + i, f"{tag}:{i}".encode(), value)
    return legacy.build(), n


def main() -> None:
    data_dir, variant, seed, round_ = sys.argv[1:5]
    rng = random.Random(int(seed))
    config = VARIANTS[variant]
    manager = LogManager([data_dir], config)
    log = manager.get_or_create("crash", 0, config)
    out = sys.stdout
    out.write(f"ready {log.log_end_offset}\n")
    out.flush()
    seq = 0
    while True:
        tag = f"r{round_}s{seq}"
        data, n = build(rng, variant, tag)
        out.write("W\n" if len(data) > 500_000 else "w\n")
        out.flush()
        info = log.append(data)
        out.write(f"{info.first_offset} {info.last_offset} {n} {tag}\n")
        out.flush()
        seq += 1


if __name__ == "__main__":
    main()
