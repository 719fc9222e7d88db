"""Transition tables: the one rule the cluster's state machines share.

Each state machine (the controller's partitions and replicas, a consumer group, a transactional
id) lists, for every state, the states it may be entered from (Kafka's ``validPreviousStates``).
A change is made only after the table allows it; any other raises :class:`IllegalTransition`,
a bug in the caller rather than a client's error, so the state is never left half-changed.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from typing import Generic, TypeVar

from odradek.errors import OdradekError

__all__ = ["IllegalTransition", "TransitionTable"]

S = TypeVar("S", bound=enum.Enum)


class IllegalTransition(OdradekError, ValueError):
    """A state change that the state machine's transition table does not allow."""


class TransitionTable(Generic[S]):
    """The states each state may be entered from, as data (``previous[target]``)."""

    __slots__ = ("_previous", "name")

    def __init__(self, name: str, previous: Mapping[S, Iterable[S]]) -> None:
        self.name = name
        self._previous = {target: frozenset(sources) for target, sources in previous.items()}

    def allows(self, current: S, target: S) -> bool:
        return current in self._previous[target]

    def previous(self, target: S) -> frozenset[S]:
        """The states ``target`` may be entered from."""
        return self._previous[target]

    def check(self, current: S, target: S, subject: str) -> None:
        """Raise IllegalTransition unless ``subject`` may go from ``current`` to ``target``."""
        if current not in self._previous[target]:
            raise IllegalTransition(
                f"illegal {self.name} state change {current.name} -> {target.name} for {subject}"
            )
