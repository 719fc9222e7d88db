"""Every endpoint of Confluent's REST API and its error codes, against a broker's registry."""

from __future__ import annotations

import json
import urllib.request

from tests.registry.conftest import MEDIA, avro_user, call, unique

NEW_FIELD_WITH_DEFAULT = {"name": "age", "type": "int", "default": 0}
NEW_FIELD_WITHOUT_DEFAULT = {"name": "email", "type": "string"}


def register(url: str, subject: str, schema: str, **body: object) -> int:
    answer = call("POST", f"{url}/subjects/{subject}/versions", {"schema": schema, **body})
    assert answer.status == 200, answer.body
    return int(answer.json["id"])


def test_root_and_schema_types(url: str) -> None:
    assert call("GET", f"{url}/").json == {}
    assert call("GET", f"{url}/schemas/types").json == ["JSON", "PROTOBUF", "AVRO"]
    assert call("GET", f"{url}/contexts").json == ["."]


def test_register_is_idempotent_and_ids_are_global(url: str) -> None:
    subject, other = unique(), unique()
    first = register(url, subject, avro_user())
    assert register(url, subject, avro_user()) == first
    # the same schema written differently is the same schema
    spaced = json.dumps(json.loads(avro_user()), indent=4)
    assert register(url, subject, spaced) == first
    # under another subject: the same id, version 1 there
    assert register(url, other, avro_user()) == first
    assert call("GET", f"{url}/subjects/{other}/versions").json == [1]
    assert call("GET", f"{url}/subjects/{subject}/versions").json == [1]
    versions = call("GET", f"{url}/schemas/ids/{first}/versions").json
    assert {"subject": subject, "version": 1} in versions and {"subject": other, "version": 1} in versions
    assert set(call("GET", f"{url}/schemas/ids/{first}/subjects").json) >= {subject, other}
    # a new schema gets a new id
    second = register(url, subject, avro_user(NEW_FIELD_WITH_DEFAULT))
    assert second > first


def test_versions_and_schemas_by_version(url: str) -> None:
    subject = unique()
    first = register(url, subject, avro_user())
    second = register(url, subject, avro_user(NEW_FIELD_WITH_DEFAULT))
    v2 = call("GET", f"{url}/subjects/{subject}/versions/2").json
    assert v2 == {"subject": subject, "version": 2, "id": second, "schema": json.loads(json.dumps(v2["schema"]))}
    assert call("GET", f"{url}/subjects/{subject}/versions/latest").json["id"] == second
    assert call("GET", f"{url}/subjects/{subject}/versions/-1").json["version"] == 2
    assert call("GET", f"{url}/subjects/{subject}/versions/1").json["id"] == first
    raw = call("GET", f"{url}/subjects/{subject}/versions/1/schema")
    assert json.loads(raw.body) == json.loads(avro_user())
    assert call("GET", f"{url}/subjects/{subject}/versions/3").code == 40402
    assert call("GET", f"{url}/subjects/{unique()}/versions/1").code == 40401
    assert call("GET", f"{url}/subjects/{unique()}/versions").code == 40401
    for bad in ("0", "abc", "-2", "99999999999"):
        answer = call("GET", f"{url}/subjects/{subject}/versions/{bad}")
        assert (answer.status, answer.code) == (422, 42202), bad
    assert subject in call("GET", f"{url}/subjects").json
    assert call("GET", f"{url}/subjects?subjectPrefix={subject[:6]}").json.count(subject) == 1
    assert call("GET", f"{url}/subjects?subjectPrefix=zzz-none").json == []


def test_schemas_by_id(url: str) -> None:
    subject = unique()
    schema_id = register(url, subject, avro_user())
    by_id = call("GET", f"{url}/schemas/ids/{schema_id}")
    assert by_id.status == 200 and by_id.headers["Content-Type"] == MEDIA
    assert json.loads(by_id.json["schema"]) == json.loads(avro_user())
    assert "schemaType" not in by_id.json  # Avro is the default type
    assert json.loads(call("GET", f"{url}/schemas/ids/{schema_id}/schema").body) == json.loads(avro_user())
    assert call("GET", f"{url}/schemas/ids/{schema_id}?fetchMaxId=true").json["maxId"] >= schema_id
    missing = call("GET", f"{url}/schemas/ids/999999")
    assert (missing.status, missing.code) == (404, 40403)
    assert call("GET", f"{url}/schemas/ids/999999/subjects").code == 40403
    assert call("GET", f"{url}/schemas/ids/999999/versions").code == 40403
    listed = call("GET", f"{url}/schemas?subjectPrefix={subject}").json
    assert [s["id"] for s in listed] == [schema_id]


