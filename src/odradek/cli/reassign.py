"""``odradek reassign``: move partitions between brokers, like Kafka's kafka-reassign-partitions.

::

    odradek reassign generate --topics-to-move-json-file topics.json --broker-list 1,2,3
    odradek reassign execute --reassignment-json-file plan.json [--throttle 10000000] [--wait]
    odradek reassign verify --reassignment-json-file plan.json [--output json] [--wait]
    odradek reassign cancel --reassignment-json-file plan.json
    odradek reassign list

The files are kafka-reassign-partitions' JSON: ``{"version":1,"topics":[{"topic":"orders"}]}`` for
``generate`` and ``{"version":1,"partitions":[{"topic":"orders","partition":0,"replicas":[2,3],
"log_dirs":["any","any"]}]}`` for the others (``log_dirs`` optional; a path instead of ``any`` moves
that replica into that log dir of its broker).  ``generate`` prints the current assignment (save
it: it is the rollback plan) and a proposal; ``execute`` prints the current assignment too and
starts the moves.

``--throttle BYTES_PER_S`` does what Kafka's tool does: on every broker a moving partition leaves
or joins, the dynamic broker configs ``leader.replication.throttled.rate`` and
``follower.replication.throttled.rate``; on each moving topic, ``leader.replication.throttled.replicas``
(``partition:broker`` of the replicas it is copied from) and ``follower.replication.throttled.replicas``
(those it is copied to).  ``verify`` removes all of them once nothing in the plan is moving any more
(``--preserve-throttles`` keeps them), as does ``cancel``; run ``verify`` until it says the moves are
complete, or use ``--wait``.

Progress: ``verify`` reports the bytes the new replicas hold of their leaders' (from
DescribeLogDirs) and the partitions done; ``--wait`` (``execute`` or ``verify``) polls until the
plan is complete, and on a terminal prints a progress line every ``--progress-interval`` seconds:
partitions and bytes moved, the copy rate and the time left at that rate.
"""

from __future__ import annotations

import argparse
import functools
import json
import random
import sys
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from odradek.cli._common import add_output_option, write_json
from odradek.cli._progress import Progress
from odradek.cli.topics import add_connection_options, run_admin
from odradek.client import Admin, AdminError, AlterConfigOp, ConfigResource
from odradek.client.admin import PartitionReassignment
from odradek.cluster.metadata import assign_replicas
from odradek.errors import ErrorCode, KafkaError

__all__ = [
    "BROKER_THROTTLES",
    "TOPIC_THROTTLES",
    "Move",
    "add_parser",
    "format_reassignment_json",
    "move_map",
    "parse_reassignment_json",
    "parse_topics_json",
    "run",
    "throttle_configs",
]

TP = tuple[str, int]
ANY_LOG_DIR = "any"
LEADER_RATE, FOLLOWER_RATE = "leader.replication.throttled.rate", "follower.replication.throttled.rate"
LEADER_REPLICAS, FOLLOWER_REPLICAS = "leader.replication.throttled.replicas", "follower.replication.throttled.replicas"
LOG_DIR_RATE = "replica.alter.log.dirs.io.max.bytes.per.second"
#: the broker configs ``--throttle`` sets (and ``--replica-alter-log-dirs-throttle``), cleared by verify/cancel
BROKER_THROTTLES = (LEADER_RATE, FOLLOWER_RATE, LOG_DIR_RATE)
#: the topic configs ``--throttle`` sets, cleared by verify/cancel
TOPIC_THROTTLES = (LEADER_REPLICAS, FOLLOWER_REPLICAS)
_EXISTING = (
    "Cannot execute because there is an existing partition assignment.  Use --additional to override this and "
    "create a new partition assignment in addition to the existing one. The --additional flag can also be used "
    "to change the throttle by resubmitting the current reassignment."
)
_RUN_VERIFY = (
    "Warning: You must run --verify periodically, until the reassignment completes, to ensure the throttle is removed."
)


# -- the files ------------------------------------------------------------------------------------


