"""The console's pages over HTTP against a real broker: what they show, what they change, and
what they refuse (no CSRF token, another origin, read-only mode)."""

from __future__ import annotations

import html
import json
import re
import socket
import time

from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import Producer as CKProducer

from odradek.client import Admin, ConfigResource, NewTopic
from odradek.config import ConfigSource
from odradek.testing import BrokerProcess
from tests.console.conftest import Console, wait_until


def _admin(broker: BrokerProcess) -> Admin:
    return Admin(bootstrap_servers=broker.bootstrap)


def _cells(body: str, test_id: str) -> list[list[str]]:
    """The text of each body row of the table marked ``data-testid=test_id``."""
    m = re.search(rf'<table[^>]*data-testid="{test_id}"[^>]*>(.*?)</table>', body, re.S)
    assert m is not None, f"no table {test_id}"
    tbody = re.search(r"<tbody>(.*?)</tbody>", m.group(1), re.S)
    assert tbody is not None
    rows = re.findall(r"<tr>(.*?)</tr>", tbody.group(1), re.S)
    return [
        [html.unescape(re.sub(r"<[^>]+>", "", c.replace("</div>", "\n"))).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", r, re.S)]
        for r in rows
    ]


def _stat(body: str, test_id: str) -> str:
    m = re.search(rf'data-testid="{test_id}"><span class="v">([^<]*)</span>', body)
    assert m is not None, test_id
    return html.unescape(m.group(1))


def _produce(broker: BrokerProcess, topic: str, records: list[dict]) -> None:  # type: ignore[type-arg]
    p = CKProducer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for r in records:
        p.produce(topic, **r)
    assert p.flush(15) == 0


def test_overview_shows_the_cluster(broker: BrokerProcess, console: Console) -> None:
    with _admin(broker) as admin:
        admin.create_topics([NewTopic("ov-a", 3, 1)])
        cluster = admin.describe_cluster()
        described = admin.describe_topics(None)
    partitions = sum(len(t.partitions) for t in described.values())
    body = console.page("/")
    assert html.escape(cluster.cluster_id or "") in body
    assert f'data-testid="cluster-id">{html.escape(cluster.cluster_id or "")}<' in body
    assert _stat(body, "stat-brokers") == "1"
    assert _stat(body, "stat-controller") == str(cluster.controller_id)
    assert int(_stat(body, "stat-partitions")) >= partitions
    assert _stat(body, "stat-under-replicated") == "0"
    assert _stat(body, "stat-offline") == "0"
    brokers = _cells(body, "brokers")
    assert [row[1:3] for row in brokers] == [[broker.host, str(broker.port)]]
    assert brokers[0][0].startswith(str(cluster.brokers[0].id))
    data = json.loads(console.page("/api/overview"))
    assert data["cluster_id"] == cluster.cluster_id
    assert data["offline"] == 0 and data["brokers"][0]["port"] == broker.port


def test_create_topic_then_its_pages(broker: BrokerProcess, console: Console) -> None:
    token = console.token()
    status, _, headers = console.post(
        "/topics",
        {"csrf": token, "name": "made.by-console_1", "partitions": "3", "replication_factor": "1",
         "configs": "retention.ms=123456\ncleanup.policy=compact"},
    )  # fmt: skip
    assert status == 303
    assert headers["Location"] == "/topics/made.by-console_1?notice=created"
    with _admin(broker) as admin:
        t = admin.describe_topics(["made.by-console_1"])["made.by-console_1"]
        res = ConfigResource("topic", "made.by-console_1")
        configs = admin.describe_configs([res])[res]
    assert len(t.partitions) == 3 and t.replication_factor == 1
    assert configs["retention.ms"].value == "123456"
    assert configs["cleanup.policy"].value == "compact"

    body = console.page("/topics/made.by-console_1?notice=created")
    assert "Topic created." in body
    rows = _cells(body, "partitions")
    assert [r[0] for r in rows] == ["0", "1", "2"]
    for r, p in zip(rows, sorted(t.partitions, key=lambda p: p.partition)):
        assert r[1] == str(p.leader) and r[2] == ",".join(map(str, p.replicas)) and r[3] == ",".join(map(str, p.isr))
        assert r[5:8] == ["0", "0", "0"]  # log start, log end, messages

    listing = {r[0]: r for r in _cells(console.page("/topics"), "topics")}
    assert listing["made.by-console_1"][1:4] == ["3", "1", "0"]
    assert "__consumer_offsets" not in " ".join(listing)


def test_create_topic_errors_are_shown(broker: BrokerProcess, console: Console) -> None:
    token = console.token()
    status, body, _ = console.post("/topics", {"csrf": token, "name": "bad/name", "partitions": "1"})
    assert status == 400 and "invalid topic name" in body
    status, body, _ = console.post("/topics", {"csrf": token, "name": "dup-topic", "partitions": "1"})
    assert status == 303
    status, body, _ = console.post("/topics", {"csrf": token, "name": "dup-topic", "partitions": "1"})
    assert status == 400 and "TOPIC_ALREADY_EXISTS" in body
    assert 'value="dup-topic"' in body  # the form keeps what was typed


def test_posts_need_the_token_and_the_same_origin(broker: BrokerProcess, console: Console) -> None:
    status, body, _ = console.post("/topics", {"name": "no-token", "partitions": "1"})
    assert status == 403 and "CSRF" in body
    status, _, _ = console.post("/topics", {"csrf": "forged", "name": "no-token", "partitions": "1"})
    assert status == 403
    token = console.token()
    status, body, _ = console.post(
        "/topics", {"csrf": token, "name": "no-token", "partitions": "1"}, headers={"Origin": "http://evil.example"}
    )
    assert status == 403 and "cross-origin" in body
    status, _, _ = console.post(
        "/topics", {"csrf": token, "name": "no-token", "partitions": "1"}, headers={"Sec-Fetch-Site": "cross-site"}
    )
    assert status == 403
    with _admin(broker) as admin:
        assert "no-token" not in admin.list_topics()
    # the same post from the console's own origin goes through
    status, _, _ = console.post(
        "/topics", {"csrf": token, "name": "with-token", "partitions": "1"}, headers={"Origin": console.url}
    )
    assert status == 303
    with _admin(broker) as admin:
        assert "with-token" in admin.list_topics()


def test_message_browser(broker: BrokerProcess, console: Console) -> None:
    with _admin(broker) as admin:
        admin.create_topics([NewTopic("browse", 2, 1)])
    base = 1_700_000_000_000
    records = [
        {"partition": 0, "key": b"json-key", "value": b'{"user": "ada", "n": 1}', "timestamp": base},
        {"partition": 0, "key": b"xss", "value": b"<script>alert('x')</script>", "timestamp": base + 1000,
         "headers": [("trace", b"abc-123"), ("bin", b"\x00\x01\xff")]},
        {"partition": 0, "key": None, "value": b"\x00\x9f\x92\x96 binary", "timestamp": base + 2000},
        {"partition": 0, "key": b"k3", "value": b"plain text three", "timestamp": base + 3000},
        {"partition": 1, "key": b"k4", "value": b"other partition", "timestamp": base + 1500},
    ]  # fmt: skip
    _produce(broker, "browse", records)

    body = console.page("/topics/browse/messages")  # two partitions: every partition, by time
    rows = _cells(body, "records")
    assert [(r[0], r[1]) for r in rows] == [("0", "0"), ("0", "1"), ("1", "0"), ("0", "2"), ("0", "3")]
    assert "<script>alert" not in body
    assert "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt;" in body
    assert '&quot;user&quot;: &quot;ada&quot;' in body and 'data-kind="json"' in body  # pretty JSON
    assert "00000000  00 9f 92 96 20 62 69 6e 61 72 79" in body  # hex dump of the binary value
    assert rows[1][5].replace("\n", " ").split() == ["trace:", "abc-123", "bin:", "00", "01", "ff"]
    assert rows[0][2] == "2023-11-14 22:13:20.000Z"

    rows = _cells(console.page("/topics/browse/messages?partition=0&position=offset&offset=2&limit=1"), "records")
    assert [(r[1], r[4]) for r in rows] == [("2", "00000000  " + "00 9f 92 96 20 62 69 6e 61 72 79".ljust(47) + "  .... binary")]

    rows = _cells(console.page("/topics/browse/messages?partition=0&position=latest&limit=2"), "records")
    assert [r[1] for r in rows] == ["2", "3"]

    rows = _cells(console.page(f"/topics/browse/messages?partition=0&position=timestamp&timestamp={base + 1500}"), "records")
    assert [r[1] for r in rows] == ["2", "3"]
    rows = _cells(
        console.page("/topics/browse/messages?partition=all&position=timestamp&timestamp=2023-11-14T22:13:21.500"),
        "records",
    )
    assert [(r[0], r[1]) for r in rows] == [("1", "0"), ("0", "2"), ("0", "3")]

    body = console.page("/topics/browse/messages?q=TEXT")
    assert [r[4] for r in _cells(body, "records")] == ["plain text three"]
    assert "5 scanned" in body
    assert [r[1] for r in _cells(console.page("/topics/browse/messages?q=abc-12"), "records")] == ["1"]

    rows = _cells(console.page("/topics/browse/messages?partition=1&format=hex"), "records")
    assert rows[0][3].startswith("00000000  6b 34") and "other partition" in rows[0][4]
    rows = _cells(console.page("/topics/browse/messages?partition=0&format=text&limit=1"), "records")
    assert rows[0][4] == '{"user": "ada", "n": 1}'

    assert console.get("/topics/browse/messages?partition=7")[0] == 404
    assert console.get("/topics/browse/messages?partition=all&position=offset&offset=1")[0] == 400
    assert console.get("/topics/browse/messages?position=timestamp&timestamp=yesterday")[0] == 400
    assert console.get("/topics/nope/messages")[0] == 404


def test_configs_view_and_edit(broker: BrokerProcess, console: Console) -> None:
    with _admin(broker) as admin:
        admin.create_topics([NewTopic("conf", 1, 1)])
    res = ConfigResource("topic", "conf")
    rows = {r[0]: r for r in _cells(console.page("/topics/conf/configs"), "configs")}
    assert rows["retention.ms"][2] == "default config"
    token = console.token()
    status, _, headers = console.post("/topics/conf/configs", {"csrf": token, "name": "retention.ms", "op": "set", "value": "7777"})
    assert status == 303 and headers["Location"].endswith("notice=config-set")
    with _admin(broker) as admin:
        entry = admin.describe_configs([res])[res]["retention.ms"]
    assert entry.value == "7777" and entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG
    body = console.page("/topics/conf/configs")
    assert 'value="7777"' in body and "Reset to default" in body
    assert {r[0]: r for r in _cells(body, "configs")}["retention.ms"][2] == "dynamic topic config"

    status, body, _ = console.post("/topics/conf/configs", {"csrf": token, "name": "retention.ms", "op": "set", "value": "soon"})
    assert status == 400 and "retention.ms" in body
    status, _, _ = console.post("/topics/conf/configs", {"csrf": token, "name": "retention.ms", "op": "delete"})
    assert status == 303
    with _admin(broker) as admin:
        assert admin.describe_configs([res])[res]["retention.ms"].source == ConfigSource.DEFAULT_CONFIG


def test_delete_topic_takes_a_confirmation(broker: BrokerProcess, console: Console) -> None:
    with _admin(broker) as admin:
        admin.create_topics([NewTopic("doomed", 2, 1)])
    body = console.page("/topics/doomed/delete")
    assert 'data-testid="confirm-delete"' in body and "2 partition(s)" in body
    token = console.token()
    status, body, _ = console.post("/topics/doomed/delete", {"csrf": token, "confirm": "doome"})
    assert status == 400 and "nothing was deleted" in body
    with _admin(broker) as admin:
        assert "doomed" in admin.list_topics()
    status, _, headers = console.post("/topics/doomed/delete", {"csrf": token, "confirm": "doomed"})
    assert status == 303 and headers["Location"] == "/topics?notice=deleted"
    with _admin(broker) as admin:
        assert "doomed" not in admin.list_topics()
    assert "doomed" not in [r[0] for r in _cells(console.page("/topics?notice=deleted"), "topics")]
    assert console.get("/topics/doomed")[0] == 404


def _group_consume(broker: BrokerProcess, group: str, topic: str, n: int, *, close: bool = True) -> CKConsumer:
    c = CKConsumer({
        "bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
    })  # fmt: skip
    c.subscribe([topic])
    seen = 0
    deadline = time.monotonic() + 30
    while seen < n and time.monotonic() < deadline:
        for m in c.consume(n - seen, 0.5):
            if m.error() is None:
                seen += 1
    assert seen == n
    c.commit(asynchronous=False)
    if close:
        c.close()
    return c


def test_groups_lag_and_offset_reset(broker: BrokerProcess, console: Console) -> None:
    with _admin(broker) as admin:
        admin.create_topics([NewTopic("lagging", 2, 1)])
    _produce(broker, "lagging", [{"partition": i % 2, "value": b"v%d" % i} for i in range(20)])
    member = _group_consume(broker, "billing", "lagging", 6, close=False)
    try:
        def stable() -> str | None:
            b = console.page("/groups/billing")
            return b if 'data-testid="group-state">Stable<' in b else None

        body = wait_until(stable, 20, "a Stable group")
        assert "rdkafka" in _cells(body, "members")[0][1]
        with _admin(broker) as admin:
            expected = admin.group_lag("billing")
        lag = _cells(body, "lag")

        def text(x: int | None) -> str:
            return "-" if x is None else str(x)

        assert [r[:5] for r in lag] == [
            ["lagging", str(p), text(x.committed_offset), text(x.log_end_offset), text(x.lag)]
            for (_t, p), x in sorted(expected.items())
        ]
        assert [r[3] for r in lag] == ["10", "10"]
        assert sum(x.committed_offset or 0 for x in expected.values()) == 6
        total = sum(x.lag or 0 for x in expected.values())
        assert total > 0 and re.search(rf'data-testid="total-lag">{total}<', body)
        token = console.token()
        status, body, _ = console.post(
            "/groups/billing/reset", {"csrf": token, "topic": "lagging", "strategy": "earliest", "action": "execute"}
        )
        assert status == 400 and "the group is Stable" in body
    finally:
        member.close()
    listing = {r[0]: r for r in _cells(console.page("/groups"), "groups")}
    assert listing["billing"][1] == "Empty" and listing["billing"][4:] == ["lagging", str(total)]

    token = console.token()
    status, body, _ = console.post(
        "/groups/billing/reset", {"csrf": token, "topic": "lagging", "strategy": "shift", "value": "-2", "action": "preview"}
    )
    assert status == 200 and "Preview (dry run" in body
    preview = _cells(body, "reset-preview")
    with _admin(broker) as admin:
        before = admin.list_group_offsets("billing")
    # shift -2 from the committed offset (the log end where nothing is committed), kept in the log
    assert [[r[0], r[2]] for r in preview] == [
        [str(p), str(max((before[("lagging", p)].offset if ("lagging", p) in before else 10) - 2, 0))] for p in (0, 1)
    ]
    for when, expected_new in (("0", ["0", "0"]), ("2999-01-01T00:00:00", ["10", "10"])):
        status, body, _ = console.post(
            "/groups/billing/reset",
            {"csrf": token, "topic": "lagging", "strategy": "timestamp", "value": when, "action": "preview"},
        )
        assert status == 200 and [r[2] for r in _cells(body, "reset-preview")] == expected_new, when
    status, body, _ = console.post(
        "/groups/billing/reset",
        {"csrf": token, "topic": "lagging", "partitions": "1", "strategy": "offset", "value": "4", "action": "execute"},
    )
    assert status == 200 and "Offsets reset" in body
    with _admin(broker) as admin:
        after = admin.list_group_offsets("billing")
    assert after[("lagging", 1)].offset == 4 and after.get(("lagging", 0)) == before.get(("lagging", 0))
    status, body, _ = console.post(
        "/groups/billing/reset", {"csrf": token, "topic": "lagging", "strategy": "latest", "action": "execute"}
    )
    assert status == 200
    assert re.search(r'data-testid="total-lag">0<', body)
    # the group's offsets live in an internal topic: listed on request only
    assert "__consumer_offsets" not in [r[0] for r in _cells(console.page("/topics"), "topics")]
    with_internal = [r[0] for r in _cells(console.page("/topics?internal=1"), "topics")]
    assert "__consumer_offsets internal" in with_internal


def test_read_only_hides_and_refuses_changes(broker: BrokerProcess, read_only_console: Console) -> None:
    ro = read_only_console
    with _admin(broker) as admin:
        admin.create_topics([NewTopic("ro-topic", 1, 1)])
    for path in ("/", "/topics", "/topics/ro-topic", "/topics/ro-topic/configs", "/topics/ro-topic/messages", "/groups"):
        body = ro.page(path)
        assert 'method="post"' not in body and 'name="csrf"' not in body, path
        assert 'data-testid="read-only"' in body
    assert "/delete" not in ro.page("/topics/ro-topic")
    assert ro.get("/topics/ro-topic/delete")[0] == 403
    for path, form in (
        ("/topics", {"name": "ro-new", "partitions": "1"}),
        ("/topics/ro-topic/delete", {"confirm": "ro-topic"}),
        ("/topics/ro-topic/configs", {"name": "retention.ms", "value": "1"}),
        ("/groups/any/reset", {"topic": "ro-topic", "strategy": "earliest"}),
    ):
        status, body, _ = ro.post(path, form)
        assert status == 403 and "read-only" in body, path
    with _admin(broker) as admin:
        assert "ro-topic" in admin.list_topics() and "ro-new" not in admin.list_topics()


def test_throughput_sampled_from_end_offsets(broker: BrokerProcess, console: Console) -> None:
    with _admin(broker) as admin:
        admin.create_topics([NewTopic("rate", 2, 1)])
    assert 'data-testid="chart"' in console.page("/throughput")

    def api() -> dict:  # type: ignore[type-arg]
        return json.loads(console.page("/api/throughput"))

    wait_until(lambda: "rate" in api()["topics"], 20, "a sample with the topic")
    since = api()["series"][-1]["t"]
    _produce(broker, "rate", [{"value": b"x", "partition": i % 2} for i in range(500)])

    def counted() -> int | None:
        n = sum(p["messages"] for p in api()["series"] if p["t"] > since)
        return n if n >= 500 else None

    assert wait_until(counted, 20, "the 500 records in the series") == 500
    data = api()
    assert data["interval_s"] == 1 and data["window_s"] == 900 and data["error"] is None
    assert max(p["messages_per_s"] for p in data["series"] if p["t"] > since) > 0
    assert all(p["messages"] >= 0 for p in data["series"])
    assert "__consumer_offsets" not in data["topics"]  # the groups' commits are not messages in


def test_http_edges(console: Console) -> None:
    assert console.get("/no/such/page")[0] == 404
    status, _, _ = console.request("POST", "/", {"x": "1"})
    assert status == 405
    assert console.get("/static/console.css")[0] == 200
    assert console.get("/static/../__init__.py")[0] == 404
    status, _, headers = console.request("GET", "/")
    assert "default-src 'self'" in headers["Content-Security-Policy"]
    assert console.get("/groups/no-such-group")[0] == 404
    # served on 127.0.0.1: a page asked for under another name (DNS rebinding) is refused
    status, body, _ = console.request("GET", "/", headers={"Host": "attacker.example:80"})
    assert status == 403 and "answers only to" in body
    host, port = console.url.removeprefix("http://").split(":")
    status, _, _ = console.request("GET", "/", headers={"Host": f"localhost:{port}"})
    assert status == 200
    with socket.create_connection((host, int(port)), timeout=10) as s:
        s.sendall(b"NONSENSE\r\n\r\n")
        assert s.recv(100).startswith(b"HTTP/1.1 400")