def test_lookup(url: str) -> None:
    subject = unique()
    schema_id = register(url, subject, avro_user())
    found = call("POST", f"{url}/subjects/{subject}", {"schema": avro_user()})
    assert found.status == 200
    assert (found.json["id"], found.json["version"], found.json["subject"]) == (schema_id, 1, subject)
    missing = call("POST", f"{url}/subjects/{subject}", {"schema": avro_user(NEW_FIELD_WITH_DEFAULT)})
    assert (missing.status, missing.code) == (404, 40403)
    assert call("POST", f"{url}/subjects/{unique()}", {"schema": avro_user()}).code == 40401


def test_evolution_under_backward_and_none(url: str) -> None:
    subject = unique()
    register(url, subject, avro_user())
    # compatible: a new version
    register(url, subject, avro_user(NEW_FIELD_WITH_DEFAULT))
    # incompatible: 409
    refused = call("POST", f"{url}/subjects/{subject}/versions",
                   {"schema": avro_user(NEW_FIELD_WITH_DEFAULT, NEW_FIELD_WITHOUT_DEFAULT)})
    assert (refused.status, refused.code) == (409, 409)
    assert "READER_FIELD_MISSING_DEFAULT_VALUE" in refused.json["message"]
    assert call("GET", f"{url}/subjects/{subject}/versions").json == [1, 2]
    # under NONE it registers
    assert call("PUT", f"{url}/config/{subject}", {"compatibility": "NONE"}).json == {"compatibility": "NONE"}
    register(url, subject, avro_user(NEW_FIELD_WITH_DEFAULT, NEW_FIELD_WITHOUT_DEFAULT))
    assert call("GET", f"{url}/subjects/{subject}/versions").json == [1, 2, 3]


def test_compatibility_endpoints(url: str) -> None:
    subject = unique()
    register(url, subject, avro_user())
    ok = call("POST", f"{url}/compatibility/subjects/{subject}/versions/latest",
              {"schema": avro_user(NEW_FIELD_WITH_DEFAULT)})
    assert ok.json == {"is_compatible": True}
    bad = call("POST", f"{url}/compatibility/subjects/{subject}/versions/1?verbose=true",
               {"schema": avro_user(NEW_FIELD_WITHOUT_DEFAULT)})
    assert bad.json["is_compatible"] is False
    assert any("READER_FIELD_MISSING_DEFAULT_VALUE" in m for m in bad.json["messages"])
    assert call("POST", f"{url}/compatibility/subjects/{subject}/versions",
                {"schema": avro_user(NEW_FIELD_WITHOUT_DEFAULT)}).json == {"is_compatible": False}
    assert call("POST", f"{url}/compatibility/subjects/{subject}/versions/7", {"schema": avro_user()}).code == 40402
    # an unknown subject has nothing to be incompatible with
    assert call("POST", f"{url}/compatibility/subjects/{unique()}/versions/latest",
                {"schema": avro_user()}).json == {"is_compatible": True}
    invalid = call("POST", f"{url}/compatibility/subjects/{subject}/versions/latest", {"schema": "{nope"})
    assert invalid.code == 42201
    verbose = call("POST", f"{url}/compatibility/subjects/{subject}/versions/latest?verbose=true", {"schema": "{nope"})
    assert verbose.json["is_compatible"] is False and verbose.json["messages"]


