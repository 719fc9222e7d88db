"""``benchmarks/compare.py``: a figure is worse beyond noise only when the after runs are worse than
the before runs by more than the before runs' own spread, in the figure's own direction."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.compare import compare, direction, main


@pytest.mark.parametrize(
    ("name", "sense"),
    [
        ("partitions.4.consume.odradek.records_per_s", 1),
        ("partitions.4.consume.odradek.broker_cpu_s_per_million", -1),
        ("partitions.4.consume.cpu_ratio", -1),
        ("partitions.4.consume.ratio", 1),
        ("produce.latency_ms.p99", -1),
        ("startup.empty.process_start_to_ready_line_s.median", -1),
        ("security.connect_ready_ms_plaintext.p99", -1),
        ("produce.loadgen.median_ack_p99_ms.odradek", -1),
        ("idle_rss_mb", -1),
        ("batch.ratio_to_bound", 1),
        ("pushdown.1%.ratio", -1),  # a pushdown query's time over the full scan's
        ("config.records", 0),
        ("partitions.workload.value_bytes", 0),
        ("section_seconds.partitions", 0),
        ("startup.empty.target_s", 0),
        ("rss.target_idle_mb", 0),
    ],
)
def test_direction_from_the_figures_name(name: str, sense: int) -> None:
    assert direction(name) == sense


def _run(rate: float, cpu: float) -> dict[str, object]:
    return {
        "consume": {"records_per_s": rate, "broker_cpu_s": cpu, "meets_target": True},
        "config": {"records": 10},
    }


def test_worse_beyond_noise_in_each_direction() -> None:
    before = [_run(100, 1.0), _run(110, 1.1)]
    rows = {r["figure"]: r for r in compare(before, [_run(80, 1.0), _run(85, 1.05)])}
    assert set(rows) == {"consume.records_per_s", "consume.broker_cpu_s"}  # no booleans, no config
    assert rows["consume.records_per_s"]["worse_beyond_noise"]  # 82.5 / 105 is beyond the 10 % spread
    assert not rows["consume.broker_cpu_s"]["worse_beyond_noise"]
    rows = {r["figure"]: r for r in compare(before, [_run(120, 1.3), _run(125, 1.4)])}
    assert not rows["consume.records_per_s"]["worse_beyond_noise"]  # better
    assert rows["consume.broker_cpu_s"]["worse_beyond_noise"]  # more CPU, beyond noise


def test_within_noise_is_not_worse() -> None:
    before = [_run(60, 1.0), _run(100, 1.0)]  # a spread of 1.67
    rows = {r["figure"]: r for r in compare(before, [_run(70, 1.0), _run(75, 1.0)])}
    assert not rows["consume.records_per_s"]["worse_beyond_noise"]
    # outside the ratio but one after run inside the before range: not beyond noise either
    rows = {
        r["figure"]: r for r in compare([_run(100, 1.0), _run(101, 1.0)], [_run(50, 1.0), _run(100.5, 1.0)])
    }
    assert not rows["consume.records_per_s"]["worse_beyond_noise"]


def test_prints_the_worse_figures(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    files = []
    for i, run in enumerate([_run(100, 1.0), _run(101, 1.0), _run(50, 1.0), _run(51, 1.0)]):
        files.append(tmp_path / f"{i}.json")
        files[-1].write_text(json.dumps(run))
    assert main(["--before", str(files[0]), str(files[1]), "--after", str(files[2]), str(files[3])]) == 0
    out = json.loads(capsys.readouterr().out)
    assert [w["figure"] for w in out["worse_beyond_noise"]] == ["consume.records_per_s"]
    assert out["figures_compared"] == 2


def test_a_peers_figures_are_controls(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The peer got slower too: reported apart, as a sign the machine changed between the sides."""
    runs = [{"tansu": {"records_per_s": r}, "odradek": {"records_per_s": r}} for r in (100, 101, 50, 51)]
    files = []
    for i, run in enumerate(runs):
        files.append(tmp_path / f"{i}.json")
        files[-1].write_text(json.dumps(run))
    main(["--before", str(files[0]), str(files[1]), "--after", str(files[2]), str(files[3])])
    out = json.loads(capsys.readouterr().out)
    assert [w["figure"] for w in out["worse_beyond_noise"]] == ["odradek.records_per_s"]
    assert [w["figure"] for w in out["controls_worse_beyond_noise"]] == ["tansu.records_per_s"]
