"""Broker-side schema validation of produced batches (Confluent Server's topic configs).

On the partition's leader, a batch for a topic with ``confluent.key.schema.validation`` or
``confluent.value.schema.validation`` is read record by record before the log appends it: every
key / value must be framed for the schema registry with an id registered under the subject its
strategy names (:mod:`odradek.schemas.validation`).  One record that is not refuses the whole
batch with INVALID_RECORD and KIP-467 record errors (the index of each refused record and why),
as the log's own record validation does; nothing of it is appended, and the request's other
partitions are appended as usual.

The ids come from this broker's own view of ``_schemas`` (the registry's materialized state),
never over HTTP: the ids each topic may carry are worked out on the event loop (cached until the
view changes), and the records are read on the loop for a small batch, in a worker process
(:mod:`odradek.broker.offload`) for a large one.  A view that lags (a follower's replica of
``_schemas``, a schema registered a moment ago) is brought up to date once before a batch naming
an unknown id is refused.  A broker with no view (no registry listener, no ``_schemas`` replica
here) refuses batches of validating topics, saying why in the error message.
"""

from __future__ import annotations

from typing import Any, Protocol

from odradek.broker.offload import LOOP_DECOMPRESSED_BYTES, OffLoop
from odradek.errors import ErrorCode, KafkaError
from odradek.records import DecompressionLimitExceeded, RecordsError
from odradek.schemas.store import RegistryState
from odradek.schemas.validation import allowed_ids, check_framing, record_count, strategy_of, topic_subject
from odradek.storage.config import LogConfig
from odradek.storage.errors import InvalidRecordError

__all__ = ["INLINE_RECORDS", "RegistryView", "SchemaValidation"]

#: records of a batch read on the event loop (a few microseconds each); a larger batch is read
#: in a worker
INLINE_RECORDS = 256
#: how long a batch naming an unknown id waits for the view to catch up
_SYNC_TIMEOUT_S = 5.0
#: topics whose allowed ids are remembered (per view version)
_MAX_CACHED = 1024


class RegistryView(Protocol):
    """The broker's materialized view of ``_schemas``."""

    def current(self) -> RegistryState | None:
        """The view as it is (None: this broker has none now)."""

    async def synced(self, timeout: float) -> RegistryState | None:
        """The view once it holds every write acknowledged so far (None: not in time)."""


class SchemaValidation:
    """Validation of produced batches for the topics that ask for it."""

    def __init__(self, view: RegistryView | None, offload: OffLoop) -> None:
        self.view = view
        self.offload = offload
        self._allowed: dict[tuple[str, str, bool], frozenset[int]] = {}
        self._names: dict[tuple[str, str], str | None] = {}
        self._version: tuple[int, int] = (0, -1)

    async def check(self, topic: str, config: LogConfig, records: bytes | bytearray | memoryview) -> None:
        """Nothing if every record passes; InvalidRecordError (with record errors) if one does not,
        CORRUPT_MESSAGE for records that cannot be read."""
        if not config.schema_validation:
            return
        state = self.view.current() if self.view is not None else None
        if state is None and self.view is not None:
            state = await self.view.synced(_SYNC_TIMEOUT_S)
        if state is None:
            raise InvalidRecordError(
                f"schema validation is on for topic {topic} but this broker has no view of the schema registry "
                "(schema.registry.listeners, or no replica of _schemas here)"
            )
        errors, total = await self._scan(state, topic, config, records)
        if errors and self.view is not None:
            fresh = await self.view.synced(_SYNC_TIMEOUT_S)  # the view may lag behind a registration
            if fresh is not None:
                errors, total = await self._scan(fresh, topic, config, records)
        if errors:
            more = f" ({total - len(errors)} more not listed)" if total > len(errors) else ""
            raise InvalidRecordError(
                f"{total} record(s) refused by schema validation of topic {topic}: {errors[0][1]}{more}", errors
            )

    async def _scan(
        self, state: RegistryState, topic: str, config: LogConfig, records: bytes | bytearray | memoryview
    ) -> tuple[list[tuple[int, str]], int]:
        key_strategy = config.confluent_key_subject_name_strategy
        value_strategy = config.confluent_value_subject_name_strategy
        key_ids = self._ids(state, key_strategy, topic, True) if config.confluent_key_schema_validation else None
        value_ids = self._ids(state, value_strategy, topic, False) if config.confluent_value_schema_validation else None
        args: tuple[Any, ...] = (
            records, key_ids, value_ids, _subject(key_strategy, topic, True), _subject(value_strategy, topic, False),
        )
        try:
            if record_count(records) <= INLINE_RECORDS:
                return check_framing(*args, max_decompressed=LOOP_DECOMPRESSED_BYTES)
        except DecompressionLimitExceeded:
            pass  # too much to decompress on the loop: the worker reads it, with the usual bound
        except RecordsError as exc:
            raise KafkaError(ErrorCode.CORRUPT_MESSAGE, str(exc)) from exc
        return await self.offload.run(_check_off_loop, *args, cost=3 * len(records))

    def _ids(self, state: RegistryState, strategy: str, topic: str, is_key: bool) -> frozenset[int]:
        version = (id(state), state.applied)
        if version != self._version:
            self._allowed.clear()
            self._version = version
        key = (strategy_of(strategy), topic, is_key)
        found = self._allowed.get(key)
        if found is None:
            if len(self._allowed) >= _MAX_CACHED:
                self._allowed.clear()
            if len(self._names) >= 16 * _MAX_CACHED:
                self._names.clear()
            found = self._allowed[key] = allowed_ids(state, strategy, topic, is_key, self._names)
        return found


def _subject(strategy: str, topic: str, is_key: bool) -> str:
    short = strategy_of(strategy)
    if short == "TopicNameStrategy":
        return f"subject {topic_subject(topic, is_key)}"
    if short == "RecordNameStrategy":
        return "the subject of its record name (RecordNameStrategy)"
    return f"the subject {topic}-<record name> (TopicRecordNameStrategy)"


def _check_off_loop(
    records: bytes, key_ids: frozenset[int] | None, value_ids: frozenset[int] | None, key_subject: str,
    value_subject: str,
) -> tuple[list[tuple[int, str]], int]:
    """check_framing in a worker: unreadable records are CORRUPT_MESSAGE."""
    try:
        return check_framing(records, key_ids, value_ids, key_subject, value_subject)
    except RecordsError as exc:
        raise KafkaError(ErrorCode.CORRUPT_MESSAGE, str(exc)) from exc
