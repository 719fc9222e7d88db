"""One module per group of APIs; importing this package registers every handler."""

from odradek.broker.handlers import (  # noqa: F401
    acls,
    admin,
    api_versions,
    cluster,
    configs,
    consumer_groups,
    features,
    fetch,
    groups,
    list_offsets,
    metadata,
    produce,
    quotas,
    sasl,
    share_fetch,
    share_groups,
    share_state,
    telemetry,
    topic_partitions,
    transactions,
)
