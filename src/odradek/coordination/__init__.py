"""Where cluster metadata is kept: an embedded single-node backend, or ZooKeeper.

The broker talks to one :class:`~odradek.coordination.base.MetadataBackend`.  The embedded store
is a single node's (this broker hosts every partition and decides alone); ZooKeeper is a
cluster's, where the controller decides and leaders record ISR changes.  The operations only a
replicated store has are part of the interface (the embedded store refuses them), so the broker
asks the backend instead of branching on which one it has; it picks its replication services
once, when it is wired.
"""

from odradek.coordination.base import MetadataBackend, validate_topic_name
from odradek.coordination.embedded import EmbeddedBackend

__all__ = ["EmbeddedBackend", "MetadataBackend", "validate_topic_name"]
