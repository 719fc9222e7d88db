"""A producer for failover tests, as a process of its own: confluent-kafka, ``acks=all``, idempotent,
values ``0, 1, 2, ...`` (as text) at full speed or ``--rate`` records/s, until ``STOP_FILE`` exists.

It writes no pipe the test must drain: on stop it flushes and writes ``OUT`` as JSON — the acknowledged
values, the errors, and the acknowledgement times (monotonic seconds, one per acknowledged record,
in acknowledgement order) as a list of gaps above 50 ms with the longest gap.
"""

import json
import os
import sys
import time

from confluent_kafka import Producer

bootstrap, topic, stop_file, out = sys.argv[1:5]
rate = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0
p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True, "linger.ms": 5,
              "message.timeout.ms": 120000, "queue.buffering.max.messages": 200000})
acked: list[int] = []
errors: list[str] = []
last_ack = [0.0]
gaps: list[float] = []
first = [0.0]


def delivered(err, msg):  # type: ignore[no-untyped-def]
    now = time.monotonic()
    if err is not None:
        errors.append(str(err))
        return
    acked.append(int(msg.value()))
    if last_ack[0]:
        gaps.append(now - last_ack[0])
    else:
        first[0] = now
    last_ack[0] = now


n = 0
t0 = time.monotonic()
deadline = t0 + 600  # bounded: the test stops it long before
while not os.path.exists(stop_file) and time.monotonic() < deadline:
    if rate:
        due = t0 + n / rate
        wait = due - time.monotonic()
        if wait > 0:
            p.poll(min(wait, 0.05))
            continue
    try:
        p.produce(topic, str(n).encode(), on_delivery=delivered)
        n += 1
    except BufferError:
        p.poll(0.01)
        continue
    if n % 500 == 0:
        p.poll(0)
left = p.flush(120)
result = {
    "sent": n, "acked": acked, "errors": errors[:20], "error_count": len(errors), "unflushed": left,
    "longest_gap_s": round(max(gaps, default=0.0), 3),
    "gaps_over_50ms": [round(g, 3) for g in gaps if g > 0.05][:200],
    "seconds": round(last_ack[0] - first[0], 2),
}
with open(out + ".tmp", "w") as f:
    json.dump(result, f)
os.replace(out + ".tmp", out)
