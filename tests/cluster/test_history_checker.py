"""The history checker on hand-made histories: each anomaly is detected; a clean history passes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.cluster.history.checker import check, check_file


class H:
    """A tiny history builder."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []
        self.t = 0.0

    def ev(self, type_: str, **fields: Any) -> H:
        self.t += 0.1
        self.events.append({"t": round(self.t, 3), "type": type_, **fields})
        return self

    def send(self, proc: str, seq: int, partition: int, *, idempotent: bool = True, acks: str = "all") -> str:
        value = f"{proc}-{seq:08d}"
        self.ev("send", proc=proc, value=value, partition=partition, seq=seq, idempotent=idempotent, acks=acks)
        return value

    def ack(self, value: str, partition: int, offset: int) -> H:
        return self.ev("ack", proc=value.rsplit("-", 1)[0], value=value, partition=partition, offset=offset)

    def final(self, log: dict[int, list[str]], complete: bool = True) -> H:
        for p, values in log.items():
            for o, v in enumerate(values):
                self.ev("read", partition=p, offset=o, value=v)
        return self.ev("final", partitions=len(log), complete=complete)


def clean() -> tuple[H, dict[int, list[str]]]:
    h = H()
    log: dict[int, list[str]] = {0: [], 1: []}
    for seq in range(6):
        p = seq % 2
        v = h.send("pi1", seq, p)
        h.ack(v, p, len(log[p]))
        log[p].append(v)
        h.ev("poll", proc="ca", group="g", mode="assign", partition=p, offset=len(log[p]) - 1, value=v)
    h.ev("commit", proc="ca", group="g", partition=0, offset=2)
    h.ev("committed", proc="obs", group="g", partition=0, offset=2)
    h.ev("commit", proc="ca", group="g", partition=0, offset=3)
    return h, log


def test_clean_history_passes() -> None:
    h, log = clean()
    h.ev("nemesis", op="kill-controller", phase="start", target=1, id="n1")
    h.ev("nemesis", op="kill-controller", phase="end", target=1, id="n1")
    v = h.send("pi1", 6, 0)
    h.t += 5.0
    h.ack(v, 0, 3)
    log[0].append(v)
    h.ev("workload_end")
    r = check(h.final(log).events)
    assert r.ok, r.summary()
    assert (r.lost_count, r.duplicated_count, r.reordered_count, r.vanished_count, r.backwards_count) == (0,) * 5
    assert r.acked == 7 and r.final_records == 7
    # the 5 s without acknowledgements is charged to the fault that was running
    assert r.longest_gap is not None and r.longest_gap.seconds > 5
    assert any("kill-controller" in f for f in r.longest_gap.faults)
    assert r.gap_per_fault_kind["kill-controller"].seconds > 5
    assert "RESULT: OK" in r.summary()


def test_lost_write_detected() -> None:
    h, log = clean()
    lost = log[1].pop()  # acknowledged at partition 1, offset 2, not in the final log
    r = check(h.final(log).events)
    assert not r.ok
    assert r.lost_count == 1 and r.lost[0]["value"] == lost and r.lost[0]["offset"] == 2
    assert "lost (acks=all): 1" in r.summary()


def test_overwritten_write_is_lost_and_acks1_loss_reported_apart() -> None:
    h, log = clean()
    v = h.send("p1", 0, 0, idempotent=False, acks="1")
    h.ack(v, 0, 3)  # acks=1 record acknowledged, then lost: allowed by Kafka, reported apart
    other = h.send("pi2", 0, 1)
    h.ack(other, 1, 3)
    log[1].append("pa-00000000")  # another record at the acknowledged offset
    r = check(h.final(log).events)
    assert r.lost_acks1_count == 1
    assert r.lost_count == 1 and r.lost[0]["final_at_offset"] == "pa-00000000"


def test_duplicate_from_idempotent_producer_detected() -> None:
    h, log = clean()
    log[0].append(log[0][0])  # the same value written twice
    r = check(h.final(log).events)
    assert r.duplicated_count == 1 and not r.ok
    # a non-idempotent producer's duplicate is counted, not an anomaly
    h2 = H()
    v = h2.send("pa", 0, 0, idempotent=False)
    h2.ack(v, 0, 0)
    r2 = check(h2.final({0: [v, v]}).events)
    assert r2.duplicated_count == 0 and r2.duplicated_non_idempotent == 1 and r2.ok


