"""The console's Schemas page against a real broker and its schema registry: the subjects with
their versions and schemas, the topics that use them (by the topic's subject name, or named by
the topic's broker-side validation), over HTTP and in a headless Chromium."""

from __future__ import annotations

import html
import json
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from odradek.testing import BrokerProcess
from tests.console.conftest import Console
from tests.console.test_pages import _cells

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ORDER = {"type": "record", "name": "Order", "namespace": "shop",
         "fields": [{"name": "id", "type": "string"}, {"name": "qty", "type": "int"}]}
ORDER_V2 = {**ORDER, "fields": [*ORDER["fields"], {"name": "note", "type": "string", "default": ""}]}


@pytest.fixture(scope="module")
def registry_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    b = BrokerProcess(
        tmp_path_factory.mktemp("console-schemas") / "data",
        overrides={"schema.registry.listeners": "http://127.0.0.1:0", "group.initial.rebalance.delay.ms": 0,
                   "offsets.topic.num.partitions": 1},
    )
    b.start()
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="module")
def schema_console(registry_broker: BrokerProcess) -> Iterator[Console]:
    assert registry_broker.registry_url is not None
    c = Console(registry_broker.bootstrap, "--schema-registry-url", registry_broker.registry_url).start()
    try:
        yield c
    finally:
        assert c.stop() == 0, "".join(c.stderr[-30:])


@pytest.fixture(scope="module")
def world(registry_broker: BrokerProcess) -> dict[str, str]:
    """Topics and subjects: ``orders`` with two versions of ``orders-value``, ``audit`` validating
    values by record name (subject ``shop.Audit``), and a subject no topic uses."""
    tag = uuid.uuid4().hex[:6]
    orders, audit, unused = f"orders{tag}", f"audit{tag}", f"lonely{tag}-value"
    admin = AdminClient({"bootstrap.servers": registry_broker.bootstrap})
    news = [NewTopic(orders, 1, 1), NewTopic(audit, 1, 1, config={
        "confluent.value.schema.validation": "true",
        "confluent.value.subject.name.strategy": "io.confluent.kafka.serializers.subject.RecordNameStrategy"})]
    for f in admin.create_topics(news).values():
        f.result(30)
    client = SchemaRegistryClient({"url": registry_broker.registry_url})
    client.register_schema(f"{orders}-value", Schema(json.dumps(ORDER), "AVRO"))
    client.register_schema(f"{orders}-value", Schema(json.dumps(ORDER_V2), "AVRO"))
    client.register_schema(f"shop.Audit{tag}", Schema(json.dumps({**ORDER, "name": f"Audit{tag}"}), "AVRO"))
    client.register_schema(unused, Schema(json.dumps({"type": "string"}), "AVRO"))
    return {"orders": orders, "audit": audit, "audit_subject": f"shop.Audit{tag}", "unused": unused}


def test_the_schemas_page_lists_subjects_versions_and_topics(schema_console: Console, world: dict[str, str]) -> None:
    body = schema_console.page("/schemas")
    assert 'href="/schemas"' in body  # in the navigation
    rows = {r[0]: r for r in _cells(body, "subjects")}
    orders = rows[f"{world['orders']}-value"]
    assert orders[1:4] == ["AVRO", "1, 2", orders[3]] and orders[3].isdigit()
    assert f"{world['orders']} (value, topic name)" in orders[4]
    audit = rows[world["audit_subject"]]
    assert f"{world['audit']} (value, validated (RecordNameStrategy))" in audit[4]
    assert world["orders"] not in audit[4]
    assert rows[world["unused"]][4] == "none"
    assert f'href="/topics/{world["orders"]}"' in body


def test_a_subject_page_shows_each_version_and_its_schema(schema_console: Console, world: dict[str, str]) -> None:
    subject = f"{world['orders']}-value"
    body = schema_console.page(f"/schemas/{subject}")
    versions = _cells(body, "versions")
    assert [v[0] for v in versions] == ["1", "2"] and all(v[2] == "AVRO" for v in versions)
    texts = {v: html.unescape(body.split(f'data-testid="schema-v{v}">', 1)[1].split("</pre>", 1)[0]) for v in (1, 2)}
    assert json.loads(texts[1])["fields"] == ORDER["fields"]
    assert json.loads(texts[2])["fields"][-1]["name"] == "note"
    assert world["orders"] in body.split('data-testid="subject-topics">', 1)[1].split("</dd>", 1)[0]
    status, missing = schema_console.get("/schemas/no-such-subject")
    assert status == 404 and "no-such-subject" in html.unescape(missing)


def test_an_unreachable_registry_is_an_error_page(registry_broker: BrokerProcess) -> None:
    c = Console(registry_broker.bootstrap, "--schema-registry-url", "http://127.0.0.1:9").start()
    try:
        status, body = c.get("/schemas")
        assert status == 502 and "schema registry at http://127.0.0.1:9 did not answer" in html.unescape(body)
        assert c.get("/")[0] == 200  # the other pages do not need it
    finally:
        assert c.stop() == 0


def test_the_schemas_pages_in_chromium(schema_console: Console, world: dict[str, str], output_dir: Path) -> None:
    from playwright import sync_api as playwright_api

    from tests.console.test_browser import CHROMIUM_ARGS

    if not Path(CHROMIUM).exists():
        pytest.fail(f"no Chromium at {CHROMIUM}: apt-get install chromium")
    errors: list[str] = []
    with playwright_api.sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, headless=True, timeout=60_000)
        try:
            page = chromium.new_context(viewport={"width": 1280, "height": 800}).new_page()
            page.set_default_timeout(20_000)
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.goto(schema_console.url + "/")
            page.get_by_role("link", name="Schemas").click()
            page.wait_for_url("**/schemas")
            subjects = page.get_by_test_id("subjects")
            playwright_api.expect(subjects).to_contain_text(world["audit_subject"])
            page.screenshot(path=str(output_dir / "schemas-list.png"), full_page=True)
            subjects.get_by_role("link", name=f"{world['orders']}-value").click()
            page.wait_for_url(f"**/schemas/{world['orders']}-value")
            playwright_api.expect(page.get_by_test_id("versions").locator("tbody tr")).to_have_count(2)
            playwright_api.expect(page.get_by_test_id("schema-v2")).to_contain_text('"note"')
            page.screenshot(path=str(output_dir / "schemas-subject.png"), full_page=True)
            page.get_by_test_id("subject-topics").get_by_role("link", name=world["orders"]).click()
            page.wait_for_url(f"**/topics/{world['orders']}")
        finally:
            chromium.close()
    assert errors == []
