"""The cluster controller's region (ZooKeeper mode), active on the broker that owns ``/controller``.

``orchestrator`` holds :class:`Controller`, the decisions for each event (brokers joining and
leaving, topic changes, deletions, ISR change notifications, reassignments, elections,
controlled shutdowns), which come from :mod:`odradek.cluster.controller`'s pure rules and
transition tables; ``events`` runs the events one at a time.  ``requests`` builds LeaderAndIsr, UpdateMetadata and
StopReplica from the controller's context; ``channel`` sends them to each broker in order,
retrying until answered or the broker leaves.  Writes to ZooKeeper are transactions that also
check ``/controller_epoch``'s version, so a deposed controller changes nothing.
"""

from odradek.broker.controller.orchestrator import Controller, ControllerMoved

__all__ = ["Controller", "ControllerMoved"]
