"""Records of a planned range that are gone: Spark's wording, raised or logged (``failOnDataLoss``).

Apart from :mod:`odradek.spark._fetch` (the executors' reads) so that the driver's planning
(:mod:`odradek.spark._offsets`), which reports missing offsets too, does not import the fetch path.
"""

from __future__ import annotations

import logging

from odradek.errors import OdradekError

__all__ = [
    "INSTRUCTION_FAIL_ON_DATA_LOSS_FALSE",
    "INSTRUCTION_FAIL_ON_DATA_LOSS_TRUE",
    "DataLossError",
    "report_data_loss",
]

log = logging.getLogger("odradek.spark._fetch")

INSTRUCTION_FAIL_ON_DATA_LOSS_TRUE = (
    "Some data may have been lost because they are not available in Kafka any more; either the "
    "data was aged out by Kafka or the topic may have been deleted before all the data in the topic "
    "was processed. If you don't want your streaming query to fail on such cases, set the source "
    'option "failOnDataLoss" to "false".'
)
INSTRUCTION_FAIL_ON_DATA_LOSS_FALSE = (
    "Some data may have been lost because they are not available in Kafka any more; either the "
    "data was aged out by Kafka or the topic may have been deleted before all the data in the topic "
    "was processed. If you want your streaming query to fail on such cases, set the source option "
    '"failOnDataLoss" to "true".'
)


class DataLossError(OdradekError, RuntimeError):
    """Records of a planned range are gone and ``failOnDataLoss`` is true."""


def report_data_loss(message: str, fail_on_data_loss: bool) -> None:
    """Raise (``failOnDataLoss``) or log a warning, with Spark's wording."""
    if fail_on_data_loss:
        raise DataLossError(f"{message}. {INSTRUCTION_FAIL_ON_DATA_LOSS_TRUE}")
    log.warning("%s. %s", message, INSTRUCTION_FAIL_ON_DATA_LOSS_FALSE)
