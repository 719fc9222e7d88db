"""The console in a real headless Chromium (Debian's ``chromium``, driven by Playwright): create a
topic through the page, produce with confluent-kafka, browse the records, watch a group's lag fall
to 0, delete the topic through its confirmation step.  Every page is saved as a PNG screenshot in
the test output folder (``$ODRADEK_TEST_OUTPUT/console`` or ``test-output/console``) and no page
may log a console error."""

from __future__ import annotations

import re
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer as CKConsumer
from confluent_kafka import Producer as CKProducer
from confluent_kafka import TopicPartition as CKTopicPartition
from playwright import sync_api as playwright_api

from odradek.client import Admin
from odradek.testing import BrokerProcess
from tests.console.conftest import Console

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
TOPIC = "clicks"
RECORDS = 30


class Browser:
    """One page of a Chromium instance, recording every console error and uncaught exception."""

    def __init__(self, page: object, console: Console, out: Path) -> None:
        self.page = page
        self.console = console
        self.out = out
        self.errors: list[str] = []
        self.shots: list[Path] = []
        page.on("console", lambda m: self.errors.append(f"console {m.type}: {m.text}") if m.type == "error" else None)  # type: ignore[attr-defined]
        page.on("pageerror", lambda exc: self.errors.append(f"page error: {exc}"))  # type: ignore[attr-defined]

    def goto(self, path: str) -> None:
        response = self.page.goto(self.console.url + path, wait_until="load")  # type: ignore[attr-defined]
        assert response is not None and response.status == 200, (path, response and response.status)

    def shot(self, name: str) -> Path:
        path = self.out / f"{name}.png"
        self.page.screenshot(path=str(path), full_page=True)  # type: ignore[attr-defined]
        assert path.stat().st_size > 5000 and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        self.shots.append(path)
        return path


@pytest.fixture
def browser(console: Console, output_dir: Path) -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"no Chromium at {CHROMIUM}: apt-get install chromium")
    with playwright_api.sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True, timeout=60_000)
        try:
            context = chromium.new_context(viewport={"width": 1280, "height": 800}, device_scale_factor=1)
            page = context.new_page()
            page.set_default_timeout(20_000)
            b = Browser(page, console, output_dir)
            yield b
            context.close()
        finally:
            chromium.close()


def _total_lag(b: Browser) -> int:
    return int(b.page.get_by_test_id("total-lag").inner_text().replace(",", ""))  # type: ignore[attr-defined]


