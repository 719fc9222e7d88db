"""Avro serializers: Odradek's (``odradek.client.serde``) against confluent-kafka's, records/s.

Run: ``python benchmarks/serde.py [--records 20000] [--rounds 5]`` (or ``python -m
benchmarks.serde``).  Prints one JSON object.

One ``odradek serve`` with its registry; both libraries' serializers register the same schema
under the same subject first (so both write the same bytes: checked), then, in the same run and
interleaved round by round:

* ``serialize``: ``records`` dicts of an order-like record (strings, ints, longs, a double, a
  boolean, a nullable union, an enum, an array and a map) framed by
  ``AvroSerializer.serialize(topic, value)`` (Odradek) and ``AvroSerializer(value, ctx)``
  (confluent-kafka), records/s of the best round each; ``ratio`` Odradek's over confluent's
  (target >= 1.0);
* ``deserialize``: the framed records read back to dicts by each library's ``AvroDeserializer``
  (every field of every record built), records/s, ``ratio`` the same way.

The window of a figure is the first call to the last return of a round; the registry is asked
only before the timed rounds (both libraries cache the schema and its id).  Figures on the shared
2-core development machine are provisional.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

try:
    from odradek.testing import BrokerProcess
except ImportError:  # running from a checkout without an install
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))
    from odradek.testing import BrokerProcess

from confluent_kafka.schema_registry import SchemaRegistryClient as ConfluentRegistry
from confluent_kafka.schema_registry.avro import AvroDeserializer as CAvroDeserializer
from confluent_kafka.schema_registry.avro import AvroSerializer as CAvroSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from odradek.client.serde import AvroDeserializer, AvroSerializer, SchemaRegistryClient

SCHEMA = {
    "type": "record", "name": "Order", "namespace": "bench",
    "fields": [
        {"name": "id", "type": "string"},
        {"name": "customer", "type": "string"},
        {"name": "qty", "type": "int"},
        {"name": "ts", "type": "long"},
        {"name": "price", "type": "double"},
        {"name": "paid", "type": "boolean"},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "PAID", "SHIPPED"]}},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "attrs", "type": {"type": "map", "values": "long"}},
    ],
}


def records(n: int) -> list[dict[str, Any]]:
    statuses = ["NEW", "PAID", "SHIPPED"]
    return [{"id": f"order-{i:08d}", "customer": f"customer-{i % 977}", "qty": i % 100, "ts": 1_700_000_000_000 + i,
             "price": i * 0.25, "paid": i % 2 == 0, "note": None if i % 3 else f"note {i}",
             "status": statuses[i % 3], "tags": ["a", "bb"][: i % 3], "attrs": {"k": i} if i % 2 else {}}
            for i in range(n)]


def timed(fn: Callable[[], None], n: int, rounds: list[float]) -> None:
    t0 = time.perf_counter()
    fn()
    rounds.append(n / (time.perf_counter() - t0))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=20000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args(argv)
    values = records(args.records)
    topic = "bench-serde"
    ctx = SerializationContext(topic, MessageField.VALUE)
    text = json.dumps(SCHEMA)
    with tempfile.TemporaryDirectory() as tmp:
        broker = BrokerProcess(Path(tmp) / "data", overrides={"schema.registry.listeners": "http://127.0.0.1:0",
                                                               "metrics.port": -1})
        broker.start()
        try:
            assert broker.registry_url is not None
            ours_ser = AvroSerializer(SchemaRegistryClient(broker.registry_url), text)
            ours_de = AvroDeserializer(SchemaRegistryClient(broker.registry_url))
            confluent = ConfluentRegistry({"url": broker.registry_url})
            theirs_ser = CAvroSerializer(confluent, text)
            theirs_de = CAvroDeserializer(confluent)
            # warm both caches (registration, the id's schema) and check the bytes agree
            framed = [ours_ser.serialize(topic, v) for v in values]
            assert framed == [theirs_ser(v, ctx) for v in values], "the two serializers wrote different bytes"
            assert [ours_de.deserialize(topic, b) for b in framed[:100]] == [theirs_de(b, ctx) for b in framed[:100]]
            rates: dict[str, list[float]] = {"ours_ser": [], "theirs_ser": [], "ours_de": [], "theirs_de": []}
            o_ser, t_ser, o_de, t_de = ours_ser.serialize, theirs_ser, ours_de.deserialize, theirs_de
            for _ in range(args.rounds):
                timed(lambda: [o_ser(topic, v) for v in values], len(values), rates["ours_ser"])
                timed(lambda: [t_ser(v, ctx) for v in values], len(values), rates["theirs_ser"])
                timed(lambda: [o_de(topic, b) for b in framed], len(framed), rates["ours_de"])
                timed(lambda: [t_de(b, ctx) for b in framed], len(framed), rates["theirs_de"])
        finally:
            broker.stop()
    best = {k: max(v) for k, v in rates.items()}
    result = {
        "benchmark": "serde",
        "records": args.records,
        "rounds": args.rounds,
        "bytes_per_record": round(sum(len(b or b"") for b in framed) / len(framed), 1),
        "serialize": {"odradek_per_s": round(best["ours_ser"]), "confluent_kafka_per_s": round(best["theirs_ser"]),
                      "ratio": round(best["ours_ser"] / best["theirs_ser"], 2), "target": 1.0},
        "deserialize": {"odradek_per_s": round(best["ours_de"]), "confluent_kafka_per_s": round(best["theirs_de"]),
                        "ratio": round(best["ours_de"] / best["theirs_de"], 2), "target": 1.0},
        "window": "first call to last return of a round, best of the rounds; schemas cached before timing",
        "reference": "confluent-kafka's AvroSerializer / AvroDeserializer, same schema, same records, same run",
    }
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
