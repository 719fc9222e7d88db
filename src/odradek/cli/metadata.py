"""``odradek metadata``: what a cluster says about itself, like ``kcat -L``, for any broker::

    odradek metadata -b broker:9092                  # brokers, controller, every topic's partitions
    odradek metadata --topic orders --output json

JSON (``--output json``): ``{cluster_id, controller, brokers: [{id, host, port, rack}], topics:
[{name, topic_id, internal, partitions: [{partition, leader, replicas, isr, offline_replicas}]}]}``
(``controller`` and a partition's ``leader`` are ``null`` when there is none).
"""

from __future__ import annotations

import argparse
from typing import Any

from odradek.cli._common import add_output_option, write_json
from odradek.cli.topics import add_connection_options, kafka_uuid, run_admin
from odradek.client import Admin

__all__ = ["add_parser", "run"]


def add_parser(sub: Any) -> None:
    """Add the ``odradek metadata`` subcommand (brokers, controller and topics' partitions as the cluster
    reports them, like kcat -L) and its options to the top-level subparsers ``sub``."""
    p = sub.add_parser(
        "metadata",
        help="brokers, controller and topics' partitions as the cluster reports them (like kcat -L)",
        description="Print the cluster's metadata: brokers, the controller, and each topic's partitions "
        "with leader, replicas and ISR (like kcat -L).",
    )
    add_connection_options(p, top=True)
    p.add_argument("-t", "--topic", action="append", default=[], metavar="NAME", help="only this topic (repeatable)")
    add_output_option(p)


def cmd(admin: Admin, args: argparse.Namespace, out: Any) -> int:
    """``odradek metadata``: the brokers, the controller and the topics' partitions (leader, replicas, ISR)
    from Metadata, for ``run_admin``: writes to ``out`` and returns the exit status; a Kafka error or
    ValueError raised becomes the one-line error and exit status 1."""
    cluster = admin.describe_cluster(timeout=args.timeout)
    topics = admin.describe_topics(args.topic or None, timeout=args.timeout)
    controller = cluster.controller_id if cluster.controller_id >= 0 else None
    if args.output == "json":
        write_json(
            {
                "cluster_id": cluster.cluster_id,
                "controller": controller,
                "brokers": [
                    {"id": b.id, "host": b.host, "port": b.port, "rack": b.rack}
                    for b in sorted(cluster.brokers, key=lambda b: b.id)
                ],
                "topics": [
                    {
                        "name": t.name,
                        "topic_id": None if t.topic_id is None else kafka_uuid(t.topic_id),
                        "internal": t.internal,
                        "partitions": [
                            {
                                "partition": p.partition,
                                "leader": p.leader if p.leader >= 0 else None,
                                "replicas": list(p.replicas),
                                "isr": list(p.isr),
                                "offline_replicas": list(p.offline_replicas),
                            }
                            for p in t.partitions
                        ],
                    }
                    for t in sorted(topics.values(), key=lambda t: t.name)
                ],
            },
            out,
        )
        return 0
    out.write(f"Metadata for {'all topics' if not args.topic else ', '.join(args.topic)} "
              f"(cluster {cluster.cluster_id or '-'}):\n")  # fmt: skip
    out.write(f" {len(cluster.brokers)} brokers:\n")
    for b in sorted(cluster.brokers, key=lambda b: b.id):
        mark = " (controller)" if b.id == controller else ""
        rack = f" rack {b.rack}" if b.rack else ""
        out.write(f"  broker {b.id} at {b.host}:{b.port}{rack}{mark}\n")
    out.write(f" {len(topics)} topics:\n")
    for t in sorted(topics.values(), key=lambda t: t.name):
        internal = " (internal)" if t.internal else ""
        out.write(f'  topic "{t.name}" with {len(t.partitions)} partitions{internal}:\n')
        for p in t.partitions:
            leader = p.leader if p.leader >= 0 else "none"
            ids = ",".join
            offline = f", offline: {ids(map(str, p.offline_replicas))}" if p.offline_replicas else ""
            out.write(
                f"    partition {p.partition}, leader {leader}, replicas: {ids(map(str, p.replicas))}, "
                f"isrs: {ids(map(str, p.isr))}{offline}\n"
            )
    return 0


def run(args: argparse.Namespace) -> int:
    """Run ``odradek metadata`` for the parsed ``args``; returns the exit status: 0, or 1 with the error on
    stderr."""
    return run_admin("metadata", cmd, args)
