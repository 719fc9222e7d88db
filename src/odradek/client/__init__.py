"""Odradek's Python client: Producer / AsyncProducer (more to come: consumers, Admin).

Configuration takes Kafka's client config names, as a dict or as keyword arguments with
underscores: ``Producer({"bootstrap.servers": "127.0.0.1:9092"})`` or
``Producer(bootstrap_servers="127.0.0.1:9092")``.
"""

from odradek.client._config import ClientConfigError
from odradek.client._network import BrokerConnection, Cluster, parse_bootstrap
from odradek.client.partitioner import DefaultPartitioner, murmur2, murmur2_partition
from odradek.client.producer import AsyncProducer, Producer, RecordMetadata

__all__ = [
    "AsyncProducer",
    "BrokerConnection",
    "ClientConfigError",
    "Cluster",
    "DefaultPartitioner",
    "Producer",
    "RecordMetadata",
    "murmur2",
    "murmur2_partition",
    "parse_bootstrap",
]
