"""The broker's coordinators, on one runtime (:mod:`.runtime`): the group coordinator
(``__consumer_offsets``, :mod:`.groups`), the transaction coordinator
(``__transaction_state``, :mod:`.transactions`) and the share coordinator
(``__share_group_state``, :mod:`.share_state`), each supplying only its record handling and its
state machine from :mod:`odradek.cluster`."""

from odradek.broker.coordinators.groups import GroupCoordinator, GroupShard
from odradek.broker.coordinators.runtime import (
    CoordinatorPorts,
    CoordinatorRecord,
    CoordinatorRuntime,
    CoordinatorShard,
    CoordinatorTopic,
    Written,
)
from odradek.broker.coordinators.transactions import (
    MarkerWriter,
    TransactionCoordinator,
    TxnDescription,
    TxnShard,
)

__all__ = [
    "CoordinatorPorts",
    "CoordinatorRecord",
    "CoordinatorRuntime",
    "CoordinatorShard",
    "CoordinatorTopic",
    "GroupCoordinator",
    "GroupShard",
    "MarkerWriter",
    "TransactionCoordinator",
    "TxnDescription",
    "TxnShard",
    "Written",
]