def _load(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        raise ValueError("The input string is not a valid JSON") from None


def _version(data: Any) -> None:
    if not isinstance(data, dict):
        raise ValueError("The input string is not a valid JSON object")
    version = data.get("version", 1)
    if version != 1:
        raise ValueError(f"Not supported version field value {version}")


def parse_topics_json(text: str) -> list[str]:
    """The topics of a ``--topics-to-move-json-file``: ``{"version":1,"topics":[{"topic":"t"}]}``."""
    data = _load(text)
    _version(data)
    items = data.get("topics", [])
    if not isinstance(items, list) or not all(isinstance(i, dict) and isinstance(i.get("topic"), str) for i in items):
        raise ValueError('"topics" must be a list of {"topic": NAME}')
    topics = [i["topic"] for i in items]
    dups = sorted({t for t in topics if topics.count(t) > 1})
    if dups:
        raise ValueError(f"List of topics to reassign contains duplicate entries: {', '.join(dups)}")
    return topics


def parse_reassignment_json(text: str) -> tuple[dict[TP, list[int]], dict[tuple[str, int, int], str]]:
    """The targets of a ``--reassignment-json-file`` (replicas per partition, in file order) and the
    log-dir moves it asks for (``(topic, partition, broker) -> dir``, where ``log_dirs`` is not
    ``any``).  ValueError with kafka-reassign-partitions' message for what it refuses."""
    data = _load(text)
    _version(data)
    items = data.get("partitions")
    if not isinstance(items, list):
        raise ValueError('"partitions" must be a list')
    targets: dict[TP, list[int]] = {}
    dirs: dict[tuple[str, int, int], str] = {}
    dups: list[str] = []
    for item in items:
        if not isinstance(item, dict):
            raise ValueError("each partition must be a JSON object")
        topic, partition, replicas = item.get("topic"), item.get("partition"), item.get("replicas")
        if not isinstance(topic, str) or not isinstance(partition, int) or isinstance(partition, bool):
            raise ValueError('each partition needs "topic" (a string) and "partition" (an integer)')
        if not isinstance(replicas, list) or not all(isinstance(r, int) and not isinstance(r, bool) for r in replicas):
            raise ValueError(f'{topic}-{partition}: "replicas" must be a list of broker ids')
        log_dirs = item.get("log_dirs", [ANY_LOG_DIR] * len(replicas))
        if not isinstance(log_dirs, list) or not all(isinstance(d, str) for d in log_dirs):
            raise ValueError(f'{topic}-{partition}: "log_dirs" must be a list of paths or "any"')
        if len(log_dirs) != len(replicas):
            raise ValueError(
                f"Size of replicas list {replicas} is different from size of log dirs list {log_dirs} "
                f"for partition {topic}-{partition}"
            )
        tp = (topic, partition)
        if tp in targets:
            dups.append(f"{topic}-{partition}")
        targets[tp] = list(replicas)
        for broker, d in zip(replicas, log_dirs, strict=True):
            if d != ANY_LOG_DIR:
                dirs[(topic, partition, broker)] = d
    if not targets:
        raise ValueError("Partition reassignment list cannot be empty")
    if any(not r for r in targets.values()):
        raise ValueError("Partition replica list cannot be empty")
    if dups:
        raise ValueError(f"Partition reassignment contains duplicate topic partitions: {','.join(dups)}")
    multi = [
        f"{t}-{p} contains multiple entries for {','.join(str(b) for b in sorted({b for b in r if r.count(b) > 1}))}"
        for (t, p), r in targets.items()
        if len(set(r)) != len(r)
    ]
    if multi:
        raise ValueError(f"Partition replica lists may not contain duplicate entries: {'. '.join(multi)}")
    return targets, dirs


def format_reassignment_json(assignment: Mapping[TP, Iterable[int]], dirs: Mapping[tuple[str, int, int], str] | None = None) -> str:
    """kafka-reassign-partitions' JSON (compact, partitions sorted) for ``assignment``."""
    dirs = dirs or {}
    partitions = []
    for (topic, p) in sorted(assignment):
        replicas = [int(r) for r in assignment[(topic, p)]]
        partitions.append({
            "topic": topic, "partition": p, "replicas": replicas,
            "log_dirs": [dirs.get((topic, p, r), ANY_LOG_DIR) for r in replicas],
        })  # fmt: skip
    return json.dumps({"version": 1, "partitions": partitions}, separators=(",", ":"))


# -- throttles -------------------------------------------------------------------------------------


@dataclass(slots=True)
class Move:
    """A partition's move: the brokers it is copied from (its replicas before the move) and those
    it is copied to."""

    sources: set[int] = field(default_factory=set)
    destinations: set[int] = field(default_factory=set)


def move_map(
    ongoing: Mapping[TP, PartitionReassignment], targets: Mapping[TP, list[int]], current: Mapping[TP, list[int]]
) -> dict[TP, Move]:
    """Every partition moving once ``targets`` is submitted: the reassignments in progress
    (sources: their original replicas) and the new targets (sources: their original replicas if
    already moving, else their current replicas; destinations: the target's new brokers)."""
    moves: dict[TP, Move] = {}
    for tp, r in ongoing.items():
        moves[tp] = Move(set(r.replicas) - set(r.adding_replicas), set(r.adding_replicas))
    for tp, replicas in targets.items():
        if tp in moves:
            sources = moves[tp].sources
        elif tp in current:
            sources = set(current[tp])
        else:
            raise ValueError(f"Trying to reassign a topic partition {tp[0]}-{tp[1]} with 0 replicas")
        moves[tp] = Move(set(sources), set(replicas) - sources)
    return moves


def throttle_configs(moves: Mapping[TP, Move]) -> tuple[dict[str, str], dict[str, str], list[int]]:
    """What ``--throttle`` sets, as Kafka's tool computes it: per topic the
    ``leader.replication.throttled.replicas`` value (``partition:source`` items) and the
    ``follower.replication.throttled.replicas`` value (``partition:destination``), and the brokers
    whose rates are set (every source and destination)."""
    leaders: dict[str, set[tuple[int, int]]] = {}
    followers: dict[str, set[tuple[int, int]]] = {}
    brokers: set[int] = set()
    for (topic, p), m in moves.items():
        leaders.setdefault(topic, set()).update((p, b) for b in m.sources)
        followers.setdefault(topic, set()).update((p, b) for b in m.destinations if b not in m.sources)
        brokers |= m.sources | m.destinations

    def text(items: set[tuple[int, int]]) -> str:
        return ",".join(f"{p}:{b}" for p, b in sorted(items))

    return (
        {t: text(v) for t, v in sorted(leaders.items())},
        {t: text(v) for t, v in sorted(followers.items())},
        sorted(brokers),
    )


def _set_throttles(admin: Admin, moves: Mapping[TP, Move], rate: int, timeout: float, out: Any) -> None:
    leaders, followers, brokers = throttle_configs(moves)
    changes: dict[ConfigResource, list[AlterConfigOp]] = {}
    for topic in sorted(set(leaders) | set(followers)):
        ops = []
        if topic in leaders:
            ops.append(AlterConfigOp.set(LEADER_REPLICAS, leaders[topic]))
        if topic in followers:
            ops.append(AlterConfigOp.set(FOLLOWER_REPLICAS, followers[topic]))
        changes[ConfigResource("topic", topic)] = ops
    for b in brokers:
        changes[ConfigResource("broker", str(b))] = [AlterConfigOp.set(LEADER_RATE, rate), AlterConfigOp.set(FOLLOWER_RATE, rate)]
    admin.incremental_alter_configs(changes, timeout=timeout)
    out.write(f"The inter-broker throttle limit was set to {rate} B/s\n")


def _clear_throttles(admin: Admin, targets: Mapping[TP, list[int]], timeout: float, out: Any) -> None:
    """Remove the broker-level throttles on every broker of the cluster and of the plan and the
    topic-level ones of the plan's topics (Kafka's tool cannot know which brokers earlier moves
    touched, so it clears them all)."""
    brokers = {n.id for n in admin.describe_cluster(timeout=timeout).brokers}
    for replicas in targets.values():
        brokers.update(replicas)
    topics = sorted({t for t, _ in targets})
    out.write(f"Clearing broker-level throttles on broker{'' if len(brokers) == 1 else 's'} "
              f"{','.join(str(b) for b in sorted(brokers))}\n")  # fmt: skip
    admin.incremental_alter_configs(
        {ConfigResource("broker", str(b)): [AlterConfigOp.delete(n) for n in BROKER_THROTTLES] for b in sorted(brokers)},
        timeout=timeout,
    )
    out.write(f"Clearing topic-level throttles on topic{'' if len(topics) == 1 else 's'} {','.join(topics)}\n")
    admin.incremental_alter_configs(
        {ConfigResource("topic", t): [AlterConfigOp.delete(n) for n in TOPIC_THROTTLES] for t in topics}, timeout=timeout
    )


# -- the state of a plan --------------------------------------------------------------------------


@dataclass(slots=True)
class PartitionState:
    """Where a partition of the plan is: ``in_progress``, ``completed`` or ``mismatch`` (no move in
    progress, but its replicas are not the target's); with the bytes its new replicas hold of
    the leader's (both 0 when nothing is being added)."""

    topic: str
    partition: int
    target: list[int]
    current: list[int]
    adding: list[int]
    removing: list[int]
    state: str
    bytes_moved: int = 0
    bytes_total: int = 0


def _current_replicas(admin: Admin, tps: Iterable[TP], timeout: float) -> tuple[dict[TP, list[int]], dict[TP, int]]:
    """Replicas and leader of each partition; ValueError naming the partitions that do not exist."""
    wanted = set(tps)
    topics = sorted({t for t, _ in wanted})
    try:
        described = admin.describe_topics(topics, timeout=timeout)
    except AdminError as exc:
        missing = sorted(t for t, e in exc.errors.items() if e.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        if missing:
            raise ValueError(f"Topic {missing[0]} not found.") from None
        raise
    except KafkaError as exc:
        if exc.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION and len(topics) == 1:
            raise ValueError(f"Topic {topics[0]} not found.") from None
        raise
    replicas: dict[TP, list[int]] = {}
    leaders: dict[TP, int] = {}
    for name, d in described.items():
        for p in d.partitions:
            if (name, p.partition) in wanted:
                replicas[(name, p.partition)] = list(p.replicas)
                leaders[(name, p.partition)] = p.leader
    missing_tps = sorted(wanted - set(replicas))
    if missing_tps:
        raise ValueError("Unable to find partition: " + ", ".join(f"{t}-{p}" for t, p in missing_tps))
    return replicas, leaders


def plan_state(admin: Admin, targets: Mapping[TP, list[int]], timeout: float) -> list[PartitionState]:
    """The state of every partition of the plan, with the bytes copied so far (DescribeLogDirs of
    the brokers involved: each new replica's size against its leader's)."""
    ongoing = admin.list_partition_reassignments(timeout=timeout)
    current, leaders = _current_replicas(admin, targets, timeout)
    states = []
    for tp in sorted(targets):
        target = targets[tp]
        if tp in ongoing:
            r = ongoing[tp]
            states.append(PartitionState(tp[0], tp[1], target, list(r.replicas), list(r.adding_replicas),
                                         list(r.removing_replicas), "in_progress"))  # fmt: skip
        else:
            state = "completed" if current[tp] == list(target) else "mismatch"
            states.append(PartitionState(tp[0], tp[1], target, current[tp], [], [], state))
    moving = [s for s in states if s.adding]
    if moving:
        brokers = {b for s in moving for b in s.adding} | {leaders[(s.topic, s.partition)] for s in moving}
        sizes = _replica_sizes(admin, sorted(b for b in brokers if b >= 0), [(s.topic, s.partition) for s in moving], timeout)
        for s in moving:
            tp = (s.topic, s.partition)
            total = sizes.get((leaders[tp], tp), 0)
            s.bytes_total = total * len(s.adding)
            s.bytes_moved = sum(min(sizes.get((b, tp), 0), total) for b in s.adding)
    return states


def _replica_sizes(admin: Admin, brokers: list[int], tps: list[TP], timeout: float) -> dict[tuple[int, TP], int]:
    try:
        dirs = admin.describe_log_dirs(brokers, tps, timeout=timeout)
    except AdminError as exc:  # a broker that cannot say: its replicas count as nothing copied yet
        dirs = exc.results
    sizes: dict[tuple[int, TP], int] = {}
    for broker, by_path in dirs.items():
        for d in by_path.values():
            for tp, info in d.replicas.items():
                if not info.is_future:
                    sizes[(broker, tp)] = max(sizes.get((broker, tp), 0), info.size)
    return sizes


def _status_lines(states: list[PartitionState]) -> list[str]:
    lines = ["Status of partition reassignment:"]
    for s in states:
        name = f"{s.topic}-{s.partition}"
        if s.state == "completed":
            lines.append(f"Reassignment of partition {name} is completed.")
        elif s.state == "mismatch":
            lines.append(
                f"There is no active reassignment of partition {name}, but replica set is "
                f"{','.join(map(str, s.current))} rather than {','.join(map(str, s.target))}."
            )
        else:
            lines.append(f"Reassignment of partition {name} is still in progress.")
    return lines


def _mb(n: float) -> str:
    return f"{n / 1e6:.1f} MB"


def _summary(states: list[PartitionState]) -> str:
    done = sum(s.state != "in_progress" for s in states)
    moved = sum(s.bytes_moved for s in states)
    total = sum(s.bytes_total for s in states)
    return f"{done}/{len(states)} partitions done, {_mb(moved)} of {_mb(total)} copied to new replicas"


class _Rate:
    """The copy rate between samples of the bytes moved, and the time left at that rate."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, int]] = []

    def add(self, moved: int) -> None:
        self.samples.append((time.monotonic(), moved))
        del self.samples[:-10]

    def text(self, states: list[PartitionState]) -> str:
        moved = sum(s.bytes_moved for s in states)
        total = sum(s.bytes_total for s in states)
        line = _summary(states)
        if len(self.samples) >= 2:
            (t0, b0), (t1, b1) = self.samples[0], self.samples[-1]
            rate = max(b1 - b0, 0) / max(t1 - t0, 1e-6)
            line += f", {_mb(rate)}/s"
            if rate > 0 and total > moved:
                line += f", ETA {_duration((total - moved) / rate)}"
        return line


def _duration(seconds: float) -> str:
    s = round(seconds)
    return f"{s // 3600}h{s // 60 % 60:02d}m{s % 60:02d}s" if s >= 3600 else f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


def _wait(admin: Admin, targets: Mapping[TP, list[int]], args: argparse.Namespace) -> list[PartitionState]:
    """Poll the plan until no partition of it is moving, with progress lines on a terminal (or
    with ``--progress``); returns the last state."""
    progress = Progress("reassign", interval=args.progress_interval, enabled=args.progress)
    rate = _Rate()
    deadline = None if args.wait_timeout is None else time.monotonic() + args.wait_timeout
    while True:
        states = plan_state(admin, targets, args.timeout)
        rate.add(sum(s.bytes_moved for s in states))
        if all(s.state != "in_progress" for s in states):
            return states
        if deadline is not None and time.monotonic() >= deadline:
            raise TimeoutError(f"the reassignment is still in progress after {args.wait_timeout:g} s: {_summary(states)}")
        progress.update(functools.partial(rate.text, states))
        time.sleep(min(args.poll_interval, args.progress_interval))


# -- the commands ----------------------------------------------------------------------------------


def _generate(admin: Admin, args: argparse.Namespace, out: Any) -> int:
    topics = parse_topics_json(Path(args.topics_to_move_json_file).read_text())
    try:
        brokers = [int(b) for b in args.broker_list.split(",")]
    except ValueError:
        raise ValueError(f"--broker-list must be broker ids separated by commas, not {args.broker_list!r}") from None
    dups = sorted({b for b in brokers if brokers.count(b) > 1})
    if dups:
        raise ValueError(f"Broker list contains duplicate entries: {','.join(map(str, dups))}")
    known = {n.id for n in admin.describe_cluster(timeout=args.timeout).brokers}
    usable = [b for b in brokers if b in known]
    described = admin.describe_topics(topics, timeout=args.timeout)
    current = {(t, p.partition): list(p.replicas) for t, d in described.items() for p in d.partitions}
    proposed: dict[TP, list[int]] = {}
    for t in topics:
        parts = sorted(p for tt, p in current if tt == t)
        rf = len(current[(t, parts[0])]) if parts else 0
        if rf > len(usable):
            raise ValueError(f"Replication factor: {rf} larger than available brokers: {len(usable)}.")
        placed = assign_replicas(usable, len(parts), rf, start_index=random.randrange(len(usable)) if usable else 0)
        proposed.update({(t, p): list(placed[i]) for i, p in enumerate(parts)})
    out.write(f"Current partition replica assignment\n{format_reassignment_json(current)}\n\n")
    out.write(f"Proposed partition reassignment configuration\n{format_reassignment_json(proposed)}\n")
    return 0


def _execute(admin: Admin, args: argparse.Namespace, out: Any) -> int:
    targets, dirs = parse_reassignment_json(Path(args.reassignment_json_file).read_text())
    ongoing = admin.list_partition_reassignments(timeout=args.timeout)
    if ongoing and not args.additional:
        print(_EXISTING, file=sys.stderr)
        return 1
    known = {n.id for n in admin.describe_cluster(timeout=args.timeout).brokers}
    unknown = sorted({b for r in targets.values() for b in r} - known)
    if unknown:
        raise ValueError(f"Unknown broker id {unknown[0]}")
    current, _leaders = _current_replicas(admin, targets, args.timeout)
    out.write(
        f"Current partition replica assignment\n\n{format_reassignment_json(current)}\n\n"
        "Save this to use as the --reassignment-json-file option during rollback\n"
    )
    if args.throttle >= 0 or args.replica_alter_log_dirs_throttle >= 0:
        out.write(_RUN_VERIFY + "\n")
        if args.throttle >= 0:
            _set_throttles(admin, move_map(ongoing, targets, current), args.throttle, args.timeout, out)
        if args.replica_alter_log_dirs_throttle >= 0:
            rate = args.replica_alter_log_dirs_throttle
            admin.incremental_alter_configs(
                {ConfigResource("broker", str(b)): [AlterConfigOp.set(LOG_DIR_RATE, rate)] for b in sorted({k[2] for k in dirs})},
                timeout=args.timeout,
            )
            out.write(f"The replica-alter-dir throttle limit was set to {rate} B/s\n")
    try:
        admin.alter_partition_reassignments(
            targets, allow_replication_factor_change=not args.disallow_replication_factor_change, timeout=args.timeout
        )
    except AdminError as exc:
        lines = [f"{t}-{p}: {e.message or e.code.name}" for (t, p), e in sorted(exc.errors.items())]
        print("Error reassigning partition(s):\n" + "\n".join(lines), file=sys.stderr)
        return 1
    names = ",".join(f"{t}-{p}" for t, p in sorted(targets))
    out.write(f"Successfully started partition reassignment{'' if len(targets) == 1 else 's'} for {names}\n")
    if dirs:
        _move_dirs(admin, dirs, args, out)
    if args.wait:
        states = _wait(admin, targets, args)
        return _report(admin, targets, states, args, out, dirs)
    return 0


def _move_dirs(admin: Admin, dirs: Mapping[tuple[str, int, int], str], args: argparse.Namespace, out: Any) -> None:
    """AlterReplicaLogDirs until every move has started (a replica new to a broker can be moved only
    once the broker has it), within ``--timeout``."""
    pending = dict(dirs)
    deadline = time.monotonic() + args.timeout
    while pending:
        try:
            admin.alter_replica_log_dirs(pending, timeout=args.timeout)
            started, failed = dict(pending), {}
        except AdminError as exc:
            started = {k: v for k, v in pending.items() if k not in exc.errors}
            failed = {k: e for k, e in exc.errors.items() if e.code != ErrorCode.REPLICA_NOT_AVAILABLE}
            if failed:
                raise KafkaError(next(iter(failed.values())).code, "; ".join(
                    f"{t}-{p} on broker {b}: {e.message}" for (t, p, b), e in sorted(failed.items())
                )) from None  # fmt: skip
        for (t, p, b), d in sorted(started.items()):
            out.write(f"Successfully started moving log directory to {d} for replica {t}-{p} with broker {b}\n")
            pending.pop((t, p, b))
        if pending:
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    "Timed out before log directory moves could be started for: "
                    + ",".join(f"{t}-{p}-{b}" for t, p, b in sorted(pending))
                )
            time.sleep(0.1)


def dir_move_states(admin: Admin, dirs: Mapping[tuple[str, int, int], str], timeout: float) -> dict[tuple[str, int, int], str]:
    """Where each log-dir move of a plan is (DescribeLogDirs of its broker): ``completed`` (the
    replica is in the target dir), ``in_progress`` (its future replica is), ``not_started`` (the
    broker has the replica elsewhere and no future one in the target) or ``missing`` (the broker
    does not have the replica, yet)."""
    if not dirs:
        return {}
    brokers = sorted({b for _t, _p, b in dirs})
    tps = sorted({(t, p) for t, p, _b in dirs})
    try:
        described = admin.describe_log_dirs(brokers, tps, timeout=timeout)
    except AdminError as exc:
        described = exc.results
    states: dict[tuple[str, int, int], str] = {}
    for (t, p, b), target in dirs.items():
        state = "missing"
        for path, d in described.get(b, {}).items():
            info = d.replicas.get((t, p))
            if info is None:
                continue
            if path.rstrip("/") == target.rstrip("/"):
                state = "in_progress" if info.is_future else "completed"
                break
            if state == "missing":
                state = "not_started"
        states[(t, p, b)] = state
    return states


def _report(
    admin: Admin, targets: Mapping[TP, list[int]], states: list[PartitionState], args: argparse.Namespace, out: Any,
    dirs: Mapping[tuple[str, int, int], str] | None = None,
) -> int:
    """Print the plan's state (Kafka's lines, or JSON); clear the throttles when nothing of it
    moves (neither a partition between brokers nor a replica between log dirs)."""
    moves = dir_move_states(admin, dirs or {}, args.timeout)
    complete = all(s.state != "in_progress" for s in states) and all(m != "in_progress" for m in moves.values())
    cleared = False
    as_json = getattr(args, "output", "table") == "json"
    log = sys.stderr if as_json else out
    if not as_json:
        out.write("\n".join(_status_lines(states)) + "\n")
        if moves:
            out.write("Status of replica reassignment:\n")
            for (t, p, b), m in sorted(moves.items(), key=lambda kv: (kv[0][2], kv[0][0], kv[0][1])):
                target = (dirs or {})[(t, p, b)]
                if m == "completed":
                    out.write(f"Reassignment of replica {t}-{p}-{b} completed successfully.\n")
                elif m == "in_progress":
                    out.write(f"Reassignment of replica {t}-{p}-{b} is still in progress.\n")
                elif m == "not_started":
                    out.write(f"Partition {t}-{p} on broker {b} is not being moved to log dir {target}.\n")
                else:
                    out.write(f"Partition {t}-{p} cannot be found in any live log directory on broker {b}.\n")
        if not complete:
            out.write(f"Progress: {_summary(states)}\n")
    if complete and not args.preserve_throttles:
        _clear_throttles(admin, targets, args.timeout, log)
        cleared = True
    if as_json:
        write_json(
            {
                "complete": complete,
                "partitions_total": len(states),
                "partitions_done": sum(s.state != "in_progress" for s in states),
                "bytes_moved": sum(s.bytes_moved for s in states),
                "bytes_total": sum(s.bytes_total for s in states),
                "throttles_cleared": cleared,
                "log_dir_moves": [
                    {"topic": t, "partition": p, "broker": b, "log_dir": (dirs or {})[(t, p, b)], "state": m}
                    for (t, p, b), m in sorted(moves.items())
                ],
                "partitions": [
                    {"topic": s.topic, "partition": s.partition, "state": s.state, "target_replicas": s.target,
                     "current_replicas": s.current, "adding_replicas": s.adding, "removing_replicas": s.removing,
                     "bytes_moved": s.bytes_moved, "bytes_total": s.bytes_total}
                    for s in states
                ],
            },
            out,
        )  # fmt: skip
    return 0


def _verify(admin: Admin, args: argparse.Namespace, out: Any) -> int:
    targets, dirs = parse_reassignment_json(Path(args.reassignment_json_file).read_text())
    states = _wait(admin, targets, args) if args.wait else plan_state(admin, targets, args.timeout)
    return _report(admin, targets, states, args, out, dirs)


def _cancel(admin: Admin, args: argparse.Namespace, out: Any) -> int:
    targets, _dirs = parse_reassignment_json(Path(args.reassignment_json_file).read_text())
    active = sorted(admin.list_partition_reassignments(targets, timeout=args.timeout))
    if active:
        try:
            admin.alter_partition_reassignments(dict.fromkeys(active), timeout=args.timeout)
        except AdminError as exc:
            lines = [f"{t}-{p}: {e.message or e.code.name}" for (t, p), e in sorted(exc.errors.items())]
            s = "" if len(exc.errors) == 1 else "s"
            print(f"Error cancelling partition reassignment{s} for:\n" + "\n".join(lines), file=sys.stderr)
            return 1
        names = ",".join(f"{t}-{p}" for t, p in active)
        out.write(f"Successfully cancelled partition reassignment{'' if len(active) == 1 else 's'} for: {names}\n")
    else:
        out.write("None of the specified partition reassignments are active.\n")
    if not args.preserve_throttles:
        _clear_throttles(admin, targets, args.timeout, out)
    return 0


def _list(admin: Admin, args: argparse.Namespace, out: Any) -> int:
    ongoing = admin.list_partition_reassignments(timeout=args.timeout)
    if getattr(args, "output", "table") == "json":
        write_json(
            [{"topic": t, "partition": p, "replicas": r.replicas, "adding_replicas": r.adding_replicas,
              "removing_replicas": r.removing_replicas} for (t, p), r in sorted(ongoing.items())],
            out,
        )  # fmt: skip
        return 0
    if not ongoing:
        out.write("No partition reassignments found.\n")
        return 0
    out.write("Current partition reassignments:\n")
    for (t, p), r in sorted(ongoing.items()):
        line = f"{t}-{p}: replicas: {','.join(map(str, r.replicas))}."
        if r.adding_replicas:
            line += f" adding: {','.join(map(str, r.adding_replicas))}."
        if r.removing_replicas:
            line += f" removing: {','.join(map(str, r.removing_replicas))}."
        out.write(line + "\n")
    return 0


_COMMANDS = {"generate": _generate, "execute": _execute, "verify": _verify, "cancel": _cancel, "list": _list}


def add_parser(sub: Any) -> None:
    """Add the ``odradek reassign`` subcommand (move partitions between brokers, like
    kafka-reassign-partitions) and its options to the top-level subparsers ``sub``."""
    p = sub.add_parser(
        "reassign",
        help="move partitions between brokers, with replication throttles",
        description="Move partitions between brokers (like kafka-reassign-partitions), with its JSON files.",
    )
    add_connection_options(p, top=True)
    rsub = p.add_subparsers(dest="reassign_command", required=True, metavar="COMMAND")
    gen = rsub.add_parser("generate", help="propose a plan that spreads topics over brokers",
                          description="Print the current assignment of topics and a proposal over --broker-list.")
    gen.add_argument("--topics-to-move-json-file", required=True, metavar="FILE",
                     help='{"version":1,"topics":[{"topic":"t"}]}')
    gen.add_argument("--broker-list", required=True, metavar="IDS", help="the brokers to spread over: 1,2,3")
    gen.add_argument("--disable-rack-aware", action="store_true", help="(accepted; placement ignores racks)")
    exe = rsub.add_parser("execute", help="start the moves of a plan", description="Start the reassignments of a plan.")
    ver = rsub.add_parser("verify", help="the state of a plan; clears the throttles once it is done",
                          description="Report a plan's progress; once done, remove the throttles.")
    can = rsub.add_parser("cancel", help="cancel the moves of a plan still in progress",
                          description="Cancel the plan's reassignments in progress (back to the original replicas).")
    lst = rsub.add_parser("list", help="the reassignments in progress", description="List reassignments in progress.")
    for c in (exe, ver, can):
        c.add_argument("--reassignment-json-file", required=True, metavar="FILE",
                       help='{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,2]}]}')
    exe.add_argument("--throttle", type=int, default=-1, metavar="BYTES_PER_S",
                     help="limit the copy to this many bytes/s per broker (leader and follower side)")
    exe.add_argument("--replica-alter-log-dirs-throttle", type=int, default=-1, metavar="BYTES_PER_S",
                     help="limit moves between a broker's log dirs to this many bytes/s")
    exe.add_argument("--disallow-replication-factor-change", action="store_true",
                     help="refuse targets with another number of replicas than the partition has (KIP-860)")
    exe.add_argument("--additional", action="store_true",
                     help="submit although reassignments are in progress (or change their throttle)")
    for c in (ver, can):
        c.add_argument("--preserve-throttles", action="store_true", help="leave the throttle configs in place")
    exe.set_defaults(preserve_throttles=False)
    for c in (exe, ver):
        c.add_argument("--wait", action="store_true", help="poll until the plan is complete (then as verify)")
        c.add_argument("--wait-timeout", type=float, default=None, metavar="SECONDS", help="give up waiting after this long")
        c.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                       help="progress lines on stderr while waiting (default: when stderr is a terminal)")
        c.add_argument("--progress-interval", type=float, default=2.0, metavar="SECONDS", help=argparse.SUPPRESS)
        c.add_argument("--poll-interval", type=float, default=1.0, help=argparse.SUPPRESS)
    for c in (ver, lst):
        add_output_option(c)
    for c in (gen, exe, ver, can, lst):
        add_connection_options(c, top=False)


def cmd_reassign(admin: Admin, args: argparse.Namespace, out: Any) -> int:
    """One ``odradek reassign`` command through ``admin``, for ``run_admin``."""
    try:
        return _COMMANDS[args.reassign_command](admin, args, out)
    except OSError as exc:
        raise ValueError(str(exc)) from None


def run(args: argparse.Namespace) -> int:
    """Run ``odradek reassign`` for the parsed ``args``; returns the exit status: 0, or 1 with the error on stderr."""
    return run_admin("reassign", cmd_reassign, args)
