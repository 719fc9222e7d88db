"""Where cluster metadata is kept: an embedded single-node backend, or ZooKeeper.

The broker talks to one :class:`~odradek.coordination.base.MetadataBackend`; a single-node broker
and a cluster run the same broker code with different backends.
"""

from odradek.coordination.base import MetadataBackend, validate_topic_name
from odradek.coordination.embedded import EmbeddedBackend

__all__ = ["EmbeddedBackend", "MetadataBackend", "validate_topic_name"]
