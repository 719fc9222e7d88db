"""``odradek cluster rolling-restart`` and ``odradek cluster wait-healthy``.

A rolling restart takes one broker at a time through a controlled shutdown (SIGTERM: the
controller moves its leaderships away first), starts it again, and waits until every partition's
ISR holds all of its replicas again (and none is offline) before it touches the next one, so a
topic with replication factor 3 and ``min.insync.replicas=2`` keeps taking ``acks=all`` writes
throughout.  The controller goes last (its role then moves once, not at every step).  Before the
first broker, the cluster must be healthy: a rolling restart of a cluster with an
under-replicated partition could take that partition offline, so it waits (``--isr-timeout``)
and then refuses.  At the end a preferred-leader election gives the leaderships back to the
preferred replicas (``--no-elect-leaders`` skips it).

``wait-healthy`` is the same wait on its own, for the loop on several hosts (restart one
broker's service, wait, next).  Both read the state from ZooKeeper (Kafka's znodes).
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

__all__ = ["health", "rolling_restart", "wait_healthy"]


def health(status: dict[str, Any], brokers: set[int] | None = None) -> list[str]:
    """What keeps a cluster's state (``read_status``) from being healthy: under-replicated or
    offline partitions, expected brokers not registered; empty when healthy."""
    problems = []
    registered = {b["id"] for b in status["brokers"]}
    missing = sorted((brokers or set()) - registered)
    if missing:
        problems.append(f"broker(s) {','.join(map(str, missing))} not registered")
    if status.get("controller") in (None, -1):
        problems.append("no controller")
    offline = [f"{p['topic']}-{p['partition']}" for p in status["partitions"] if p["offline"]]
    under = [f"{p['topic']}-{p['partition']}" for p in status["partitions"] if p["under_replicated"] and not p["offline"]]
    for what, names in (("offline", offline), ("under-replicated", under)):
        if names:
            shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
            problems.append(f"{len(names)} partition(s) {what}: {shown}")
    return problems


def wait_healthy(
    read: Callable[[], dict[str, Any]], *, timeout: float, brokers: set[int] | None = None, poll: float = 0.2
) -> list[str]:
    """Poll ``read`` (a ``read_status``) until :func:`health` finds nothing, at most ``timeout`` s;
    the problems left (empty: healthy)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            problems = health(read(), brokers)
        except Exception as exc:  # ZooKeeper busy or away for a moment: ask again
            problems = [f"cannot read the cluster state: {exc}"]
        if not problems or time.monotonic() >= deadline:
            return problems
        time.sleep(poll)


def rolling_restart(
    cluster_dir: Path,
    *,
    timeout: float,
    isr_timeout: float,
    elect: bool,
    as_json: bool,
) -> int:
    """Restart every running broker of the local cluster in ``cluster_dir``, one at a time."""
    from . import cluster as ops

    state = ops._require_state(cluster_dir)
    if state is None:
        return 1
    connect = str(state.get("zookeeper", {}).get("connect", ""))
    out = sys.stderr if as_json else sys.stdout

    def say(message: str) -> None:
        print(message, file=out, flush=True)

    try:
        client = ops._kazoo_client(connect, 10.0)
    except Exception as exc:
        ops._err(f"cannot reach the cluster's ZooKeeper at {connect}: {exc}")
        return 1
    try:
        def read() -> dict[str, Any]:
            return dict(ops.read_status(client))

        live = ops.live_brokers(cluster_dir, state)
        unknown = [b for b in live.values() if b["pid"] is None]
        if unknown:
            ops._err(ops._unknown_pid(unknown[0]))
            return 1
        ids = set(live)
        if not ids:
            ops._err("no broker is running")
            return 1
        problems = wait_healthy(read, timeout=isr_timeout, brokers=ids)
        if problems:
            ops._err("the cluster is not healthy, so restarting a broker could take partitions offline: "
                     + "; ".join(problems))
            return 1
        controller = read().get("controller")
        order = sorted(ids, key=lambda i: (i == controller, i))
        say(f"rolling restart of brokers {','.join(map(str, order))} (controller {controller} last)")
        steps = []
        t_all = time.monotonic()
        for i, broker_id in enumerate(order, 1):
            t0 = time.monotonic()
            with contextlib.redirect_stdout(out):
                status = ops.stop_broker(cluster_dir, broker_id, timeout=timeout, missing_ok=True)
                t1 = time.monotonic()
                if status == 0:
                    status = ops.start_broker(cluster_dir, broker_id, timeout=timeout)
            t2 = time.monotonic()
            if status != 0:
                ops._err(f"broker {broker_id} did not come back: the rolling restart stops here")
                return 1
            problems = wait_healthy(read, timeout=isr_timeout, brokers=ids)
            t3 = time.monotonic()
            if problems:
                ops._err(f"after restarting broker {broker_id}, the cluster did not become healthy within "
                         f"{isr_timeout:g} s: " + "; ".join(problems) + " (the rolling restart stops here)")
                return 1
            steps.append({"broker": broker_id, "stop_seconds": round(t1 - t0, 2),
                          "start_seconds": round(t2 - t1, 2), "catch_up_seconds": round(t3 - t2, 2)})
            say(f"[{i}/{len(order)}] broker {broker_id}: stopped in {t1 - t0:.1f}s, started in {t2 - t1:.1f}s, "
                f"every ISR full again after {t3 - t2:.1f}s")
        elected = None
        if elect:
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                ops.elect_leaders(cluster_dir, None, "preferred", None, None)
            elected = sum(1 for line in buf.getvalue().splitlines() if line.endswith(": elected"))
            say(f"preferred leaders elected for {elected} partition(s)")
        total = time.monotonic() - t_all
        say(f"rolling restart done in {total:.1f}s")
        if as_json:
            print(json.dumps({"brokers": steps, "seconds": round(total, 2), "preferred_leaders_elected": elected}))
        return 0
    finally:
        client.stop()
        client.close()


def wait_healthy_command(zookeeper: str, *, timeout: float, brokers: set[int] | None) -> int:
    """``odradek cluster wait-healthy``: 0 once every partition's ISR is full and none is offline."""
    from . import cluster as ops

    try:
        client = ops._kazoo_client(zookeeper, 10.0)
    except Exception as exc:
        ops._err(f"cannot reach ZooKeeper at {zookeeper}: {exc}")
        return 1
    try:
        t0 = time.monotonic()
        problems = wait_healthy(lambda: dict(ops.read_status(client)), timeout=timeout, brokers=brokers)
    finally:
        client.stop()
        client.close()
    if problems:
        ops._err(f"not healthy after {timeout:g} s: " + "; ".join(problems))
        return 1
    print(f"healthy: every partition's ISR is full ({time.monotonic() - t0:.1f}s)")
    return 0
