"""Topics as Apache Iceberg tables (``odradek.iceberg.mode``), through PyIceberg.

A partition's leader appends the topic's committed records (read_committed) to the topic's table
in Parquet files and commits Iceberg snapshots whose summaries record the offsets each partition
is written up to, so that a restart or a leader change resumes from the table's own record
(:mod:`odradek.tables.writer`).  ``key_value`` mode keeps the key and value as binary beside the
record's topic, partition, offset, timestamp and headers; ``value_schema`` mode decodes the value
with the registry's schema into typed columns (:mod:`odradek.tables.convert`).  Records that
cannot be converted go to ``<topic>~dlq`` with their reason.  The broker runs the writers on
threads of their own (:mod:`odradek.tables.service`); the catalog is a broker setting
(:mod:`odradek.tables.catalog`).  Needs ``pip install 'odradek[tables]'``.
"""

from __future__ import annotations

from odradek.tables.service import Lag, LeaderLog, TableWriters

__all__ = ["Lag", "LeaderLog", "TableWriters"]
