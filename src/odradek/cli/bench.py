"""``odradek bench produce|consume|end-to-end``: Kafka's perf-test tools for any Kafka-protocol broker.

* ``produce`` — like ``kafka-producer-perf-test``: send ``--num-records`` records of
  ``--record-size`` bytes (or lines of ``--payload-file``) at ``--throughput`` records/s (-1: as
  fast as possible) and report throughput and the latency of each record, from ``produce()`` to
  its acknowledgement: average, maximum and the 50th, 95th, 99th and 99.9th percentiles.
  Measured from the first send to the last acknowledgement.
* ``consume`` — like ``kafka-consumer-perf-test``: read the topic with a consumer group (by
  default everything in it when the run starts) and print Kafka's columns (``start.time,
  end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, rebalance.time.ms,
  fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec``); fetch.* leave out the time the group took to form.
* ``end-to-end`` — like Kafka's ``EndToEndLatency``: send one record at a time and time it until
  a consumer (assigned every partition at its end) receives it.  The consumer long-polls (the
  client's default fetch wait), so the figure includes the broker waking a waiting fetch.

The client (``--client``): by default ``loadgen``, Odradek's compiled load generator
(``cli/loadgen/odradek_loadgen.c`` on librdkafka's C API, built with gcc on first use, see
:mod:`odradek.cli._loadgen`) when gcc and Debian's librdkafka headers are there, so the figures
are the broker's and not a Python client's; else confluent-kafka (librdkafka from Python) when it
is installed; else Odradek's own client.  ``--client confluent|odradek|loadgen`` chooses one.
An option the load generator cannot honour (``--payload-file``, ``--group``, ``--from-latest``,
``--progress``) makes the default choice run confluent-kafka instead, with a note on stderr, and
``--client loadgen`` refuse it.  Whichever client ran, the output has the same shape (the JSON
object the same keys; ``client`` names it).  Topics are created when missing (``--partitions``,
``--replication-factor``; else the broker's defaults).

While running, a progress line every ``--reporting-interval`` seconds (5) when the output is a
terminal (``--progress`` / ``--no-progress`` to choose; the load generator prints none, only the
result); then the summary, or with ``--json`` one JSON object on stdout.  Exit 1 when records
failed or the broker cannot be reached.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import random
import sys
import time
import uuid
from array import array
from collections.abc import Callable, Iterator, Mapping
from typing import Any, TextIO

from odradek.cli import _loadgen
from odradek.errors import OdradekError

__all__ = ["ProduceStats", "add_parser", "percentile", "run"]

MB = 1024 * 1024
CLIENTS = ("auto", "loadgen", "confluent", "odradek")
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
DEFAULT_TOPIC = "odradek-bench"


# -- arguments ------------------------------------------------------------------------------------


def add_parser(sub: Any) -> None:
    """Add the ``odradek bench`` subcommand (produce, consume and end-to-end throughput and latency, like
    kafka-producer-perf-test) and its options to the top-level subparsers ``sub``."""
    p = sub.add_parser(
        "bench",
        help="measure produce/consume throughput and latency (like kafka-producer-perf-test)",
        description="Performance tools in the manner of kafka-producer-perf-test, kafka-consumer-perf-test "
        "and Kafka's EndToEndLatency, for any Kafka-protocol broker.",
    )
    bsub = p.add_subparsers(dest="bench_command", required=True, metavar="COMMAND")

    def common(c: argparse.ArgumentParser, config_alias: str | None) -> None:
        c.add_argument(
            "-b", "--bootstrap-server", "--broker-list", dest="bootstrap_server", default="127.0.0.1:9092",
            help="host:port[,host:port] (default 127.0.0.1:9092)",
        )
        c.add_argument("-t", "--topic", default=DEFAULT_TOPIC, help=f"the topic (default {DEFAULT_TOPIC})")
        c.add_argument(
            "--client", choices=CLIENTS, default="auto",
            help="loadgen: Odradek's compiled load generator (C on librdkafka, built with gcc on first use; "
            "needs Debian's librdkafka-dev; prints no progress lines, only the result); confluent: "
            "confluent-kafka (librdkafka from Python); odradek: Odradek's own client; auto (default): loadgen "
            "when it can be built, else confluent-kafka when installed, else odradek (confluent-kafka also "
            "for the options loadgen lacks: --payload-file, --group, --from-latest, --progress)",
        )
        names = ["--command-config"] + ([config_alias] if config_alias else [])
        c.add_argument(
            *names, dest="command_config", metavar="FILE",
            help="client settings in a properties file (security settings, ...), for every client the tool makes",
        )
        c.add_argument("--json", action="store_true", help="print one JSON object instead of the text summary")
        c.add_argument(
            "--progress", action=argparse.BooleanOptionalAction, default=None,
            help="print a progress line every --reporting-interval seconds "
            "(default: when the output is a terminal, except with the load generator; on stderr with --json)",
        )
        c.add_argument(
            "--reporting-interval", type=float, default=5.0, metavar="SECONDS",
            help="seconds between progress lines (default 5)",
        )
        c.add_argument("--partitions", type=int, default=None, help="partitions of the topic when it is created")
        c.add_argument(
            "--replication-factor", type=int, default=None, help="replication factor of the topic when it is created"
        )  # fmt: skip

    def producer_options(c: argparse.ArgumentParser, acks_default: str) -> None:
        c.add_argument("--record-size", type=int, default=None, metavar="BYTES", help="size of each record's value")
        c.add_argument(
            "--acks", choices=("0", "1", "all", "-1"), default=acks_default,
            help=f"acknowledgements to wait for (default {acks_default})",
        )
        c.add_argument("--compression", choices=CODECS, default="none", help="compression codec (default none)")
        c.add_argument(
            "--producer-props", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
            help="producer settings by their Kafka names, e.g. linger.ms=10 batch.size=65536",
        )

    pr = bsub.add_parser(
        "produce", help="producer throughput and latency (kafka-producer-perf-test)",
        description="Send records as fast as asked and report throughput and per-record latency.",
    )
    common(pr, "--producer.config")
    pr.add_argument("--num-records", type=int, required=True, help="number of records to send")
    producer_options(pr, "all")
    pr.add_argument(
        "--payload-file", metavar="FILE",
        help="send values taken at random from this file's records (split at --payload-delimiter) "
        "instead of --record-size bytes",
    )
    pr.add_argument(
        "--payload-delimiter", default="\\n", help="separator of records in --payload-file (default \\n)"
    )
    pr.add_argument(
        "--throughput", type=float, default=-1, metavar="RECORDS_PER_SEC",
        help="target rate in records/s; -1 (default): no limit",
    )

    co = bsub.add_parser(
        "consume", help="consumer throughput (kafka-consumer-perf-test)",
        description="Read the topic with a consumer group and report throughput in Kafka's columns.",
    )
    common(co, "--consumer.config")
    co.add_argument(
        "--num-records", "--messages", dest="num_records", type=int, default=None,
        help="records to read (default: every record in the topic when the run starts)",
    )
    co.add_argument("--group", default=None, help="consumer group (default perf-consumer-<random>)")
    co.add_argument("--from-latest", action="store_true", help="start at the end of the topic, not the beginning")
    co.add_argument(
        "--timeout", type=float, default=10.0,
        help="give up after this many seconds without a record (default 10)",
    )
    co.add_argument(
        "--consumer-props", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
        help="consumer settings by their Kafka names, e.g. fetch.max.bytes=52428800",
    )

    ee = bsub.add_parser(
        "end-to-end", help="produce-to-consume latency, one record at a time (Kafka's EndToEndLatency)",
        description="Send one record at a time and time it until a consumer receives it.",
    )
    common(ee, None)
    ee.add_argument("--num-records", type=int, default=1000, help="number of round trips (default 1000)")
    producer_options(ee, "1")
    ee.add_argument(
        "--consumer-props", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
        help="consumer settings by their Kafka names",
    )
    ee.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for each record (default 60)")


# -- shared pieces --------------------------------------------------------------------------------


class BenchError(OdradekError):
    """A failure to report in one line (exit 1)."""


def _value(text: str) -> Any:
    if text.lstrip("-").isdigit():
        return int(text)
    if text.lower() in ("true", "false"):
        return text.lower() == "true"
    return text


def _pairs(items: list[str], what: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise BenchError(f"{what} {item!r} is not KEY=VALUE")
        out[name.strip()] = _value(value.strip())
    return out


def _properties(path: str | None) -> dict[str, Any]:
    """A Java properties file (``key=value`` or ``key: value``, ``#``/``!`` comments)."""
    if path is None:
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise BenchError(f"--command-config {path}: {exc.strerror or exc}") from exc
    out: dict[str, Any] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if cut <= 0:
            raise BenchError(f"--command-config {path}: {line!r} is not key=value")
        out[line[:cut].strip()] = _value(line[cut + 1 :].strip())
    return out


def _loadgen_blockers(args: argparse.Namespace) -> list[str]:
    """The options of this run that the load generator cannot honour."""
    out = []
    if getattr(args, "payload_file", None) is not None:
        out.append("--payload-file")
    if getattr(args, "group", None) is not None:
        out.append("--group")
    if getattr(args, "from_latest", False):
        out.append("--from-latest")
    if args.progress:
        out.append("--progress")
    return out


def _note(text: str) -> None:
    print(f"odradek bench: {text}", file=sys.stderr, flush=True)


def _client_kind(args: argparse.Namespace) -> str:
    """loadgen, confluent or odradek: the explicit ``--client``, or for auto the first that can run."""
    choice = args.client
    blockers = _loadgen_blockers(args)
    if choice == "loadgen":
        if blockers:
            raise BenchError(
                f"--client loadgen cannot honour {' and '.join(blockers)}: use --client confluent or odradek"
            )
        try:
            _loadgen.binary()
        except _loadgen.LoadgenUnavailable as exc:
            raise BenchError(f"--client loadgen: {' '.join(str(exc).split())}") from exc
        return "loadgen"
    if choice != "auto":
        if choice == "confluent" and not _have_confluent():
            raise BenchError("--client confluent: confluent-kafka is not installed (pip install confluent-kafka)")
        return choice
    fallback = "confluent" if _have_confluent() else "odradek"
    instead = f"running {'confluent-kafka' if fallback == 'confluent' else 'the odradek client'} instead"
    if _loadgen.missing() is None:  # gcc and the headers are here: the default is the load generator
        if blockers:
            _note(f"the load generator cannot honour {' and '.join(blockers)}: {instead}")
            return fallback
        try:
            _loadgen.binary()
        except _loadgen.LoadgenUnavailable as exc:
            _note(f"{str(exc).splitlines()[0]}: {instead}")
            return fallback
        return "loadgen"
    return fallback


def _have_confluent() -> bool:
    try:
        import confluent_kafka  # noqa: F401
    except ImportError:
        return False
    return True


def _client_name(kind: str) -> str:
    if kind == "confluent":
        import confluent_kafka

        def text(v: Any) -> str:  # a string, or (string, int) in older releases
            return str(v[0] if isinstance(v, tuple) else v)

        return f"confluent-kafka {text(confluent_kafka.version())} (librdkafka {text(confluent_kafka.libversion())})"
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"odradek {version('odradek')}"
    except PackageNotFoundError:
        return "odradek"


def _admin_config(args: argparse.Namespace, settings: Mapping[str, Any]) -> dict[str, Any]:
    from odradek.client import ADMIN_DEFAULTS

    conf = {k: v for k, v in settings.items() if k in ADMIN_DEFAULTS}
    conf["bootstrap.servers"] = args.bootstrap_server
    conf["client.id"] = "odradek-bench"
    return conf


def ensure_topic(args: argparse.Namespace, settings: Mapping[str, Any], timeout: float = 30.0) -> int:
    """Create ``args.topic`` if it does not exist; wait until each partition has a leader.
    Returns its partition count."""
    from odradek.client import Admin, NewTopic
    from odradek.errors import ErrorCode, KafkaError

    admin = Admin(_admin_config(args, settings))
    try:
        deadline = time.monotonic() + timeout
        if args.topic not in admin.list_topics(timeout=timeout):
            topic = NewTopic(args.topic, args.partitions or -1, args.replication_factor or -1)
            try:
                admin.create_topics([topic], timeout=timeout)
            except KafkaError as exc:  # created meanwhile by someone else (or auto-created)
                if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                    raise
        while True:
            try:
                desc = admin.describe_topics([args.topic], timeout=max(1.0, deadline - time.monotonic()))[args.topic]
                if desc.partitions and all(p.leader >= 0 for p in desc.partitions):
                    break
            except Exception:
                if time.monotonic() >= deadline:
                    raise
            if time.monotonic() >= deadline:
                raise BenchError(f"topic {args.topic}: partitions without a leader after {timeout:g} s")
            time.sleep(0.1)
        if args.partitions is not None and len(desc.partitions) != args.partitions:
            print(
                f"odradek bench: topic {args.topic} exists with {len(desc.partitions)} partitions; "
                f"--partitions {args.partitions} applies only when it is created",
                file=sys.stderr,
            )
        return len(desc.partitions)
    finally:
        admin.close()


def end_offsets(args: argparse.Namespace, settings: Mapping[str, Any]) -> dict[int, tuple[int, int]]:
    """(log start, high watermark) of every partition of the topic."""
    from odradek.client import Admin

    admin = Admin(_admin_config(args, settings))
    try:
        parts = [p.partition for p in admin.describe_topics([args.topic], timeout=30)[args.topic].partitions]
        tps = [(args.topic, p) for p in parts]
        starts = admin.list_offsets(dict.fromkeys(tps, "earliest"), timeout=30)
        ends = admin.list_offsets(dict.fromkeys(tps, "latest"), timeout=30)
        return {p: (starts[(args.topic, p)].offset, ends[(args.topic, p)].offset) for p in parts}
    finally:
        admin.close()


def percentile(ordered: Any, q: float) -> float:
    """The ``q`` quantile (0..1) of an ascending sequence, as Kafka's tool takes it (no interpolation)."""
    if not ordered:
        return 0.0
    return float(ordered[min(len(ordered) - 1, int(len(ordered) * q))])


def _progress_stream(args: argparse.Namespace) -> TextIO | None:
    stream = sys.stderr if args.json else sys.stdout
    enabled = args.progress if args.progress is not None else stream.isatty()
    return stream if enabled else None


def _emit(stream: TextIO | None, line: str) -> None:
    if stream is not None:
        print(line, file=stream, flush=True)


def _payloads(args: argparse.Namespace) -> list[bytes]:
    if args.payload_file is not None:
        if args.record_size is not None:
            raise BenchError("give either --record-size or --payload-file, not both")
        delimiter = args.payload_delimiter.encode().decode("unicode_escape").encode()
        try:
            with open(args.payload_file, "rb") as f:
                data = f.read()
        except OSError as exc:
            raise BenchError(f"--payload-file {args.payload_file}: {exc.strerror or exc}") from exc
        payloads = [p for p in data.split(delimiter) if p]
        if not payloads:
            raise BenchError(f"--payload-file {args.payload_file}: no records in it")
        return payloads
    if args.record_size is None:
        raise BenchError("--record-size or --payload-file is required")
    if args.record_size < 0:
        raise BenchError("--record-size must be at least 0")
    # as Kafka's tool: one value of random upper-case letters, sent every time
    return [bytes(65 + b % 26 for b in os.urandom(args.record_size))]


# -- produce --------------------------------------------------------------------------------------


class ProduceStats:
    """Acknowledgements and their latencies (ms), in the order they came; one writer at a time."""

    def __init__(self) -> None:
        self.acked = 0
        self.failed = 0
        self.bytes = 0
        self.latencies = array("d")
        self.first_error: str | None = None
        self.start = time.monotonic()
        self.end = self.start
        # the last progress report
        self._w_time = self.start
        self._w_acked = 0
        self._w_bytes = 0

    def ack(self, latency_ms: float, size: int) -> None:
        """Count one acknowledged record of ``size`` bytes, sent ``latency_ms`` before its acknowledgement."""
        self.acked += 1
        self.bytes += size
        self.latencies.append(latency_ms)

    def fail(self, error: Any) -> None:
        """Count one failed record; the first error is kept for the report."""
        self.failed += 1
        if self.first_error is None:
            self.first_error = str(error)

    def window(self, now: float) -> str:
        """Kafka's progress line for the records acknowledged since the last one."""
        n = self.acked - self._w_acked
        lat = self.latencies[self._w_acked : self.acked]
        secs = max(now - self._w_time, 1e-9)
        line = (
            f"{n} records sent, {n / secs:.1f} records/sec ({(self.bytes - self._w_bytes) / MB / secs:.2f} MB/sec), "
            f"{(sum(lat) / n if n else 0.0):.1f} ms avg latency, {(max(lat) if n else 0.0):.1f} ms max latency."
        )
        self._w_time, self._w_acked, self._w_bytes = now, self.acked, self.bytes
        return line

    def summary(self) -> dict[str, Any]:
        """The run's figures as the JSON report gives them: records sent and failed, bytes, elapsed seconds,
        records/s, MB/s, average, maximum and p50/p95/p99 latency (ms)."""
        ordered = sorted(self.latencies)
        secs = max(self.end - self.start, 1e-9)
        n = self.acked
        return {
            "records_sent": n,
            "records_failed": self.failed,
            "bytes": self.bytes,
            "elapsed_s": round(secs, 6),
            "records_per_sec": n / secs,
            "mb_per_sec": self.bytes / MB / secs,
            "avg_latency_ms": sum(ordered) / n if n else 0.0,
            "max_latency_ms": ordered[-1] if n else 0.0,
            "p50_ms": percentile(ordered, 0.5),
            "p95_ms": percentile(ordered, 0.95),
            "p99_ms": percentile(ordered, 0.99),
            "p999_ms": percentile(ordered, 0.999),
        }


def produce_summary_line(s: Mapping[str, Any]) -> str:
    """Kafka's final line (percentiles in whole ms, as kafka-producer-perf-test prints them)."""
    return (
        f"{s['records_sent']} records sent, {s['records_per_sec']:.1f} records/sec ({s['mb_per_sec']:.2f} MB/sec), "
        f"{s['avg_latency_ms']:.2f} ms avg latency, {s['max_latency_ms']:.2f} ms max latency, "
        f"{int(s['p50_ms'])} ms 50th, {int(s['p95_ms'])} ms 95th, {int(s['p99_ms'])} ms 99th, "
        f"{int(s['p999_ms'])} ms 99.9th."
    )


class _Throttle:
    """Kafka's ThroughputThrottler: sleep when ahead of ``rate`` records/s."""

    def __init__(self, rate: float, start: float) -> None:
        self.rate = rate
        self.start = start

    def wait(self, sent: int) -> None:
        ahead = sent / self.rate - (time.monotonic() - self.start)
        if ahead > 0.0005:
            time.sleep(ahead)


def _producer_settings(args: argparse.Namespace, kind: str, base: Mapping[str, Any]) -> dict[str, Any]:
    conf = dict(base)
    conf.update({"bootstrap.servers": args.bootstrap_server, "acks": args.acks, "compression.type": args.compression})
    if kind == "odradek":
        conf.setdefault("enable.idempotence", args.acks in ("all", "-1"))
        conf.setdefault("client.id", "odradek-bench")
    else:
        conf.setdefault("client.id", "odradek-bench")
    conf.update(_pairs(args.producer_props, "--producer-props"))
    return conf


def _produce_confluent(
    args: argparse.Namespace, conf: dict[str, Any], payloads: list[bytes], stats: ProduceStats, tick: Callable[[], None]
) -> None:
    from confluent_kafka import KafkaException, Producer

    try:
        producer = Producer(conf)
    except KafkaException as exc:
        raise BenchError(f"producer settings: {exc}") from exc

    def delivered(err: Any, msg: Any) -> None:
        if err is not None:
            stats.fail(err)
        else:
            stats.ack((msg.latency() or 0.0) * 1000.0, len(msg))

    produce, poll = producer.produce, producer.poll
    topic, n = args.topic, args.num_records
    one = payloads[0] if len(payloads) == 1 else None
    rng = random.Random()
    throttle = _Throttle(args.throughput, time.monotonic()) if args.throughput > 0 else None
    stats.start = time.monotonic()
    for i in range(n):
        value = one if one is not None else rng.choice(payloads)
        while True:
            try:
                produce(topic, value, on_delivery=delivered)
                break
            except BufferError:  # librdkafka's queue is full: serve acknowledgements
                poll(0.005)
        if throttle is not None:
            throttle.wait(i + 1)
        if i & 1023 == 0:
            poll(0)
            tick()
    while producer.flush(0.2) > 0:
        tick()
    stats.end = time.monotonic()


def _produce_odradek(
    args: argparse.Namespace, conf: dict[str, Any], payloads: list[bytes], stats: ProduceStats, tick: Callable[[], None]
) -> None:
    from odradek.client import ClientConfigError, Producer

    try:
        producer = Producer(conf)
    except (ClientConfigError, ValueError) as exc:
        raise BenchError(f"producer settings: {exc}") from exc
    wall = time.time
    ack, fail = stats.ack, stats.fail

    # One callback for every record (a closure per record would cost a third of the rate): the
    # latency is taken from the record's create time, in whole ms as Kafka's tool takes it (on a
    # LogAppendTime topic that is the broker's append time instead).
    def delivered(err: BaseException | None, md: Any) -> None:
        if err is not None:
            fail(err)
        else:
            ack(max(0.0, wall() * 1000.0 - md.timestamp), md.serialized_value_size)

    send = producer.send
    topic, n = args.topic, args.num_records
    one = payloads[0] if len(payloads) == 1 else None
    rng = random.Random()
    throttle = _Throttle(args.throughput, time.monotonic()) if args.throughput > 0 else None
    try:
        stats.start = time.monotonic()
        for i in range(n):
            value = one if one is not None else rng.choice(payloads)
            send(topic, value, on_delivery=delivered)
            if throttle is not None:
                throttle.wait(i + 1)
            if i & 1023 == 0:
                tick()
        while producer.flush(0.2) > 0:
            tick()
        stats.end = time.monotonic()
    finally:
        producer.close(5)


def _loadgen_run(run: Callable[..., dict[str, Any]], *args: Any, **kwargs: Any) -> dict[str, Any]:
    """One run of the load generator (``check=False``: the caller reports failed records)."""
    try:
        return run(*args, check=False, **kwargs)
    except _loadgen.LoadgenUnavailable as exc:
        raise BenchError(f"load generator: {' '.join(str(exc).split())}") from exc
    except _loadgen.LoadgenError as exc:  # no result at all: a usage or settings error, or no broker
        lines = [ln.strip() for ln in exc.stderr.splitlines() if ln.strip()]
        why = lines[-1].removeprefix("odradek_loadgen: ") if lines else str(exc).splitlines()[0]
        raise BenchError(f"load generator: {why}") from exc


def _loadgen_settings(settings: Mapping[str, Any], *more: Mapping[str, Any]) -> dict[str, Any]:
    """librdkafka settings for the load generator (it takes the bootstrap servers from -b)."""
    conf = {k: v for k, v in settings.items() if k != "bootstrap.servers"}
    conf.setdefault("client.id", "odradek-bench")
    for m in more:
        conf.update(m)
    return conf


def _loadgen_name(result: Mapping[str, Any]) -> str:
    version = result.get("librdkafka")
    if version is None and _loadgen.wheel_librdkafka() is not None:  # no run: the library it links
        import confluent_kafka

        version = confluent_kafka.libversion()[0]
    return f"odradek_loadgen (librdkafka {version or 'from the system'})"


def _latency_fields(lat: Mapping[str, Any]) -> dict[str, Any]:
    """The summary's latency keys from the load generator's latency object."""
    return {
        "avg_latency_ms": lat["avg"],
        "max_latency_ms": lat["max"],
        "p50_ms": lat["p50"],
        "p95_ms": lat["p95"],
        "p99_ms": lat["p99"],
        "p999_ms": lat["p999"],
    }


def _produce_loadgen(args: argparse.Namespace, settings: Mapping[str, Any]) -> tuple[dict[str, Any], str, str | None]:
    """The run on the load generator: the summary ProduceStats gives, the client's name, the first error."""
    conf = _loadgen_settings(
        settings,
        {"acks": args.acks, "compression.type": args.compression},
        _pairs(args.producer_props, "--producer-props"),
    )
    r = _loadgen_run(
        _loadgen.run_produce, args.bootstrap_server, args.topic, args.num_records,
        record_size=args.record_size, rate=args.throughput, acks=args.acks, compression=args.compression,
        perf_test_payload=True, partitioner=True, config=conf, timeout=None,
    )  # fmt: skip
    lat = r["latency_ms"]["produce_to_ack"]
    n, size, secs = r["records"], r["bytes"], max(r["seconds"], 1e-9)
    summary = {
        "records_sent": n,
        "records_failed": max(0, args.num_records - n),
        "bytes": size,
        "elapsed_s": round(secs, 6),
        "records_per_sec": n / secs,
        "mb_per_sec": size / MB / secs,
        **_latency_fields(lat),
    }
    first_error = r.get("first_error") or None
    if first_error is None and summary["records_failed"]:
        first_error = f"{r.get('undelivered', 0)} records without an acknowledgement"
    return summary, _loadgen_name(r), first_error


def bench_produce(args: argparse.Namespace) -> int:
    """``odradek bench produce``, like kafka-producer-perf-test: send the records at the throughput asked,
    print progress lines and the throughput and latency summary (JSON with ``--output json``); returns 0,
    or 1 when records failed.  BenchError for invalid options."""
    if args.num_records < 0:
        raise BenchError("--num-records must be at least 0")
    if args.throughput == 0:
        raise BenchError("--throughput must be positive, or -1 for no limit")
    payloads = _payloads(args)
    kind = _client_kind(args)
    settings = _properties(args.command_config)
    partitions = ensure_topic(args, settings)
    if kind == "loadgen":
        summary, client, first_error = _produce_loadgen(args, settings)
        failed = summary["records_failed"]
    else:
        conf = _producer_settings(args, kind, settings)
        stream = _progress_stream(args)
        stats = ProduceStats()
        next_report = time.monotonic() + args.reporting_interval

        def tick() -> None:
            nonlocal next_report
            if stream is not None and time.monotonic() >= next_report:
                _emit(stream, stats.window(time.monotonic()))
                next_report = time.monotonic() + args.reporting_interval

        if kind == "confluent":
            _produce_confluent(args, conf, payloads, stats, tick)
        else:
            _produce_odradek(args, conf, payloads, stats, tick)
        summary, client, failed, first_error = stats.summary(), _client_name(kind), stats.failed, stats.first_error
    if args.json:
        out = {
            "tool": "produce",
            "client": client,
            "topic": args.topic,
            "partitions": partitions,
            "num_records": args.num_records,
            "record_size": args.record_size,
            "payload_file": args.payload_file,
            "throughput_target": args.throughput,
            "acks": args.acks,
            "compression": args.compression,
            "window": "first send to last acknowledgement",
            **summary,
        }
        print(json.dumps(out))
    else:
        print(produce_summary_line(summary))
    if failed:
        print(f"odradek bench: {failed} records failed; first error: {first_error}", file=sys.stderr)
        return 1
    return 0


# -- consume --------------------------------------------------------------------------------------


def _kafka_time(t: float) -> str:
    """Kafka's perf-test timestamps: ``yyyy-MM-dd HH:mm:ss:SSS`` (local time)."""
    d = datetime.datetime.fromtimestamp(t)
    return d.strftime("%Y-%m-%d %H:%M:%S:") + f"{d.microsecond // 1000:03d}"


CONSUME_HEADER = (
    "start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, "
    "rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec"
)


class _ConsumeState:
    def __init__(self) -> None:
        self.records = 0
        self.bytes = 0
        self.assigned_at: float | None = None
        self.last_record_at = time.monotonic()


def _consume_confluent(
    args: argparse.Namespace, conf: dict[str, Any], target: int | None, st: _ConsumeState, tick: Callable[[], None]
) -> None:
    from confluent_kafka import Consumer, KafkaError, KafkaException

    try:
        consumer = Consumer(conf)
    except KafkaException as exc:
        raise BenchError(f"consumer settings: {exc}") from exc

    def assigned(_consumer: Any, _partitions: Any) -> None:
        if st.assigned_at is None:
            st.assigned_at = time.monotonic()

    try:
        consumer.subscribe([args.topic], on_assign=assigned)
        st.last_record_at = time.monotonic()
        while target is None or st.records < target:
            want = 10000 if target is None else max(1, min(10000, target - st.records))
            msgs = consumer.consume(num_messages=want, timeout=0.2)
            got = 0
            size = 0
            for m in msgs:
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        continue
                    raise BenchError(f"consumer: {err}")
                got += 1
                size += len(m) + len(m.key() or b"")
            now = time.monotonic()
            if got:
                st.records += got
                st.bytes += size
                st.last_record_at = now
            elif now - st.last_record_at > args.timeout:
                break
            tick()
    finally:
        consumer.close()


def _consume_odradek(
    args: argparse.Namespace, conf: dict[str, Any], target: int | None, st: _ConsumeState, tick: Callable[[], None]
) -> None:
    from odradek.client import ClientConfigError, Consumer

    try:
        consumer = Consumer(conf)
    except (ClientConfigError, ValueError) as exc:
        raise BenchError(f"consumer settings: {exc}") from exc

    class Listener:
        def on_partitions_assigned(self, partitions: Any) -> None:
            if st.assigned_at is None:
                st.assigned_at = time.monotonic()

        def on_partitions_revoked(self, partitions: Any) -> None:
            pass

    try:
        consumer.subscribe([args.topic], listener=Listener())
        st.last_record_at = time.monotonic()
        while target is None or st.records < target:
            want = 10000 if target is None else max(1, min(10000, target - st.records))
            records = consumer.poll(0.2, max_records=want)
            now = time.monotonic()
            if records:
                st.records += len(records)
                st.bytes += sum(len(r.value or b"") + len(r.key or b"") for r in records)
                st.last_record_at = now
            elif now - st.last_record_at > args.timeout:
                break
            tick()
    finally:
        consumer.close()


def ready_group_coordinator(args: argparse.Namespace, settings: Mapping[str, Any], timeout: float = 30.0) -> None:
    """The load generator's group coordinator, ready before the measured read
    (:func:`_loadgen.ready_consumer_group`).  A failure (a principal not allowed to describe the
    group, say) is noted and the run goes on: only the set-up's cost may land in the figures then."""
    from odradek.errors import KafkaError

    try:
        _loadgen.ready_consumer_group(args.bootstrap_server, timeout, _admin_config(args, settings))
    except (KafkaError, OSError, TimeoutError) as exc:
        _note(f"the group coordinator of {_loadgen.CONSUMER_GROUP} did not answer before the read: {exc}")


def _consume_loadgen(args: argparse.Namespace, settings: Mapping[str, Any], target: int) -> int:
    """The run on the load generator: assign() from the beginning, no group, no commits (the
    group's coordinator is made ready first, outside the measured read)."""
    conf = _loadgen_settings(settings, _pairs(args.consumer_props, "--consumer-props"))
    if target:
        ready_group_coordinator(args, settings)
    wall_start = time.time()
    if target == 0:
        r: dict[str, Any] = {"records": 0, "bytes": 0, "assigned_s": 0.0}
    else:
        r = _loadgen_run(
            _loadgen.run_consume, args.bootstrap_server, args.topic, target,
            idle_timeout=args.timeout, config=conf, timeout=None,
        )  # fmt: skip
        if r.get("errors"):
            raise BenchError(f"consumer: {r.get('first_error') or 'errors'}")
    # from the start (connections, metadata) to the last record; to the assignment of every partition
    secs = max(r["assign_to_last_s"] if r["records"] else r["assigned_s"], 1e-9)
    return _consume_report(
        args, _loadgen_name(r), None, target, r["records"], r["bytes"], wall_start, secs,
        min(r["assigned_s"], secs),
        "start to the last record; assign() from the beginning, no group: rebalance.time.ms is the "
        "time to connect and assign every partition, fetch.* run from there to the last record",
    )  # fmt: skip


def bench_consume(args: argparse.Namespace) -> int:
    """``odradek bench consume``, like kafka-consumer-perf-test: read the topic with a consumer group and
    print Kafka's columns (MB and records per second, rebalance and fetch time); returns the exit status."""
    kind = _client_kind(args)
    settings = _properties(args.command_config)
    ensure_topic(args, settings)
    target = args.num_records
    if target is None and not args.from_latest:
        target = sum(end - start for start, end in end_offsets(args, settings).values())
    if kind == "loadgen":
        assert target is not None  # --from-latest runs on a Python client
        return _consume_loadgen(args, settings, target)
    group = args.group or f"perf-consumer-{random.randrange(100000)}"
    conf = dict(settings)
    conf.update({
        "bootstrap.servers": args.bootstrap_server,
        "group.id": group,
        "auto.offset.reset": "latest" if args.from_latest else "earliest",
        "client.id": "odradek-bench",
    })
    conf.update(_pairs(args.consumer_props, "--consumer-props"))
    stream = _progress_stream(args)
    st = _ConsumeState()
    wall_start = time.time()
    start = time.monotonic()
    next_report = start + args.reporting_interval
    w_time, w_records, w_bytes = start, 0, 0

    def tick() -> None:
        nonlocal next_report, w_time, w_records, w_bytes
        now = time.monotonic()
        if stream is None or now < next_report:
            return
        secs = max(now - w_time, 1e-9)
        n = st.records - w_records
        _emit(
            stream,
            f"{n} records consumed, {n / secs:.1f} records/sec ({(st.bytes - w_bytes) / MB / secs:.2f} MB/sec), "
            f"{st.records} in total.",
        )
        w_time, w_records, w_bytes = now, st.records, st.bytes
        next_report = now + args.reporting_interval

    if target != 0:
        if kind == "confluent":
            _consume_confluent(args, conf, target, st, tick)
        else:
            _consume_odradek(args, conf, target, st, tick)
    end = time.monotonic() if target is not None and st.records >= target else st.last_record_at
    end = max(end, start)
    secs = max(end - start, 1e-9)
    rebalance = (st.assigned_at - start) if st.assigned_at is not None else 0.0
    rebalance = min(rebalance, secs)
    return _consume_report(
        args, _client_name(kind), group, target, st.records, st.bytes, wall_start, secs, rebalance,
        "subscribe to last record (fetch.*: first assignment to last record)",
    )  # fmt: skip


def _consume_report(
    args: argparse.Namespace,
    client: str,
    group: str | None,
    target: int | None,
    records: int,
    nbytes: int,
    wall_start: float,
    secs: float,
    rebalance: float,
    window: str,
) -> int:
    """Kafka's columns (or the JSON object) for ``records`` read in ``secs`` seconds, the first
    ``rebalance`` of them before the partitions were assigned."""
    wall_end = wall_start + secs
    fetch_secs = secs - rebalance
    mb = nbytes / MB
    row = {
        "start_time": _kafka_time(wall_start),
        "end_time": _kafka_time(wall_end),
        "data_consumed_mb": mb,
        "mb_per_sec": mb / secs,
        "records_consumed": records,
        "records_per_sec": records / secs,
        "rebalance_time_ms": round(rebalance * 1000),
        "fetch_time_ms": round(fetch_secs * 1000),
        "fetch_mb_per_sec": mb / fetch_secs if fetch_secs > 0 else 0.0,
        "fetch_records_per_sec": records / fetch_secs if fetch_secs > 0 else 0.0,
    }
    incomplete = target is not None and records < target
    if args.json:
        print(json.dumps({
            "tool": "consume",
            "client": client,
            "topic": args.topic,
            "group": group,
            "records_expected": target,
            "bytes": nbytes,
            "window": window,
            **row,
        }))
    else:
        print(CONSUME_HEADER)
        print(
            f"{row['start_time']}, {row['end_time']}, {mb:.4f}, {row['mb_per_sec']:.4f}, {records}, "
            f"{row['records_per_sec']:.4f}, {row['rebalance_time_ms']}, {row['fetch_time_ms']}, "
            f"{row['fetch_mb_per_sec']:.4f}, {row['fetch_records_per_sec']:.4f}"
        )
    if incomplete:
        print(
            f"odradek bench: WARNING: Exiting before consuming the expected number of records: "
            f"{records} of {target}, none for {args.timeout:g} s",
            file=sys.stderr,
        )
        return 1
    return 0


# -- end-to-end -----------------------------------------------------------------------------------


@contextlib.contextmanager
def _e2e_confluent(
    args: argparse.Namespace, pconf: dict[str, Any], cconf: dict[str, Any], offsets: dict[int, tuple[int, int]]
) -> Iterator[Callable[[bytes], bytes | None]]:
    from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

    try:
        producer = Producer({**pconf, "linger.ms": pconf.get("linger.ms", 0)})
        consumer = Consumer(cconf)
    except KafkaException as exc:
        raise BenchError(f"client settings: {exc}") from exc
    consumer.assign([TopicPartition(args.topic, p, end) for p, (_start, end) in offsets.items()])
    failure: list[Any] = []

    def delivered(err: Any, _msg: Any) -> None:
        if err is not None:
            failure.append(err)

    def round_trip(value: bytes) -> bytes | None:
        producer.produce(args.topic, value, on_delivery=delivered)
        producer.flush(args.timeout)
        if failure:
            raise BenchError(f"send failed: {failure[0]}")
        deadline = time.monotonic() + args.timeout
        while time.monotonic() < deadline:
            m = consumer.poll(min(0.5, max(0.0, deadline - time.monotonic())))
            if m is not None and m.error() is None:
                return bytes(m.value() or b"")
        return None

    try:
        yield round_trip
    finally:
        consumer.close()


@contextlib.contextmanager
def _e2e_odradek(
    args: argparse.Namespace, pconf: dict[str, Any], cconf: dict[str, Any], offsets: dict[int, tuple[int, int]]
) -> Iterator[Callable[[bytes], bytes | None]]:
    from odradek.client import ClientConfigError, Consumer, Producer

    try:
        producer = Producer({**pconf, "linger.ms": pconf.get("linger.ms", 0)})
        consumer = Consumer(cconf)
    except (ClientConfigError, ValueError) as exc:
        raise BenchError(f"client settings: {exc}") from exc
    consumer.assign([(args.topic, p) for p in offsets])
    for p, (_start, end) in offsets.items():
        consumer.seek((args.topic, p), end)
    pending: list[bytes] = []

    def round_trip(value: bytes) -> bytes | None:
        producer.send(args.topic, value).result(args.timeout)
        deadline = time.monotonic() + args.timeout
        while not pending and time.monotonic() < deadline:
            pending.extend(r.value or b"" for r in consumer.poll(min(0.5, max(0.0, deadline - time.monotonic()))))
        return pending.pop(0) if pending else None

    try:
        yield round_trip
    finally:
        consumer.close(autocommit=False)
        producer.close(5)


def _end_to_end_loadgen(args: argparse.Namespace, settings: Mapping[str, Any], size: int) -> tuple[dict[str, Any], str]:
    """The round trips on the load generator (its ``ping`` mode: the same loop in C)."""
    pconf = _loadgen_settings(
        settings,
        {"acks": args.acks, "compression.type": args.compression},
        _pairs(args.producer_props, "--producer-props"),
    )
    cconf = _loadgen_settings(
        settings,
        {"group.id": f"end-to-end-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False},
        _pairs(args.consumer_props, "--consumer-props"),
    )
    r = _loadgen_run(
        _loadgen.run_ping, args.bootstrap_server, args.topic, args.num_records,
        record_size=size, acks=args.acks, compression=args.compression,
        producer_config=pconf, consumer_config=cconf, record_timeout=args.timeout, timeout=None,
    )  # fmt: skip
    if r["records"] < args.num_records:
        raise BenchError(r.get("first_error") or f"{r['records']} of {args.num_records} round trips")
    lat = r["latency_ms"]["end_to_end"]
    s = {"records": r["records"], **_latency_fields(lat)}
    return s, _loadgen_name(r)


def _end_to_end_python(args: argparse.Namespace, kind: str, settings: Mapping[str, Any], size: int) -> dict[str, Any]:
    offsets = end_offsets(args, settings)
    pconf = _producer_settings(args, kind, settings)
    cconf = dict(settings)
    cconf.update({
        "bootstrap.servers": args.bootstrap_server,
        "group.id": f"end-to-end-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "client.id": "odradek-bench",
    })
    cconf.update(_pairs(args.consumer_props, "--consumer-props"))
    stream = _progress_stream(args)
    latencies = array("d")
    opener = _e2e_confluent if kind == "confluent" else _e2e_odradek
    base = bytes(65 + b % 26 for b in os.urandom(size))
    with opener(args, pconf, cconf, offsets) as round_trip:
        next_report = time.monotonic() + args.reporting_interval
        for i in range(args.num_records):
            tag = f"{i:010d}".encode()
            value = (tag + base[len(tag):]) if size >= len(tag) else base
            t0 = time.monotonic()
            got = round_trip(value)
            elapsed = (time.monotonic() - t0) * 1000.0
            if got is None:
                raise BenchError(f"record {i} did not come back within {args.timeout:g} s")
            if got != value:
                raise BenchError(f"record {i}: the consumer read a different record than was sent")
            latencies.append(elapsed)
            if stream is not None and time.monotonic() >= next_report:
                _emit(stream, f"{i + 1}\t{elapsed:.3f}")
                next_report = time.monotonic() + args.reporting_interval
    ordered = sorted(latencies)
    n = len(ordered)
    return {
        "records": n,
        "avg_latency_ms": sum(ordered) / n,
        "max_latency_ms": ordered[-1],
        "p50_ms": percentile(ordered, 0.5),
        "p95_ms": percentile(ordered, 0.95),
        "p99_ms": percentile(ordered, 0.99),
        "p999_ms": percentile(ordered, 0.999),
    }


def bench_end_to_end(args: argparse.Namespace) -> int:
    """``odradek bench end-to-end``, like Kafka's EndToEndLatency: send one record at a time, time it until a
    consumer receives it, and print the latency percentiles; returns the exit status.  BenchError for
    invalid options."""
    if args.num_records <= 0:
        raise BenchError("--num-records must be at least 1")
    kind = _client_kind(args)
    settings = _properties(args.command_config)
    size = 100 if args.record_size is None else args.record_size
    if args.partitions is None:
        args.partitions = 1
    ensure_topic(args, settings)
    if kind == "loadgen":
        s, client = _end_to_end_loadgen(args, settings, size)
    else:
        s, client = _end_to_end_python(args, kind, settings, size), _client_name(kind)
    if args.json:
        print(json.dumps({
            "tool": "end-to-end",
            "client": client,
            "topic": args.topic,
            "record_size": size,
            "acks": args.acks,
            "window": "send to the consumer's receipt, one record at a time",
            **s,
        }))
    else:
        print(f"Avg latency: {s['avg_latency_ms']:.4f} ms")
        print(
            f"Percentiles: 50th = {s['p50_ms']:.2f}, 95th = {s['p95_ms']:.2f}, 99th = {s['p99_ms']:.2f}, "
            f"99.9th = {s['p999_ms']:.2f} (ms; max {s['max_latency_ms']:.2f})"
        )
    return 0


# -- entry ----------------------------------------------------------------------------------------


def run(args: argparse.Namespace) -> int:
    """Run ``odradek bench`` for the parsed ``args``; returns the exit status: 0, 1 when the run
    failed (said on stderr), 130 when interrupted."""
    from odradek.errors import KafkaError

    commands = {"produce": bench_produce, "consume": bench_consume, "end-to-end": bench_end_to_end}
    try:
        return commands[args.bench_command](args)
    except BenchError as exc:
        print(f"odradek bench: {exc}", file=sys.stderr)
        return 1
    except (KafkaError, ConnectionError, TimeoutError) as exc:
        print(f"odradek bench: {' '.join(str(exc).split()) or type(exc).__name__}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("odradek bench: interrupted", file=sys.stderr)
        return 130
