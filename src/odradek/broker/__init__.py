"""The broker: ``odradek serve``'s asyncio server over the storage, cluster and coordination layers.

``app`` wires a broker together and owns its lifecycle; ``server`` holds the connections and
frames requests; ``dispatch`` routes each request to its handler in ``handlers``; ``replica`` (the
leader side) and ``fetcher`` (the follower side) replicate partitions over ``channel``'s
broker-to-broker connections; ``controller`` is the cluster controller (ZooKeeper mode);
``coordinator`` runs the group coordinator on ``__consumer_offsets``; ``compat`` down-converts
batches for old fetch versions; ``logdirs`` is the log dir failure channel; ``limits`` holds the
bounds checked before a request does any work; ``refusals`` the rate-limited log of refused
requests.

A regular package (not a namespace package) so that import-linter's contracts see it.
"""
