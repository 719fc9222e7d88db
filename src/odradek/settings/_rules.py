"""What the generated settings are built from (:class:`Source`) and the rules their fields follow:
types, Kafka's ranges, units, and the derived fields (the broker id, the listeners, the log dirs,
the topic configs' defaults).  Hand-written; :mod:`odradek.settings._generated` calls it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import FrozenInstanceError
from pathlib import Path
from types import MappingProxyType
from typing import Any, ClassVar, TypeVar

from odradek.config import BROKER_CONFIGS, ConfigError, Listener, parse_listeners
from odradek.config import topic_defaults as _topic_defaults

__all__ = ["Frozen", "Source", "advertised", "broker_id", "log_dirs", "topic_defaults"]

_F = TypeVar("_F", bound="Frozen")


class Frozen:
    """The base of the generated settings classes: a frozen value over ``__slots__``, compared,
    hashed and shown by its fields, as ``@dataclass(frozen=True, slots=True)`` makes one.  The
    generator writes each class's ``__slots__``, ``_fields`` and ``__init__`` into the source, so
    importing the settings builds no methods at run time (a dataclass compiles six per class)."""

    __slots__ = ()
    #: the fields compared, hashed, shown and copied by :meth:`replace`, in order
    _fields: ClassVar[tuple[str, ...]] = ()
    #: the fields :meth:`__repr__` leaves out (passwords)
    _hidden: ClassVar[frozenset[str]] = frozenset()

    def __setattr__(self, name: str, value: object) -> None:
        raise FrozenInstanceError(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise FrozenInstanceError(f"cannot delete field {name!r}")

    def _values(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self._fields)

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        assert isinstance(other, Frozen)
        return self._values() == other._values()

    def __hash__(self) -> int:
        return hash(self._values())

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self._fields if name not in self._hidden)
        return f"{self.__class__.__qualname__}({shown})"

    def __getstate__(self) -> tuple[Any, ...]:
        # pickle and copy: object.__new__ and these values, not __init__ (Spark ships settings)
        return tuple(getattr(self, name) for name in self._slot_names())

    def __setstate__(self, state: tuple[Any, ...]) -> None:
        for name, value in zip(self._slot_names(), state, strict=True):
            object.__setattr__(self, name, value)

    def _slot_names(self) -> tuple[str, ...]:
        names: tuple[str, ...] = self.__slots__  # the class's own: its fields and any other state
        return names

    def replace(self: _F, **changes: Any) -> _F:
        """A copy with ``changes`` made (as :func:`dataclasses.replace`)."""
        values = {name: getattr(self, name) for name in self._fields}
        unknown = set(changes) - set(values)
        if unknown:
            raise TypeError(f"{self.__class__.__qualname__} has no field {sorted(unknown)[0]!r}")
        values.update(changes)
        return self.__class__(**values)


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


class Source:
    """The values one settings object is built from: every broker config's value (parsed by
    :mod:`odradek.config`), the names that were given (not defaults), and the per-listener
    values (``listener.name.<listener>[.<mechanism>].<config>``)."""

    __slots__ = ("given", "overrides", "values")

    def __init__(
        self, values: Mapping[str, Any], given: frozenset[str], overrides: Mapping[tuple[str, str, str], Any]
    ) -> None:
        self.values = values
        self.given = given
        self.overrides = overrides

    def for_listener(self, listener: str, mechanism: str = "") -> Source:
        """The values as ``listener`` (and SASL ``mechanism``) sees them: the mechanism's own,
        then the listener's, then the broker's (as BrokerConfig.for_listener)."""
        values = dict(self.values)
        for (name_l, name_m, name), value in self.overrides.items():
            if name_l == listener and name_m == "" and value is not None:
                values[name] = value
        if mechanism:
            for (name_l, name_m, name), value in self.overrides.items():
                if name_l == listener and name_m == mechanism and value is not None:
                    values[name] = value
        return Source(values, self.given, self.overrides)

    # -- typed values ---------------------------------------------------------------------------
    def value(self, name: str) -> Any:
        return self.values[name]

    def _present(self, name: str) -> Any:
        value = self.values[name]
        if value is None:
            raise ConfigError(f"Missing required configuration {name} which has no default value")
        return value

    def _range(self, name: str, value: float, low: float | None, high: float | None) -> None:
        """Kafka's ConfigDef.Range, with its message."""
        if (low is not None and value < low) or (high is not None and value > high):
            if high is None:
                assert low is not None
                rule = f"Value must be at least {_number(low)}"
            elif low is None:
                rule = f"Value must be no more than {_number(high)}"
            else:
                rule = f"Value must be between {_number(low)} and {_number(high)}"
            raise ConfigError(f"Invalid value {value} for configuration {name}: {rule}")

    def integer(self, name: str, low: float | None = None, high: float | None = None) -> int:
        value = self._present(name)
        if not isinstance(value, int) or isinstance(value, bool):
            raise ConfigError(f"Invalid value {value} for configuration {name}: Not a number")
        self._range(name, value, low, high)
        return value

    def opt_integer(self, name: str, low: float | None = None, high: float | None = None) -> int | None:
        return None if self.values[name] is None else self.integer(name, low, high)

    def real(self, name: str, low: float | None = None, high: float | None = None) -> float:
        value = self._present(name)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise ConfigError(f"Invalid value {value} for configuration {name}: Not a number")
        self._range(name, value, low, high)
        return float(value)

    def flag(self, name: str) -> bool:
        value = self._present(name)
        if not isinstance(value, bool):
            raise ConfigError(f"Invalid value {value} for configuration {name}: Expected value to be either true or false")
        return value

    def text(self, name: str) -> str:
        return str(self._present(name))

    def opt_text(self, name: str) -> str | None:
        value = self.values[name]
        return None if value is None else str(value)

    def items(self, name: str) -> tuple[str, ...]:
        """A list config's items (none when it is not set)."""
        value = self.values[name]
        return tuple(item.strip() for item in str(value or "").split(",") if item.strip())

    def millis(self, *sources: tuple[str, int]) -> int:
        """The first of ``(config, factor to milliseconds)`` that is set, in milliseconds."""
        for name, factor in sources:
            if self.values[name] is not None:
                return self.integer(name) * factor
        raise ConfigError(f"Missing required configuration {sources[0][0]} which has no default value")


def broker_id(src: Source) -> int:
    """``node.id`` when it is set (not negative) and ``broker.id`` is not, else ``broker.id``."""
    node = src.value("node.id")
    if node is not None and node >= 0 and "broker.id" not in src.given:
        return int(node)
    return src.integer("broker.id")


def log_dirs(src: Source) -> tuple[Path, ...]:
    dirs = src.value("log.dirs") or src.value("log.dir")
    return tuple(Path(d.strip()) for d in str(dirs).split(",") if d.strip())


def advertised(src: Source) -> tuple[Listener, ...]:
    protocol_map = src.text("listener.security.protocol.map")
    spec = src.value("advertised.listeners")
    return tuple(parse_listeners(spec or src.text("listeners"), protocol_map))


def topic_defaults(src: Source) -> Mapping[str, Any]:
    return MappingProxyType(_topic_defaults(src.values.__getitem__))


#: every broker config's name: what a Source holds a value of
NAMES = tuple(BROKER_CONFIGS)