def test_console_in_chromium(broker: BrokerProcess, console: Console, browser: Browser) -> None:
    b = browser
    page = b.page
    expect = playwright_api.expect

    b.goto("/")
    expect(page.get_by_test_id("stat-brokers")).to_contain_text("1")  # type: ignore[arg-type]
    expect(page.get_by_test_id("brokers")).to_contain_text(str(broker.port))  # type: ignore[arg-type]
    b.shot("01-overview")

    # create a topic through the form
    b.goto("/topics")
    form = page.get_by_test_id("create-topic")  # type: ignore[attr-defined]
    form.locator("input[name=name]").fill(TOPIC)
    form.locator("input[name=partitions]").fill("2")
    form.locator("textarea[name=configs]").fill("retention.ms=3600000")
    form.get_by_role("button", name="Create topic").click()
    page.wait_for_url(re.compile(rf"/topics/{TOPIC}\?notice=created$"))  # type: ignore[attr-defined]
    expect(page.get_by_role("status")).to_have_text("Topic created.")  # type: ignore[attr-defined]
    expect(page.get_by_test_id("partitions").locator("tbody tr")).to_have_count(2)  # type: ignore[attr-defined]
    with Admin(bootstrap_servers=broker.bootstrap) as admin:
        assert len(admin.describe_topics([TOPIC])[TOPIC].partitions) == 2

    # records from a real client
    producer = CKProducer({"bootstrap.servers": broker.bootstrap, "linger.ms": 5})
    for i in range(RECORDS):
        producer.produce(
            TOPIC, key=f"user-{i % 5}", value=f'{{"page": "/item/{i}", "ms": {100 + i}}}', partition=i % 2,
            headers=[("source", b"browser-test")],
        )  # fmt: skip
    assert producer.flush(15) == 0
    page.reload()  # type: ignore[attr-defined]
    expect(page.get_by_test_id("partitions").locator("tfoot")).to_contain_text(str(RECORDS))  # type: ignore[attr-defined]
    b.shot("02-topic-partitions")

    b.goto("/topics")
    row = page.get_by_test_id("topics").locator("tr", has_text=TOPIC)  # type: ignore[attr-defined]
    expect(row.locator("td").nth(4)).to_have_text(str(RECORDS))
    b.shot("03-topics")

    # the message browser: every record, then a search
    page.get_by_role("link", name=TOPIC).click()  # type: ignore[attr-defined]
    page.get_by_role("link", name="Messages").click()  # type: ignore[attr-defined]
    rows = page.get_by_test_id("records").locator("tbody tr")  # type: ignore[attr-defined]
    expect(rows).to_have_count(RECORDS)
    expect(page.get_by_test_id("records")).to_contain_text('"page": "/item/29"')  # type: ignore[attr-defined]
    expect(page.get_by_test_id("records")).to_contain_text("browser-test")  # type: ignore[attr-defined]
    b.shot("04-messages")
    browse = page.get_by_test_id("browse")  # type: ignore[attr-defined]
    browse.locator("input[name=q]").fill("/item/1")
    browse.get_by_role("button", name="Show").click()
    expect(rows).to_have_count(11)  # /item/1 and /item/10../item/19
    expect(page.get_by_test_id("browse-summary")).to_contain_text(f"{RECORDS} scanned")  # type: ignore[attr-defined]
    browse = page.get_by_test_id("browse")  # type: ignore[attr-defined]
    browse.locator("input[name=q]").fill("")
    browse.locator("select[name=partition]").select_option("1")
    browse.locator("select[name=position]").select_option("offset")
    browse.locator("input[name=offset]").fill("10")
    browse.locator("select[name=format]").select_option("hex")
    browse.get_by_role("button", name="Show").click()
    expect(rows).to_have_count(RECORDS // 2 - 10)
    expect(rows.first.locator("td").nth(1)).to_have_text("10")
    expect(rows.first.locator("pre").nth(1)).to_contain_text("00000000  7b 22 70 61 67 65")
    b.shot("05-messages-hex")

    page.get_by_role("link", name="Configs").click()  # type: ignore[attr-defined]
    retention = page.get_by_test_id("configs").locator("tr").filter(has=page.get_by_text("retention.ms", exact=True))  # type: ignore[attr-defined]
    expect(retention).to_contain_text("dynamic topic config")
    expect(retention.locator("input[name=value]")).to_have_value("3600000")
    b.shot("06-configs")

    # a consumer group: lag while behind, 0 once it has consumed everything
    consumer = CKConsumer({
        "bootstrap.servers": broker.bootstrap, "group.id": "dashboard", "enable.auto.commit": False,
        "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
    })  # fmt: skip
    try:
        consumer.subscribe([TOPIC])
        seen = 0
        deadline = time.monotonic() + 30
        while seen < 10 and time.monotonic() < deadline:
            seen += sum(1 for m in consumer.consume(10 - seen, 0.5) if m.error() is None)
        assert seen == 10
        # halfway through each partition's first third: 5 + 5 committed, 20 behind
        consumer.commit(offsets=[CKTopicPartition(TOPIC, 0, 5), CKTopicPartition(TOPIC, 1, 5)], asynchronous=False)
        b.goto("/groups/dashboard")
        assert _total_lag(b) == RECORDS - 10
        expect(page.get_by_test_id("members")).to_contain_text("rdkafka")  # type: ignore[attr-defined]
        b.shot("07-group-lagging")
        deadline = time.monotonic() + 30
        while seen < RECORDS and time.monotonic() < deadline:
            seen += sum(1 for m in consumer.consume(RECORDS - seen, 0.5) if m.error() is None)
        assert seen == RECORDS
        consumer.commit(asynchronous=False)
        for _ in range(50):
            page.reload()  # type: ignore[attr-defined]
            if _total_lag(b) == 0:
                break
            time.sleep(0.2)
        assert _total_lag(b) == 0
        expect(page.get_by_test_id("group-state")).to_have_text("Stable")  # type: ignore[attr-defined]
        b.shot("08-group-caught-up")
    finally:
        consumer.close()
    b.goto("/groups")
    expect(page.get_by_test_id("groups").locator("tr", has_text="dashboard")).to_contain_text("Empty")  # type: ignore[attr-defined]
    b.shot("09-groups")

    # reset offsets: preview first (nothing committed), on the now-empty group
    b.goto("/groups/dashboard")
    reset = page.get_by_test_id("reset")  # type: ignore[attr-defined]
    reset.locator("select[name=topic]").select_option(TOPIC)
    reset.locator("select[name=strategy]").select_option("earliest")
    reset.get_by_role("button", name="Preview (dry run)").click()
    expect(page.get_by_test_id("reset-result")).to_contain_text("Preview")  # type: ignore[attr-defined]
    expect(page.get_by_test_id("reset-preview").locator("tbody tr")).to_have_count(2)  # type: ignore[attr-defined]
    assert _total_lag(b) == 0  # a preview changes nothing
    b.shot("10-reset-preview")

    # the throughput chart: the records produced above show as a positive rate
    b.goto("/throughput")
    chart = page.get_by_test_id("chart")  # type: ignore[attr-defined]
    expect(chart.locator("svg polyline")).to_have_count(1, timeout=30_000)
    page.wait_for_function(  # type: ignore[attr-defined]
        "() => Number(document.getElementById('chart').dataset.points || 0) >= 3", timeout=30_000
    )
    # the 30 records went in between two samples: some step of the series shows them
    assert float(chart.get_attribute("data-max")) > 0
    expect(page.locator("#chart-now")).to_contain_text("messages/s")  # type: ignore[attr-defined]
    b.shot("11-throughput")

    # delete through the confirmation step
    b.goto(f"/topics/{TOPIC}")
    page.get_by_role("link", name="Delete").click()  # type: ignore[attr-defined]
    confirm = page.get_by_test_id("confirm-delete")  # type: ignore[attr-defined]
    b.shot("12-delete-confirm")
    confirm.get_by_label("topic name").fill(TOPIC)
    confirm.get_by_role("button", name="Delete topic").click()
    page.wait_for_url(re.compile(r"/topics\?notice=deleted$"))  # type: ignore[attr-defined]
    expect(page.get_by_role("status")).to_have_text("Topic deleted.")  # type: ignore[attr-defined]
    expect(page.get_by_test_id("topics").locator("tr", has_text=TOPIC)).to_have_count(0)  # type: ignore[attr-defined]
    b.shot("13-topic-deleted")
    with Admin(bootstrap_servers=broker.bootstrap) as admin:
        assert TOPIC not in admin.list_topics()

    assert len(b.shots) == 13
    assert b.errors == [], b.errors


def test_read_only_console_in_chromium(
    broker: BrokerProcess, read_only_console: Console, output_dir: Path
) -> None:
    with playwright_api.sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True, timeout=60_000)
        try:
            page = chromium.new_page(viewport={"width": 1280, "height": 800})
            errors: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(read_only_console.url + "/topics")
            playwright_api.expect(page.get_by_test_id("read-only")).to_have_text("read-only")
            assert page.locator("form[method=post]").count() == 0
            assert page.get_by_test_id("create-topic").count() == 0
            page.screenshot(path=str(output_dir / "14-read-only-topics.png"), full_page=True)
            response = page.goto(read_only_console.url + "/topics/anything/delete")
            assert response is not None and response.status == 403
            playwright_api.expect(page.get_by_role("alert")).to_contain_text("read-only")
            # Chromium logs the refused page as a failed resource: the listener sees errors, and that one is all
            assert len(errors) == 1 and "403" in errors[0], errors
        finally:
            chromium.close()
