"""``odradek consume TOPIC``: print records from a topic, like ``kcat -C`` or
kafka-console-consumer.

It reads by offset with the low-level :class:`~odradek.client.SimpleConsumer` (no consumer
group, nothing committed).  By default every partition is read from the end and records are
printed as they arrive (follow mode, stop with Ctrl-C); ``--exit`` stops at the end of every
partition, ``--count N`` after N records.  With ``--group G`` it reads as a member of consumer
group G instead (the group's partitions, from its committed offsets), committing the offset after
each record it printed.  ``--topic`` and ``--from-beginning`` are kafka-console-consumer's spellings.

Output: the value of each record and a newline, or with ``--format`` a string in which

====  =========================================================
%s    value (also ``%v``)                %S    value length in bytes (-1 for null)
%k    key                                %K    key length in bytes (-1 for null)
%t    topic                              %p    partition
%o    offset                             %T    timestamp (ms since the epoch)
%h    headers as ``name=value,...``      %%    a percent sign
\\n   newline   \\t  tab   \\r  carriage return   \\\\  backslash
====  =========================================================

(the letters are kcat's).  A null key or value prints as nothing (``NULL`` with
``--print-null``).  ``--key-separator SEP`` prints ``key SEP value`` per line, as
kafka-console-consumer's ``print.key``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import select
import stat
import sys
from collections.abc import Callable
from typing import Any, BinaryIO

from odradek.cli.topics import add_connect_timeout, check_reachable
from odradek.client import Admin, Consumer
from odradek.client.consumer_simple import ConsumerRecord, SimpleConsumer
from odradek.client.errors import OffsetOutOfRangeError
from odradek.errors import ErrorCode, KafkaError

__all__ = ["add_parser", "compile_format", "run"]

Formatter = Callable[[ConsumerRecord], bytes]


def add_parser(sub: Any) -> None:
    """Add the ``odradek consume`` subcommand (print records of a topic, like kcat -C) and its options to the
    top-level subparsers ``sub``."""
    p = sub.add_parser(
        "consume",
        help="print records of a topic (like kcat -C)",
        description="Print records of a topic by offset (no consumer group). Follows new records until "
        "interrupted unless --exit or --count is given.",
        # the epilog is printed as written (argparse %-formats only the help of arguments)
        epilog="FORMAT: %s/%v value, %S value length, %k key, %K key length, %t topic, %p partition, "
        "%o offset, %T timestamp (ms), %h headers (name=value,...), %% percent, \\n \\t \\r \\\\ escapes.",
    )
    p.add_argument("topic", nargs="?", help="the topic (or --topic, as kafka-console-consumer spells it)")
    p.add_argument("-t", "--topic", dest="topic_option", metavar="TOPIC", help="the topic (kafka-console-consumer's spelling)")
    p.add_argument("-b", "--bootstrap-server", default="127.0.0.1:9092", help="host:port[,host:port] (default 127.0.0.1:9092)")
    p.add_argument("-p", "--partition", type=int, action="append", default=None, help="read only this partition (repeatable; default all)")
    start = p.add_mutually_exclusive_group()
    start.add_argument(
        "-o",
        "--offset",
        default="end",
        help="where to start: beginning, end (default), N (absolute offset) or -N (the last N records of each partition)",
    )
    start.add_argument(
        "--from-beginning", dest="offset", action="store_const", const="beginning",
        help="the same as --offset beginning (kafka-console-consumer's spelling)",
    )  # fmt: skip
    start.add_argument("--from-time", metavar="ISO8601", help="start at the first record at or after this time (UTC unless a zone is given)")
    p.add_argument("-c", "--count", type=int, default=None, help="stop after N records")
    p.add_argument(
        "-g", "--group", metavar="GROUP",
        help="read as a member of this consumer group: its partitions, from its committed offsets (else from "
        "--offset beginning|end), committing what was printed",
    )  # fmt: skip
    p.add_argument("-e", "--exit", action="store_true", help="stop at the end of every partition instead of waiting for more")
    p.add_argument("-f", "--format", default=None, help="output format (see below); default: the value and a newline")
    p.add_argument("-K", "--key-separator", default=None, metavar="SEP", help="print key SEP value (ignored with --format)")
    p.add_argument("-Z", "--print-null", action="store_true", help="print NULL for null keys and values")
    p.add_argument("--timeout", type=float, default=10.0, help="seconds to wait for the cluster on each request (default 10)")
    add_connect_timeout(p)


# -- output -----------------------------------------------------------------------------------
def _bytes(x: Any, null: bytes) -> bytes:
    if x is None:
        return null
    if isinstance(x, (bytes, bytearray, memoryview)):
        return bytes(x)
    return str(x).encode()


def _headers(headers: list[tuple[str, bytes | None]], null: bytes) -> bytes:
    return b",".join(name.encode() + b"=" + (null if v is None else bytes(v)) for name, v in headers)


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "0": "\0"}


def compile_format(fmt: str, *, print_null: bool = False) -> Formatter:
    """Turn a kcat-style format string into a function from a record to bytes."""
    null = b"NULL" if print_null else b""
    parts: list[bytes | Callable[[ConsumerRecord], bytes]] = []
    literal: list[str] = []

    def flush() -> None:
        if literal:
            parts.append("".join(literal).encode())
            literal.clear()

    fields: dict[str, Callable[[ConsumerRecord], bytes]] = {
        "s": lambda r: _bytes(r.value, null),
        "v": lambda r: _bytes(r.value, null),
        "S": lambda r: str(-1 if r.value is None else len(_bytes(r.value, b""))).encode(),
        "k": lambda r: _bytes(r.key, null),
        "K": lambda r: str(-1 if r.key is None else len(_bytes(r.key, b""))).encode(),
        "t": lambda r: r.topic.encode(),
        "p": lambda r: str(r.partition).encode(),
        "o": lambda r: str(r.offset).encode(),
        "T": lambda r: str(r.timestamp).encode(),
        "h": lambda r: _headers(r.headers, null),
    }
    i = 0
    while i < len(fmt):
        c = fmt[i]
        if c in "%\\" and i + 1 < len(fmt):
            nxt = fmt[i + 1]
            if c == "%" and nxt == "%":
                literal.append("%")
            elif c == "%" and nxt in fields:
                flush()
                parts.append(fields[nxt])
            elif c == "\\" and nxt in _ESCAPES:
                literal.append(_ESCAPES[nxt])
            else:
                raise ValueError(f"unknown format sequence {c}{nxt} in {fmt!r}")
            i += 2
            continue
        if c == "%":
            raise ValueError(f"format {fmt!r} ends with a lone %")
        literal.append(c)
        i += 1
    flush()
    if all(isinstance(x, bytes) for x in parts):
        const = b"".join(x for x in parts if isinstance(x, bytes))
        return lambda r: const

    def render(r: ConsumerRecord) -> bytes:
        return b"".join(x if isinstance(x, bytes) else x(r) for x in parts)

    return render


def _default_formatter(args: argparse.Namespace) -> Formatter:
    null = b"NULL" if args.print_null else b""
    if args.key_separator is not None:
        sep = args.key_separator.encode()
        return lambda r: _bytes(r.key, null) + sep + _bytes(r.value, null) + b"\n"
    return lambda r: _bytes(r.value, null) + b"\n"


# -- start positions ---------------------------------------------------------------------------
def _parse_time(text: str) -> int:
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise ValueError(f"--from-time {text!r} is not an ISO 8601 time") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    return int(when.timestamp() * 1000)


def _start_offsets(c: SimpleConsumer, topic: str, partitions: list[int], args: argparse.Namespace) -> dict[int, int]:
    out: dict[int, int] = {}
    if args.from_time is not None:
        ts = _parse_time(args.from_time)
        for p in partitions:
            found = c.offset_for_time(topic, p, ts)
            out[p] = found if found is not None else c.latest_offset(topic, p)
        return out
    spec = str(args.offset).strip().lower()
    for p in partitions:
        if spec in ("beginning", "earliest", "start"):
            out[p] = c.earliest_offset(topic, p)
        elif spec in ("end", "latest"):
            out[p] = c.latest_offset(topic, p)
        else:
            try:
                n = int(spec)
            except ValueError:
                raise ValueError(f"--offset must be beginning, end, N or -N, not {args.offset!r}") from None
            if n >= 0:
                earliest, latest = c.earliest_offset(topic, p), c.latest_offset(topic, p)
                if not earliest <= n <= latest:
                    raise OffsetOutOfRangeError(topic, p, n, earliest, latest)
                out[p] = n
            else:
                out[p] = max(c.latest_offset(topic, p) + n, c.earliest_offset(topic, p))
    return out


# -- main loop ---------------------------------------------------------------------------------
def _reader_gone(out: BinaryIO) -> bool:
    """Whether ``out`` is a pipe whose reader has gone (``| head`` had enough): noticed between
    fetches, so that following a quiet topic does not wait for the next record to find out."""
    try:
        fd = out.fileno()
        if not stat.S_ISFIFO(os.fstat(fd).st_mode):
            return False
        poller = select.poll()
        poller.register(fd, 0)  # POLLERR is reported whatever the mask
        return any(events & select.POLLERR for _fd, events in poller.poll(0))
    except (OSError, ValueError, AttributeError):
        return False


_RESET = {"beginning": "earliest", "earliest": "earliest", "start": "earliest", "end": "latest", "latest": "latest"}


def consume_group(args: argparse.Namespace, out: BinaryIO, formatter: Formatter) -> int:
    """``--group``: a group member; commits the offset after each record printed (nothing more)."""
    spec = str(args.offset).strip().lower()
    if spec not in _RESET or args.from_time is not None or args.partition:
        raise ValueError("with --group, --offset is beginning or end (where a group without committed offsets "
                         "starts); --partition and --from-time do not apply")  # fmt: skip
    timeout_ms = max(int(args.timeout * 1000), 1)
    consumer = Consumer({
        "bootstrap.servers": args.bootstrap_server, "client.id": "odradek-consume", "group.id": args.group,
        "auto.offset.reset": _RESET[spec], "enable.auto.commit": False, "request.timeout.ms": timeout_ms,
    })  # fmt: skip
    admin: Admin | None = None
    done: dict[tuple[str, int], int] = {}
    try:
        consumer.subscribe([args.topic])
        remaining = args.count
        while remaining is None or remaining > 0:
            if _reader_gone(out):
                return 0
            records = consumer.poll(0.2 if args.exit else 0.5)
            if remaining is not None:
                records = records[:remaining]
                remaining -= len(records)
            if records:
                out.write(b"".join(formatter(r) for r in records))
                out.flush()
                for r in records:
                    done[(r.topic, r.partition)] = r.offset + 1
                consumer.commit(dict(done))
                continue
            if args.exit and consumer.assignment():
                admin = admin or Admin({"bootstrap.servers": args.bootstrap_server, "client.id": "odradek-consume"})
                tps = consumer.assignment()
                ends = admin.list_offsets(dict.fromkeys(tps, "latest"), timeout=args.timeout)
                if all(consumer.position(tp) >= ends[tp].offset for tp in tps):
                    return 0
        return 0
    finally:
        if admin is not None:
            admin.close()
        consumer.close(autocommit=False)


def consume(args: argparse.Namespace, out: BinaryIO) -> int:
    """Print records of ``args.topic`` to ``out`` (all partitions or those given, from the offset or time
    asked, formatted by ``--format``), as a group member with ``--group``; stops after ``--count`` records
    or, with ``--exit``, at the end of the partitions.  Returns the exit status; ValueError or KafkaError
    for a bad option or a missing topic or partition."""
    if args.count is not None and args.count < 0:
        raise ValueError("--count must be >= 0")
    formatter = compile_format(args.format, print_null=args.print_null) if args.format is not None else _default_formatter(args)
    if args.group is not None:
        return consume_group(args, out, formatter)
    timeout_ms = max(int(args.timeout * 1000), 1)
    config: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap_server,
        "client.id": "odradek-consume",
        "request.timeout.ms": timeout_ms,
        "socket.connection.setup.timeout.ms": timeout_ms,
        "fetch.max.wait.ms": 100 if args.exit else 500,
    }
    topic = args.topic
    with SimpleConsumer(config) as c:
        try:
            available = c.partitions_for(topic, timeout_ms=min(timeout_ms, 2000))
        except KafkaError as exc:
            if exc.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                raise KafkaError(exc.code, f"topic {topic!r} does not exist") from None
            raise
        partitions = sorted(set(args.partition)) if args.partition else available
        missing = [p for p in partitions if p not in available]
        if missing:
            raise ValueError(f"topic {topic!r} has no partition {missing[0]} (partitions: 0..{max(available)})")
        positions = _start_offsets(c, topic, partitions, args)
        remaining = args.count
        if remaining == 0:
            return 0
        active = set(partitions)
        if args.exit:
            for p in partitions:
                if positions[p] >= c.latest_offset(topic, p):
                    active.discard(p)
        while active:
            if _reader_gone(out):
                return 0
            fetched = c.multi_fetch({(topic, p): positions[p] for p in sorted(active)})
            for (_t, p), records in sorted(fetched.items()):
                if remaining is not None and len(records) >= remaining:
                    out.write(b"".join(formatter(r) for r in records[:remaining]))
                    out.flush()
                    return 0
                if records:
                    out.write(b"".join(formatter(r) for r in records))
                    if remaining is not None:
                        remaining -= len(records)
                positions[p] = records.next_offset
                if args.exit and records.high_watermark >= 0 and records.next_offset >= records.high_watermark:
                    active.discard(p)
            out.flush()
    return 0


def _unreachable(args: argparse.Namespace) -> str | None:
    admin = Admin({"bootstrap.servers": args.bootstrap_server, "client.id": "odradek-consume"})
    try:
        return check_reachable(admin, args)
    finally:
        admin.close()


def run(args: argparse.Namespace) -> int:
    """Run ``odradek consume`` for the parsed ``args``; writes records to stdout and returns the exit status:
    0, 1 with the error on stderr, 2 for a usage error."""
    out = sys.stdout.buffer
    if args.topic and args.topic_option and args.topic != args.topic_option:
        print(f"odradek consume: two different topics given: {args.topic!r} and {args.topic_option!r}", file=sys.stderr)
        return 2
    args.topic = args.topic or args.topic_option
    if not args.topic:
        print("odradek consume: a topic is required (TOPIC or --topic TOPIC)", file=sys.stderr)
        return 2
    try:
        unreachable = _unreachable(args)
        if unreachable is not None:
            print(f"odradek consume: {unreachable}", file=sys.stderr)
            return 1
        return consume(args, out)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        raise  # the reader went away (``| head``): the entry point exits quietly
    except OffsetOutOfRangeError as exc:
        print(f"odradek consume: {exc.message}", file=sys.stderr)
        return 1
    except KafkaError as exc:
        print(f"odradek consume: {exc.message or exc}", file=sys.stderr)
        return 1
    except (ConnectionError, TimeoutError, ValueError, OSError) as exc:
        print(f"odradek consume: {exc}", file=sys.stderr)
        return 1