def test_config(url: str) -> None:
    subject = unique()
    assert call("GET", f"{url}/config").json["compatibilityLevel"] in ("BACKWARD", "NONE", "FULL")
    assert call("GET", f"{url}/config/{subject}").code == 40408
    assert call("GET", f"{url}/config/{subject}?defaultToGlobal=true").json["compatibilityLevel"]
    assert call("PUT", f"{url}/config/{subject}", {"compatibility": "full_transitive"}).json == {
        "compatibility": "FULL_TRANSITIVE"}
    assert call("GET", f"{url}/config/{subject}").json == {"compatibilityLevel": "FULL_TRANSITIVE"}
    bad = call("PUT", f"{url}/config/{subject}", {"compatibility": "SIDEWAYS"})
    assert (bad.status, bad.code) == (422, 42203)
    assert call("DELETE", f"{url}/config/{subject}").json == {"compatibilityLevel": "FULL_TRANSITIVE"}
    assert call("GET", f"{url}/config/{subject}").code == 40408
    assert call("DELETE", f"{url}/config/{subject}").code == 40401
    # the global level
    before = call("GET", f"{url}/config").json
    assert call("PUT", f"{url}/config", {"compatibility": "FORWARD"}).json == {"compatibility": "FORWARD"}
    assert call("GET", f"{url}/config").json["compatibilityLevel"] == "FORWARD"
    assert call("DELETE", f"{url}/config").json["compatibilityLevel"] == "FORWARD"
    assert call("GET", f"{url}/config").json == before


def test_soft_and_permanent_delete_of_versions(url: str) -> None:
    subject = unique()
    first = register(url, subject, avro_user())
    register(url, subject, avro_user(NEW_FIELD_WITH_DEFAULT))
    assert call("DELETE", f"{url}/subjects/{subject}/versions/1/?permanent=true").code == 40407
    assert call("DELETE", f"{url}/subjects/{subject}/versions/1").json == 1
    assert call("GET", f"{url}/subjects/{subject}/versions").json == [2]
    assert call("GET", f"{url}/subjects/{subject}/versions?deleted=true").json == [1, 2]
    assert call("GET", f"{url}/subjects/{subject}/versions?deletedOnly=true").json == [1]
    assert call("GET", f"{url}/subjects/{subject}/versions?deletedAsNegative=true").json == [-1, 2]
    assert call("GET", f"{url}/subjects/{subject}/versions/1").code == 40402
    assert call("GET", f"{url}/subjects/{subject}/versions/1?deleted=true").json["id"] == first
    assert call("DELETE", f"{url}/subjects/{subject}/versions/1").code == 40406
    # a soft-deleted schema's id still reads (data written with it stays readable)
    assert call("GET", f"{url}/schemas/ids/{first}").status == 200
    assert call("DELETE", f"{url}/subjects/{subject}/versions/1?permanent=true").json == 1
    assert call("GET", f"{url}/subjects/{subject}/versions?deleted=true").json == [2]
    assert call("DELETE", f"{url}/subjects/{subject}/versions/9").code == 40402
    assert call("DELETE", f"{url}/subjects/{unique()}/versions/1").code == 40401


def test_soft_and_permanent_delete_of_subjects(url: str) -> None:
    subject = unique()
    register(url, subject, avro_user())
    register(url, subject, avro_user(NEW_FIELD_WITH_DEFAULT))
    assert call("DELETE", f"{url}/subjects/{subject}?permanent=true").code == 40405
    assert call("DELETE", f"{url}/subjects/{subject}").json == [1, 2]
    assert subject not in call("GET", f"{url}/subjects").json
    assert subject in call("GET", f"{url}/subjects?deleted=true").json
    assert subject in call("GET", f"{url}/subjects?deletedOnly=true").json
    assert call("DELETE", f"{url}/subjects/{subject}").code == 40404
    # registering again continues the versions; the soft-deleted version 1, holding the same
    # schema, gives way to the new one (as in Confluent's registry)
    register(url, subject, avro_user())
    assert call("GET", f"{url}/subjects/{subject}/versions").json == [3]
    assert call("GET", f"{url}/subjects/{subject}/versions?deleted=true").json == [2, 3]
    assert call("DELETE", f"{url}/subjects/{subject}").json == [3]
    assert call("DELETE", f"{url}/subjects/{subject}?permanent=true").json == [2, 3]
    assert subject not in call("GET", f"{url}/subjects?deleted=true").json
    assert call("DELETE", f"{url}/subjects/{subject}").code == 40401


