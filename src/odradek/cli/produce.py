"""``odradek produce TOPIC``: send the lines of stdin as records, like kafka-console-producer
or ``kcat -P``.

Each line is one record (its line ending removed; an empty line is an empty value).  With
``--key-separator SEP`` a line is split at the first SEP into key and value (a line without SEP
is an error, as in kafka-console-producer with ``parse.key``).  ``--header NAME=VALUE`` adds a
header to every record; ``--partition N`` sends every record to partition N (default: the
default partitioner, murmur2 of the key, sticky for records without a key).

Nothing is printed on success (``--verbose`` prints a summary on stderr).  On failure — the
cluster cannot be reached within ``--timeout``, a record is rejected — it prints one line on
stderr and exits 1; records read before the failure may have been written.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from typing import TYPE_CHECKING, Any, BinaryIO

if TYPE_CHECKING:  # the client is imported when the command runs, not when `odradek` starts
    from odradek.client import Producer, RecordMetadata

__all__ = ["add_parser", "produce_lines", "run"]

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")


def add_parser(sub: Any) -> None:
    """Add the ``odradek produce`` subcommand (send lines of stdin as records, like kcat -P) and its options
    to the top-level subparsers ``sub``."""
    p = sub.add_parser(
        "produce",
        help="send lines of stdin as records (like kcat -P)",
        description="Send each line of standard input as one record to TOPIC. Prints nothing on success.",
    )
    p.add_argument("topic")
    p.add_argument(
        "-b",
        "--bootstrap-server",
        default="127.0.0.1:9092",
        help="host:port[,host:port] (default 127.0.0.1:9092)",
    )
    p.add_argument(
        "-K",
        "--key-separator",
        metavar="SEP",
        default=None,
        help="split each line at the first SEP into key and value",
    )
    p.add_argument(
        "-H",
        "--header",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="add a header to every record (repeatable)",
    )
    p.add_argument("-p", "--partition", type=int, default=None, help="send every record to this partition")
    p.add_argument(
        "-z", "--compression", choices=CODECS, default="none", help="compression codec (default none)"
    )
    p.add_argument(
        "--acks",
        choices=("0", "1", "all", "-1"),
        default="all",
        help="acknowledgements to wait for (default all)",
    )
    p.add_argument("--linger-ms", type=int, default=5, help="linger.ms (default 5)")
    p.add_argument("--batch-size", type=int, default=None, help="batch.size (default 16384)")
    p.add_argument(
        "-X",
        "--producer-property",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="any producer setting by its Kafka name, e.g. -X max.request.size=2097152 (repeatable)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        help="seconds to wait for the cluster and for delivery (default 30)",
    )
    p.add_argument("-v", "--verbose", action="store_true", help="print a summary on stderr")
    from odradek.cli.topics import add_connect_timeout

    add_connect_timeout(p)


def _pair(item: str, what: str) -> tuple[str, str]:
    name, sep, value = item.partition("=")
    if not sep or not name:
        raise ValueError(f"{what} {item!r} is not NAME=VALUE")
    return name, value


def _config(args: argparse.Namespace) -> dict[str, Any]:
    timeout_ms = max(1, int(args.timeout * 1000))
    config: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap_server,
        "client.id": "odradek-produce",
        "acks": args.acks,
        "enable.idempotence": args.acks in ("all", "-1"),
        "compression.type": args.compression,
        "linger.ms": args.linger_ms,
        "max.block.ms": timeout_ms,
        "delivery.timeout.ms": timeout_ms,
        "request.timeout.ms": min(timeout_ms, 30000),
    }
    if args.batch_size is not None:
        config["batch.size"] = args.batch_size
    for item in args.producer_property:
        name, value = _pair(item, "producer property")
        if value.lstrip("-").isdigit():
            config[name] = int(value)
        elif value.lower() in ("true", "false"):
            config[name] = value.lower() == "true"
        else:
            config[name] = value
    return config


def produce_lines(
    producer: Producer, topic: str, lines: BinaryIO, args: argparse.Namespace
) -> tuple[int, Counter[int], list[BaseException]]:
    """Send every line; returns (records sent, records per partition, delivery errors)."""
    headers = [(name, value.encode()) for name, value in (_pair(h, "header") for h in args.header)] or None
    sep = args.key_separator.encode() if args.key_separator is not None else None
    if sep == b"":
        raise ValueError("the key separator is empty")
    per_partition: Counter[int] = Counter()
    errors: list[BaseException] = []

    def delivered(err: BaseException | None, md: RecordMetadata | None) -> None:
        if err is not None:
            errors.append(err)
        elif md is not None:
            per_partition[md.partition] += 1

    count = 0
    for number, raw in enumerate(lines, 1):
        line = raw[:-1] if raw.endswith(b"\n") else raw
        if line.endswith(b"\r"):
            line = line[:-1]
        key: bytes | None = None
        if sep is not None:
            key, found, value = line.partition(sep)
            if not found:
                raise ValueError(f"line {number} has no key separator {args.key_separator!r}")
        else:
            value = line
        producer.send(topic, value, key=key, partition=args.partition, headers=headers, on_delivery=delivered)
        count += 1
        if errors:
            break
    return count, per_partition, errors


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def run(args: argparse.Namespace, stdin: BinaryIO | None = None) -> int:
    """Run ``odradek produce`` for the parsed ``args``, reading ``stdin`` (default: the process's);
    returns the exit status: 0, 1 when records failed or the cluster could not be reached (said on
    stderr), 130 when interrupted."""
    from odradek.cli.topics import check_reachable
    from odradek.client import Admin, ClientConfigError, Producer
    from odradek.errors import KafkaError

    t0 = time.monotonic()
    try:
        admin = Admin({"bootstrap.servers": args.bootstrap_server, "client.id": "odradek-produce"})
        try:
            unreachable = check_reachable(admin, args)
        finally:
            admin.close()
    except (ClientConfigError, ValueError) as exc:
        unreachable = _one_line(exc)
    except KafkaError as exc:
        unreachable = _one_line(exc)
    if unreachable is not None:
        print(f"odradek produce: {unreachable}", file=sys.stderr)
        return 1
    try:
        producer = Producer(_config(args))
    except (ClientConfigError, ValueError) as exc:
        print(f"odradek produce: {_one_line(exc)}", file=sys.stderr)
        return 1
    failure: BaseException | None = None
    count = 0
    per_partition: Counter[int] = Counter()
    errors: list[BaseException] = []
    try:
        count, per_partition, errors = produce_lines(producer, args.topic, stdin or sys.stdin.buffer, args)
    except (KafkaError, ConnectionError, TimeoutError, ValueError, TypeError) as exc:
        failure = exc
    except KeyboardInterrupt:
        failure = KeyboardInterrupt("interrupted")
    finally:
        pending = producer.flush(args.timeout)
        producer.close(1)
    if failure is None and errors:
        failure = errors[0]
    if failure is None and pending:
        failure = TimeoutError(f"{pending} batch(es) not acknowledged within {args.timeout:g} s")
    if failure is not None:
        failed = f" ({len(errors)} of {count} records failed)" if errors else ""
        print(f"odradek produce: {_one_line(failure)}{failed}", file=sys.stderr)
        return 130 if isinstance(failure, KeyboardInterrupt) else 1
    if args.verbose:
        parts = ", ".join(f"{p}: {n}" for p, n in sorted(per_partition.items()))
        print(
            f"produced {count} record(s) to {args.topic} in {time.monotonic() - t0:.3f} s"
            + (f" (partition {parts})" if parts else ""),
            file=sys.stderr,
        )
    return 0
