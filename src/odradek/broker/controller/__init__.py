"""The cluster controller's region (ZooKeeper mode), active on the broker that owns ``/controller``.

``orchestrator`` holds :class:`Controller`: its election, take-over and resignation, and the
events it handles one at a time (``events``: brokers joining and leaving, topic changes,
deletions, ISR change notifications, reassignments, elections, controlled shutdowns).  The work
is done by collaborators sharing its context: ``zkview`` reads ZooKeeper into the context and
writes partition states and assignments back; ``partitions`` elects leaders (Kafka's
PartitionStateMachine), ``replicas`` moves replicas and ISRs (ReplicaStateMachine),
``reassignment`` and ``deletion`` carry out reassignments and topic deletions.  Their decisions
come from :mod:`odradek.cluster.controller`'s pure rules and transition tables.  ``requests``
builds LeaderAndIsr, UpdateMetadata and StopReplica from the context; ``channel`` sends them to
each broker in order, retrying until answered or the broker leaves.  Writes to ZooKeeper are
transactions that also check ``/controller_epoch``'s version (``fenced``), so a deposed
controller changes nothing.
"""

from odradek.broker.controller.orchestrator import Controller, ControllerMoved

__all__ = ["Controller", "ControllerMoved"]
