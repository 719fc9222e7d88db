"""Odradek's Python client (in progress): blocking broker connections and cluster metadata."""

from odradek.client._network import BrokerConnection, Cluster, parse_bootstrap

__all__ = ["BrokerConnection", "Cluster", "parse_bootstrap"]
