"""``Struct.builder()`` builds exactly what the generated constructor builds."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import odradek.protocol.messages as messages_pkg
from odradek.protocol._schema import Struct


def _structs() -> list[type[Struct]]:
    found: list[type[Struct]] = []
    for info in pkgutil.iter_modules(messages_pkg.__path__):
        module = importlib.import_module(f"odradek.protocol.messages.{info.name}")
        stack = [v for v in vars(module).values() if inspect.isclass(v) and issubclass(v, Struct) and v.__module__ == module.__name__]
        while stack:
            cls = stack.pop()
            found.append(cls)
            stack += [v for v in vars(cls).values() if inspect.isclass(v) and issubclass(v, Struct)]
    return found


def test_builders_match_the_constructors() -> None:
    structs = _structs()
    assert len(structs) > 300
    for cls in structs:
        built, made = cls.builder()(), cls()
        assert type(built) is cls and built == made
        for f in cls._fields_:
            value = getattr(built, f.attr)
            if isinstance(value, (list, Struct)):  # fresh mutable defaults, never shared
                assert value is not getattr(cls.builder()(), f.attr)
        assert cls.builder() is cls.builder()


def test_builders_take_the_constructors_arguments() -> None:
    from odradek.protocol.messages.produce import ProduceResponse as R

    leader = R.LeaderIdAndEpoch(leader_id=3, leader_epoch=7)
    kwargs = {"index": 2, "error_code": 6, "base_offset": 10, "current_leader": leader, "error_message": "x"}
    assert R.PartitionProduceResponse.builder()(**kwargs) == R.PartitionProduceResponse(**kwargs)
    topic = R.TopicProduceResponse.builder()(name="t", unknown_tagged_fields=[(9, b"\x01")])
    assert topic == R.TopicProduceResponse(name="t", unknown_tagged_fields=[(9, b"\x01")])
