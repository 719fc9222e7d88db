"""The broker: ``odradek serve``'s asyncio server over the storage, cluster and coordination layers.

Read it top-down, in the order of the import contracts (``pyproject.toml``):

* ``app`` — the composition root: wiring, lifecycle, listeners.  Only ``odradek serve`` imports it.
* ``handlers`` — one module per group of Kafka APIs; each handler gets a
  :class:`~odradek.broker.dispatch.RequestContext` carrying ``services``, never the broker.
* ``server`` — a client connection: framing, pipelining, back-pressure; ``dispatch`` routes each
  request to its handler and derives the advertised API versions from the registry.
* ``services`` — the bundle a handler sees.  Under it: ``partitions`` (which partition a request
  may use), ``coordinator`` (consumer groups on ``__consumer_offsets``), ``replication`` (what
  this broker hosts and leads: ``LocalReplication`` for a single node, ``ClusterReplication`` for
  LeaderAndIsr, StopReplica, ISR changes and controlled shutdown), ``controller`` (the cluster
  controller's region), ``topics`` (creation, limits, topic configs), ``producer_ids``,
  ``scheduler`` (flush, retention, compaction and checkpoints on the I/O executor),
  ``single_node`` (the controller's admin answers on one node) and ``fetcher`` (followers).
* I/O helpers at the bottom: ``replica`` (hosted partitions, appends, reads, the HW),
  ``channel`` (broker-to-broker connections), ``compat`` (down-conversion, recompression),
  ``offload`` (their worker processes), ``limits``,
  ``logdirs`` (the log dir failure channel), ``refusals`` (the rate-limited refusal log) and
  ``purgatory`` (delayed operations).

A regular package (not a namespace package) so that import-linter's contracts see it.
"""