def test_references(url: str) -> None:
    address_subject, user_subject = unique("address"), unique("user")
    address = json.dumps({"type": "record", "name": "Address", "namespace": "acme",
                          "fields": [{"name": "city", "type": "string"}]})
    address_id = register(url, address_subject, address)
    user = json.dumps({"type": "record", "name": "Customer", "namespace": "acme",
                       "fields": [{"name": "home", "type": "Address"}]})
    refs = [{"name": "acme.Address", "subject": address_subject, "version": 1}]
    user_id = register(url, user_subject, user, references=refs)
    got = call("GET", f"{url}/subjects/{user_subject}/versions/1").json
    assert got["references"] == refs
    assert call("GET", f"{url}/schemas/ids/{user_id}").json["references"] == refs
    assert call("GET", f"{url}/subjects/{address_subject}/versions/1/referencedby").json == [user_id]
    refused = call("DELETE", f"{url}/subjects/{address_subject}/versions/1")
    assert (refused.status, refused.code) == (422, 42206)
    assert call("DELETE", f"{url}/subjects/{address_subject}").code == 42206
    missing = call("POST", f"{url}/subjects/{unique()}/versions",
                   {"schema": user, "references": [{"name": "acme.Address", "subject": unique(), "version": 1}]})
    assert missing.code == 42201
    assert address_id != user_id


def test_modes(url: str) -> None:
    subject = unique()
    register(url, subject, avro_user())
    assert call("GET", f"{url}/mode").json == {"mode": "READWRITE"}
    assert call("GET", f"{url}/mode/{subject}").code == 40409
    assert call("GET", f"{url}/mode/{subject}?defaultToGlobal=true").json == {"mode": "READWRITE"}
    assert call("PUT", f"{url}/mode/{subject}", {"mode": "READONLY"}).json == {"mode": "READONLY"}
    refused = call("POST", f"{url}/subjects/{subject}/versions", {"schema": avro_user(NEW_FIELD_WITH_DEFAULT)})
    assert (refused.status, refused.code) == (422, 42205)
    assert call("DELETE", f"{url}/subjects/{subject}").code == 42205
    assert call("PUT", f"{url}/mode/{subject}", {"mode": "SIDEWAYS"}).code == 42204
    assert call("DELETE", f"{url}/mode/{subject}").json == {"mode": "READONLY"}
    assert call("DELETE", f"{url}/mode/{subject}").code == 40401
    # IMPORT: refused while the subject has schemas; on a new subject it keeps the ids given
    assert call("PUT", f"{url}/mode/{subject}", {"mode": "IMPORT"}).code == 42205
    imported = unique()
    assert call("PUT", f"{url}/mode/{imported}", {"mode": "IMPORT"}).json == {"mode": "IMPORT"}
    assert register(url, imported, avro_user(name="Imported"), id=70000, version=5) == 70000
    assert call("GET", f"{url}/subjects/{imported}/versions").json == [5]
    assert call("GET", f"{url}/schemas/ids/70000").status == 200
    # an id that holds another schema is not overwritten
    clash = call("POST", f"{url}/subjects/{imported}/versions", {"schema": avro_user(name="Other"), "id": 70000})
    assert clash.code == 42205
    # outside IMPORT mode an id may not be given
    assert call("POST", f"{url}/subjects/{subject}/versions", {"schema": avro_user(), "id": 5}).code == 42205
    call("DELETE", f"{url}/mode/{imported}")


def test_invalid_requests(url: str) -> None:
    subject = unique()
    bad_schema = call("POST", f"{url}/subjects/{subject}/versions", {"schema": '{"type": "nope"}'})
    assert (bad_schema.status, bad_schema.code) == (422, 42201)
    assert bad_schema.json["message"].startswith("Invalid schema of type AVRO")
    assert call("POST", f"{url}/subjects/{subject}/versions", {"schema": "x", "schemaType": "XML"}).code == 42201
    assert call("POST", f"{url}/subjects/{subject}/versions", {"schema": ""}).code == 42201
    not_json = call("POST", f"{url}/subjects/{subject}/versions", raw=b"{not json")
    assert (not_json.status, not_json.code) == (400, 400)
    wrong_shape = call("POST", f"{url}/subjects/{subject}/versions", raw=b"[1,2]")
    assert wrong_shape.status == 422
    assert call("POST", f"{url}/subjects/{subject}/versions", {"schema": avro_user()},
                headers={"Content-Type": "text/plain"}).status == 415
    assert call("GET", f"{url}/subjects", headers={"Accept": "text/html"}).status == 406
    assert call("GET", f"{url}/no/such/path").status == 404
    assert call("PATCH", f"{url}/subjects").status == 405
    control = call("POST", f"{url}/subjects/bad%01subject/versions", {"schema": avro_user()})
    assert (control.status, control.code) == (422, 42208)
    assert call("GET", f"{url}/subjects?offset=x").status == 400
    assert subject not in call("GET", f"{url}/subjects?deleted=true").json  # nothing was stored


