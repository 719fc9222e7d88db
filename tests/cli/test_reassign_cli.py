"""``odradek reassign``: kafka-reassign-partitions' JSON files and throttle rules (pure), and the
commands against a single-node broker.  Moves between brokers under load, with a throttle:
tests/cluster/test_reassign_throttled.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from odradek.cli.__main__ import main
from odradek.cli.reassign import (
    format_reassignment_json,
    move_map,
    parse_reassignment_json,
    parse_topics_json,
    throttle_configs,
)
from odradek.client import Admin, ConfigResource, NewTopic
from odradek.client.admin import PartitionReassignment
from odradek.testing import BrokerProcess

TOPIC = "moving"


def test_reassignment_json_round_trip() -> None:
    plan = {("b", 1): [3, 1], ("a", 0): [1, 2]}
    text = format_reassignment_json(plan, {("a", 0, 2): "/data2"})
    assert text == (
        '{"version":1,"partitions":[{"topic":"a","partition":0,"replicas":[1,2],"log_dirs":["any","/data2"]},'
        '{"topic":"b","partition":1,"replicas":[3,1],"log_dirs":["any","any"]}]}'
    )
    targets, dirs = parse_reassignment_json(text)
    assert targets == {("a", 0): [1, 2], ("b", 1): [3, 1]}
    assert dirs == {("a", 0, 2): "/data2"}
    # log_dirs may be left out; version defaults to 1
    assert parse_reassignment_json('{"partitions":[{"topic":"a","partition":0,"replicas":[2]}]}')[0] == {("a", 0): [2]}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not a valid JSON"),
        ('{"version":2,"partitions":[]}', "Not supported version"),
        ('{"version":1,"partitions":[]}', "Partition reassignment list cannot be empty"),
        ('{"partitions":[{"topic":"a","partition":0,"replicas":[]}]}', "Partition replica list cannot be empty"),
        ('{"partitions":[{"topic":"a","partition":0,"replicas":[1]},{"topic":"a","partition":0,"replicas":[2]}]}',
         "duplicate topic partitions: a-0"),
        ('{"partitions":[{"topic":"a","partition":0,"replicas":[1,1]}]}', "a-0 contains multiple entries for 1"),
        ('{"partitions":[{"topic":"a","partition":0,"replicas":[1,2],"log_dirs":["any"]}]}',
         "different from size of log dirs list"),
        ('{"partitions":[{"topic":"a","partition":"0","replicas":[1]}]}', '"partition" (an integer)'),
        ('{"partitions":[{"topic":"a","partition":0,"replicas":["1"]}]}', "list of broker ids"),
    ],
)
def test_bad_reassignment_json_is_refused_with_kafkas_message(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        parse_reassignment_json(text)


def test_topics_json() -> None:
    assert parse_topics_json('{"version":1,"topics":[{"topic":"a"},{"topic":"b"}]}') == ["a", "b"]
    with pytest.raises(ValueError, match="duplicate entries: a"):
        parse_topics_json('{"topics":[{"topic":"a"},{"topic":"a"}]}')


def test_throttled_replicas_as_kafkas_tool_sets_them() -> None:
    """Leader side: every replica the partition had before the move (it may be copied from any of
    them); follower side: only the brokers it is copied to; rates on all of them.  A partition
    already moving keeps its original replicas as sources."""
    ongoing = {("t", 2): PartitionReassignment([1, 2, 3], adding_replicas=[3], removing_replicas=[1])}
    targets = {("t", 0): [2, 3], ("t", 1): [1, 2], ("u", 0): [3]}
    current = {("t", 0): [1, 2], ("t", 1): [1, 2], ("u", 0): [1]}
    moves = move_map(ongoing, targets, current)
    assert moves[("t", 0)].sources == {1, 2} and moves[("t", 0)].destinations == {3}
    assert moves[("t", 1)].destinations == set()
    assert moves[("t", 2)].sources == {1, 2} and moves[("t", 2)].destinations == {3}
    leaders, followers, brokers = throttle_configs(moves)
    assert leaders == {"t": "0:1,0:2,1:1,1:2,2:1,2:2", "u": "0:1"}
    assert followers == {"t": "0:3,2:3", "u": "0:3"}
    assert brokers == [1, 2, 3]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with BrokerProcess(tmp_path_factory.mktemp("reassign-cli"), broker_id=1) as b:
        with Admin(bootstrap_servers=b.bootstrap) as admin:
            admin.create_topics([NewTopic(TOPIC, num_partitions=2, replication_factor=1)], timeout=20)
        yield b


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = main(list(argv))
    got = capsys.readouterr()
    return rc, got.out, got.err


def test_commands_on_one_broker(broker: BrokerProcess, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    b = ["-b", broker.bootstrap]
    topics = tmp_path / "topics.json"
    topics.write_text(json.dumps({"version": 1, "topics": [{"topic": TOPIC}]}))
    rc, out, err = _run(capsys, "reassign", "generate", *b, "--topics-to-move-json-file", str(topics), "--broker-list", "1")
    assert rc == 0, err
    current, proposed = out.split("\n\n")
    assert current.startswith("Current partition replica assignment\n")
    assert parse_reassignment_json(proposed.split("\n")[1])[0] == {(TOPIC, 0): [1], (TOPIC, 1): [1]}

    plan = tmp_path / "plan.json"
    plan.write_text(format_reassignment_json({(TOPIC, 0): [1]}))
    rc, out, err = _run(capsys, "reassign", "execute", *b, "--reassignment-json-file", str(plan), "--throttle", "1000000")
    assert rc == 0, err
    assert "Save this to use as the --reassignment-json-file option during rollback" in out
    assert "The inter-broker throttle limit was set to 1000000 B/s" in out
    assert f"Successfully started partition reassignment for {TOPIC}-0" in out
    with Admin(bootstrap_servers=broker.bootstrap) as admin:
        configs = admin.describe_configs([ConfigResource("topic", TOPIC), ConfigResource("broker", "1")], timeout=20)
    values = {name: e.value for r in configs.values() for name, e in r.items()}
    assert values["leader.replication.throttled.replicas"] == "0:1"
    assert values["follower.replication.throttled.rate"] == "1000000"

    rc, out, err = _run(capsys, "reassign", "verify", *b, "--reassignment-json-file", str(plan), "--output", "json")
    assert rc == 0, err
    state = json.loads(out)
    assert state["complete"] and state["throttles_cleared"]
    assert state["partitions"][0]["state"] == "completed"
    with Admin(bootstrap_servers=broker.bootstrap) as admin:
        configs = admin.describe_configs([ConfigResource("topic", TOPIC), ConfigResource("broker", "1")], timeout=20)
    for r in configs.values():
        for name in ("leader.replication.throttled.replicas", "follower.replication.throttled.rate"):
            if name in r:
                assert r[name].value in ("", "9223372036854775807"), (name, r[name])

    # a plan naming the replica's own log dir: that move is complete
    here = str(broker.data_dir.resolve())
    plan.write_text(format_reassignment_json({(TOPIC, 1): [1]}, {(TOPIC, 1, 1): here}))
    rc, out, err = _run(capsys, "reassign", "verify", *b, "--reassignment-json-file", str(plan), "--output", "json")
    assert rc == 0, err
    assert json.loads(out)["log_dir_moves"] == [{"topic": TOPIC, "partition": 1, "broker": 1, "log_dir": here,
                                                 "state": "completed"}]  # fmt: skip
    rc, out, err = _run(capsys, "reassign", "verify", *b, "--reassignment-json-file", str(plan))
    assert f"Reassignment of replica {TOPIC}-1-1 completed successfully." in out, out

    rc, out, err = _run(capsys, "reassign", "list", *b)
    assert (rc, out) == (0, "No partition reassignments found.\n"), err
    rc, out, err = _run(capsys, "reassign", "cancel", *b, "--reassignment-json-file", str(plan))
    assert rc == 0 and out.startswith("None of the specified partition reassignments are active."), err

    bad = tmp_path / "bad.json"
    bad.write_text(format_reassignment_json({(TOPIC, 0): [1, 7]}))
    rc, out, err = _run(capsys, "reassign", "execute", *b, "--reassignment-json-file", str(bad))
    assert rc == 1 and "Unknown broker id 7" in err
    bad.write_text(format_reassignment_json({(TOPIC, 9): [1]}))
    rc, out, err = _run(capsys, "reassign", "execute", *b, "--reassignment-json-file", str(bad))
    assert rc == 1 and f"Unable to find partition: {TOPIC}-9" in err


def test_progress_line_has_partitions_bytes_rate_and_eta() -> None:
    from odradek.cli.reassign import PartitionState, _Rate

    states = [
        PartitionState("t", 0, [2, 3], [2, 3, 1], [3], [1], "in_progress", bytes_moved=1_000_000, bytes_total=4_000_000),
        PartitionState("t", 1, [2, 3], [2, 3], [], [], "completed"),
    ]
    rate = _Rate()
    assert rate.text(states) == "1/2 partitions done, 1.0 MB of 4.0 MB copied to new replicas"
    rate.samples = [(100.0, 0), (102.0, 1_000_000)]  # 0.5 MB/s: 3 MB left take 6 s
    assert rate.text(states) == "1/2 partitions done, 1.0 MB of 4.0 MB copied to new replicas, 0.5 MB/s, ETA 6s"
    rate.samples = [(100.0, 0), (101.0, 10_000)]
    assert rate.text(states).endswith("0.0 MB/s, ETA 5m00s")


def test_log_dir_move_states() -> None:
    from types import SimpleNamespace

    from odradek.cli.reassign import dir_move_states
    from odradek.client.admin import LogDirDescription, ReplicaInfo

    described = {
        2: {
            "/d1": LogDirDescription("/d1", None, {("t", 0): ReplicaInfo(10, 0), ("t", 1): ReplicaInfo(10, 0)}),
            "/d2": LogDirDescription("/d2", None, {("t", 0): ReplicaInfo(4, 6, is_future=True)}),
        },
    }
    admin = SimpleNamespace(describe_log_dirs=lambda brokers, tps, timeout: described)
    moves = {("t", 0, 2): "/d2", ("t", 1, 2): "/d1", ("t", 2, 2): "/d1", ("t", 1, 3): "/d2"}
    assert dir_move_states(admin, {("t", 1, 2): "/d2"}, 5) == {("t", 1, 2): "not_started"}  # type: ignore[arg-type]
    assert dir_move_states(admin, moves, 5) == {  # type: ignore[arg-type]
        ("t", 0, 2): "in_progress", ("t", 1, 2): "completed", ("t", 2, 2): "missing", ("t", 1, 3): "missing",
    }


def _json_values() -> object:
    from hypothesis import strategies as st

    scalars = st.none() | st.booleans() | st.integers(-3, 5) | st.text(max_size=4) | st.just("any")
    return st.recursive(
        scalars,
        lambda inner: st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(["version", "partitions", "topics", "topic", "partition", "replicas",
                                           "log_dirs", "x"]), inner, max_size=5),
        max_leaves=20,
    )


def test_any_json_gives_a_plan_or_a_message() -> None:
    """Whatever JSON a plan file holds, the parser returns well-formed targets or refuses it with
    a ValueError (its message printed by the command), never another exception."""
    from hypothesis import given

    @given(_json_values())  # type: ignore[misc]
    def check(value: object) -> None:
        text = json.dumps(value)
        for parse in (parse_reassignment_json, parse_topics_json):
            try:
                got = parse(text)
            except ValueError as exc:
                assert str(exc)
                continue
            if parse is parse_topics_json:
                assert isinstance(got, list) and all(isinstance(t, str) for t in got)
            else:
                targets, dirs = got  # type: ignore[misc]
                assert targets and all(r and len(set(r)) == len(r) for r in targets.values())
                assert all(b in targets[(t, p)] for t, p, b in dirs)

    check()
