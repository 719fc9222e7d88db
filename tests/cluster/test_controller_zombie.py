"""A controller whose ZooKeeper session expired is no controller, even before it resigns.

When a session expires, kazoo fires every watch the client had at once and then opens a new
session.  The watch handlers are queued on the old controller's event queue ahead of its
resignation, so they run with the new session while the controller still thinks it is active.
One of them, the ISR change handler, deletes the notifications it reads: the successor never
learns the leader's new ISR, and (for one) never moves a partition back to its preferred leader,
whose replica it believes out of sync.  Seen in CI: a follower that was also the controller was
frozen for longer than its session, and its successor's partition stayed on the wrong leader.

The first runs the real controller over the in-memory ZooKeeper of ``test_controller_properties``;
the second a leader's replication layer, whose notification must reach the controller at all.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from odradek.cluster.controller import LeaderIsr
from odradek.cluster.metadata import PartitionState
from tests.cluster.test_controller_properties import _World
from tests.cluster.test_isr_leaving_brokers import _replication

NOTIFICATIONS = "/isr_change_notification"
STATE = "/brokers/topics/t/partitions/0/state"


def test_an_expired_controller_leaves_isr_change_notifications_to_its_successor() -> None:
    async def run() -> tuple[bool, tuple[int, ...], tuple[int, ...] | None, list[str]]:
        world = _World()
        try:
            await world.start_with_topic()
            old = int(world.tree.json("/controller")["brokerid"])
            zombie = world.controllers[old]
            # the process is frozen: its queued events wait (the store keeps working, as kazoo's
            # thread does once the process runs again)
            zombie._tasks[0].cancel()
            await asyncio.sleep(0)
            del world.controllers[old]  # (settle waits for empty event queues)
            world.stores[old].new_session()
            world._register(old)
            await world.settle()
            new = int(world.tree.json("/controller")["brokerid"])
            assert new != old
            # the leader shrinks the ISR and announces it; the successor's watch has not fired yet
            # when the old controller, thawed, runs the handler kazoo queued at the expiry
            held = world.tree.child_watches.pop(NOTIFICATIONS, [])
            current = LeaderIsr.from_json(world.tree.json(STATE), world.tree.stat(STATE).version)
            dropped = next(r for r in current.isr if r != current.leader)
            shrunk = LeaderIsr(current.leader, current.leader_epoch, tuple(r for r in current.isr if r != dropped),
                               current.controller_epoch)
            world.tree.set(STATE, json.dumps(shrunk.to_json()).encode(), current.zk_version)
            world.tree.create(f"{NOTIFICATIONS}/isr_change_",
                              json.dumps({"version": 1, "partitions": [{"topic": "t", "partition": 0}]}).encode(),
                              sequence=True)
            zombie_active = zombie.active
            await zombie._isr_changed()
            left = world.tree.children(NOTIFICATIONS)
            # then the successor's watch fires, and the old controller handles its new session
            world.tree.child_watches.setdefault(NOTIFICATIONS, []).extend(held)
            world.tree._fire(world.tree.child_watches, NOTIFICATIONS)
            zombie._tasks[0] = asyncio.get_running_loop().create_task(zombie.events.run())
            world.controllers[old] = zombie
            await zombie.on_new_session()
            await world.settle()
            seen = world.controllers[new].ctx.states.get(("t", 0))
            assert not world.unsettled
            return zombie_active, shrunk.isr, None if seen is None else seen.isr, left
        finally:
            await world.stop()

    zombie_active, isr, seen, left = asyncio.run(run())
    assert not zombie_active, "a controller whose session expired still counts itself active"
    assert left, "the expired controller deleted the ISR change notification"
    assert seen == isr, f"the new controller believes ISR {seen}; the leader's is {isr}"


def test_a_leader_retries_an_isr_change_notification_that_failed(tmp_path: Path) -> None:
    """The leader's ISR write succeeded, its notification did not (ZooKeeper went away between
    the two): it is sent again at the next ISR check, not dropped."""

    async def run() -> tuple[list[list[tuple[str, int]]], tuple[int, ...]]:
        replication, rm = _replication(tmp_path, 2, {1, 2, 3})
        sent: list[list[tuple[str, int]]] = []
        attempts = 0

        async def write_leader_isr(_t: str, _p: int, _li: LeaderIsr, version: int) -> int:
            return version + 1

        async def notify_isr_change(tps: list[tuple[str, int]]) -> None:
            nonlocal attempts
            attempts += 1
            if attempts == 1:
                raise ConnectionError("connection to ZooKeeper lost")
            sent.append(tps)

        replication.backend.write_leader_isr = write_leader_isr
        replication.backend.notify_isr_change = notify_isr_change
        p = rm.make_leader(PartitionState("t", 0, (2, 1, 3), (2, 1, 3), 2, 1, 1), None, 0)
        await replication.change_isr(p, (2, 3))
        assert sent == []
        await replication._isr_check()
        await replication._isr_check()  # nothing left to announce: no second notification
        return sent, p.state.isr

    sent, isr = asyncio.run(run())
    assert isr == (2, 3)
    assert sent == [[("t", 0)]], f"notifications sent after the failed one: {sent}"