def test_reorder_detected() -> None:
    h = H()
    a = h.send("pi1", 0, 0)
    b = h.send("pi1", 1, 0)
    h.ack(b, 0, 0)  # sent second, written first
    h.ack(a, 0, 1)
    r = check(h.final({0: [b, a]}).events)
    assert r.reordered_count == 1 and not r.ok
    assert r.reordered[0]["earlier"] == [a, 1] and r.reordered[0]["later"] == [b, 0]
    # the same for a non-idempotent producer is allowed (retries may reorder)
    h2 = H()
    a = h2.send("pa", 0, 0, idempotent=False)
    b = h2.send("pa", 1, 0, idempotent=False)
    h2.ack(b, 0, 0).ack(a, 0, 1)
    assert check(h2.final({0: [b, a]}).events).ok


def test_vanished_read_detected() -> None:
    h, log = clean()
    # a consumer saw a record at offset 3 of partition 0 (past the high watermark) that was truncated away
    h.ev("poll", proc="cg1", group="g", mode="group", partition=0, offset=3, value="pa-00000042")
    r = check(h.final(log).events)
    assert r.vanished_count == 1 and not r.ok
    assert r.vanished[0]["value"] == "pa-00000042" and r.vanished[0]["final_at_offset"] is None
    # a poll whose value is at the offset in the final read is fine
    h2, log2 = clean()
    h2.ev("poll", proc="cg1", group="g", mode="group", partition=0, offset=0, value=log2[0][0])
    assert check(h2.final(log2).events).ok


def test_committed_offset_backwards_detected() -> None:
    h, log = clean()
    h.ev("commit", proc="cg1", group="g", partition=0, offset=1)  # acknowledged after 3 was
    r = check(h.final(log).events)
    assert r.backwards_count == 1 and not r.ok
    assert r.backwards[0]["from"] == 3 and r.backwards[0]["to"] == 1
    # a commit lost: after healing the group's committed offset is below an acknowledged commit
    h1, log1 = clean()
    h1.ev("final_committed", proc="obs", group="g", partition=0, offset=2, issued=h1.t)
    r1 = check(h1.final(log1).events)
    assert r1.backwards_count == 1 and r1.backwards[0]["to_event"][0] == "final_committed" and not r1.ok
    # after a documented reset the offset may go back
    h2, log2 = clean()
    h2.ev("reset", proc="ca", group="g", partition=0, reason="offset out of range")
    h2.ev("commit", proc="ca", group="g", partition=0, offset=0)
    r2 = check(h2.final(log2).events)
    assert r2.backwards_count == 0 and r2.ok
    # other groups and partitions are independent
    h3, log3 = clean()
    h3.ev("commit", proc="x", group="other", partition=0, offset=1)
    h3.ev("commit", proc="ca", group="g", partition=1, offset=1)
    assert check(h3.final(log3).events).ok


def test_incomplete_final_read_fails(tmp_path: Path) -> None:
    h, log = clean()
    h.final(log, complete=False)
    path = tmp_path / "history.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in h.events) + '{"t": 9, "type": "re')  # a torn last line
    r = check_file(path)
    assert not r.final_complete and not r.ok
    assert "INCOMPLETE" in r.summary()


def test_stale_committed_offset_read_reported() -> None:
    h, log = clean()  # commits 2 then 3 acknowledged on partition 0
    issued = h.t
    h.ev("committed", proc="obs", group="g", partition=0, offset=1, issued=issued)  # issued after 3 was acked
    r = check(h.final(log).events)
    assert r.stale_reads_count == 1 and r.stale_reads[0]["read"] == 1
    assert r.backwards_count == 0 and r.ok  # reported, not a safety failure
    assert "stale committed-offset reads (reported only): 1" in r.summary()
    # a read issued before the higher commit was acknowledged (concurrent with it) is not stale
    h2 = H()
    h2.ev("commit", proc="c", group="g", partition=0, offset=2)
    issued = h2.t
    h2.ev("commit", proc="c", group="g", partition=0, offset=5)
    h2.ev("committed", proc="obs", group="g", partition=0, offset=2, issued=issued)
    assert check(h2.final({0: []}).events).stale_reads_count == 0


def test_stuck_producer_reported() -> None:
    h = H()
    v = h.send("pi2", 0, 0)
    h.ack(v, 0, 0)
    log = [v]
    for seq in range(1, 40):  # pi1 never acknowledged while pi2 writes for ~8 s
        stuck = h.send("pi1", seq, 0)
        h.ev("error", proc="pi1", value=stuck, error="Local: Message timed out")
        v = h.send("pi2", seq, 0)
        h.ack(v, 0, len(log))
        log.append(v)
    r = check(h.final({0: log}).events)
    assert r.ok  # an availability problem, not a safety one
    assert r.longest_gap_per_producer["pi1"].seconds > 7 > r.longest_gap_per_producer["pi2"].seconds
    assert "producer pi1:" in r.summary() and "39 records failed" in r.summary()
