"""The throughput sampler's arithmetic: rates from end offsets, topics created or re-created."""

from __future__ import annotations

from odradek.console._throughput import Sample, ThroughputSampler, _growth


def _s(t: float, ends: dict[tuple[str, int], int]) -> Sample:
    return Sample(t, int(t * 1000), ends, {tp[0] for tp in ends})


def test_growth_per_topic() -> None:
    a = _s(0, {("a", 0): 10, ("a", 1): 5, ("old", 0): 7})
    b = _s(2, {("a", 0): 30, ("a", 1): 5, ("new", 0): 4, ("old", 0): 3})
    # a: +20; new topic: grew from 0; old was re-created (its end went down): counts from 0
    assert _growth(a, b) == {"a": 20, "new": 4, "old": 3}


def test_series_and_topic_rates() -> None:
    sampler = ThroughputSampler(admin=None, interval=1.0)  # type: ignore[arg-type]
    assert sampler.series() == [] and sampler.topic_rates() == {}
    sampler.samples.extend([_s(0, {("a", 0): 0}), _s(2, {("a", 0): 100}), _s(4, {("a", 0): 100})])
    assert [(p["messages"], p["messages_per_s"]) for p in sampler.series()] == [(100, 50.0), (0, 0.0)]
    assert sampler.topic_rates() == {"a": 0.0}
    assert sampler.samples.maxlen == 901  # 15 minutes of 1 s samples
