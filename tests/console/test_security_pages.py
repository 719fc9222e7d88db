"""The console's ACL, SCRAM user and client quota pages over HTTP against a real broker with Kafka's
ACL authorizer (the console's connection is a super user): what confluent-kafka's AdminClient
created is listed, a Remove button removes exactly that binding / credential / quota (checked
through the AdminClient), and the guards hold: no CSRF token or a read-only console changes nothing."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)

from odradek.client import Admin
from odradek.testing import BrokerProcess
from tests.console.conftest import Console, started_broker, started_console
from tests.console.test_pages import _cells

T = 30.0
_FORMS = re.compile(r'<form method="post" action="(/[a-z]+/delete)" class="inline">(.*?)</form>', re.S)
_FIELD = re.compile(r'<input type="hidden" name="([^"]+)" value="([^"]*)">')


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    with started_broker(tmp_path_factory.mktemp("console-acl-broker") / "data",
                        **{"authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
                           "super.users": "User:ANONYMOUS"}) as b:
        yield b


@pytest.fixture(scope="module")
def sconsole(secured: BrokerProcess) -> Iterator[Console]:
    with started_console(secured.bootstrap) as c:
        yield c


@pytest.fixture(scope="module")
def sconsole_ro(secured: BrokerProcess) -> Iterator[Console]:
    with started_console(secured.bootstrap, "--read-only", clean_exit=False) as c:
        yield c


def _forms(body: str) -> list[tuple[str, dict[str, str]]]:
    return [(action, dict(_FIELD.findall(fields))) for action, fields in _FORMS.findall(body)]


def _acl(principal: str, topic: str, op: AclOperation) -> AclBinding:
    return AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, principal, "*", op,
                      AclPermissionType.ALLOW)


def test_the_acl_page_lists_bindings_and_removes_exactly_one(
    secured: BrokerProcess, sconsole: Console, sconsole_ro: Console
) -> None:
    admin = AdminClient({"bootstrap.servers": secured.bootstrap})
    for f in admin.create_acls([_acl("User:alice", "orders", AclOperation.WRITE),
                                _acl("User:bob", "orders", AclOperation.READ)]).values():
        f.result(T)
    body = sconsole.page("/acls")
    rows = sorted(r[:7] for r in _cells(body, "acls"))
    assert rows == [["User:alice", "*", "Allow", "Write", "Topic", "orders", "LITERAL"],
                    ["User:bob", "*", "Allow", "Read", "Topic", "orders", "LITERAL"]]
    forms = _forms(body)
    [(action, alice)] = [(a, f) for a, f in forms if f.get("principal") == "User:alice"]
    # a read-only console shows no form and refuses the post; a post without the token changes nothing
    assert not _forms(sconsole_ro.page("/acls"))
    assert sconsole_ro.post(action, alice)[0] == 403
    assert sconsole.post(action, {k: v for k, v in alice.items() if k != "csrf"})[0] == 403
    assert len(_cells(sconsole.page("/acls"), "acls")) == 2
    status, _, headers = sconsole.post(action, alice)
    assert status == 303 and headers["Location"] == "/acls?notice=acl-deleted"
    left = admin.describe_acls(AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                                                AclOperation.ANY, AclPermissionType.ANY)).result(T)
    assert [(b.principal, b.operation) for b in left] == [("User:bob", AclOperation.READ)]
    assert [r[0] for r in _cells(sconsole.page("/acls?notice=acl-deleted"), "acls")] == ["User:bob"]
    # a forged binding is refused before anything is asked of the cluster
    bad = dict(alice, operation="NOT_AN_OPERATION")
    assert sconsole.post(action, bad)[0] == 400


def test_without_an_authorizer_the_acl_page_says_so(console: Console) -> None:
    body = console.page("/acls")
    assert 'data-testid="acls-disabled"' in body and "SECURITY_DISABLED" in body


def test_the_users_page_lists_scram_credentials_and_removes_one_mechanism(
    secured: BrokerProcess, sconsole: Console
) -> None:
    admin = AdminClient({"bootstrap.servers": secured.bootstrap})
    ups = [UserScramCredentialUpsertion("carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 8192), b"pw1"),
           UserScramCredentialUpsertion("carol", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"pw2")]
    for f in admin.alter_user_scram_credentials(ups).values():
        f.result(T)
    body = sconsole.page("/users")
    assert sorted(r[:3] for r in _cells(body, "users")) == [["carol", "SCRAM-SHA-256", "8,192"],
                                                            ["carol", "SCRAM-SHA-512", "4,096"]]
    [(action, form)] = [(a, f) for a, f in _forms(body) if f["mechanism"] == "SCRAM-SHA-256"]
    assert sconsole.post(action, form)[0] == 303
    with Admin(bootstrap_servers=secured.bootstrap) as odr:
        assert odr.describe_user_scram_credentials() == {"carol": {"SCRAM-SHA-512": 4096}}
    assert [r[:2] for r in _cells(sconsole.page("/users"), "users")] == [["carol", "SCRAM-SHA-512"]]


def test_the_quotas_page_lists_quotas_and_removes_one(secured: BrokerProcess, sconsole: Console) -> None:
    with Admin(bootstrap_servers=secured.bootstrap) as odr:
        odr.alter_client_quotas([({"user": "dave"}, {"producer_byte_rate": 1048576, "consumer_byte_rate": 2097152}),
                                 ({"client-id": None}, {"request_percentage": 50})])
        body = sconsole.page("/quotas")
        assert sorted(r[:5] for r in _cells(body, "quotas")) == [
            ["", "<default>", "", "request_percentage", "50.0"],
            ["dave", "", "", "consumer_byte_rate", "2,097,152.0"],
            ["dave", "", "", "producer_byte_rate", "1,048,576.0"],
        ]
        forms = _forms(body)
        [(action, form)] = [(a, f) for a, f in forms if f.get("key") == "producer_byte_rate"]
        assert sconsole.post(action, form)[0] == 303
        [(action, form)] = [(a, f) for a, f in forms if f.get("key") == "request_percentage"]
        assert sconsole.post(action, form)[0] == 303
        left = {str(k): v for k, v in odr.describe_client_quotas().items()}
        assert left == {"user=dave": {"consumer_byte_rate": 2097152.0}}
