"""The schema registry service: Confluent's Schema Registry REST API, served by the brokers.

* :mod:`.service` — the API on an HTTP listener, reads from this broker's view of ``_schemas``,
  writes through the one writer (the partition's leader), forwarded there from other brokers;
* :mod:`.core` — what each request does over the registry's state (Confluent's rules);
* :mod:`.http` — the bounded HTTP/1.1 server and the forwarding client;
* :mod:`.security` — HTTP Basic against the broker's users, ACLs on the topics subjects name;
* :mod:`.metrics` — its metrics on the broker's ``/metrics``.

The formats, compatibility and the ``_schemas`` records are pure logic in
:mod:`odradek.schemas`; the broker wires the service to its coordinator runtime in
:mod:`odradek.broker.schema_registry`.
"""

from odradek.registry.errors import RestError
from odradek.registry.service import RegistryService, RegistrySettings, SchemaStore

__all__ = ["RegistryService", "RegistrySettings", "RestError", "SchemaStore"]
