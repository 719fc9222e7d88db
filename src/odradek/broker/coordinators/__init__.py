"""The broker's coordinators, on one runtime (:mod:`.runtime`), each supplying only its record
handling and its state machine from :mod:`odradek.cluster`."""

from odradek.broker.coordinators.runtime import (
    CoordinatorPorts,
    CoordinatorRecord,
    CoordinatorRuntime,
    CoordinatorShard,
    CoordinatorTopic,
    Written,
)

__all__ = [
    "CoordinatorPorts",
    "CoordinatorRecord",
    "CoordinatorRuntime",
    "CoordinatorShard",
    "CoordinatorTopic",
    "Written",
]