def test_media_types(url: str) -> None:
    plain = call("GET", f"{url}/subjects", headers={"Accept": "application/json"})
    assert plain.headers["Content-Type"] == "application/json"
    assert call("GET", f"{url}/subjects", headers={"Accept": "*/*"}).headers["Content-Type"] == MEDIA
    subject = unique()
    sent_as_json = call("POST", f"{url}/subjects/{subject}/versions", {"schema": avro_user()},
                        headers={"Content-Type": "application/json"})
    assert sent_as_json.status == 200


def test_normalize(url: str) -> None:
    subject = unique()
    a = json.dumps({"type": "record", "name": "N", "fields": [{"name": "x", "type": "int", "doc": "d", "zz": 1, "aa": 2}]})
    b = json.dumps({"type": "record", "name": "N", "fields": [{"name": "x", "type": "int", "doc": "d", "aa": 2, "zz": 1}]})
    first = register(url, subject, a)
    # without normalize the properties' order tells the schemas apart; with it they are one
    assert call("POST", f"{url}/subjects/{subject}?normalize=true", {"schema": b}).json["id"] == first
    normalized = call("POST", f"{url}/subjects/{unique()}/versions?normalize=true", {"schema": a}).json["id"]
    assert call("POST", f"{url}/subjects/{unique()}/versions?normalize=true", {"schema": b}).json["id"] == normalized


def test_json_and_protobuf_schemas(url: str) -> None:
    subject = unique()
    schema = json.dumps({"type": "object", "properties": {"a": {"type": "string"}}, "additionalProperties": False})
    schema_id = register(url, subject, schema, schemaType="JSON")
    assert call("GET", f"{url}/schemas/ids/{schema_id}").json["schemaType"] == "JSON"
    grown = json.dumps({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
                        "additionalProperties": False})
    register(url, subject, grown, schemaType="JSON")
    required = json.dumps({"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}},
                           "required": ["b"], "additionalProperties": False})
    assert call("POST", f"{url}/subjects/{subject}/versions", {"schema": required, "schemaType": "JSON"}).status == 409
    proto_subject = unique()
    proto = 'syntax = "proto3";\npackage acme;\nmessage Ping { string id = 1; }\n'
    proto_id = register(url, proto_subject, proto, schemaType="PROTOBUF")
    by_id = call("GET", f"{url}/schemas/ids/{proto_id}").json
    assert by_id["schemaType"] == "PROTOBUF" and "message Ping" in by_id["schema"]
    serialized = call("GET", f"{url}/schemas/ids/{proto_id}?format=serialized").json["schema"]
    # the serialized descriptor registers as the same schema
    assert register(url, proto_subject, serialized, schemaType="PROTOBUF") == proto_id
    bad = call("POST", f"{url}/subjects/{proto_subject}/versions",
               {"schema": 'syntax = "proto3"; message X { strin a = 1; }', "schemaType": "PROTOBUF"})
    assert bad.code == 42201 and "strin" in bad.json["message"]


def test_keep_alive_serves_many_requests_on_one_connection(url: str) -> None:
    import http.client

    host, port = url.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=10)
    try:
        for _ in range(20):
            conn.request("GET", "/schemas/types")
            resp = conn.getresponse()
            assert resp.status == 200 and json.loads(resp.read()) == ["JSON", "PROTOBUF", "AVRO"]
    finally:
        conn.close()


def test_registry_metrics_on_the_broker_metrics(url: str, registry_broker: object) -> None:
    register(url, unique(), avro_user())
    metrics_url = registry_broker.metrics_url  # type: ignore[attr-defined]
    assert metrics_url is not None
    text = urllib.request.urlopen(metrics_url, timeout=10).read().decode()
    assert 'kafka_schema_registry_requests_total{endpoint="/subjects/{subject}/versions",method="POST",status="200"}' in text
    assert "kafka_schema_registry_request_latency_seconds_bucket" in text
    registered = [line for line in text.splitlines() if line.startswith("kafka_schema_registry_registered_count ")]
    assert registered and float(registered[0].split()[1]) >= 1
    assert "kafka_schema_registry_master_slave_role 1.0" in text
